"""Generalised advantage estimation with terminations and truncations told apart, and the critic-free
discounted returns-to-go of `ppo.advantage=batch_baseline`."""

from __future__ import annotations

import torch


def compute_gae(
    rewards: torch.Tensor,       # (T, N) rewards of each step
    values: torch.Tensor,        # (T, N) V(s_t)
    terminated: torch.Tensor,    # (T, N) bool: the episode's return ends at step t (a time-out too, unless bootstrapped)
    truncated: torch.Tensor,     # (T, N) bool: the episode was cut at step t (time limit)
    final_values: torch.Tensor,  # (T, N) V(final observation) where truncated, anything elsewhere
    next_value: torch.Tensor,    # (N,) V(s_T), the state after the last collected step
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns, each (T, N).

    After a termination the future is worth 0; after a truncation that is not also a
    termination it is worth V(final observation) (bootstrapped); otherwise it is V(s_{t+1}).
    No advantage flows across an episode boundary of either kind. A caller that treats a
    time-out as the end of the task (GLAM, BabyAI) passes terminated | truncated.
    """
    T = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last_gae = torch.zeros_like(next_value)
    for t in reversed(range(T)):
        following = next_value if t == T - 1 else values[t + 1]                  # (N,)
        future = torch.where(truncated[t], final_values[t], following)
        future = torch.where(terminated[t], torch.zeros_like(future), future)
        delta = rewards[t] + gamma * future - values[t]
        continues = (~(terminated[t] | truncated[t])).to(rewards.dtype)
        last_gae = delta + gamma * gae_lambda * continues * last_gae
        advantages[t] = last_gae
    return advantages, advantages + values


def discounted_returns(
    rewards: torch.Tensor,  # (T, N) rewards of each step
    ended: torch.Tensor,    # (T, N) bool: the episode's return ends at step t (termination or time-out)
    gamma: float,
) -> torch.Tensor:
    """Returns-to-go within the rollout, (T, N): G_t = r_t + gamma * G_{t+1}, with G_{t+1} = 0 where the episode
    ended at step t, and after the rollout's last step (an episode still running there is bootstrapped with 0,
    not with a value: no critic is read). `ppo.advantage=batch_baseline`'s returns."""
    T = rewards.shape[0]
    returns = torch.zeros_like(rewards)
    following = torch.zeros_like(rewards[0])                                     # (N,) G_T = 0
    for t in reversed(range(T)):
        following = rewards[t] + gamma * (~ended[t]).to(rewards.dtype) * following
        returns[t] = following
    return returns
