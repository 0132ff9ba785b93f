"""Typed configuration: dataclasses, YAML files and dotted command-line overrides.

Every option of a run lives in one `TrainConfig` made of small sections. A YAML file
gives some of them, `section.field=value` overrides on the command line give others,
and anything unknown, mistyped or impossible stops the run before any work with one
message that names the field and says what to change.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import json
import math
import textwrap
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from glamrl.agents.registry import KINDS, kind_names
from glamrl.envs.actions import ACTION_NAMES
from glamrl.errors import GlamrlError
from glamrl.run.trackers import TRACKERS
from glamrl.seeds import LEGACY_SEEDING, SEEDINGS, eval_seed, train_seed

if TYPE_CHECKING:
    from collections.abc import Callable

    import gymnasium as gym
    from gymnasium.vector import SyncVectorEnv


class ConfigError(GlamrlError, ValueError):
    """A configuration value is unknown, of the wrong type or impossible."""


# ----------------------------------------------------------------------------- env
@dataclass
class EnvConfig:
    id: str = "BabyAI-MixedTrainLocal-v0"
    """gymnasium id of a BabyAI-Text level (any registered `BabyAI-*` id works)."""
    num_envs: int = 4
    """parallel environments (per process)."""
    seed: int = 1
    """seed of the run: its episodes' seeds follow from it by env.seeding; torch and numpy get it too."""
    seeding: str = "spread"
    """how env.seed becomes the episodes' seeds (`glamrl.seeds`). spread: env i trains from seed x 2**32 + i and
    evaluation episode k plays from seed x 2**32 + 2**31 + k, so two seeds share no episode. offset (glamrl's
    first scheme; a run's config.yaml written before this field reads as offset): seed + i and
    seed + 1000000 + k, so seeds S and S+1 share all but one env stream and evaluation episode."""
    task: str | None = None
    """restrict a Mixed level to one task kind (go_to, pick_up, open, put_next, ...)."""
    language: str = "en"
    """language of the observations and missions: en or fr."""
    max_steps: int | None = None
    """episode length limit; None keeps the level's own."""
    faithful: bool = False
    """describe doors in the original BabyAI-Text's wording ("You see a open red door"); false: correct
    English articles ("an open red door")."""

    def __post_init__(self) -> None:
        _check(bool(self.id), f"env.id must name a BabyAI level, e.g. {EnvConfig.id}")
        _check(self.num_envs >= 1, "env.num_envs must be >= 1")
        _check(0 <= self.seed < 2**31, f"env.seed must be in [0, 2**31), got {self.seed}")
        _check(self.seeding in SEEDINGS, f"env.seeding must be one of {', '.join(SEEDINGS)}, got {self.seeding!r}")
        _check(self.language in ("en", "fr"), f"env.language must be 'en' or 'fr', got {self.language!r}")
        _check(self.max_steps is None or self.max_steps >= 1, "env.max_steps must be >= 1 or null")

    def make_vector_env(self, render_mode: str | None = None,
                        wrapper: Callable[[gym.Env], gym.Env] | None = None) -> SyncVectorEnv:
        """The vector env this section describes, each copy wrapped by `wrapper` if given (not yet reset: call
        `reset(seed=self.train_seed)`)."""
        from glamrl.envs.factory import make_vector_env

        return make_vector_env(self.id, self.num_envs, task=self.task, language=self.language,
                               faithful=self.faithful, max_steps=self.max_steps, render_mode=render_mode,
                               wrapper=wrapper)

    @property
    def train_seed(self) -> int:
        """The seed env 0 of the run's first training reset plays from (env i: train_seed + i)."""
        return train_seed(self.seed, self.seeding)

    @property
    def eval_seed(self) -> int:
        """The seed the run's evaluation episode 0 plays from (episode k: eval_seed + k)."""
        return eval_seed(self.seed, self.seeding)

    @property
    def several_tasks(self) -> bool:
        """Whether this level draws its episodes from several task kinds (a Mixed level with no env.task): the
        training loops then log each kind's success as well (`success_rate_TASK`)."""
        from glamrl.envs.factory import task_kinds

        return len(task_kinds(self.id, self.task)) > 1


# -------------------------------------------------------------------------- prompt
@dataclass
class PromptConfig:
    nbr_obs: int = 3
    """observations kept in the prompt (the current one and nbr_obs - 1 past ones)."""
    actions: list[str] = field(default_factory=lambda: list(ACTION_NAMES))
    """names of the 6 actions as the model reads them (synonyms and translations allowed)."""

    def __post_init__(self) -> None:
        _check(self.nbr_obs >= 1, "prompt.nbr_obs must be >= 1")
        _check(all(a.strip() for a in self.actions), "prompt.actions must be non-empty names")
        _check(len(self.actions) == len(ACTION_NAMES),
               f"prompt.actions must name the {len(ACTION_NAMES)} actions in order {list(ACTION_NAMES)}")
        _check(len(set(self.actions)) == len(self.actions), "prompt.actions must be distinct")


# --------------------------------------------------------------------------- model
SCORES = ("log_softmax", "sum_logits")
"""What the action scorer (glamrl/llm/scorer.py) can sum over an action's tokens (model.score)."""


@dataclass
class ModelConfig:
    name: str = "smollm2-135m"
    """embedded default (smollm2-135m), tiny-llama / tiny-t5 (random, for tests),
    a local Hugging Face directory, a .gguf file, or a hub id (needs network)."""
    dtype: str = "float32"
    """storage dtype of the weights: float32 or bfloat16 (bfloat16 loses small Adam steps: prefer compute_dtype)."""
    compute_dtype: str | None = "auto"
    """auto, float32 or bfloat16 (autocast, weights kept in model.dtype). auto: bfloat16 where the hardware has
    fast bf16 kernels (CUDA with native bf16; a CPU with AMX or AVX-512 BF16, detected at run time), float32
    elsewhere; the choice is logged and recorded under `resolved` in RUN_DIR/config.yaml. null reads as auto
    (config.yaml of runs written before auto existed). Collection and update run the same numerics either way."""
    batching: str = "bucketed"
    """padded: one batch padded to its longest prompt; bucketed: prompts sorted by length and split into
    batches that waste at most model.max_padding of their tokens on padding (same results, less compute)."""
    max_padding: float = 0.1
    """bucketed batching: largest share of a batch's tokens that may be padding."""
    inference_batching: str | None = "auto"
    """model.batching for the passes without gradients (collection, evaluation). auto: padded with one observation
    per prompt (prompt.nbr_obs=1), model.batching with more. On a CPU with AMX, collecting num_envs one-observation
    prompts as one padded batch made whole PPO runs 1.08-1.13x faster than bucketed at the same peak memory; with
    three observations it did not pay (docs/results.md, "One padded batch for the collection"). null:
    model.batching. Same scores up to rounding, so a resume may change it."""
    train_layers: int | None = None
    """None or 0: every weight trains (GLAM). K: only the top K blocks, the final norm, the LM head (when not
    tied to the input embeddings) and the value/action heads train; the frozen lower blocks' outputs are
    computed once per frame at collection and reused by every PPO epoch. Seq2seq: the encoder is frozen and
    its output cached; the decoder's top K blocks train (its lower blocks stay frozen but are recomputed)."""
    cache_dtype: str = "bfloat16"
    """with train_layers: dtype the cached activations are kept in (float32 or bfloat16)."""
    trunk_cache_mb: int = 1024
    """with train_layers: MiB of cached activations kept from earlier rollouts for prompts seen again
    (least recently used first out); the current rollout's are always kept. 0: one rollout only."""
    prefix_cache_mb: int = 256
    """with train_layers, causal Llama-like models: MiB of the frozen blocks' keys and values kept for the prompts
    collected lately (least recently used first out), so that a new prompt runs those blocks only on its tokens
    after the longest prefix it shares with a kept one: the action list and mission at least, an episode's first
    observations while the prompt's window fills (glamrl.llm.trunk.PrefixStore). The same results up to rounding;
    about 20 KiB per token with SmolLM2 in bfloat16. Off where model.compile compiles the blocks (the store's path
    runs them eager) and for models whose block is not Llama's. 0: off (new prompts run the frozen blocks whole)."""
    gradient_checkpointing: bool | str = "auto"
    """true: the update keeps only each block's input and recomputes the block's activations in the backward
    pass (glamrl.llm.recompute): the same gradients, a third more update FLOPs, a small fraction of the
    activations' memory. auto: true for full fine-tuning (train_layers null, no LoRA), whose activations are most
    of the update's memory; false with LoRA (no weight gradients or Adam state: memory is affordable, update speed
    is kept) and with model.train_layers (K blocks' activations are small)."""
    compile: bool | str = "auto"
    """true: every transformer block runs through torch.compile (inductor, dynamic shapes; glamrl.llm.compiled),
    in collection and update. The first passes compile (seconds with SmolLM2 on a CPU; the run says how long
    after its first update), later ones run fused kernels (benchmarks/glam_config.py measures both). Same
    results as eager. Where inductor cannot compile (no C++ compiler, or Triton on CUDA) true stops the run with
    one line. auto: true for models of at least 50M parameters (glamrl.llm.compiled.AUTO_MIN_PARAMETERS;
    SmolLM2-135M has 134.5M, the tiny test models far fewer: compiling costs seconds whatever the size, and
    small models never earn them back) where inductor compiles here (its toolchain found and a one-block trial
    compile run once per process) and one of the model's blocks, timed both ways, is not more than 1.1x slower
    compiled (some CPUs run compiled blocks slower), except with model.train_layers on a CPU and one observation
    per prompt (prompt.nbr_obs=1: the prefix store, off where blocks compile, gains more there); false elsewhere.
    The choice and the block's timings are logged and recorded under `resolved` in RUN_DIR/config.yaml. false:
    eager."""
    device: str = "auto"
    """cpu, cuda, cuda:N or auto (cuda when available)."""
    pretrained: bool = True
    """False: same architecture with random weights (the NPAE baseline)."""
    load_embedding: bool = False
    """with pretrained=False, copy the pretrained input embeddings."""
    use_action_heads: bool = False
    """True: an MLP head over the actions instead of scoring their text (NPAE)."""
    normalize_by_length: bool = False
    """divide each action's score by its token count (as TWOSOME does), in either model.score."""
    score: str = "log_softmax"
    """what an action's score sums over its tokens: log_softmax (the tokens' log-probabilities, i.e.
    log p(action | prompt)) or sum_logits (the tokens' raw logits, no log-softmax: the score of GLAM's
    released code, which is not a log-likelihood; docs/differences.md)."""
    lora: bool = False
    """train LoRA adapters (and the heads) instead of all weights."""
    lora_r: int = 16
    """rank of the LoRA adapters."""
    lora_alpha: int = 32
    """LoRA scaling numerator (the update is scaled by lora_alpha / lora_r)."""
    lora_dropout: float = 0.0
    """dropout on the adapters' input, in [0, 1)."""
    lora_target_modules: list[str] | None = None
    """None: the family's attention and MLP projections."""
    value_head_init: str = "default"
    """default: PyTorch's initialisation of the value head (GLAM's). standardized: after the first rollout, the
    head's first layer is rescaled to read that rollout's hidden states standardised per feature (a
    data-dependent initialisation; the states an LLM gives its last prompt token differ little between prompts).
    A head that agent.init_from's PPO run trained is kept as it learned it (a clone's, never trained, is not)."""
    critic_reads_step: bool = False
    """true: the value head reads, beside the hidden state, how far the episode has gone: x = step / max_steps
    of the observation (the env's step count and the episode's limit) and sin, cos(pi x), sin, cos(2 pi x)
    (glamrl.llm.heads.step_features), so that V can follow the reward's 1 - 0.9 x and the time-out, which a
    one-observation prompt does not show. The action scores do not read it: only V changes. The PPO update
    replays each frame's step from the rollout. Another value changes the head's shape: a run keeps its value,
    and agent.init_from needs a run with the same, or a clone (glamrl bc trains no value head: the run starts its
    own). agent.kind=llm only (another kind's run refuses it, as it does every model.* field); false: GLAM's
    V(prompt)."""

    def __post_init__(self) -> None:
        _check(self.score in SCORES, f"model.score must be one of {', '.join(SCORES)}, got {self.score!r}")
        _check(self.value_head_init in ("default", "standardized"),
               f"model.value_head_init must be default or standardized, got {self.value_head_init!r}")
        for name in ("dtype", "cache_dtype"):
            value = getattr(self, name)
            _check(value in ("float32", "bfloat16"), f"model.{name} must be float32 or bfloat16, got {value!r}")
        if self.compute_dtype is None:
            self.compute_dtype = "auto"
        _check(self.compute_dtype in ("auto", "float32", "bfloat16"),
               f"model.compute_dtype must be auto, float32 or bfloat16, got {self.compute_dtype!r}")
        _check(not (self.compute_dtype == "float32" and self.dtype == "bfloat16"),
               "model.compute_dtype=float32 needs model.dtype=float32 (bfloat16 weights compute in bfloat16)")
        _check(isinstance(self.gradient_checkpointing, bool) or self.gradient_checkpointing == "auto",
               f"model.gradient_checkpointing must be auto, true or false, got {self.gradient_checkpointing!r}")
        _check(isinstance(self.compile, bool) or self.compile == "auto",
               f"model.compile must be auto, true or false, got {self.compile!r}")
        _check(self.batching in ("padded", "bucketed"),
               f"model.batching must be padded or bucketed, got {self.batching!r}")
        _check(0 <= self.max_padding < 1, f"model.max_padding must be in [0, 1), got {self.max_padding}")
        _check(self.inference_batching in (None, "auto", "padded", "bucketed"),
               f"model.inference_batching must be auto, padded, bucketed or null, got {self.inference_batching!r}")
        _check(self.trunk_cache_mb >= 0, f"model.trunk_cache_mb must be >= 0, got {self.trunk_cache_mb}")
        _check(self.prefix_cache_mb >= 0, f"model.prefix_cache_mb must be >= 0, got {self.prefix_cache_mb}")
        _check(self.train_layers is None or self.train_layers >= 0,
               f"model.train_layers must be >= 0 or null, got {self.train_layers}")
        _check(self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda"),
               f"model.device must be cpu, cuda, cuda:N or auto, got {self.device!r}")
        _check(bool(self.name), f"model.name must name a model ({ModelConfig.name}, a directory, a .gguf file)")
        _check(self.lora_r >= 1, "model.lora_r must be >= 1")
        _check(self.lora_alpha > 0, f"model.lora_alpha must be > 0, got {self.lora_alpha}")
        _check(0 <= self.lora_dropout < 1, f"model.lora_dropout must be in [0, 1), got {self.lora_dropout}")
        _check(self.lora_target_modules is None or len(self.lora_target_modules) > 0,
               "model.lora_target_modules must list at least one module name, or be null for the defaults")
        _check(not (self.load_embedding and self.pretrained),
               "model.load_embedding only applies with model.pretrained=false")


# ----------------------------------------------------------------------------- ppo
ADVANTAGES = ("gae", "batch_baseline")
"""How PPO estimates its advantages (ppo.advantage): glamrl/rl/gae.py's compute_gae or discounted_returns."""


@dataclass
class PPOConfig:
    total_frames: int = 1_500_000
    """environment steps of the whole run, all envs (and processes) together."""
    num_steps: int = 40
    """frames collected per env per update (GLAM's frames_per_proc)."""
    lr: float = 1e-6
    """Adam learning rate."""
    anneal_lr: bool = False
    """decay the learning rates (ppo.lr, ppo.value_lr) linearly to 0 at ppo.total_frames, as CleanRL's ppo.py does
    by default: each update's rates are the set ones times 1 - frames collected before it / ppo.total_frames, so a
    resumed run continues the schedule and a run stopped earlier (run.max_minutes) ends above 0. false: constant
    (GLAM)."""
    adam_beta1: float = 0.9
    """Adam's first-moment decay, in [0, 1)."""
    adam_beta2: float = 0.999
    """Adam's second-moment decay, in [0, 1)."""
    adam_eps: float = 1e-5
    """Adam's denominator epsilon, > 0."""
    epochs: int = 4
    """passes over each rollout."""
    minibatch_size: int = 64
    """transitions per optimizer step."""
    grad_accum: int = 1
    """split each minibatch into this many forward/backward chunks (memory, not maths)."""
    clip_eps: float = 0.2
    """clip range of the policy ratio (and of the value change, with clip_value)."""
    clip_value: bool = True
    """clip each value's change per update to clip_eps, as GLAM (and CleanRL's clip_vloss) do; false: the plain
    squared error, which lets the critic move as far as its gradient takes it (docs/configuration.md, "The critic")."""
    gamma: float = 0.99
    """discount factor, in [0, 1]."""
    gae_lambda: float = 0.99
    """GAE's lambda, in [0, 1]."""
    entropy_coef: float = 0.01
    """weight of the entropy bonus, >= 0."""
    value_coef: float = 0.5
    """weight of the value loss, >= 0."""
    max_grad_norm: float = 0.5
    """clip the gradient's global norm to this, > 0."""
    reward_scale: float = 20.0
    """GLAM trains on 20 x the env reward."""
    norm_adv: bool = False
    """normalise advantages per minibatch (GLAM does not)."""
    value_norm: bool = False
    """the value head predicts returns normalised by running statistics (glamrl/rl/value_norm.py); GLAM does not.
    Advantages are computed in the returns' own units either way. A run started from a PPO run (agent.init_from)
    goes on with that run's statistics, the units its value head learned in."""
    value_norm_decay: float = 0.9
    """per-update decay of the value normalisation's moving averages of the returns' mean and second moment,
    in [0, 1) (debiased, so the first update's statistics are that rollout's)."""
    value_lr: float | None = None
    """learning rate of the value head's parameters (the symbolic agent's critic); null: ppo.lr (GLAM)."""
    bootstrap_truncation: bool = False
    """false: a time-out ends the episode's return, as in GLAM, BabyAI and torch-ac (the limit is part of the
    task: the reward shrinks with the step count and a time-out is a failure). true: a time-out is bootstrapped
    from V(final observation), which is right only when the limit is not part of the task or the critic sees
    the step count."""
    advantage: str = "gae"
    """how an action's advantage is estimated. gae: GAE(ppo.gamma, ppo.gae_lambda) over the value head's
    estimates (GLAM's). batch_baseline: critic-free, the discounted return-to-go within the rollout
    (glamrl.rl.gae.discounted_returns) minus the mean of every return of the rollout (all ranks'), then
    ppo.norm_adv as usual; the value head's outputs are not used nor is it trained (value loss 0), and
    explained_variance is logged as nan. A time-out ends the return, and an episode still running at the
    rollout's end is bootstrapped with 0: its last frames' returns read low, a bias that shrinks as
    ppo.num_steps grows past the episode length (about L / num_steps of the frames sit in such cut episodes of
    length L). Refuses ppo.value_norm, ppo.bootstrap_truncation and model.critic_reads_step, which belong to a
    critic."""
    mirror_coef: float = 0.0
    """weight, >= 0, of a mirror-symmetry term added to the loss (0: none, GLAM's loss): the symmetrised KL between
    pi(. | s) and pi(. | mirror of s) with turn left and turn right swapped back, where the mirror of a prompt is
    what the agent would read in the world reflected left to right (glamrl/envs/mirror.py). It asks the policy
    to turn towards the side the text names, rather than to prefer one turn everywhere; it scores each
    minibatch's mirror images too (about twice the update's work). agent.kind=llm only."""

    def __post_init__(self) -> None:
        _check(self.advantage in ADVANTAGES,
               f"ppo.advantage must be one of {', '.join(ADVANTAGES)}, got {self.advantage!r}")
        if self.advantage == "batch_baseline":
            for name in ("value_norm", "bootstrap_truncation"):
                _check(not getattr(self, name), f"ppo.{name}=true needs a critic, and ppo.advantage=batch_baseline "
                                                f"trains none: set ppo.{name}=false or ppo.advantage=gae")
        _check_range(self, "ppo", COUNT, "total_frames", "num_steps", "epochs", "minibatch_size", "grad_accum")
        _check_range(self, "ppo", POSITIVE, "lr", "adam_eps", "clip_eps", "max_grad_norm", "reward_scale")
        _check_range(self, "ppo", FRACTION, "adam_beta1", "adam_beta2", "value_norm_decay")
        _check_range(self, "ppo", NON_NEGATIVE, "entropy_coef", "value_coef", "mirror_coef")
        _check_range(self, "ppo", UNIT, "gamma", "gae_lambda")
        _check(self.value_lr is None or self.value_lr > 0, f"ppo.value_lr must be > 0 or null, got {self.value_lr}")
        _check(self.minibatch_size % self.grad_accum == 0,
               f"ppo.minibatch_size ({self.minibatch_size}) must be a multiple of ppo.grad_accum ({self.grad_accum})")


# --------------------------------------------------------------------------- agent
@dataclass
class AgentConfig:
    kind: str = "llm"
    """llm (GLAM; NPAE with model.pretrained=false, model.use_action_heads=true), drrn (off-policy
    Q-learning over action texts), symbolic (BabyAI's PPO baseline on the 7x7x3 grid), random or bot: a kind
    registered in glamrl/agents/registry.py."""
    init_from: str | None = None
    """a run directory of the same kind whose trained weights start this run (e.g. BC, then PPO)."""

    def __post_init__(self) -> None:
        _check(self.kind in kind_names(), f"agent.kind must be one of {', '.join(kind_names())}, got {self.kind!r}")


DRRN_TOKENIZERS = ("subword", "word")
"""How DRRN reads text (glamrl/agents/drrn.py): glamrl/envs/subwords.py, glamrl/envs/vocabulary.py."""


@dataclass
class DRRNConfig:
    """DRRN's network and training; the defaults are GLAM's DRRN baseline (configs/drrn.yaml)."""

    total_frames: int = 1_500_000
    """environment steps of the whole run, all envs together (GLAM: 1.5M; configs/drrn_200k.yaml: 200k)."""
    tokenizer: str = "subword"
    """how text becomes ids. subword: a unigram model whose pieces are BabyAI-Text's words and every letter,
    digit and punctuation mark (GLAM's DRRN read SentencePiece pieces), so a word the envs never write (the
    suite's "dax", "chaise") is spelled out in pieces. word: the closed word vocabulary, where every such
    word reads <unk>; runs saved before this field existed used it: resume them with drrn.tokenizer=word."""
    embedding_dim: int = 128
    """size of the piece embeddings (one table for observations and actions; its rows: the tokenizer's vocabulary)."""
    hidden_size: int = 128
    """size of the GRU states of the observation and action encoders."""
    lr: float = 1e-4
    """Adam learning rate."""
    gamma: float = 0.9
    """discount factor of the Q targets, in [0, 1]."""
    batch_size: int = 64
    """transitions per gradient step, drawn uniformly from the replay memory."""
    replay_size: int = 1_500_000
    """transitions the replay memory keeps (the oldest are overwritten). GLAM's held 5M, more than its 1.5M frames:
    all of them. Its memory grows with what it holds, 2 x max_tokens int16 ids a transition: 3.1 GB for 1.5M
    transitions of 512 tokens."""
    learning_starts: int = 64
    """frames collected before the first gradient step (GLAM: one batch)."""
    train_every: int = 4
    """vector steps between gradient steps (GLAM: one step per 128 frames, 4 steps of 32 envs)."""
    double_q: bool = False
    """double Q-learning (the online network picks the next action, the target values it); false:
    max over the target network's Q, GLAM's target."""
    target_update_every: int = 1
    """gradient steps between copies of the online network into the target network (GLAM had no target
    network: 1 makes the target the online network of the step before)."""
    exploration: str = "softmax"
    """how actions are drawn from Q, in training and evaluation: "softmax" (sample softmax(Q / temperature),
    GLAM's DRRN) or "epsilon" (argmax, uniform with probability epsilon)."""
    temperature: float = 1.0
    """softmax temperature over Q (exploration=softmax)."""
    epsilon_start: float = 1.0
    """epsilon at the first frame (exploration=epsilon)."""
    epsilon_end: float = 0.05
    """epsilon after epsilon_decay_frames frames (exploration=epsilon)."""
    epsilon_decay_frames: int = 50_000
    """frames over which epsilon falls linearly from epsilon_start to epsilon_end (exploration=epsilon)."""
    eval_epsilon: float = 0.05
    """epsilon when evaluating without --greedy / run.eval_greedy (exploration=epsilon; a greedy
    Q-policy can loop forever)."""
    max_grad_norm: float = 5.0
    """clip the gradient's global norm to this, > 0 (GLAM: 5)."""
    reward_scale: float = 20.0
    """the Q targets use reward_scale x the env reward, > 0 (GLAM: 20)."""
    log_every: int = 1_000
    """frames of a log row (and between checkpoints), at most: the whole vector steps that fit (at least one); the
    run's last row takes only the frames left to drrn.total_frames."""
    bootstrap_truncation: bool = False
    """false: a time-out is terminal in the Q target, as in GLAM; true: bootstrap it from the final
    observation (see ppo.bootstrap_truncation)."""
    max_tokens: int = 512
    """pieces of an observation text (one per word of BabyAI-Text's own text; a word spelled out takes
    several): the action list and goal always, then the newest observations that fit (the oldest are cut
    first). GLAM's prompts on random play of the Mixed levels: median 221 words,
    99th percentile 426, longest seen 473."""

    def __post_init__(self) -> None:
        _check_positive(self, "drrn", ("total_frames", "embedding_dim", "hidden_size", "batch_size", "replay_size",
                                       "train_every", "target_update_every", "log_every", "max_tokens"))
        _check(self.exploration in ("softmax", "epsilon"),
               f"drrn.exploration must be softmax or epsilon, got {self.exploration!r}")
        _check(self.temperature > 0, "drrn.temperature must be > 0")
        _check(self.tokenizer in DRRN_TOKENIZERS,
               f"drrn.tokenizer must be one of {', '.join(DRRN_TOKENIZERS)}, got {self.tokenizer!r}")
        _check_range(self, "drrn", NON_NEGATIVE, "learning_starts", "epsilon_decay_frames")
        _check_range(self, "drrn", POSITIVE, "lr", "max_grad_norm", "reward_scale")
        _check_range(self, "drrn", UNIT, "gamma", "eval_epsilon")
        _check(0 <= self.epsilon_end <= self.epsilon_start <= 1,
               "drrn needs 0 <= epsilon_end <= epsilon_start <= 1")
        _check(self.batch_size <= self.replay_size, "drrn.batch_size must be <= drrn.replay_size")


SYMBOLIC_ARCHS = ("expert_filmcnn", "small")
"""The symbolic agent's image encoders (glamrl/agents/symbolic.py)."""


@dataclass
class SymbolicConfig:
    """The symbolic agent's network. The defaults are glamrl's first network (small, no memory), so that run
    directories written before `arch` and `recurrence` existed read as they were; configs/symbolic.yaml
    sets GLAM's (expert_filmcnn, 128 wide, memory, recurrence 20), configs/symbolic_small.yaml the fast one."""

    arch: str = "small"
    """the image encoder. expert_filmcnn: BabyAI's, the network GLAM's symbolic PPO baseline trained (the raw
    3-channel 7x7 view, conv + batch norm stem, two FiLM blocks with batch norm, BabyAI's init of linear layers).
    small: glamrl's fast variant (a bag-of-words cell embedding, no batch norm, residual FiLM blocks, PyTorch's
    default init). Whole PPO on one CPU thread, configs/symbolic.yaml against configs/symbolic_small.yaml:
    0.55k against 3.0k frames/s (benchmarks/baselines.py --only speed, CPU time, one run)."""
    image_dim: int = 32
    """channels of the image encoder (FiLM-conditioned on the mission); BabyAI's and GLAM's: 128. With
    arch=expert_filmcnn, the stem and the first FiLM block keep BabyAI's 128 channels whatever this is."""
    instr_dim: int = 32
    """word embedding and mission GRU size (BabyAI: 128)."""
    memory: bool = False
    """an LSTM memory over each episode (BabyAI's and GLAM's baseline had one)."""
    memory_dim: int = 32
    """LSTM state size (BabyAI: 128)."""
    recurrence: int = 1
    """steps the PPO update backpropagates through the memory (BabyAI's and GLAM's: 20): each env's rollout is
    cut into sequences of this many steps, replayed from the memory stored at their first step. 1: every step is
    re-scored alone from its stored memory (no backpropagation through time). Needs memory=true unless 1, and
    divides ppo.num_steps and ppo.minibatch_size."""
    collect_mode: str = "train"
    """the network's mode while it collects a rollout, which only batch norm (arch=expert_filmcnn) reads.
    train (BabyAI's and GLAM's): batch norm normalises each step with the statistics of the N envs' current
    frames and updates its running statistics. eval: it normalises with its running statistics and leaves them
    as they are. Evaluation always runs in eval mode, and the PPO update in train mode."""

    def __post_init__(self) -> None:
        _check_positive(self, "symbolic", ("image_dim", "instr_dim", "memory_dim", "recurrence"))
        _check(self.collect_mode in ("train", "eval"),
               f"symbolic.collect_mode must be train or eval, got {self.collect_mode!r}")
        _check(self.arch in SYMBOLIC_ARCHS,
               f"symbolic.arch must be one of {', '.join(SYMBOLIC_ARCHS)}, got {self.arch!r}")
        _check(self.memory or self.recurrence == 1,
               f"symbolic.recurrence={self.recurrence} backpropagates through the LSTM memory, but symbolic.memory "
               f"is false: set symbolic.memory=true or symbolic.recurrence=1")


@dataclass
class BCConfig:
    epochs: int = 1
    """passes over the demonstrations."""
    batch_size: int = 16
    """demonstration records per optimizer step."""
    lr: float = 1e-4
    """Adam learning rate, > 0."""
    max_grad_norm: float = 1.0
    """clip the gradient's global norm to this, > 0."""
    log_every: int = 10
    """optimizer steps between log rows (and checkpoints)."""

    def __post_init__(self) -> None:
        _check_positive(self, "bc", ("epochs", "batch_size", "log_every"))
        _check_range(self, "bc", POSITIVE, "lr", "max_grad_norm")


# ----------------------------------------------------------------------------- run
@dataclass
class RunConfig:
    eval_episodes: int = 0
    """episodes evaluated before and after training (0: skip)."""
    eval_greedy: bool = False
    """evaluate the argmax action instead of sampling."""
    checkpoint_every: int = 1
    """save a checkpoint every this many log rows (PPO updates, DRRN rows) and at the end; BC, which saves one at
    each of its log rows (bc.log_every), refuses it."""
    tensorboard: bool = True
    """also write TensorBoard scalars to RUN_DIR/tb."""
    tracker: str = "none"
    """also send the log to an experiment tracker (glamrl/run/trackers.py): none, wandb (Weights & Biases, under its
    own settings: `wandb login` first, or WANDB_MODE=offline to stay off the network) or trackio (a local store,
    TRACKIO_DIR). It gets log.csv's scalars under their TensorBoard tags at step frames, config.yaml, and
    curves.png at the end; one tracker run per invocation, named after the run directory. Needs the extra:
    pip install 'glamrl[wandb]' or 'glamrl[trackio]'."""
    tracker_project: str = "glamrl"
    """the tracker's project that run.tracker logs to."""
    check_replicas: bool = False
    """PPO under torchrun: verify after every update that all ranks hold bitwise the same weights."""
    sharding: str = "none"
    """PPO: how torchrun's K ranks hold the LLM (see glamrl.parallel.sharding). none: DD-PPO, a whole replica per rank,
    16 bytes per parameter (fp32 weights, gradients, two Adam moments) plus activations on every device:
    for models whose training state fits on one device (full fine-tuning up to about 1B parameters on an
    80 GB GPU; LoRA beyond). fsdp: FSDP2, weights, gradients and Adam state split over the ranks, blocks
    gathered in turn for the update; acting gathers the whole weights, so 4 + 16/K bytes per parameter:
    for models whose weights fit on one device but not their training state (estimate: up to about 7B
    parameters on 8 x 80 GB). Needs torchrun, model.batching=padded, and no model.lora or
    model.train_layers (their training state is small: use none). Evaluation alone (glamrl eval)
    needs the weights only, in one process."""
    probes: str | None = None
    """PPO: a YAML file of probe prompts (configs/probes/*.yaml): pi(a | probe) is logged to probes.csv at every
    update."""
    max_minutes: float | None = None
    """PPO, DRRN and BC: stop cleanly (checkpoint, then the final evaluation) after the first log row that ends
    past this many minutes of the run's training time, summed over every invocation (the checkpoint's
    `duration`, the log's `duration` column): a resumed run that used it up trains no further; raise it to go
    on. None: train up to the total frames."""
    reuse_memory: bool = True
    """keep the large blocks a minibatch frees for the next one (glamrl/memory.py: glibc's mmap threshold raised
    to 512 MiB and its trim threshold to 2 GiB, for the whole training process), instead of mapping them afresh
    and page-faulting them in at every minibatch; false: glibc's own thresholds, which give memory back sooner at
    a cost in speed (docs/results.md). No effect where the C library is not glibc."""
    kernel_cache: int = 64
    """the most bf16 matmul kernels (one per input shape) that oneDNN and PyTorch's ideep each keep for reuse in the
    training process and in one that evaluates the run (`glamrl eval`, `play`, `demos`; glamrl/memory.py). Prompts
    of new lengths bring new shapes, and each kernel holds about 0.7-2 MB: with the libraries' own 1,024 entries,
    bf16 full fine-tuning's memory grew by a fifth over 8 updates (docs/results.md). Too few entries rebuild
    kernels within every pass. Takes effect only in a process that has run no bf16 matmul yet (a new `glamrl train`
    has not); ONEDNN_PRIMITIVE_CACHE_CAPACITY or LRU_CACHE_CAPACITY already in the environment wins over it. fp32
    matmuls do not use these caches."""
    stop_at_success: float | None = None
    """PPO and DRRN: stop cleanly after the first log row whose training episodes (all ranks together) reach
    this success rate (benchmarks/time_to_ground.py); BC, which plays no episodes, refuses it. None: train up to
    the total frames."""

    def __post_init__(self) -> None:
        _check(self.eval_episodes >= 0, f"run.eval_episodes must be >= 0 (0 skips evaluation), got {self.eval_episodes}")
        _check(self.checkpoint_every >= 1, f"run.checkpoint_every must be >= 1, got {self.checkpoint_every}")
        _check(self.kernel_cache >= 1, f"run.kernel_cache must be >= 1 (kernels per cache), got {self.kernel_cache}")
        _check(self.max_minutes is None or self.max_minutes > 0,
               f"run.max_minutes must be > 0 (or null: no time limit), got {self.max_minutes}")
        _check(self.stop_at_success is None or 0 < self.stop_at_success <= 1,
               f"run.stop_at_success must be a success rate in (0, 1] (or null), got {self.stop_at_success}")
        _check(self.sharding in ("none", "fsdp"), f"run.sharding must be none or fsdp, got {self.sharding!r}")
        _check(self.tracker in ("none", *TRACKERS),
               f"run.tracker must be one of none, {', '.join(TRACKERS)}, got {self.tracker!r}")
        _check(bool(self.tracker_project), "run.tracker_project must not be empty")
        _check(not (self.sharding == "fsdp" and self.check_replicas),
               "run.check_replicas compares whole replicas, but with run.sharding=fsdp every rank holds another "
               "shard: set run.check_replicas=false")


@dataclass
class TrainConfig:
    env: EnvConfig = field(default_factory=EnvConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    run: RunConfig = field(default_factory=RunConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    drrn: DRRNConfig = field(default_factory=DRRNConfig)
    symbolic: SymbolicConfig = field(default_factory=SymbolicConfig)
    bc: BCConfig = field(default_factory=BCConfig)

    def __post_init__(self) -> None:
        kind = KINDS.get(self.agent.kind)  # an unknown kind is refused by AgentConfig
        if kind is not None and "ppo" in kind.trainers:  # the rollout batch and its loss are PPO's alone
            self._check_rollout()
            _check(self.ppo.mirror_coef == 0 or self.agent.kind == "llm",
                   f"ppo.mirror_coef={self.ppo.mirror_coef} mirrors prompts, and agent.kind={self.agent.kind!r} "
                   f"reads none: set ppo.mirror_coef=0 or agent.kind=llm")
        _check(not (self.model.critic_reads_step and self.ppo.advantage == "batch_baseline"),
               "model.critic_reads_step=true feeds the critic, and ppo.advantage=batch_baseline trains none: "
               "set one of them back (model.critic_reads_step=false or ppo.advantage=gae)")
        if self.run.sharding == "fsdp":
            _check(self.model.value_head_init == "default",
                   "run.sharding=fsdp shards the value head: model.value_head_init=standardized is not supported there")
            _check(self.agent.kind == "llm", f"run.sharding=fsdp shards the LLM: agent.kind must be llm, "
                                             f"not {self.agent.kind!r} (set run.sharding=none)")
            _check(not self.model.lora and not self.model.train_layers,
                   "run.sharding=fsdp does not support model.lora or model.train_layers (their training state "
                   "is small: set run.sharding=none for DD-PPO)")
            _check(self.model.batching == "padded" and self.model.inference_batching in (None, "auto", "padded"),
                   "run.sharding=fsdp needs model.batching=padded (and model.inference_batching padded, auto or "
                   "null): every rank must run the same forward passes")

    def _check_rollout(self) -> None:
        """PPO's rollout batch against its minibatches and the symbolic agent's sequences."""
        _check(self.ppo.minibatch_size <= self.batch_size,
               f"ppo.minibatch_size ({self.ppo.minibatch_size}) is larger than the rollout batch "
               f"env.num_envs x ppo.num_steps = {self.batch_size}; lower it or collect more frames per update")
        R = self.recurrence
        _check(self.ppo.num_steps % R == 0,
               f"symbolic.recurrence ({R}) must divide ppo.num_steps ({self.ppo.num_steps}): each env's rollout is "
               f"cut into sequences of {R} steps; set ppo.num_steps to a multiple of {R} or change symbolic.recurrence")
        _check(self.ppo.minibatch_size % R == 0,
               f"symbolic.recurrence ({R}) must divide ppo.minibatch_size ({self.ppo.minibatch_size}): minibatches "
               f"are made of whole sequences; set ppo.minibatch_size to a multiple of {R}")
        _check(self.ppo.minibatch_size // R % self.ppo.grad_accum == 0,
               f"ppo.grad_accum ({self.ppo.grad_accum}) must divide the {self.ppo.minibatch_size // R} sequences of "
               f"a minibatch (ppo.minibatch_size / symbolic.recurrence): chunks hold whole sequences")

    @property
    def recurrence(self) -> int:
        """Steps per sequence the PPO update replays: symbolic.recurrence for the symbolic agent, else 1 (frames)."""
        return self.symbolic.recurrence if self.agent.kind == "symbolic" else 1

    @property
    def batch_size(self) -> int:
        """Frames collected per update, all envs together."""
        return self.env.num_envs * self.ppo.num_steps

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


GROWABLE = ("ppo.total_frames", "drrn.total_frames", "bc.epochs", "run.max_minutes", "run.stop_at_success")
"""The caps on how long a run trains: a resume may change them (extend the run)."""
HOW_RUN = ("run.sharding", "run.check_replicas", "run.tensorboard", "run.tracker", "run.tracker_project",
           "run.checkpoint_every", "run.eval_episodes", "run.eval_greedy", "model.inference_batching")
"""How the processes hold, save, report and evaluate a run and batch its passes without gradients, not what it
learns: a resume may change them too (a torchrun FSDP run resumed by one process; a resume evaluates only after
training; runs saved before model.inference_batching=auto collected bucketed)."""
RESUMABLE = (*GROWABLE, *HOW_RUN)
"""The only fields a resume may change, each change recorded in the run's config history (RUN_DIR/
config_history.yaml). Every other field is the run's identity: another value is another run."""


def identity_changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The dotted fields, other than the `RESUMABLE` ones, whose values differ between two configs (`to_dict()`)."""
    return [key for key in changed_fields(before, after) if key not in RESUMABLE]


def config_hash(cfg: TrainConfig) -> str:
    """8 hex digits of the config without its `RESUMABLE` fields: the same for every resume of one run."""
    identity = {key: value for key, value in flatten(cfg.to_dict()).items() if key not in RESUMABLE}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class FieldHelp:
    """One config field as `glamrl config` shows it."""

    key: str       # dotted, e.g. "ppo.lr"
    type: str
    default: Any
    help: str      # the field's docstring, "" if it has none


def field_help(section: str | None = None) -> list[FieldHelp]:
    """Every field of every section of `TrainConfig` (or of `section` only), with its docstring read from
    this module's source (the string under each field)."""
    sections = {f.name: typing.get_type_hints(TrainConfig)[f.name] for f in dataclasses.fields(TrainConfig)}
    if section is not None and section not in sections:
        raise ConfigError(f"unknown config section {section!r}; sections: {', '.join(sections)}")
    out = []
    for name, cls in sections.items():
        if section is not None and name != section:
            continue
        docs = _field_docstrings(cls)
        defaults = cls()
        for f in dataclasses.fields(cls):
            hint = typing.get_type_hints(cls)[f.name]
            type_name = hint.__name__ if isinstance(hint, type) and not typing.get_args(hint) else str(hint)
            out.append(FieldHelp(f"{name}.{f.name}", type_name, getattr(defaults, f.name), docs.get(f.name, "")))
    return out


def _field_docstrings(cls: type) -> dict[str, str]:
    """{field: the string literal right under it} in the source of dataclass `cls`."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs = {}
    for node, after in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and \
                isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def load_train_config(path: str | Path | None, overrides: Sequence[str] = ()) -> TrainConfig:
    """A `TrainConfig` from an optional YAML file (a run's config.yaml too) plus dotted overrides."""
    data = without_resolved(load_yaml(path)) if path is not None else {}
    return from_dict(TrainConfig, apply_overrides(data, overrides))


# ------------------------------------------------------------------ a run's config
# config.yaml also records, under `resolved`, what settings such as model.compute_dtype=auto became
# on the machine that last started the run. Nothing reads that record back: a resumed run decides
# afresh on its own machine (and records its choice), so a run written with auto resumes anywhere.
RESOLVED = "resolved"


@dataclass(frozen=True)
class Resolved:
    """What a setting became in this run (e.g. model.compute_dtype=auto -> bfloat16), and why, in words."""

    value: str
    why: str


def without_resolved(data: dict[str, Any]) -> dict[str, Any]:
    """A config file's sections, without a run's `resolved` record."""
    return {key: value for key, value in data.items() if key != RESOLVED}


SAVED_DEFAULTS = {("env", "seeding"): LEGACY_SEEDING, ("model", "inference_batching"): None}
"""Fields whose default changed after runs were saved without them: (section, field) -> what such a saved run
ran with. A run's config.yaml lists every field of its time, so a missing one means the run predates it."""


def with_saved_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """A run's config.yaml (as read) with each field missing from it set as in `SAVED_DEFAULTS`, so that the run
    resumes, evaluates and compares as what it ran."""
    data = {key: dict(value) if isinstance(value, dict) else value for key, value in data.items()}
    for (section, name), value in SAVED_DEFAULTS.items():
        if isinstance(data.get(section, {}), dict):
            data.setdefault(section, {}).setdefault(name, value)
    return data


def changed_fields(before: dict[str, Any], after: dict[str, Any], sections: Sequence[str] | None = None) -> list[str]:
    """The dotted fields whose values differ between two config dicts (`to_dict()`), in `sections` only if given."""
    old, new = flatten(before), flatten(after)
    return [key for key in new if old.get(key) != new[key] and (sections is None or key.split(".")[0] in sections)]


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"ppo": {"lr": 1}} -> {"ppo.lr": 1}."""
    flat = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


# ----------------------------------------------------------------- parsing and checks
def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass(frozen=True)
class _Range:
    """The values a numeric field may take, between `low` and `high`, each bound included unless open."""

    low: float
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    def holds(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def __str__(self) -> str:
        if self.high == math.inf:
            return f"{'>' if self.low_open else '>='} {self.low:g}"
        return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"


COUNT = _Range(1)                             # >= 1: steps, sizes, epochs
POSITIVE = _Range(0, low_open=True)           # > 0: learning rates, clip norms, reward scales
NON_NEGATIVE = _Range(0)                      # >= 0: loss weights
FRACTION = _Range(0, 1, high_open=True)       # [0, 1): Adam's betas, dropout
UNIT = _Range(0, 1)                           # [0, 1]: discounts, probabilities


def _check_range(section: Any, prefix: str, allowed: _Range, *fields: str) -> None:
    """Refuse a field of `section` outside `allowed`, naming it `prefix.field` (every algorithm's section uses this)."""
    for name in fields:
        value = getattr(section, name)
        _check(allowed.holds(value), f"{prefix}.{name} must be {allowed}, got {value}")


def _check_positive(section: Any, prefix: str, fields: tuple[str, ...]) -> None:
    _check_range(section, prefix, COUNT, *fields)


def from_dict(cls: type, data: dict[str, Any], where: str = "") -> Any:
    """Build dataclass `cls` from `data`, checking every key and type."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if key not in names:
            raise ConfigError(f"unknown config key {path!r}; known keys: {', '.join(sorted(names))}")
        kwargs[key] = _coerce(hints[key], value, path)
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in kwargs and f.init
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        keys = ", ".join(repr(f"{where}.{m}" if where else m) for m in missing)
        raise ConfigError(f"missing config key {keys} (it has no default)")
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, path: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value, path)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) > 1:  # e.g. bool | str: a value of one of them, as given
            _check(type(value) in options, f"{path} must be {' or '.join(a.__name__ for a in options)}, "
                                           f"got {value!r} ({type(value).__name__})")
            return value
        return _coerce(options[0], value, path)
    if origin in (list, tuple):  # tuple[X, ...]: a list in the file, a tuple in a frozen dataclass
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path} must be a list, got {value!r}")
        return origin(_coerce(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:  # dict[str, X]: a mapping of names to values
        if not isinstance(value, dict):
            raise ConfigError(f"{path} must be a mapping, got {value!r}")
        for key in value:
            _check(isinstance(key, str), f"{path} must be a mapping of names, got the key {key!r}")
        return {key: _coerce(args[1], v, f"{path}.{key}") for key, v in value.items()}
    if hint is Path:
        _check(isinstance(value, str), f"{path} must be a path, got {value!r} ({type(value).__name__})")
        return Path(value)
    if hint is float and not isinstance(value, bool) and isinstance(value, (int, float, str)):
        try:  # YAML reads 1e-6 as a string
            number = float(value)
        except ValueError:
            number = None
        if number is not None:
            _check(math.isfinite(number), f"{path} must be a finite number, got {value!r}")
            return number
    if hint in (int, float, str, bool) and (type(value) is not hint):
        raise ConfigError(f"{path} must be {hint.__name__}, got {value!r} ({type(value).__name__})")
    return value


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply `a.b=value` strings (values parsed as YAML) to a nested dict; a key given twice is refused."""
    seen: set[str] = set()
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like section.field=value")
        _check(key not in seen, f"override {key} is given twice; keep one")
        seen.add(key)
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
        node[leaf] = yaml.safe_load(raw)
    return data


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses a key given twice in one mapping (plain YAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(key_node, deep=deep) for key_node, _ in node.value]
        twice = sorted({str(k) for k in keys if keys.count(k) > 1})
        if twice:
            raise ConfigError(f"key {twice[0]!r} is given twice (line {node.start_mark.line + 1}); keep one")
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path, what: str = "config file") -> Any:
    """What the YAML file `path` holds (a key given twice in a mapping refused), or one ConfigError line naming
    `what` the file is and what is wrong with it: config files, experiment files and probe files all read so."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} not found: {path}")
    try:
        return yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)
    except ConfigError as err:
        raise ConfigError(f"{what} {path}: {err}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"{what} {path} is not valid YAML: {reason}") from None
    except OSError as err:
        raise ConfigError(f"cannot read {what} {path}: {err.strerror}") from None


def load_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping of sections in a YAML config file, or one ConfigError line saying what is wrong with it."""
    data = read_yaml(path)
    if data is None:
        raise ConfigError(f"config file {path} is empty; give at least the sections to change (see configs/)")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections, got {type(data).__name__}")
    return data
