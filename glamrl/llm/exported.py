"""The exported-policy directory format: file names, the manifest, and reading the heads back.

`glamrl export` writes a Hugging Face model directory plus two glamrl files:

    glamrl_heads.safetensors   value head (and NPAE action heads): `value_head.mlp.{0,2,4}.{weight,bias}`
    glamrl_heads.json          `PolicyManifest`: how the heads attach, action names, prompt settings

`LLMPolicy` and the model loader detect these files, so `model.name=DIR` continues from an
export, value head included.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from safetensors.torch import load_file
from torch import Tensor

from glamrl.errors import GlamrlError

HEADS_FILE = "glamrl_heads.safetensors"
MANIFEST_FILE = "glamrl_heads.json"
ADAPTER_CONFIG = "adapter_config.json"
BASE_DIR = "base"
FORMAT = "glamrl-policy"
VERSION = 1


class ExportFormatError(GlamrlError, ValueError):
    """An exported directory whose glamrl files are missing, unreadable or of another version."""


def mlp_layers(prefix: str) -> list[dict[str, str]]:
    """The heads' MLP (hidden -> 1024 -> 1024 -> out, sigmoids) as tensor names, for plain-torch readers."""
    linear = [{"type": "linear", "weight": f"{prefix}.{i}.weight", "bias": f"{prefix}.{i}.bias"} for i in (0, 2, 4)]
    return [linear[0], {"type": "sigmoid"}, linear[1], {"type": "sigmoid"}, linear[2]]


@dataclass
class PolicyManifest:
    """Everything a reader needs to rebuild the policy from an exported directory (glamrl_heads.json)."""

    weights: str
    """full (all weights in model.safetensors), merged (LoRA merged into them) or adapter (peft adapter)."""
    base_model: str | None
    """adapter only: the base model, `base` (a subdirectory of the export) or the run's model name."""
    architecture: str
    """causal or seq2seq."""
    hidden_size: int
    hidden_state: str
    """where the heads read: last_prompt_token (causal) or first_decoder_position (seq2seq)."""
    action_names: list[str]
    nbr_obs: int
    """observations kept in the prompt."""
    language: str
    normalize_by_length: bool
    """action scores are mean (True) rather than summed token log-probabilities."""
    use_action_heads: bool
    """NPAE: the policy is softmax(action_heads(hidden)) instead of softmax(action scores)."""
    score: str = "log_softmax"
    """what an action's score sums over its tokens (model.score): log_softmax, or GLAM's sum_logits."""
    critic_reads_step: bool = False
    """the value head also reads the episode's step (glamrl.llm.heads.step_features after the hidden state)."""
    value_head: list[dict[str, str]] = field(default_factory=lambda: mlp_layers("value_head.mlp"))
    action_heads: list[dict[str, str]] | None = None
    format: str = FORMAT
    version: int = VERSION
    notes: dict[str, str] = field(default_factory=dict)
    """plain-English description of the hidden state, the prompt and the action tokenisation."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, ensure_ascii=False)


def read_manifest(name: str | Path) -> PolicyManifest | None:
    """The manifest of an exported directory, or None when `name` is not one."""
    path = Path(name).expanduser() / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ExportFormatError(f"{path} is unreadable: {err}") from None
    if data.get("format") != FORMAT or data.get("version") != VERSION:
        raise ExportFormatError(f"{path} is not a {FORMAT} v{VERSION} manifest; re-export the run with this glamrl")
    known = {f.name for f in fields(PolicyManifest)}
    return PolicyManifest(**{k: v for k, v in data.items() if k in known})


def read_heads(name: str | Path) -> dict[str, Tensor]:
    """The heads' tensors of an exported directory (`value_head.*`, `action_heads.*`), on CPU."""
    path = Path(name).expanduser() / HEADS_FILE
    if not path.is_file():
        raise ExportFormatError(f"{path.parent} has {MANIFEST_FILE} but no {HEADS_FILE}; re-export the run")
    return load_file(path)


def is_adapter_dir(name: str | Path) -> bool:
    """A peft LoRA adapter directory (adapter_config.json, no full weights)."""
    return (Path(name).expanduser() / ADAPTER_CONFIG).is_file()
