"""Steps per second of a BabyAI-Text env against its raw minigrid level, and the text layer's share.

Both run the same level with the same seeds and the same random actions, in this run:

    python benchmarks/env_speed.py [--env BabyAI-MixedTrainLocal-v0] [--steps 20000]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import time

import gymnasium as gym
import numpy as np

from glamrl.envs import make_env
from glamrl.envs.describe import describe


def steps_per_second(env: gym.Env, actions: np.ndarray, seed: int) -> float:
    """Run `actions` (resetting with seed, seed + 1, ... at each episode end) and time it."""
    env.reset(seed=seed)
    start = time.process_time()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(int(action))
        if terminated or truncated:
            seed += 1
            env.reset(seed=seed)
    return len(actions) / (time.process_time() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="BabyAI-MixedTrainLocal-v0")
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3, help="alternate runs; the best of each is kept")
    args = parser.parse_args()

    actions = np.random.default_rng(args.seed).integers(0, 6, size=args.steps)
    text_env = make_env(args.env)
    raw_env = gym.make(args.env)
    steps_per_second(text_env, actions[:1000], args.seed)  # warm up
    raw = text = 0.0
    with contextlib.redirect_stdout(io.StringIO()):  # minigrid's own levels print their rejections
        for _ in range(args.rounds):  # alternate, so that a busy machine slows both alike
            raw = max(raw, steps_per_second(raw_env, actions, args.seed))
            text = max(text, steps_per_second(text_env, actions, args.seed))
        images = [text_env.step(int(a))[0]["image"] for a in actions[:1000]]

    start = time.process_time()
    for image in images:
        describe(image)
    describe_us = (time.process_time() - start) / len(images) * 1e6

    overhead = raw / text - 1  # extra time per step, as a share of the raw step time
    print(f"{args.env}: raw level {raw:,.0f} steps/s, text env {text:,.0f} steps/s "
          f"(text layer costs {overhead:.0%} of the raw step time; describe() {describe_us:.1f} µs)")


if __name__ == "__main__":
    main()
