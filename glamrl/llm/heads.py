"""MLP heads on the language model's hidden state: the value head and the NPAE action heads."""

from __future__ import annotations

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


class ActionHeads(nn.Module):
    """NPAE: one logit per action from the same hidden state, instead of scoring the actions' text."""

    def __init__(self, hidden_size: int, n_actions: int) -> None:
        super().__init__()
        self.mlp = _mlp(hidden_size, n_actions)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.mlp(hidden)  # (B, H) -> (B, A)
