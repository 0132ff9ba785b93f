"""The PPO objective: clipped policy loss, clipped value loss and entropy bonus, in one place."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from glamrl.config import PPOConfig


@dataclass
class PPOLoss:
    loss: torch.Tensor          # scalar to minimise
    policy_loss: torch.Tensor
    value_loss: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor     # estimate of KL(old || new), (ratio - 1) - log ratio
    clipfrac: torch.Tensor      # share of samples whose ratio was clipped


def ppo_loss(
    log_probs: torch.Tensor,      # (B, A) new log pi(. | s) over the candidate actions
    values: torch.Tensor,         # (B,) new V(s)
    actions: torch.Tensor,        # (B,) int64 actions taken
    old_log_probs: torch.Tensor,  # (B,) log pi_old(a | s) at collection
    old_values: torch.Tensor,     # (B,) V_old(s) at collection
    advantages: torch.Tensor,     # (B,)
    returns: torch.Tensor,        # (B,) GAE targets
    cfg: PPOConfig,
) -> PPOLoss:
    """PPO's loss on one minibatch, averaged over it (the value loss clipped as GLAM does)."""
    new_log_probs = log_probs.gather(1, actions[:, None]).squeeze(1)  # (B,)
    log_ratio = new_log_probs - old_log_probs
    ratio = log_ratio.exp()
    if cfg.norm_adv and advantages.numel() > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)

    surrogate = ratio * advantages
    surrogate_clipped = ratio.clamp(1 - cfg.clip_eps, 1 + cfg.clip_eps) * advantages
    policy_loss = -torch.min(surrogate, surrogate_clipped).mean()

    values_clipped = old_values + (values - old_values).clamp(-cfg.clip_eps, cfg.clip_eps)
    value_loss = torch.max((values - returns) ** 2, (values_clipped - returns) ** 2).mean()

    entropy = -(log_probs.exp() * log_probs).sum(dim=1).mean()
    loss = policy_loss - cfg.entropy_coef * entropy + cfg.value_coef * value_loss
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clipfrac = ((ratio - 1).abs() > cfg.clip_eps).float().mean()
    return PPOLoss(loss, policy_loss, value_loss, entropy, approx_kl, clipfrac)
