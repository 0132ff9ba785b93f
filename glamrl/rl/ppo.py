"""The PPO objective: clipped policy loss, clipped value loss and entropy bonus, in one place."""

from __future__ import annotations

from dataclasses import dataclass

from collections.abc import Callable, Sequence
from typing import Any

import torch

from glamrl.config import PPOConfig
from glamrl.rl.buffer import Batch


@dataclass
class PPOLoss:
    loss: torch.Tensor          # scalar to minimise
    policy_loss: torch.Tensor
    value_loss: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor     # estimate of KL(old || new), (ratio - 1) - log ratio
    clipfrac: torch.Tensor      # share of samples whose ratio was clipped
    ratio_dev: torch.Tensor     # max |ratio - 1|: 0 up to rounding on the first minibatch of an update


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
        ratio_dev = (ratio - 1).abs().max()
    return PPOLoss(loss, policy_loss, value_loss, entropy, approx_kl, clipfrac, ratio_dev)


def accumulate_gradients(
    policy: Callable[[list[str], Sequence[str]], Any],
    batch: Batch,
    mb_idx: torch.Tensor,           # (M,) indices of one minibatch in `batch`
    action_names: Sequence[str],
    cfg: PPOConfig,
) -> list[dict[str, float]]:
    """Backward the PPO loss of one minibatch in `cfg.grad_accum` chunks; the gradients
    equal those of the whole minibatch at once. Returns each chunk's loss terms."""
    advantages = batch.advantages[mb_idx]                           # (M,)
    if cfg.norm_adv and len(mb_idx) > 1:  # over the minibatch, not the chunk
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    stats = []
    for chunk in torch.arange(len(mb_idx)).tensor_split(cfg.grad_accum):
        idx = mb_idx[chunk]                                          # (C,)
        out = policy([batch.prompts[i] for i in idx.tolist()], action_names)
        loss = ppo_loss(out.log_probs.float(), out.values.float(), batch.actions[idx], batch.log_probs[idx],
                        batch.values[idx], advantages[chunk], batch.returns[idx], cfg)
        if not torch.isfinite(loss.loss):
            raise FloatingPointError("non-finite PPO loss")
        (loss.loss * len(idx) / len(mb_idx)).backward()
        stats.append({name: term.item() for name, term in vars(loss).items()})
    return stats
