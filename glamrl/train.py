"""Online PPO fine-tuning of an LLM agent in BabyAI-Text, read top to bottom.

Phases of each update: collect (the LLM scores actions under inference mode) →
bootstrap and GAE → flatten → optimise the PPO loss over epochs of minibatches →
log → checkpoint. A run directory holds everything; running again on it resumes.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from tqdm import tqdm

from glamrl.agents.llm import LLMAgent
from glamrl.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from glamrl.config import ConfigError, TrainConfig, apply_overrides, from_dict
from glamrl.envs import make_vector_env_from_config
from glamrl.llm.policy import LLMPolicy
from glamrl.rl.gae import compute_gae
from glamrl.rl.ppo import PPOLoss, ppo_loss
from glamrl.rollout import evaluate, step
from glamrl.runlog import RunLogger, episode_stats

EVAL_SEED_OFFSET = 1_000_000  # evaluation episodes never share seeds with training ones


class TrainingDiverged(RuntimeError):
    """The PPO loss became NaN or infinite."""


@dataclass
class TrainResult:
    run_dir: Path
    updates: int
    frames: int
    success_before: float | None
    success_after: float | None


def default_run_dir(cfg: TrainConfig) -> Path:
    """runs/{env}-{model}-seed{seed}: the one place run ids are made."""
    model = Path(cfg.model.name).stem.replace("/", "_")
    return Path("runs") / f"{cfg.env.id}-{model}-seed{cfg.env.seed}"


def resolve_config(run_dir: Path, cfg: TrainConfig | None, overrides: list[str]) -> tuple[TrainConfig, bool]:
    """The run's config and whether it resumes: a run directory keeps its own config."""
    saved = run_dir / "config.yaml"
    if not saved.exists():
        if cfg is None:
            raise ConfigError(f"{run_dir} holds no run to resume; give --config")
        return cfg, False
    data = apply_overrides(yaml.safe_load(saved.read_text()), overrides)
    return from_dict(TrainConfig, data), True


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_agent(cfg: TrainConfig, policy: LLMPolicy, greedy: bool = False) -> LLMAgent:
    return LLMAgent(policy, cfg.env.num_envs, cfg.prompt.actions, cfg.prompt.nbr_obs, cfg.env.language, greedy)


def write_config(cfg: TrainConfig, run_dir: Path) -> None:
    """RUN_DIR/config.yaml, written atomically: a run directory keeps the config it was started with."""
    tmp = run_dir / ".config.yaml.tmp"
    tmp.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    os.replace(tmp, run_dir / "config.yaml")


def train(cfg: TrainConfig, run_dir: Path, resume: bool = False, progress: bool = True,
          say: Callable[[str], None] = print) -> TrainResult:
    """Train (or resume, from RUN_DIR's last checkpoint) the LLM agent `cfg` describes."""
    run_dir.mkdir(parents=True, exist_ok=True)
    state = load_checkpoint(run_dir) if resume else None
    if not resume:
        write_config(cfg, run_dir)
    seed_everything(cfg.env.seed)
    p = cfg.ppo
    N, T = cfg.env.num_envs, p.num_steps
    num_updates = math.ceil(p.total_frames / cfg.batch_size)

    # ---- model, optimizer, envs
    policy = LLMPolicy(cfg.model, cfg.prompt.actions)
    params = [w for w in policy.parameters() if w.requires_grad]
    optimizer = torch.optim.Adam(params, lr=p.lr, betas=(p.adam_beta1, p.adam_beta2), eps=p.adam_eps)
    envs = make_vector_env_from_config(cfg.env)
    agent = make_agent(cfg, policy)
    update, frames, episodes, duration = 0, 0, 0, 0.0
    if state is not None:
        policy.load_trainable_state_dict(state["policy"])
        optimizer.load_state_dict(state["optimizer"])
        set_rng_state(state["rng"])
        update, frames, episodes, duration = state["update"], state["frames"], state["episodes"], state["duration"]
        say(f"resuming {run_dir} after update {update} ({frames} frames)")

    success_before = None
    if state is None and cfg.run.eval_episodes:
        success_before = evaluate_policy(cfg, policy)["success_rate"]
        say(f"success rate before training: {success_before:.3f} ({cfg.run.eval_episodes} episodes)")

    logger = RunLogger(run_dir, resume_after_update=update if state is not None else None,
                       tensorboard=cfg.run.tensorboard)
    obs, _ = envs.reset(seed=cfg.env.seed + update * N)  # a resumed run starts fresh episodes

    # ---- rollout storage: (T, N)
    prompts: list[list[str]] = [[] for _ in range(T)]
    actions = torch.zeros(T, N, dtype=torch.long)
    log_probs = torch.zeros(T, N)
    values = torch.zeros(T, N)
    rewards = torch.zeros(T, N)
    terminated = torch.zeros(T, N, dtype=torch.bool)
    truncated = torch.zeros(T, N, dtype=torch.bool)
    final_values = torch.zeros(T, N)
    recent = deque(maxlen=100)  # (success, return) of the last episodes, for the progress bar

    bar = tqdm(total=num_updates * cfg.batch_size, initial=frames, unit="frame", disable=not progress)
    start_time = time.time() - duration
    while update < num_updates:
        update_start = time.time()
        finished = []

        # ---- 1. collect T steps in N envs
        for t in range(T):
            s = step(envs, agent, obs)
            prompts[t] = s.decision.prompts
            actions[t] = torch.as_tensor(s.decision.actions)
            log_probs[t], values[t] = s.decision.log_probs, s.decision.values
            rewards[t] = torch.as_tensor(s.rewards) * p.reward_scale
            terminated[t], truncated[t] = torch.as_tensor(s.terminated), torch.as_tensor(s.truncated)
            cut = np.flatnonzero(s.truncated & ~s.terminated)
            if len(cut):  # bootstrap a time-limit cut from V(final observation)
                final = [s.infos["final_obs"][i] for i in cut]
                final_obs = {"mission": [o["mission"] for o in final], "descriptions": [o["descriptions"] for o in final]}
                final_values[t, cut] = agent.values(final_obs, cut)
            agent.end_episodes(s.done)
            finished += s.episodes
            obs = s.next_obs
        frames += cfg.batch_size
        episodes += len(finished)
        recent.extend((e.success, e.episode_return) for e in finished)
        collect_time = time.time() - update_start

        # ---- 2. bootstrap value if not done, then GAE
        next_value = agent.values(obs, range(N))                              # (N,)
        advantages, returns = compute_gae(rewards, values, terminated, truncated, final_values,
                                          next_value, p.gamma, p.gae_lambda)  # (T, N)

        # ---- 3. flatten the batch: (T, N) -> (T * N,)
        b_prompts = [text for row in prompts for text in row]
        b_actions, b_log_probs = actions.reshape(-1), log_probs.reshape(-1)
        b_values, b_advantages, b_returns = values.reshape(-1), advantages.reshape(-1), returns.reshape(-1)

        # ---- 4. optimise the policy and value over epochs of minibatches
        stats = []
        for epoch in range(p.epochs):
            for mb_idx in torch.randperm(cfg.batch_size).split(p.minibatch_size):
                optimizer.zero_grad(set_to_none=True)
                mb_stats = []
                for chunk in mb_idx.tensor_split(p.grad_accum):
                    out = policy([b_prompts[i] for i in chunk.tolist()], cfg.prompt.actions)
                    loss = ppo_loss(out.log_probs.float(), out.values.float(), b_actions[chunk], b_log_probs[chunk],
                                    b_values[chunk], b_advantages[chunk], b_returns[chunk], p)
                    if not torch.isfinite(loss.loss):
                        raise TrainingDiverged(
                            f"non-finite PPO loss at update {update + 1}, epoch {epoch + 1}; "
                            f"the last good checkpoint is in {run_dir / 'checkpoints'} (try a lower ppo.lr)")
                    (loss.loss * len(chunk) / len(mb_idx)).backward()
                    mb_stats.append(PPOLoss(*(term.detach() for term in vars(loss).values())))
                grad_norm = torch.nn.utils.clip_grad_norm_(params, p.max_grad_norm)
                optimizer.step()
                stats.append((mb_stats, float(grad_norm)))
        update += 1
        update_time = time.time() - update_start - collect_time

        # ---- 5. log, then checkpoint (a kill in between replays this update on resume)
        y, v = b_returns, b_values
        explained = float(1 - (y - v).var() / y.var()) if y.var() > 0 else float("nan")
        metrics = {
            "update": update, "frames": frames, "episodes": episodes,
            "FPS": cfg.batch_size / (collect_time + update_time), "duration": time.time() - start_time,
            "collect_FPS": cfg.batch_size / collect_time,
            **episode_stats([e.episode_return for e in finished], [e.episode_length for e in finished],
                            [e.success for e in finished]),
            **_mean_losses(stats), "explained_variance": explained,
        }
        logger.log(metrics)
        if update % cfg.run.checkpoint_every == 0 or update == num_updates:
            save_checkpoint(run_dir, {
                "policy": policy.trainable_state_dict(), "optimizer": optimizer.state_dict(),
                "rng": rng_state(), "update": update, "frames": frames, "episodes": episodes,
                "duration": metrics["duration"], "config": cfg.to_dict(),
            })
        bar.update(cfg.batch_size)
        if recent:
            bar.set_postfix(fps=f"{metrics['FPS']:.1f}", success=f"{np.mean([r[0] for r in recent]):.2f}")
    bar.close()
    logger.close()
    envs.close()

    success_after = None
    if cfg.run.eval_episodes:
        success_after = evaluate_policy(cfg, policy)["success_rate"]
        say(f"success rate after training: {success_after:.3f} ({cfg.run.eval_episodes} episodes)")
    return TrainResult(run_dir, update, frames, success_before, success_after)


def evaluate_policy(cfg: TrainConfig, policy: LLMPolicy) -> dict[str, Any]:
    """The policy's success on fresh evaluation episodes (seeds apart from training)."""
    envs = make_vector_env_from_config(cfg.env)
    agent = make_agent(cfg, policy, greedy=cfg.run.eval_greedy)
    try:
        return evaluate(envs, agent, cfg.run.eval_episodes, seed=cfg.env.seed + EVAL_SEED_OFFSET)
    finally:
        envs.close()


def _mean_losses(stats: list[tuple[list[Any], float]]) -> dict[str, float]:
    """Average each loss term over all minibatches of the update."""
    names = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")
    out = {name: float(np.mean([getattr(l, name).item() for mb, _ in stats for l in mb])) for name in names}
    out["grad_norm"] = float(np.mean([g for _, g in stats]))
    return out
