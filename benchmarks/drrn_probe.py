"""What a trained DRRN's Q-values say: how much they vary between states and between actions.

    python -m benchmarks.drrn_probe runs/bench-drrn                 # 64 steps of 8 envs of the run's level
    python -m benchmarks.drrn_probe runs/bench-drrn --steps 256 --seed 7

It plays `--steps` steps of the run's level with the run's own policy (softmax over Q, as it trained) and
prints, over those states:
  Q per action      the mean of Q(o, a) for each action, and its std across states
  spread            the mean over states of max_a Q(o, a) - min_a Q(o, a)
  entropy           the mean entropy of the distribution actions are drawn from, against ln(actions)
  actions taken     the share of each action
A Q-function whose std across states and spread are near 0 has not learnt anything about the states: its
softmax policy is uniform, a random agent's.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np
import torch

from glamrl.agents.factory import read_run, restore_agent
from glamrl.rollout import step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a trained drrn run directory")
    parser.add_argument("--steps", type=int, default=64, help="steps of the envs")
    parser.add_argument("--envs", type=int, default=8, help="parallel envs")
    parser.add_argument("--seed", type=int, default=12345, help="env seed (away from training's)")
    args = parser.parse_args()
    cfg, _ = read_run(args.run, "drrn")
    envs = dataclasses.replace(cfg.env, num_envs=args.envs).make_vector_env()
    agent, cfg = restore_agent(args.run, envs, kind="drrn")
    obs, _ = envs.reset(seed=args.seed)
    q_values, entropies, taken = [], [], np.zeros(len(agent.action_names))
    with torch.no_grad():
        for _ in range(args.steps):
            q_values.append(agent.q_values(agent.encode(obs, range(args.envs))).numpy())  # (N, A)
            s = step(envs, agent, obs)
            probs = s.decision.probs                                                     # (N, A)
            entropies.append(-(probs * np.log(np.clip(probs, 1e-12, None))).sum(1))
            np.add.at(taken, s.decision.actions, 1)
            agent.end_episodes(s.done)
            obs = s.next_obs
    envs.close()
    q = np.concatenate(q_values)                                                         # (steps x N, A)
    print(f"{args.run}: {len(q)} states of {cfg.env.id}")
    print(f"{'action':<14}{'mean Q':>9}{'std over states':>17}{'taken':>8}")
    for name, mean, std, share in zip(agent.action_names, q.mean(0), q.std(0), taken / taken.sum()):
        print(f"{name:<14}{mean:>9.3f}{std:>17.4f}{share:>8.3f}")
    print(f"spread (max - min over actions, mean over states): {(q.max(1) - q.min(1)).mean():.4f}")
    print(f"entropy of the policy: {np.concatenate(entropies).mean():.4f} (uniform: {np.log(q.shape[1]):.4f})")


if __name__ == "__main__":
    main()
