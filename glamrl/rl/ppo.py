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
    mirror_kl: torch.Tensor | None = None  # symmetrised KL between pi(. | s) and the mirror's (ppo.mirror_coef)


@dataclass(frozen=True)
class Mirror:
    """A symmetry the policy is asked to respect (ppo.mirror_coef): `inputs` maps a policy input to its mirror
    image (`glamrl.llm.policy.mirror_input`), and `actions[i]` is the index of action i's image
    (`glamrl.envs.mirror.mirror_actions`), so that pi(a | s) should equal pi(actions[a] | inputs(s))."""
    inputs: Callable[[Any], Any]
    actions: Sequence[int]


def symmetric_kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """(KL(p || q) + KL(q || p)) / 2 = sum_a (p - q)(log p - log q) / 2, per row of two (B, A) log-distributions,
    averaged over the rows; both sides get gradients."""
    return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum(dim=1).mean() / 2


def ppo_loss(
    log_probs: torch.Tensor,      # (B, A) new log pi(. | s) over the candidate actions
    values: torch.Tensor,         # (B,) new V(s)
    actions: torch.Tensor,        # (B,) int64 actions taken
    old_log_probs: torch.Tensor,  # (B,) log pi_old(a | s) at collection
    old_values: torch.Tensor,     # (B,) V_old(s): the head's output at collection, in the head's units
    advantages: torch.Tensor,     # (B,)
    returns: torch.Tensor,        # (B,) GAE targets, in the head's units now (ppo.value_norm's new statistics)
    cfg: PPOConfig,
    mirrored_log_probs: torch.Tensor | None = None,  # (B, A) log pi(mirror(a) | mirror(s)), with ppo.mirror_coef
) -> PPOLoss:
    """PPO's loss on one minibatch, averaged over it (the value loss clipped as GLAM does, unless cfg.clip_value is
    off; 0, and no gradient to the value head, with cfg.advantage=batch_baseline, which has no critic). Given the
    mirror's log-probabilities, the loss adds cfg.mirror_coef x their symmetrised KL with `log_probs`."""
    new_log_probs = log_probs.gather(1, actions[:, None]).squeeze(1)  # (B,)
    log_ratio = new_log_probs - old_log_probs
    ratio = log_ratio.exp()

    surrogate = ratio * advantages
    surrogate_clipped = ratio.clamp(1 - cfg.clip_eps, 1 + cfg.clip_eps) * advantages
    policy_loss = -torch.min(surrogate, surrogate_clipped).mean()

    if cfg.advantage == "batch_baseline":  # no critic to train: its head gets no gradient
        value_loss = torch.zeros((), device=values.device)
    else:
        value_loss = (values - returns) ** 2
        if cfg.clip_value:  # pessimistic: a value that moved more than clip_eps from V_old gets no gradient towards G
            values_clipped = old_values + (values - old_values).clamp(-cfg.clip_eps, cfg.clip_eps)
            value_loss = torch.max(value_loss, (values_clipped - returns) ** 2)
        value_loss = value_loss.mean()

    entropy = -(log_probs.exp() * log_probs).sum(dim=1).mean()
    loss = policy_loss - cfg.entropy_coef * entropy + cfg.value_coef * value_loss
    mirror_kl = None
    if mirrored_log_probs is not None:
        mirror_kl = symmetric_kl(log_probs, mirrored_log_probs)
        loss = loss + cfg.mirror_coef * mirror_kl
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clipfrac = ((ratio - 1).abs() > cfg.clip_eps).float().mean()
        ratio_dev = (ratio - 1).abs().max()
    return PPOLoss(loss, policy_loss, value_loss, entropy, approx_kl, clipfrac, ratio_dev, mirror_kl)


def accumulate_gradients(
    policy: Callable[..., Any],
    batch: Batch,
    mb_idx: torch.Tensor,           # (R, S) indices in `batch` of S sequences of R steps (R = 1: S frames)
    action_names: Sequence[str],
    cfg: PPOConfig,
    mirror: Mirror | None = None,
) -> list[dict[str, float]]:
    """Backward the PPO loss of one minibatch in `cfg.grad_accum` chunks of whole sequences; the gradients
    equal those of the whole minibatch at once (unless the policy normalises over its batch, as batch norm
    does). Returns each chunk's loss terms.

    The policy scores a list of inputs (`Decision.inputs`): `policy(inputs, action_names)` for frames
    (R = 1), the call every policy takes; sequences (R > 1) go to a recurrent policy as
    `policy(inputs, action_names, resets)`, inputs step-major (step i of every sequence, then step i + 1)
    and `resets` (R, C) where its memory restarts from zero, which carries its memory through each
    sequence from the one stored with the sequence's first input.

    With a `mirror` (frames only), the chunk's mirror images are scored in the same forward pass, after the
    chunk's own inputs, for the loss's mirror term.
    """
    advantages = batch.advantages[mb_idx]                           # (R, S)
    if cfg.norm_adv and mb_idx.numel() > 1:  # over the minibatch, not the chunk
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    stats = []
    for chunk in torch.arange(mb_idx.shape[1]).tensor_split(cfg.grad_accum):
        idx = mb_idx[:, chunk]                                       # (R, C)
        flat = idx.reshape(-1)                                       # (R * C,) step-major
        inputs = [batch.inputs[i] for i in flat.tolist()]
        C, mirrored = len(inputs), None
        if mirror is not None:
            out = policy(inputs + [mirror.inputs(x) for x in inputs], action_names)   # (2 * C, A)
            mirrored = out.log_probs[C:, mirror.actions].float()                        # (C, A) in s's action order
        else:
            out = policy(inputs, action_names) if len(idx) == 1 else policy(inputs, action_names, batch.resets[idx])
        loss = ppo_loss(out.log_probs[:C].float(), out.values[:C].float(), batch.actions[flat],
                        batch.log_probs[flat], batch.values[flat], advantages[:, chunk].reshape(-1),
                        batch.returns[flat], cfg, mirrored)
        if not torch.isfinite(loss.loss):
            raise FloatingPointError("non-finite PPO loss")
        (loss.loss * idx.numel() / mb_idx.numel()).backward()
        stats.append({name: term.item() for name, term in vars(loss).items() if term is not None})
    return stats
