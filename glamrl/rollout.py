"""Acting in a vector env: one step function shared by training and evaluation."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from tqdm import tqdm

from glamrl.agents.base import Agent, Decision
from glamrl.envs import EpisodeResult, finished_episodes
from glamrl.run.checkpoint import seeded
from glamrl.stats import mean_interval, wilson_interval

@dataclass
class Step:
    """One synchronous step of N envs (after a done, `next_obs` is the new episode's start)."""

    decision: Decision
    next_obs: dict[str, Any]
    rewards: np.ndarray      # (N,) env rewards (unscaled)
    terminated: np.ndarray   # (N,) bool
    truncated: np.ndarray    # (N,) bool
    infos: dict[str, Any]

    @property
    def done(self) -> np.ndarray:
        return self.terminated | self.truncated

    @property
    def episodes(self) -> list[EpisodeResult]:
        return finished_episodes(self.infos)

    def final_obs(self, envs: np.ndarray) -> dict[str, Any]:
        """The last observation of the episodes that just ended in `envs`, batched like `next_obs`."""
        final = [self.infos["final_obs"][i] for i in envs]
        return {key: [o[key] for o in final] for key in final[0]}


def step(envs: gym.vector.VectorEnv, agent: Agent, obs: dict[str, Any]) -> Step:
    """Let `agent` act on `obs` and step every env once. The caller ends the agent's episodes."""
    decision = agent.act(obs)
    next_obs, rewards, terminated, truncated, infos = envs.step(decision.actions)
    return Step(decision, next_obs, np.asarray(rewards, dtype=np.float32), terminated, truncated, infos)


def evaluate(
    envs: gym.vector.VectorEnv, agent: Agent, episodes: int, seed: int, progress: bool = False,
    on_episode: Callable[[int, EpisodeResult], None] | None = None,
) -> dict[str, Any]:
    """Success rate, mean return and length over `episodes` episodes (see `run_episodes`), overall and per task."""
    return summarize(run_episodes(envs, agent, episodes, seed, progress, on_episode))


def run_episodes(
    envs: gym.vector.VectorEnv, agent: Agent, episodes: int, seed: int, progress: bool = False,
    on_episode: Callable[[int, EpisodeResult], None] | None = None,
) -> list[EpisodeResult]:
    """Play episodes 0..episodes-1, episode k from `reset(seed=seed + k)`, whatever `envs.num_envs`; their results
    in that order.

    Env i starts episode i; an env whose episode ends starts the next episode not yet begun, so every episode
    counts once whatever its length (short ones are not favoured); envs left with none play on, uncounted.
    The global RNGs (Python, numpy, torch) are seeded with `seed` for the episodes and restored after them: the
    episodes' draws do not depend on what ran before, nor change what runs after. The bot, the random agent and
    greedy agents then play each episode alike whatever `num_envs`; agents that sample a batch of actions at once
    (llm, symbolic and drrn unless greedy) still draw each env's action from a stream shared by the batch, so
    their draws depend on `num_envs`.
    `on_episode(k, result)` is called when episode k ends, after the agent's `end_episodes`.
    """
    n = envs.num_envs
    results: list[EpisodeResult | None] = [None] * episodes
    playing = np.arange(n)  # (N,) the episode each env plays; >= episodes: uncounted
    started, ended = n, 0
    with seeded(seed), tqdm(total=episodes, unit="ep", disable=not progress, leave=False) as bar:
        obs, _ = envs.reset(seed=seed)  # env i gets seed + i: episode i
        agent.end_episodes(np.ones(n, dtype=bool))
        while ended < episodes:
            s = step(envs, agent, obs)
            agent.end_episodes(s.done)
            obs = s.next_obs
            restart, seeds = np.zeros(n, dtype=bool), [None] * n  # the envs that start the next episodes
            for ep in s.episodes:
                i, k = ep.env_index, playing[ep.env_index]
                if k < episodes:
                    results[k] = ep
                    ended += 1
                    if on_episode is not None:
                        on_episode(int(k), ep)
                    bar.update(1)
                playing[i] = started
                if started < episodes:
                    restart[i], seeds[i] = True, seed + started
                    started += 1
            if restart.any():  # replace the first observation of the episodes the vector env reset unseeded
                obs, _ = envs.reset(seed=seeds, options={"reset_mask": restart})
    return results


def summarize(results: list[EpisodeResult]) -> dict[str, Any]:
    """The statistics `glamrl eval` prints and writes, overall and per task kind, and each episode's outcome in
    episode order (`per_episode`: success 0/1, return, length; what `glamrl results` bootstraps over)."""
    by_task: dict[str, list[EpisodeResult]] = defaultdict(list)
    for r in results:
        by_task[r.task].append(r)
    summary = _stats(results)
    summary["per_task"] = {task: _stats(rs) for task, rs in sorted(by_task.items())}
    summary["per_episode"] = {"success": [int(r.success) for r in results],
                              "return": [r.episode_return for r in results],
                              "length": [r.episode_length for r in results]}
    return summary


def _stats(results: list[EpisodeResult]) -> dict[str, Any]:
    """Means, with 95% intervals: Wilson for the success rate, normal approximation for the return."""
    returns = [r.episode_return for r in results]
    return {
        "episodes": len(results),
        "success_rate": float(np.mean([r.success for r in results])),
        "success_ci": list(wilson_interval(sum(r.success for r in results), len(results))),
        "mean_return": float(np.mean(returns)),
        "return_ci": list(mean_interval(returns)),
        "mean_length": float(np.mean([r.episode_length for r in results])),
    }


def format_table(summary: dict[str, Any]) -> str:
    """A plain-text table of `summarize`'s output."""
    rows = [("all", summary)] + list(summary["per_task"].items())
    lines = [f"{'task':<22}{'episodes':>9}{'success':>9}{'return':>9}{'length':>9}"]
    for name, s in rows:
        lines.append(f"{name:<22}{s['episodes']:>9}{s['success_rate']:>9.3f}"
                     f"{s['mean_return']:>9.3f}{s['mean_length']:>9.1f}")
    return "\n".join(lines)
