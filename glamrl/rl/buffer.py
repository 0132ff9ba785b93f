"""Rollout storage: T steps of N envs, preallocated, then flattened into one training batch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from glamrl.transfer import to_device


@dataclass
class Batch:
    """A flattened rollout: B = T * N transitions."""

    prompts: list[str]         # (B,) the text each decision read
    actions: torch.Tensor      # (B,) int64
    log_probs: torch.Tensor    # (B,) log pi_old(a | s)
    values: torch.Tensor       # (B,) V_old(s)
    advantages: torch.Tensor   # (B,)
    returns: torch.Tensor      # (B,)

    def __len__(self) -> int:
        return len(self.prompts)

    def to(self, device: torch.device) -> Batch:
        """The same batch with its tensors on `device` (pinned, non-blocking copies on CUDA); prompts stay."""
        return Batch(self.prompts, *(to_device(t, device) for t in (self.actions, self.log_probs, self.values,
                                                                     self.advantages, self.returns)))


class RolloutBuffer:
    """What PPO needs of each of T steps in N envs, as (T, N) tensors."""

    def __init__(self, num_steps: int, num_envs: int) -> None:
        T, N = num_steps, num_envs
        self.prompts: list[list[str]] = [[] for _ in range(T)]
        self.actions = torch.zeros(T, N, dtype=torch.long)
        self.log_probs = torch.zeros(T, N)
        self.values = torch.zeros(T, N)
        self.rewards = torch.zeros(T, N)
        self.terminated = torch.zeros(T, N, dtype=torch.bool)
        self.truncated = torch.zeros(T, N, dtype=torch.bool)
        self.final_values = torch.zeros(T, N)  # V(final observation) where truncated

    def add(self, t: int, prompts: list[str], actions: np.ndarray, log_probs: torch.Tensor, values: torch.Tensor,
            rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> None:
        self.prompts[t] = prompts
        self.actions[t] = torch.as_tensor(actions)
        self.log_probs[t], self.values[t] = log_probs, values
        self.rewards[t] = torch.as_tensor(rewards)
        self.terminated[t], self.truncated[t] = torch.as_tensor(terminated), torch.as_tensor(truncated)
        self.final_values[t] = 0.0

    def flatten(self, advantages: torch.Tensor, returns: torch.Tensor) -> Batch:
        """(T, N) -> (T * N,), step-major."""
        return Batch(
            prompts=[text for row in self.prompts for text in row],
            actions=self.actions.reshape(-1),
            log_probs=self.log_probs.reshape(-1),
            values=self.values.reshape(-1),
            advantages=advantages.reshape(-1),
            returns=returns.reshape(-1),
        )
