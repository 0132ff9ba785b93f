"""Value-target normalisation: the critic learns returns rescaled to about zero mean and unit variance.

GLAM's returns (20 x the reward, up to ~18) are far from the value head's initial outputs (~0),
and Adam moves each weight by about the learning rate per step, so at lr 1e-4 the head needs
thousands of steps to reach the returns' scale; meanwhile its loss dominates the clipped
gradient. With normalisation the head predicts (G - mu) / sigma, where mu and sigma^2 are
debiased exponential moving averages of the returns' mean and second moment, updated once per
rollout (as MAPPO's ValueNorm; without PopArt's output-preserving rescaling). Advantages are
computed in the returns' own units from denormalised values, so the policy's update is unchanged
by the choice.

Value clipping under normalisation: the statistics move between the collection of a rollout and
its update, so V_old re-expressed in the new statistics is not where the head starts. The clip
band is therefore centred on the head's own output at collection, in the head's units, and the
targets are normalised with the new statistics (as MAPPO does): inside the band the clipped loss
is the plain one, whatever the statistics did.

`make_value_normalizer` gives `NoValueNorm` when ppo.value_norm is off: the same calls, each the
identity, so the training loop has no branch for the choice.
"""

from __future__ import annotations

import torch

from glamrl.config import PPOConfig


class ValueNormalizer:
    """Running statistics of the value targets and the maps between their units and the head's."""

    def __init__(self, decay: float, min_var: float = 1e-2) -> None:
        self.decay, self.min_var = decay, min_var  # min_var: a rollout without success has returns all 0
        self.mean = torch.zeros((), dtype=torch.float64)      # EMA of E[G] (biased towards 0 early)
        self.mean_sq = torch.zeros((), dtype=torch.float64)   # EMA of E[G^2]
        self.weight = torch.zeros((), dtype=torch.float64)    # 1 - decay^updates: the debiasing term

    def update(self, returns: torch.Tensor) -> None:
        """Fold one rollout's returns (any shape) into the statistics."""
        x = returns.detach().double()
        self.mean = self.decay * self.mean + (1 - self.decay) * x.mean()
        self.mean_sq = self.decay * self.mean_sq + (1 - self.decay) * (x ** 2).mean()
        self.weight = self.decay * self.weight + (1 - self.decay)

    def stats(self) -> tuple[float, float]:
        """(mu, sigma) of the returns so far; (0, 1) before any update."""
        if self.weight == 0:
            return 0.0, 1.0
        mean = self.mean / self.weight
        var = (self.mean_sq / self.weight - mean ** 2).clamp(min=self.min_var)
        return float(mean), float(var.sqrt())

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Returns' units -> the value head's units."""
        mean, std = self.stats()
        return (x - mean) / std

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """The value head's units -> returns' units."""
        mean, std = self.stats()
        return x * std + mean

    def metrics(self) -> dict[str, float]:
        """The statistics as log columns."""
        mean, std = self.stats()
        return {"value_mean": mean, "value_std": std}

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"mean": self.mean, "mean_sq": self.mean_sq, "weight": self.weight}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.mean, self.mean_sq, self.weight = state["mean"], state["mean_sq"], state["weight"]

    def checkpoint_extra(self) -> dict[str, dict[str, torch.Tensor]]:
        """What a PPO checkpoint keeps of the normaliser (its `extra` entries)."""
        return {"value_norm": self.state_dict()}

    def restore(self, extra: dict[str, object]) -> None:
        """Reload the statistics from a checkpoint's `extra` entries."""
        self.load_state_dict(extra["value_norm"])


class NoValueNorm:
    """ppo.value_norm off: the head speaks the returns' units; every map is the identity, nothing is kept."""

    def update(self, returns: torch.Tensor) -> None:
        pass

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def metrics(self) -> dict[str, float]:
        return {}

    def checkpoint_extra(self) -> dict[str, dict[str, torch.Tensor]]:
        return {}

    def restore(self, extra: dict[str, object]) -> None:
        pass


def make_value_normalizer(p: PPOConfig) -> ValueNormalizer | NoValueNorm:
    """The value-target normalisation ppo.value_norm asks for."""
    return ValueNormalizer(p.value_norm_decay) if p.value_norm else NoValueNorm()
