"""Optional LoRA adapters (peft): base weights frozen, only the adapters train."""

from __future__ import annotations

import re
import warnings

from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn
from transformers import PreTrainedModel

from glamrl.config import ModelConfig
from glamrl.errors import GlamrlError

DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    "llama": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "mistral": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "qwen2": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "qwen3": ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
    "t5": ("q", "k", "v", "o", "wi", "wi_0", "wi_1", "wo"),
    "gpt2": ("c_attn", "c_proj", "c_fc"),
}
"""Attention and MLP projections adapted per model family (names absent from a model are dropped)."""


class LoRAConfigError(GlamrlError, ValueError):
    """LoRA cannot be applied with the configured target modules."""


def target_modules(model: PreTrainedModel, config: ModelConfig) -> list[str]:
    """The configured targets, or the family's defaults that exist in `model`."""
    if config.lora_target_modules is not None:
        return list(config.lora_target_modules)
    model_type = model.config.model_type
    if model_type not in DEFAULT_TARGETS:
        raise LoRAConfigError(f"no default LoRA targets for model type {model_type!r}; "
                              f"set model.lora_target_modules (e.g. [q_proj, v_proj])")
    leaves = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    return [t for t in DEFAULT_TARGETS[model_type] if t in leaves]


def apply_lora(model: PreTrainedModel, config: ModelConfig, blocks: list[int] | None = None) -> PeftModel:
    """Inject LoRA adapters into `model` in place and freeze its own weights; `blocks` (with
    `model.train_layers`) limits them to those decoder blocks (causal layers / seq2seq decoder blocks)."""
    targets: list[str] | str = target_modules(model, config)
    if blocks is not None:
        where = r"decoder\.block" if model.config.is_encoder_decoder else r"layers"
        targets = (rf".*{where}\.({'|'.join(map(str, blocks))})\..*\.({'|'.join(map(re.escape, targets))})")
    lora = LoraConfig(r=config.lora_r, lora_alpha=config.lora_alpha, lora_dropout=config.lora_dropout,
                      target_modules=targets)
    try:
        with warnings.catch_warnings():  # peft calls a transformers method deprecated in v5
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            return get_peft_model(model, lora)
    except ValueError as err:  # targets not found in the model
        raise LoRAConfigError(f"cannot apply LoRA: {err}") from None


def base_model(model: nn.Module) -> PreTrainedModel:
    """The transformers model under an optional peft wrapper (adapters, if any, are inside it)."""
    return model.get_base_model() if isinstance(model, PeftModel) else model
