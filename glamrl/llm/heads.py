"""MLP heads on the language model's hidden state: the value head and the NPAE action heads."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def _mlp(hidden_size: int, out_features: int, width: int = 1024) -> nn.Sequential:
    """hidden -> width -> width -> out with sigmoid activations (GLAM's heads)."""
    return nn.Sequential(
        nn.Linear(hidden_size, width), nn.Sigmoid(),
        nn.Linear(width, width), nn.Sigmoid(),
        nn.Linear(width, out_features),
    )


class ValueHead(nn.Module):
    """V(prompt) from the hidden state at the last prompt token (causal) or first decoder position (seq2seq)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.mlp = _mlp(hidden_size, 1)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.mlp(hidden).squeeze(-1)  # (B, H) -> (B,)

    @torch.no_grad()
    def standardize_input(self, hidden: Tensor) -> None:
        """Rescale the first layer so that it reads `hidden` (B, H) standardised per feature: W h + b becomes
        W (h - mean) / std + b. A data-dependent initialisation; the head stays a plain MLP.

        An LLM's hidden states at the last prompt token differ little between prompts (per-feature std
        about 0.08 against magnitudes about 0.9 for SmolLM2 on GoToObjS4), so the default-initialised
        head starts almost constant over states, and Adam needs many steps to amplify those differences.
        """
        first = self.mlp[0]
        mean, std = hidden.float().mean(0), hidden.float().std(0).clamp(min=1e-6)      # (H,), (H,)
        first.weight.div_(std.to(first.weight.dtype))                                  # (width, H) / (H,)
        first.bias.sub_(first.weight @ mean.to(first.weight.dtype))


class ActionHeads(nn.Module):
    """NPAE: one logit per action from the same hidden state, instead of scoring the actions' text."""

    def __init__(self, hidden_size: int, n_actions: int) -> None:
        super().__init__()
        self.mlp = _mlp(hidden_size, n_actions)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.mlp(hidden)  # (B, H) -> (B, A)
