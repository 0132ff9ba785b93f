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

from glamrl.errors import GlamrlError
from glamrl.agents.factory import AgentKindError, make_agent, make_model
from glamrl.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from glamrl.config import ConfigError, TrainConfig, apply_overrides, from_dict
from glamrl.rl.gae import compute_gae
from glamrl.rl.buffer import RolloutBuffer
from glamrl.rl.ppo import accumulate_gradients
from glamrl.rollout import evaluate, step
from glamrl.runlog import RunLogger, episode_stats

EVAL_SEED_OFFSET = 1_000_000  # evaluation episodes never share seeds with training ones
PPO_KINDS = ("llm", "symbolic")
LOSS_TERMS = ("loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "grad_norm")


class TrainingDiverged(GlamrlError, RuntimeError):
    """The PPO loss became NaN or infinite."""


@dataclass
class TrainResult:
    run_dir: Path
    updates: int
    frames: int
    success_before: float | None
    success_after: float | None


def default_run_dir(cfg: TrainConfig) -> Path:
    """runs/{env}-{model}-seed{seed} (llm) or runs/{env}-{kind}-seed{seed}: the one place run ids are made."""
    model = Path(cfg.model.name).stem.replace("/", "_") if cfg.agent.kind == "llm" else cfg.agent.kind
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


def write_config(cfg: TrainConfig, run_dir: Path) -> None:
    """RUN_DIR/config.yaml, written atomically: a run directory keeps the config it was started with."""
    tmp = run_dir / ".config.yaml.tmp"
    tmp.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    os.replace(tmp, run_dir / "config.yaml")


class TrainerMismatchError(GlamrlError, ValueError):
    """A run directory resumed by another training loop than the one that wrote it."""


def open_run(cfg: TrainConfig, run_dir: Path, resume: bool, trainer: str) -> dict[str, Any] | None:
    """Create RUN_DIR and seed everything; resuming: its last checkpoint, else write its config and return None.

    `trainer` (ppo, drrn, bc) must be the loop that wrote the checkpoint, stored under "trainer" in it.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    state = load_checkpoint(run_dir) if resume else None
    if state is not None and state.get("trainer", "ppo") != trainer:
        raise TrainerMismatchError(
            f"{run_dir} was trained by {state.get('trainer', 'ppo')}, not {trainer}: start a new run from it "
            f"with agent.init_from={run_dir} and another --run-dir")
    if not resume:
        write_config(cfg, run_dir)
    seed_everything(cfg.env.seed)
    return state


def restore_training(state: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load a checkpoint's trained weights, optimizer and RNG states (every training loop stores these three)."""
    model.load_trainable_state_dict(state["policy"])
    optimizer.load_state_dict(state["optimizer"])
    set_rng_state(state["rng"])


def open_logger(cfg: TrainConfig, run_dir: Path, state: dict[str, Any] | None) -> RunLogger:
    """RUN_DIR's log, cut back to the checkpoint being resumed (`state`) or started afresh."""
    return RunLogger(run_dir, resume_after_update=state["update"] if state is not None else None,
                     tensorboard=cfg.run.tensorboard)


def report_success(cfg: TrainConfig, model: torch.nn.Module, when: str, say: Callable[[str], None]) -> float | None:
    """Success rate on `cfg.run.eval_episodes` evaluation episodes, said aloud; None when that is 0."""
    if not cfg.run.eval_episodes:
        return None
    rate = evaluate_policy(cfg, model)["success_rate"]
    say(f"success rate {when}: {rate:.3f} ({cfg.run.eval_episodes} episodes)")
    return rate


def train(cfg: TrainConfig, run_dir: Path, resume: bool = False, progress: bool = True,
          say: Callable[[str], None] = print) -> TrainResult:
    """Train (or resume, from RUN_DIR's last checkpoint) the PPO agent `cfg` describes (llm or symbolic)."""
    if cfg.agent.kind not in PPO_KINDS:
        raise AgentKindError(f"PPO trains agent kinds {', '.join(PPO_KINDS)}, not {cfg.agent.kind!r}")
    state = open_run(cfg, run_dir, resume, "ppo")
    p = cfg.ppo
    N, T = cfg.env.num_envs, p.num_steps
    num_updates = math.ceil(p.total_frames / cfg.batch_size)

    # ---- model, optimizer, envs
    policy = make_model(cfg)
    params = [w for w in policy.parameters() if w.requires_grad]
    optimizer = torch.optim.Adam(params, lr=p.lr, betas=(p.adam_beta1, p.adam_beta2), eps=p.adam_eps)
    envs = cfg.env.make_vector_env()
    agent = make_agent(cfg, policy, envs)
    update, frames, episodes, duration = 0, 0, 0, 0.0
    if state is not None:
        restore_training(state, policy, optimizer)
        update, frames, episodes, duration = state["update"], state["frames"], state["episodes"], state["duration"]
        say(f"resuming {run_dir} after update {update} ({frames} frames)")

    success_before = report_success(cfg, policy, "before training", say) if state is None else None
    logger = open_logger(cfg, run_dir, state)
    obs, _ = envs.reset(seed=cfg.env.seed + update * N)  # a resumed run starts fresh episodes

    buffer = RolloutBuffer(T, N)
    recent = deque(maxlen=100)  # success of the last episodes, for the progress bar
    bar = tqdm(total=num_updates * cfg.batch_size, initial=frames, unit="frame", disable=not progress)
    start_time = time.time() - duration
    while update < num_updates:
        update_start = time.time()
        finished = []

        # ---- 1. collect T steps in N envs
        for t in range(T):
            s = step(envs, agent, obs)
            d = s.decision
            buffer.add(t, d.prompts, d.actions, d.log_probs, d.values, s.rewards * p.reward_scale,
                       s.terminated, s.truncated)
            cut = np.flatnonzero(s.truncated & ~s.terminated)
            if len(cut):  # bootstrap a time-limit cut from V(final observation)
                buffer.final_values[t, cut] = agent.values(s.final_obs(cut), cut)
            agent.end_episodes(s.done)
            finished += s.episodes
            obs = s.next_obs
        frames += cfg.batch_size
        episodes += len(finished)
        recent.extend(e.success for e in finished)
        collect_time = time.time() - update_start

        # ---- 2. bootstrap value if not done, then GAE
        next_value = agent.values(obs, range(N))                                       # (N,)
        advantages, returns = compute_gae(buffer.rewards, buffer.values, buffer.terminated, buffer.truncated,
                                          buffer.final_values, next_value, p.gamma, p.gae_lambda)  # (T, N)

        # ---- 3. flatten the batch: (T, N) -> (T * N,)
        batch = buffer.flatten(advantages, returns)

        # ---- 4. optimise the policy and value over epochs of minibatches
        stats: list[dict[str, float]] = []  # one entry per forward/backward chunk
        for epoch in range(p.epochs):
            for mb_idx in torch.randperm(len(batch)).split(p.minibatch_size):
                optimizer.zero_grad(set_to_none=True)
                try:
                    stats += accumulate_gradients(policy, batch, mb_idx, cfg.prompt.actions, p)
                except FloatingPointError:
                    raise TrainingDiverged(
                        f"non-finite PPO loss at update {update + 1}, epoch {epoch + 1}; "
                        f"the last good checkpoint is in {run_dir / 'checkpoints'} (try a lower ppo.lr)") from None
                stats[-1]["grad_norm"] = torch.nn.utils.clip_grad_norm_(params, p.max_grad_norm).item()
                optimizer.step()
        update += 1
        update_time = time.time() - update_start - collect_time

        # ---- 5. log, then checkpoint (a kill in between replays this update on resume)
        y, v = batch.returns, batch.values
        explained = float(1 - (y - v).var() / y.var()) if y.var() > 0 else float("nan")
        metrics = {
            "update": update, "frames": frames, "episodes": episodes,
            "FPS": cfg.batch_size / (collect_time + update_time), "duration": time.time() - start_time,
            "collect_FPS": cfg.batch_size / collect_time,
            **episode_stats([e.episode_return for e in finished], [e.episode_length for e in finished],
                            [e.success for e in finished]),
            **{name: float(np.nanmean([st.get(name, np.nan) for st in stats])) for name in LOSS_TERMS},
            "explained_variance": explained,
        }
        logger.log(metrics)
        if update % cfg.run.checkpoint_every == 0 or update == num_updates:
            save_checkpoint(run_dir, {
                "trainer": "ppo", "policy": policy.trainable_state_dict(), "optimizer": optimizer.state_dict(),
                "rng": rng_state(), "update": update, "frames": frames, "episodes": episodes,
                "duration": metrics["duration"], "config": cfg.to_dict(),
            })
        bar.update(cfg.batch_size)
        if recent:
            bar.set_postfix(fps=f"{metrics['FPS']:.1f}", success=f"{np.mean(recent):.2f}")
    bar.close()
    logger.close()
    envs.close()

    return TrainResult(run_dir, update, frames, success_before, report_success(cfg, policy, "after training", say))


def evaluate_policy(cfg: TrainConfig, policy: torch.nn.Module) -> dict[str, Any]:
    """The policy's success on fresh evaluation episodes (seeds apart from training)."""
    envs = cfg.env.make_vector_env()
    agent = make_agent(cfg, policy, envs, greedy=cfg.run.eval_greedy)
    try:
        return evaluate(envs, agent, cfg.run.eval_episodes, seed=cfg.env.seed + EVAL_SEED_OFFSET)
    finally:
        envs.close()
