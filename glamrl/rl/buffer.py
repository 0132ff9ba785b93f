"""Rollout storage: T steps of N envs, preallocated, then flattened into one training batch
and cut into random minibatches of whole sequences (of one step each without recurrence)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from glamrl.parallel.transfer import to_device


@dataclass
class Batch:
    """A flattened rollout: B = T * N transitions, step-major (index t * N + n)."""

    inputs: list[Any]          # (B,) what each decision read (`Decision.inputs`)
    actions: torch.Tensor      # (B,) int64
    log_probs: torch.Tensor    # (B,) log pi_old(a | s)
    values: torch.Tensor       # (B,) V_old(s), in the value head's units at collection
    advantages: torch.Tensor   # (B,)
    returns: torch.Tensor      # (B,)
    resets: torch.Tensor       # (B,) bool: a new episode starts here (the env was done at the step before)

    def __len__(self) -> int:
        return len(self.inputs)

    def to(self, device: torch.device) -> Batch:
        """The same batch with its tensors on `device` (pinned, non-blocking copies on CUDA); inputs stay."""
        return Batch(self.inputs, *(to_device(t, device) for t in (self.actions, self.log_probs, self.values,
                                                                     self.advantages, self.returns, self.resets)))


class RolloutBuffer:
    """What PPO needs of each of T steps in N envs, as (T, N) tensors."""

    def __init__(self, num_steps: int, num_envs: int) -> None:
        T, N = num_steps, num_envs
        self.inputs: list[list[Any]] = [[] for _ in range(T)]
        self.actions = torch.zeros(T, N, dtype=torch.long)
        self.log_probs = torch.zeros(T, N)
        self.values = torch.zeros(T, N)
        self.rewards = torch.zeros(T, N)
        self.terminated = torch.zeros(T, N, dtype=torch.bool)
        self.truncated = torch.zeros(T, N, dtype=torch.bool)
        self.final_values = torch.zeros(T, N)  # V(final observation) where truncated (ppo.bootstrap_truncation)

    def add(self, t: int, inputs: list[Any], actions: np.ndarray, log_probs: torch.Tensor, values: torch.Tensor,
            rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray) -> None:
        self.inputs[t] = inputs
        self.actions[t] = torch.as_tensor(actions)
        self.log_probs[t], self.values[t] = log_probs, values
        self.rewards[t] = torch.as_tensor(rewards)
        self.terminated[t], self.truncated[t] = torch.as_tensor(terminated), torch.as_tensor(truncated)
        self.final_values[t] = 0.0

    def flatten(self, advantages: torch.Tensor, returns: torch.Tensor) -> Batch:
        """(T, N) -> (T * N,), step-major; `returns` in the value head's units, values as the head gave them.

        `resets` at step 0 is False: a sequence always starts there, from the memory the agent stored
        (already cleared if an episode started).
        """
        done = self.terminated | self.truncated                                   # (T, N)
        resets = torch.cat([torch.zeros_like(done[:1]), done[:-1]])               # (T, N)
        return Batch(
            inputs=[item for row in self.inputs for item in row],
            actions=self.actions.reshape(-1),
            log_probs=self.log_probs.reshape(-1),
            values=self.values.reshape(-1),
            advantages=advantages.reshape(-1),
            returns=returns.reshape(-1),
            resets=resets.reshape(-1),
        )

    def minibatches(self, recurrence: int, minibatch_size: int) -> Iterator[torch.Tensor]:
        """Random minibatches of whole sequences, each an (R, S) matrix of indices into the flat batch.

        A sequence is R consecutive steps of one env; each env's rollout is cut every R steps (BabyAI's
        starting indexes), so a sequence may cross an episode boundary (see `Batch.resets`) but never an
        env's. Row i of a minibatch is step i of its S = minibatch_size / R sequences. With R = 1 this is
        a random split of the T * N frames into minibatches of `minibatch_size`.
        """
        T, N = self.actions.shape
        R = recurrence
        order = torch.randperm(T // R * N)                       # sequence q: steps q // N * R + i of env q % N
        firsts = order // N * R * N + order % N                  # (T * N / R,) flat index of each first step
        steps = torch.arange(R)[:, None] * N                     # (R, 1)
        for chunk in firsts.split(minibatch_size // R):
            yield chunk[None] + steps                            # (R, S)
