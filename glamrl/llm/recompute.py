"""Activation checkpointing (`model.gradient_checkpointing`): the PPO update keeps only each block's input
and recomputes the block's activations during the backward pass.

What is kept per block falls from ~50 kB per token (SmolLM2: attention and MLP intermediates) to its
input, 4 x hidden bytes, for one extra forward pass of the trained blocks per minibatch (the update's
FLOPs grow by a third). Gradients are those of the plain backward (same kernels, same inputs: the
tests check them to 1e-6). Passes without gradients (collection, evaluation) run as before.

transformers' `activation_checkpointing_enable` (non-reentrant `torch.utils.checkpoint`) does the
work; it checkpoints a block only while that block's own `training` flag is set, so that flag is set
on the blocks alone: their submodules, dropout included, keep the mode the model was loaded in.
"""

from __future__ import annotations

from transformers import PreTrainedModel
from transformers.modeling_layers import GradientCheckpointingLayer

from glamrl.config import ModelConfig


def choose_checkpointing(config: ModelConfig) -> tuple[bool, str]:
    """Whether the update recomputes activations for `config` (`model.gradient_checkpointing`), and why, in words."""
    setting = config.gradient_checkpointing
    if setting != "auto":
        return setting, f"model.gradient_checkpointing={str(setting).lower()}"
    if config.train_layers:
        return False, "auto: with model.train_layers only the top blocks keep activations"
    if config.lora:
        return False, "auto: LoRA keeps no gradients or Adam state of the weights, so the update's memory is affordable"
    return True, "auto: every weight trains, and the activations are most of the update's memory"


def checkpoint_blocks(model: PreTrainedModel) -> None:
    """Make every transformer block of `model` (decoder and encoder) recompute its activations in the backward pass."""
    # activation_checkpointing_enable replaced gradient_checkpointing_enable (deprecated) in transformers 5.x
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable({"use_reentrant": False})
    for block in model.modules():
        if isinstance(block, GradientCheckpointingLayer):
            block.training = True  # the flag transformers checks; block.train() would also switch on its dropout
