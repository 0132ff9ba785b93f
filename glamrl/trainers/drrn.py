"""Off-policy training of the DRRN agent, read top to bottom.

Choices (documented in `DRRNConfig`, defaults GLAM's): a uniform replay memory, Q-learning
towards the target network's max (or double Q-learning) with the target copied every
`target_update_every` gradient steps, and softmax exploration over Q in training and
evaluation (or epsilon-greedy decaying linearly over `epsilon_decay_frames` frames; greedy
with run.eval_greedy / `glamrl eval --greedy`).
Uniform rather than prioritised replay: BabyAI-Text's rewards are sparse but not rare on
the small levels, and it keeps the memory a plain ring buffer.

Each row of the log covers at most `log_every` frames (the last row of a run the frames left, so that a run
trains drrn.total_frames to within one vector step, however it was resumed): act in N envs (the same vector env, step
function and CSV columns as PPO) → store transitions → a double-Q step every
`train_every` vector steps → log → checkpoint (network, target, optimizer, replay
memory, RNGs). Running again on a run directory resumes it.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from glamrl.agents.drrn import DRRNAgent, DRRNetwork, Exploration
from glamrl.agents.factory import make_agent, make_model
from glamrl.config import DRRNConfig, TrainConfig
from glamrl.rl.dqn import double_q_loss, linear_epsilon
from glamrl.rl.replay import ReplayMemory
from glamrl.rollout import step
from glamrl.run.checkpoint import Progress
from glamrl.run.log import episode_stats
from glamrl.trainers.common import TrainResult, open_session


def q_learning_step(network: DRRNetwork, target: DRRNetwork, action_ids: torch.Tensor,
                    optimizer: torch.optim.Optimizer, memory: ReplayMemory, cfg: DRRNConfig) -> dict[str, float]:
    """One gradient step of Q-learning (double Q with `cfg.double_q`) on a uniform draw from `memory`;
    `action_ids` (A, ACTION_TOKENS): the encoded action names."""
    obs, actions, rewards, next_obs, terminated = memory.sample(cfg.batch_size)
    q = network(obs, action_ids)                                           # (B, A)
    with torch.no_grad():
        next_q_target = target(next_obs, action_ids)                       # (B, A)
        next_q_online = network(next_obs, action_ids) if cfg.double_q else next_q_target  # picks a'
    loss = double_q_loss(q, next_q_online, next_q_target, actions, rewards, terminated, cfg.gamma)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(network.parameters(), cfg.max_grad_norm)
    optimizer.step()
    return {"loss": loss.item(), "grad_norm": grad_norm.item(), "q_mean": q.detach().mean().item()}


def exploration(cfg: DRRNConfig, frames: int) -> Exploration:
    """The training exploration after `frames` frames: softmax, or epsilon on its linear schedule."""
    if cfg.exploration == "softmax":
        return Exploration("softmax", cfg.temperature)
    return Exploration("epsilon", epsilon=linear_epsilon(frames, cfg.epsilon_start, cfg.epsilon_end,
                                                         cfg.epsilon_decay_frames))


def train_drrn(cfg: TrainConfig, run_dir: Path, resume: bool = False, progress: bool = True,
               say: Callable[[str], None] = print) -> TrainResult:
    """Train (or resume, from RUN_DIR's last checkpoint) the DRRN agent `cfg` describes: up to drrn.total_frames,
    or the first row past run.max_minutes or reaching run.stop_at_success."""
    session = open_session(cfg, run_dir, resume, "drrn", progress, say)
    d, N = cfg.drrn, cfg.env.num_envs
    steps_per_row = max(1, d.log_every // N)  # vector steps of a full row

    # ---- networks, optimizer, replay memory, envs
    network = make_model(cfg, load_init=session.resumed is None)
    target = copy.deepcopy(network).requires_grad_(False)
    optimizer = torch.optim.Adam(network.parameters(), lr=d.lr)
    memory = ReplayMemory(d.replay_size, d.max_tokens)
    envs = cfg.env.make_vector_env()
    per_task = cfg.env.several_tasks  # success_rate_TASK columns too
    agent: DRRNAgent = make_agent(cfg, network, envs)

    # ---- resume (network, optimizer, RNGs, target, replay memory); then record the config, evaluate, open the log
    update, frames, episodes, duration = session.restore(network, optimizer)
    grad_steps = 0
    if session.resumed is not None:
        with session.restoring():
            target.load_state_dict(session.resumed.extra["target"])
            memory.load_state_dict(session.resumed.extra["replay"])
        grad_steps = session.resumed.extra["grad_steps"]
        agent.rng = np.random.default_rng([cfg.env.seed, update])

    success_before = session.begin(network)
    obs, _ = envs.reset(seed=cfg.env.train_seed + update * N)  # a resumed run starts fresh episodes
    bar = tqdm(total=d.total_frames, initial=frames, unit="frame", disable=not session.progress)
    start_time = time.time() - duration
    stop = session.out_of_time(duration)  # run.max_minutes counts the run's training time over every invocation
    while frames < d.total_frames and not stop:  # in frames: the budget, whatever the rows were
        row_start, row_steps = time.time(), min(steps_per_row, math.ceil((d.total_frames - frames) / N))
        finished, stats = [], []

        # ---- 1. act in N envs, store the transitions, learn every train_every steps
        for _ in range(row_steps):
            agent.exploration = exploration(d, frames)
            s = step(envs, agent, obs)
            next_ids = agent.encode(s.next_obs, range(N))                 # (N, L), histories still hold o
            cut = np.flatnonzero(s.truncated & ~s.terminated)
            if d.bootstrap_truncation and len(cut):  # a time-limit cut bootstraps from the final observation
                next_ids[cut] = agent.encode(s.final_obs(cut), cut)
            ended = s.terminated if d.bootstrap_truncation else s.done  # a time-out is terminal, as in GLAM
            memory.add(torch.stack(s.decision.inputs), torch.as_tensor(s.decision.actions),
                       torch.as_tensor(s.rewards * d.reward_scale), next_ids, torch.as_tensor(ended))
            agent.end_episodes(s.done)
            finished += s.episodes
            obs = s.next_obs
            frames += N
            if frames >= d.learning_starts and (frames // N) % d.train_every == 0:
                stats.append(q_learning_step(network, target, agent.action_ids, optimizer, memory, d))
                grad_steps += 1
                if grad_steps % d.target_update_every == 0:
                    target.load_state_dict(network.state_dict())
        episodes += len(finished)
        update += 1

        # ---- 2. log, then checkpoint (a kill in between replays this row on resume)
        metrics = {
            "update": update, "frames": frames, "episodes": episodes,
            "FPS": row_steps * N / (time.time() - row_start), "duration": time.time() - start_time,
            **episode_stats(finished, per_task),
            **{k: float(np.mean([st[k] for st in stats])) for k in (stats[0] if stats else ())},  # q_learning_step's
            "epsilon": agent.exploration.epsilon,
        }
        stop = session.out_of_time(metrics["duration"]) or session.reached_success(metrics)
        session.log(metrics)
        if update % cfg.run.checkpoint_every == 0 or frames >= d.total_frames or stop:
            session.save(network, optimizer, Progress(update, frames, episodes, metrics["duration"]),
                         extra={"target": target.state_dict(), "replay": memory.state_dict(), "grad_steps": grad_steps})
        bar.update(row_steps * N)
        if "success_rate" in metrics:
            bar.set_postfix(fps=f"{metrics['FPS']:.0f}", success=f"{metrics['success_rate']:.2f}")
    bar.close()
    envs.close()

    return session.finish(network, update, frames, success_before)
