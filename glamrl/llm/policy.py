"""The LLM policy: action scores (or NPAE action heads) and a value head over one language model.

    policy = LLMPolicy(ModelConfig(name="smollm2-135m"))
    out = policy(prompts, ACTION_NAMES)   # out.log_probs (B, A), out.values (B,)

The same call samples actions during collection (under torch.inference_mode()) and
re-scores them with gradients during the PPO update. The policy holds no action names: the
candidates are an input of every call, given by the agent that lists them in its prompts
(`glamrl.agents.llm.LLMAgent.action_names`), so that what a prompt lists is what is scored.
With `model.critic_reads_step`, the value head also reads how far the episode has gone: its inputs are then
`TimedPrompt`s (the prompt and the observation's step count), which the agent builds from the observation and
the PPO update replays from its rollout; the action scores read the prompt alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from glamrl.config import ModelConfig, Resolved
from glamrl.envs.actions import ACTION_NAMES
from glamrl.envs.mirror import mirror_prompt
from glamrl.errors import GlamrlError
from glamrl.llm.compiled import choose_compile, compile_blocks
from glamrl.llm.exported import read_heads, read_manifest
from glamrl.llm.heads import STEP_FEATURES, ActionHeads, ValueHead, step_features
from glamrl.llm.loading import load_model
from glamrl.llm.lora import apply_lora, base_model
from glamrl.llm.precision import DTYPES, choose_compute_dtype
from glamrl.llm.recompute import checkpoint_blocks, choose_checkpointing
from glamrl.llm.scorer import ActionScorer, choose_inference_batching
from glamrl.llm.trunk import FrozenTrunk, freeze_trunk

class PolicyStateError(GlamrlError, ValueError):
    """A saved policy state does not match this policy's trainable parameters."""


class TimedPrompt(NamedTuple):
    """A prompt with the elapsed time of its episode (the observation's "step" and "max_steps"): what a policy
    with `model.critic_reads_step` reads, the prompt for the action scores and the value head, the step for the
    value head alone."""

    prompt: str
    step: int
    max_steps: int


def prompt_of(item: str | TimedPrompt) -> str:
    """The prompt a policy input holds (a prompt is its own)."""
    return item.prompt if isinstance(item, TimedPrompt) else item


def mirror_input(item: str | TimedPrompt) -> str | TimedPrompt:
    """A policy input of the world reflected left to right: its prompt mirrored, its step kept."""
    return item._replace(prompt=mirror_prompt(item.prompt)) if isinstance(item, TimedPrompt) else mirror_prompt(item)


@dataclass
class PolicyOutput:
    log_probs: Tensor                       # (B, A) log pi(a | prompt), log-softmax over the candidates
    values: Tensor                          # (B,) value estimates (nan: a step-reading head given no step)
    action_log_likelihoods: Tensor | None   # (B, A) log p(action text | prompt); None with action heads


class LLMPolicy(nn.Module):
    """π(a | prompt) = softmax over actions of their text log-likelihood (or of the NPAE heads' logits)."""

    def __init__(self, config: ModelConfig, num_actions: int = len(ACTION_NAMES), observations: int = 1) -> None:
        """`observations`: the observations per prompt (prompt.nbr_obs), for `model.compile=auto`
        (glamrl.llm.compiled.choose_compile) and `model.inference_batching=auto` (scorer.choose_inference_batching)."""
        super().__init__()
        loaded = load_model(config)
        self.config = config
        self.num_actions = num_actions
        self.device, self.dtype = loaded.device, loaded.dtype
        self.compute_dtype, why = choose_compute_dtype(config, loaded.device)
        # what the settings became on this machine (auto ones included): logged and kept in RUN_DIR/config.yaml
        self.resolved = {"model.compute_dtype": Resolved(str(self.compute_dtype).removeprefix("torch."), why)}
        checkpointing, checkpointing_why = choose_checkpointing(config)
        if checkpointing:  # before auto's compile trial, which times a copy of a block as the update will run it
            checkpoint_blocks(loaded.model)
        compiling, why = choose_compile(config, loaded.model, loaded.device, observations,  # true may refuse here
                                        self.compute_dtype)
        self.resolved["model.compile"] = Resolved(str(compiling).lower(), why)
        self.resolved["model.gradient_checkpointing"] = Resolved(str(checkpointing).lower(), checkpointing_why)
        trained_blocks = freeze_trunk(loaded.model, loaded.is_seq2seq, config.train_layers) \
            if config.train_layers else None
        self.llm = apply_lora(loaded.model, config, trained_blocks) if config.lora else loaded.model
        self._collected: tuple[int, ...] | None = None  # the last collection's `_trunk_counts`
        prefix_mb = 0 if compiling else config.prefix_cache_mb  # the store's path runs the frozen blocks eager
        self.trunk = FrozenTrunk(loaded.model, loaded.is_seq2seq, trained_blocks[0], DTYPES[config.cache_dtype],
                                 budget_bytes=config.trunk_cache_mb * 2**20,
                                 prefix_budget_bytes=prefix_mb * 2**20, module_blocks=compiling or checkpointing) \
            if trained_blocks else None
        if self.trunk is not None and not loaded.is_seq2seq:
            self.resolved["model.train_layers"] = Resolved(str(config.train_layers), (
                "the top block runs at the last prompt token and the action tokens only" if self.trunk.tail_exact
                else "the top block runs at every position: its block is not Llama's (trunk.top_block_tail)"))
            if config.prefix_cache_mb:
                kept = self.trunk.prefixes is not None
                why = ("new prompts run the frozen blocks after the longest prefix kept" if kept else
                       "off: model.compile runs the frozen blocks compiled whole" if compiling else
                       "off: every block trains, so none is frozen" if not self.trunk.split else
                       "off: the blocks are not Llama's (trunk.top_block_tail)")
                self.resolved["model.prefix_cache_mb"] = Resolved(str(config.prefix_cache_mb if kept else 0), why)
        self.compiled_blocks = compile_blocks(self.llm) if compiling else None  # its report: the compile time
        inference_batching, why = choose_inference_batching(config.inference_batching, config.batching, observations)
        self.resolved["model.inference_batching"] = Resolved(inference_batching, why)
        self.scorer = ActionScorer(base_model(self.llm), loaded.tokenizer, loaded.is_seq2seq,
                                   normalize_by_length=config.normalize_by_length, batching=config.batching,
                                   max_padding=config.max_padding, trunk=self.trunk, score=config.score,
                                   inference_batching=inference_batching)
        hidden_size = loaded.model.get_input_embeddings().embedding_dim
        self.value_head = ValueHead(hidden_size, STEP_FEATURES if config.critic_reads_step else 0).to(self.device)
        self.action_heads = (ActionHeads(hidden_size, num_actions).to(self.device)
                             if config.use_action_heads else None)
        if config.pretrained:
            self._load_exported_heads(config.name, hidden_size)

    def forward(self, inputs: Sequence[str | TimedPrompt], action_names: Sequence[str]) -> PolicyOutput:
        """Policy and value for B prompts (or `TimedPrompt`s) over the candidates `action_names` (A texts,
        minigrid order)."""
        if len(action_names) != self.num_actions:
            raise ValueError(f"expected {self.num_actions} action names, got {len(action_names)}")
        prompts = [prompt_of(x) for x in inputs]
        with self._autocast():
            scores = self.scorer(prompts, None if self.action_heads is not None else list(action_names))
        hidden = scores.hidden.float()                                             # (B, H)
        logits = self.action_heads(hidden) if self.action_heads is not None else scores.log_likelihoods  # (B, A)
        return PolicyOutput(log_probs=F.log_softmax(logits.float(), dim=-1),
                            values=self.value_head(hidden, self._step_features(inputs)),
                            action_log_likelihoods=scores.log_likelihoods)

    def _step_features(self, inputs: Sequence[str | TimedPrompt]) -> Tensor | None:
        """(B, STEP_FEATURES) of the inputs' steps for a step-reading value head (nan for a plain prompt, whose
        value is then nan: `glamrl.api`'s prompts, probes); None for a head that reads the hidden state alone."""
        if not self.config.critic_reads_step:
            return None
        timed = [x if isinstance(x, TimedPrompt) else TimedPrompt(x, -1, 0) for x in inputs]
        steps = torch.tensor([float(x.step) if x.max_steps > 0 else math.nan for x in timed], device=self.device)
        return step_features(steps, torch.tensor([max(x.max_steps, 1) for x in timed], device=self.device))

    def value_parameters(self) -> Iterator[nn.Parameter]:
        """The value head's parameters (`ppo.value_lr` trains them at their own learning rate)."""
        return self.value_head.parameters()

    def standardize_value_head(self, inputs: Sequence[str | TimedPrompt]) -> None:
        """`model.value_head_init=standardized`: rescale the value head's first layer to read the hidden states
        of `inputs` (a first rollout's) standardised per feature (`ValueHead.standardize_input`)."""
        with torch.inference_mode(), self._autocast():
            hidden = self.scorer([prompt_of(x) for x in inputs], None).hidden.float()  # (B, H)
        self.value_head.standardize_input(hidden.clone())

    def values(self, inputs: Sequence[str | TimedPrompt]) -> Tensor:
        """V(prompt) alone (V(prompt, step) with `TimedPrompt`s), (B,): encodes the prompts without scoring any
        action."""
        with self._autocast():
            hidden = self.scorer([prompt_of(x) for x in inputs], None).hidden.float()  # (B, H)
        return self.value_head(hidden, self._step_features(inputs))

    def _load_exported_heads(self, name: str, hidden_size: int) -> None:
        """Start from the heads of a `glamrl export` directory when `name` is one (see glamrl.llm.exported)."""
        manifest = read_manifest(name)
        if manifest is None:
            return
        if manifest.use_action_heads != self.config.use_action_heads:
            flag = str(manifest.use_action_heads).lower()
            raise PolicyStateError(f"{name} was exported with use_action_heads={flag}; set model.use_action_heads={flag}")
        if manifest.hidden_size != hidden_size:
            raise PolicyStateError(f"{name}: heads of hidden size {manifest.hidden_size}, model of {hidden_size}")
        heads = read_heads(name)
        saved = heads["value_head.mlp.0.weight"].shape[1] - hidden_size  # the step features the head reads
        if saved != self.value_head.extra_features:
            flag = str(bool(saved)).lower()
            raise PolicyStateError(f"{name} was exported with critic_reads_step={flag}; set model.critic_reads_step={flag}")
        for prefix, module in (("value_head.", self.value_head), ("action_heads.", self.action_heads)):
            if module is not None:
                module.load_state_dict({k[len(prefix):]: v for k, v in heads.items() if k.startswith(prefix)})

    def _autocast(self) -> torch.autocast:
        """The language model's numerics, the same for collection and update; the heads stay in float32."""
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.compute_dtype == torch.bfloat16)

    @contextmanager
    def collecting(self) -> Iterator[None]:
        """Collection of a new rollout: with `train_layers`, keep the frozen trunk's output of every
        prompt scored inside this block for the update that follows (older rollouts' entries stay within
        `model.trunk_cache_mb`, least recently used first out)."""
        if self.trunk is None:
            yield
            return
        self.trunk.shrink()  # older rollouts' entries, within model.trunk_cache_mb
        before = self._trunk_counts()
        with self.trunk.record():
            yield
        self._collected = tuple(after - first for after, first in zip(self._trunk_counts(), before))

    def _trunk_counts(self) -> tuple[int, int, int, int]:
        """The trunk's running counts: cache hits and misses, prompt tokens read from the prefix store and run."""
        store = self.trunk.prefixes
        reused, computed = (store.reused, store.computed) if store is not None else (0, 0)
        return self.trunk.hits, self.trunk.misses, reused, computed

    @contextmanager
    def keeping(self) -> Iterator[None]:
        """With `train_layers`, keep the frozen trunk's output of the prompts scored inside this block too, as
        collection does (the PPO mirror term's images: computed at the first epoch, read back at the others)."""
        if self.trunk is None:
            yield
            return
        with self.trunk.record():
            yield

    def collection_metrics(self) -> dict[str, float]:
        """With `train_layers`, the last collection's frozen-trunk figures for the log: `trunk_hit_rate`, the share of
        its prompts whose lower blocks' output came from the cache, `trunk_cache_mb`, the cache's size after it,
        and with the prefix store `trunk_prefix_share`, the share of the other prompts' tokens read from it;
        nothing without a trunk."""
        if self.trunk is None or self._collected is None:
            return {}
        hits, misses, reused, computed = self._collected
        metrics = {"trunk_hit_rate": hits / max(hits + misses, 1), "trunk_cache_mb": self.trunk.nbytes / 2**20}
        if self.trunk.prefixes is not None:
            metrics["trunk_prefix_share"] = reused / max(reused + computed, 1)
        return metrics

    # ------------------------------------------------------------------- checkpoints
    def trainable_state_dict(self) -> dict[str, Tensor]:
        """The trainable parameters only (detached, not copied): all weights + heads, or adapters + heads with LoRA."""
        return {name: p.detach() for name, p in self.named_parameters() if p.requires_grad}

    def load_trainable_state_dict(self, state: dict[str, Tensor]) -> None:
        self.check_trainable_state_dict(state)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.requires_grad:
                    p.copy_(state[name])

    def check_trainable_state_dict(self, state: dict[str, Tensor]) -> None:
        """Raise PolicyStateError unless `state` holds exactly this policy's trainable parameters, in their shapes."""
        params = {name: p for name, p in self.named_parameters() if p.requires_grad}
        missing, unexpected = params.keys() - state.keys(), state.keys() - params.keys()
        if missing or unexpected:
            raise PolicyStateError(
                f"saved policy state does not match this policy (LoRA or action heads configured differently?): "
                f"{len(missing)} missing e.g. {sorted(missing)[:3]}, {len(unexpected)} unexpected e.g. "
                f"{sorted(unexpected)[:3]}")
        resized = [name for name, p in params.items() if tuple(state[name].shape) != tuple(p.shape)]
        if resized:
            name = resized[0]
            raise PolicyStateError(f"size mismatch for {name}: shape {tuple(state[name].shape)} saved, "
                                   f"{tuple(params[name].shape)} in this policy ({len(resized)} parameters differ)")
