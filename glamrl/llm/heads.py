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


STEP_FREQUENCIES = (1, 2)
"""The Fourier frequencies of `step_features`: with x = step / max_steps, x itself and sin, cos(pi k x) per k."""
STEP_FEATURES = 1 + 2 * len(STEP_FREQUENCIES)


def step_features(steps: Tensor, max_steps: Tensor) -> Tensor:
    """(B,), (B,) -> (B, STEP_FEATURES): the features of each episode's elapsed time that a critic reading the
    step count (`model.critic_reads_step`) takes beside the hidden state. x = step / max_steps in [0, 1] (the
    share of the limit used, which the return depends on through the reward 1 - 0.9 x and the time-out at 1),
    then sin(pi k x), cos(pi k x) for k in `STEP_FREQUENCIES`: all in [-1, 1]."""
    x = (steps.float() / max_steps.float()).clamp(0, 1)[:, None]                  # (B, 1)
    k = torch.tensor(STEP_FREQUENCIES, dtype=x.dtype, device=x.device) * torch.pi  # (K,)
    return torch.cat([x, torch.sin(k * x), torch.cos(k * x)], dim=1)             # (B, 1 + 2K)


class ValueHead(nn.Module):
    """V(prompt) from the hidden state at the last prompt token (causal) or first decoder position (seq2seq);
    with `extra_features` > 0, V(prompt, step) from that state and `step_features` concatenated."""

    def __init__(self, hidden_size: int, extra_features: int = 0) -> None:
        super().__init__()
        self.extra_features = extra_features
        self.mlp = _mlp(hidden_size + extra_features, 1)

    def forward(self, hidden: Tensor, extra: Tensor | None = None) -> Tensor:
        """(B, H) and, with `extra_features`, (B, F) -> (B,)."""
        if self.extra_features:
            hidden = torch.cat([hidden, extra.to(hidden.dtype)], dim=1)            # (B, H + F)
        return self.mlp(hidden).squeeze(-1)                                        # (B,)

    @torch.no_grad()
    def standardize_input(self, hidden: Tensor) -> None:
        """Rescale the first layer so that it reads `hidden` (B, H) standardised per feature: W h + b becomes
        W (h - mean) / std + b. A data-dependent initialisation; the head stays a plain MLP. The step features'
        columns (`extra_features`), already in [-1, 1], are left as they are.

        An LLM's hidden states at the last prompt token differ little between prompts (per-feature std
        about 0.08 against magnitudes about 0.9 for SmolLM2 on GoToObjS4), so the default-initialised
        head starts almost constant over states, and Adam needs many steps to amplify those differences.
        """
        first = self.mlp[0]
        mean, std = hidden.float().mean(0), hidden.float().std(0).clamp(min=1e-6)      # (H,), (H,)
        weight = first.weight[:, :hidden.shape[1]]                                     # (width, H)
        weight.div_(std.to(weight.dtype))                                              # (width, H) / (H,)
        first.bias.sub_(weight @ mean.to(weight.dtype))


class ActionHeads(nn.Module):
    """NPAE: one logit per action from the same hidden state, instead of scoring the actions' text."""

    def __init__(self, hidden_size: int, n_actions: int) -> None:
        super().__init__()
        self.mlp = _mlp(hidden_size, n_actions)

    def forward(self, hidden: Tensor) -> Tensor:
        return self.mlp(hidden)  # (B, H) -> (B, A)
