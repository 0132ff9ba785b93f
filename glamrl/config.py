"""Typed configuration: dataclasses, YAML files and dotted command-line overrides.

Every option of a run lives in one `TrainConfig` made of small sections. A YAML file
gives some of them, `section.field=value` overrides on the command line give others,
and anything unknown, mistyped or impossible stops the run before any work with one
message that names the field and says what to change.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from glamrl.envs.actions import ACTION_NAMES
from glamrl.errors import GlamrlError

if TYPE_CHECKING:
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
    """seed of the run: envs get seed, seed+1, ...; torch and numpy get it too."""
    task: str | None = None
    """restrict a Mixed level to one task kind (go_to, pick_up, open, put_next, ...)."""
    language: str = "en"
    """language of the observations and missions: en or fr."""
    max_steps: int | None = None
    """episode length limit; None keeps the level's own."""

    def __post_init__(self) -> None:
        _check(self.num_envs >= 1, "env.num_envs must be >= 1")
        _check(self.language in ("en", "fr"), f"env.language must be 'en' or 'fr', got {self.language!r}")
        _check(self.max_steps is None or self.max_steps >= 1, "env.max_steps must be >= 1 or null")

    def make_vector_env(self) -> SyncVectorEnv:
        """The vector env this section describes (not yet reset: call `reset(seed=self.seed)`)."""
        from glamrl.envs.factory import make_vector_env

        return make_vector_env(self.id, self.num_envs, task=self.task, language=self.language,
                               max_steps=self.max_steps)


# -------------------------------------------------------------------------- prompt
@dataclass
class PromptConfig:
    nbr_obs: int = 3
    """observations kept in the prompt (the current one and nbr_obs - 1 past ones)."""
    actions: list[str] = field(default_factory=lambda: list(ACTION_NAMES))
    """names of the 6 actions as the model reads them (synonyms and translations allowed)."""

    def __post_init__(self) -> None:
        _check(self.nbr_obs >= 1, "prompt.nbr_obs must be >= 1")
        _check(len(self.actions) == len(ACTION_NAMES),
               f"prompt.actions must name the {len(ACTION_NAMES)} actions in order {list(ACTION_NAMES)}")
        _check(len(set(self.actions)) == len(self.actions), "prompt.actions must be distinct")


# --------------------------------------------------------------------------- model
@dataclass
class ModelConfig:
    name: str = "smollm2-135m"
    """embedded default (smollm2-135m), tiny-llama / tiny-t5 (random, for tests),
    a local Hugging Face directory, a .gguf file, or a hub id (needs network)."""
    dtype: str = "float32"
    """storage dtype of the weights: float32 or bfloat16 (bfloat16 loses small Adam steps: prefer compute_dtype)."""
    compute_dtype: str | None = None
    """float32 or bfloat16 (autocast, weights kept in model.dtype); None: bfloat16 on CUDA, model.dtype on CPU.
    Collection and update run the same numerics either way."""
    batching: str = "bucketed"
    """padded: one batch padded to its longest prompt; bucketed: prompts sorted by length and split into
    batches that waste at most model.max_padding of their tokens on padding (same results, less compute)."""
    max_padding: float = 0.1
    """bucketed batching: largest share of a batch's tokens that may be padding."""
    train_layers: int | None = None
    """None or 0: every weight trains (GLAM). K: only the top K blocks, the final norm, the LM head (when not
    tied to the input embeddings) and the value/action heads train; the frozen lower blocks' outputs are
    computed once per frame at collection and reused by every PPO epoch. Seq2seq: the encoder is frozen and
    its output cached; the decoder's top K blocks train (its lower blocks stay frozen but are recomputed)."""
    cache_dtype: str = "bfloat16"
    """with train_layers: dtype the cached activations are kept in (float32 or bfloat16)."""
    device: str = "auto"
    """cpu, cuda, cuda:N or auto (cuda when available)."""
    pretrained: bool = True
    """False: same architecture with random weights (the NPAE baseline)."""
    load_embedding: bool = False
    """with pretrained=False, copy the pretrained input embeddings."""
    use_action_heads: bool = False
    """True: an MLP head over the actions instead of scoring their text (NPAE)."""
    normalize_by_length: bool = False
    """divide each action's log-likelihood by its token count (as TWOSOME does)."""
    lora: bool = False
    """train LoRA adapters (and the heads) instead of all weights."""
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target_modules: list[str] | None = None
    """None: the family's attention and MLP projections."""

    def __post_init__(self) -> None:
        for name in ("dtype", "cache_dtype"):
            value = getattr(self, name)
            _check(value in ("float32", "bfloat16"), f"model.{name} must be float32 or bfloat16, got {value!r}")
        _check(self.compute_dtype in (None, "float32", "bfloat16"),
               f"model.compute_dtype must be float32, bfloat16 or null, got {self.compute_dtype!r}")
        _check(not (self.compute_dtype == "float32" and self.dtype == "bfloat16"),
               "model.compute_dtype=float32 needs model.dtype=float32 (bfloat16 weights compute in bfloat16)")
        _check(self.batching in ("padded", "bucketed"),
               f"model.batching must be padded or bucketed, got {self.batching!r}")
        _check(0 <= self.max_padding < 1, f"model.max_padding must be in [0, 1), got {self.max_padding}")
        _check(self.train_layers is None or self.train_layers >= 0,
               f"model.train_layers must be >= 0 or null, got {self.train_layers}")
        _check(self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda"),
               f"model.device must be cpu, cuda, cuda:N or auto, got {self.device!r}")
        _check(self.lora_r >= 1, "model.lora_r must be >= 1")
        _check(not (self.load_embedding and self.pretrained),
               "model.load_embedding only applies with model.pretrained=false")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


# ----------------------------------------------------------------- loading / overrides
def from_dict(cls: type, data: dict[str, Any], where: str = "") -> Any:
    """Build dataclass `cls` from `data`, checking every key and type."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where or 'config'} must be a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if key not in names:
            raise ConfigError(f"unknown config key {path!r}; known keys: {', '.join(sorted(names))}")
        kwargs[key] = _coerce(hints[key], value, path)
    return cls(**kwargs)


def _coerce(hint: Any, value: Any, path: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        return from_dict(hint, value, path)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(inner, value, path)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path} must be a list, got {value!r}")
        return [_coerce(args[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str):
        try:  # YAML reads 1e-6 as a string
            return float(value)
        except ValueError:
            pass
    if hint in (int, float, str, bool) and (type(value) is not hint):
        raise ConfigError(f"{path} must be {hint.__name__}, got {value!r} ({type(value).__name__})")
    return value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `a.b=value` strings (values parsed as YAML) to a nested dict."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like section.field=value")
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
        node[leaf] = yaml.safe_load(raw)
    return data


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path} is not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections")
    return data


# ----------------------------------------------------------------------------- ppo
@dataclass
class PPOConfig:
    total_frames: int = 1_500_000
    """environment steps of the whole run, all envs (and processes) together."""
    num_steps: int = 40
    """frames collected per env per update (GLAM's frames_per_proc)."""
    lr: float = 1e-6
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-5
    epochs: int = 4
    """passes over each rollout."""
    minibatch_size: int = 64
    """transitions per optimizer step."""
    grad_accum: int = 1
    """split each minibatch into this many forward/backward chunks (memory, not maths)."""
    clip_eps: float = 0.2
    """clip range of the policy ratio and of the value change."""
    gamma: float = 0.99
    gae_lambda: float = 0.99
    entropy_coef: float = 0.01
    value_coef: float = 0.5
    max_grad_norm: float = 0.5
    reward_scale: float = 20.0
    """GLAM trains on 20 x the env reward."""
    norm_adv: bool = False
    """normalise advantages per minibatch (GLAM does not)."""

    def __post_init__(self) -> None:
        for name in ("total_frames", "num_steps", "epochs", "minibatch_size", "grad_accum"):
            _check(getattr(self, name) >= 1, f"ppo.{name} must be >= 1")
        _check(self.lr > 0, "ppo.lr must be > 0")
        _check(self.minibatch_size % self.grad_accum == 0,
               f"ppo.minibatch_size ({self.minibatch_size}) must be a multiple of ppo.grad_accum ({self.grad_accum})")
        _check(0 <= self.gamma <= 1 and 0 <= self.gae_lambda <= 1, "ppo.gamma and ppo.gae_lambda must be in [0, 1]")
        _check(self.clip_eps > 0, "ppo.clip_eps must be > 0")


# ----------------------------------------------------------------------------- run
@dataclass
class RunConfig:
    eval_episodes: int = 0
    """episodes evaluated before and after training (0: skip)."""
    eval_greedy: bool = False
    """evaluate the argmax action instead of sampling."""
    checkpoint_every: int = 1
    """save a checkpoint every this many updates (and at the end)."""
    tensorboard: bool = True


@dataclass
class TrainConfig:
    env: EnvConfig = field(default_factory=EnvConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def __post_init__(self) -> None:
        batch = self.env.num_envs * self.ppo.num_steps
        _check(self.ppo.minibatch_size <= batch,
               f"ppo.minibatch_size ({self.ppo.minibatch_size}) is larger than the rollout batch "
               f"env.num_envs x ppo.num_steps = {batch}; lower it or collect more frames per update")

    @property
    def batch_size(self) -> int:
        return self.env.num_envs * self.ppo.num_steps

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_train_config(path: str | Path | None, overrides: list[str] = ()) -> TrainConfig:
    """A `TrainConfig` from an optional YAML file plus dotted overrides."""
    data = load_yaml(path) if path is not None else {}
    return from_dict(TrainConfig, apply_overrides(data, list(overrides)))
