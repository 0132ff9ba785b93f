"""`model.compile`: each transformer block runs through torch.compile (inductor), collection and update alike.

Regional compilation: every block of the decoder (and the encoder) is compiled on its own, with dynamic
shapes, instead of the whole model. The blocks of a model share their code, so inductor compiles one block
once per kind of pass (inference; forward and backward for the update; its recomputation under
`model.gradient_checkpointing`) and reuses the result for every other block: with SmolLM2 on a CPU a first
update takes 10-16 s longer than eager, where compiling the whole model took minutes; later ones run the
fused kernels. Prompt lengths change
from batch to batch, so shapes are dynamic from the start. What the blocks compute is unchanged: tests check
log-probabilities, values and gradients against eager mode.

The frozen trunk under `model.train_layers` calls the same block modules, so its passes are compiled too;
the embeddings, the final norm and the LM head at the action tokens stay eager (a small share of the FLOPs).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer

RECOMPILE_LIMIT = 64


def compile_blocks(model: nn.Module) -> int:
    """Compile every transformer block of `model` in place (torch.compile, dynamic shapes); returns their count."""
    blocks = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    # one block code, several variants: inference and training passes, attention masks given or not, and in a
    # seq2seq model encoder blocks, decoder blocks (cross-attention) and the first of each (relative position
    # bias). Beyond dynamo's default of 8 variants per code, the rest would silently run eagerly.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    for block in blocks:
        block.compile(dynamic=True)
    return len(blocks)
