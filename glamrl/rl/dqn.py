"""Q-learning: the TD loss of a minibatch of transitions (double or plain max target), and the epsilon schedule."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def double_q_loss(
    q: torch.Tensor,              # (B, A) online Q(o, .)
    next_q_online: torch.Tensor,  # (B, A) online Q(o', .), picks the next action
    next_q_target: torch.Tensor,  # (B, A) target Q(o', .), values it
    actions: torch.Tensor,        # (B,) int64 actions taken
    rewards: torch.Tensor,        # (B,)
    terminated: torch.Tensor,     # (B,) bool: o' ends the episode (a time-limit cut is not terminal)
    gamma: float,
) -> torch.Tensor:
    """Huber loss between Q(o, a) and r + gamma * Q_target(o', argmax_a' Q_online(o', a')) (0 after termination).

    Given the target's own Q-values as `next_q_online`, the target is plain Q-learning's max_a' Q_target(o', a').
    """
    q_taken = q.gather(1, actions[:, None]).squeeze(1)                              # (B,)
    with torch.no_grad():
        next_a = next_q_online.argmax(dim=1, keepdim=True)                          # (B, 1)
        next_value = next_q_target.gather(1, next_a).squeeze(1)                     # (B,)
        target = rewards + gamma * (~terminated).float() * next_value               # (B,)
    return F.smooth_l1_loss(q_taken, target)


def linear_epsilon(frames: int, start: float, end: float, decay_frames: int) -> float:
    """Epsilon falling linearly from `start` to `end` over the first `decay_frames` frames, then constant."""
    return end + (start - end) * max(0.0, 1.0 - frames / max(decay_frames, 1))
