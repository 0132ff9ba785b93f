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
    on_episode: Callable[[EpisodeResult], None] | None = None,
) -> dict[str, Any]:
    """Success rate, mean return and length over `episodes` episodes, overall and per task."""
    return summarize(run_episodes(envs, agent, episodes, seed, progress, on_episode))


def run_episodes(
    envs: gym.vector.VectorEnv, agent: Agent, episodes: int, seed: int, progress: bool = False,
    on_episode: Callable[[EpisodeResult], None] | None = None,
) -> list[EpisodeResult]:
    """Play `episodes` episodes from `reset(seed=seed)`.

    Each env contributes a fixed quota of episodes, so short episodes are not favoured.
    `on_episode` is called with each counted episode, after the agent's `end_episodes`.
    """
    n = envs.num_envs
    quota = np.full(n, episodes // n) + (np.arange(n) < episodes % n)
    counted = np.zeros(n, dtype=int)
    results: list[EpisodeResult] = []
    obs, _ = envs.reset(seed=seed)
    agent.end_episodes(np.ones(n, dtype=bool))
    with tqdm(total=episodes, unit="ep", disable=not progress, leave=False) as bar:
        while len(results) < episodes:
            s = step(envs, agent, obs)
            agent.end_episodes(s.done)
            for ep in s.episodes:
                if counted[ep.env_index] < quota[ep.env_index]:
                    counted[ep.env_index] += 1
                    results.append(ep)
                    if on_episode is not None:
                        on_episode(ep)
                    bar.update(1)
            obs = s.next_obs
    return results


def summarize(results: list[EpisodeResult]) -> dict[str, Any]:
    """The statistics `glamrl eval` prints and writes, overall and per task kind."""
    by_task: dict[str, list[EpisodeResult]] = defaultdict(list)
    for r in results:
        by_task[r.task].append(r)
    summary = _stats(results)
    summary["per_task"] = {task: _stats(rs) for task, rs in sorted(by_task.items())}
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
