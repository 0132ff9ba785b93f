"""How often a level repeats its prompts: distinct prompts among the frames of random-action play.

    python benchmarks/prompt_reuse.py [--levels BabyAI-GoToObjS4-v0 ...] [--envs 16] [--steps 512]

The frozen-trunk cache (`model.train_layers`) and the scorer's prompt dedupe save one trunk
pass (or one forward) per repeated prompt, so this count bounds what they save. A trained
policy visits fewer states than random play, so it repeats more.
"""

from __future__ import annotations

import argparse

import numpy as np

from glamrl.envs import make_vector_env
from glamrl.envs.actions import ACTION_NAMES
from glamrl.prompts import PromptHistory


def distinct_prompts(level: str, nbr_obs: int, envs: int, steps: int, seed: int = 0) -> list[tuple[int, int]]:
    """(frames, distinct prompts so far) after every quarter of `steps` steps of `envs` random-action envs."""
    vec = make_vector_env(level, envs)
    rng = np.random.default_rng(seed)
    histories = [PromptHistory(nbr_obs) for _ in range(envs)]
    obs, _ = vec.reset(seed=seed)
    seen: set[str] = set()
    counts = []
    for step in range(1, steps + 1):
        actions = rng.integers(0, len(ACTION_NAMES), size=envs)
        for i, history in enumerate(histories):
            seen.add(history.prompt(ACTION_NAMES, obs["mission"][i], obs["descriptions"][i]))
            history.record(obs["descriptions"][i], ACTION_NAMES[actions[i]])
        obs, _, terminated, truncated, _ = vec.step(actions)
        for i in np.flatnonzero(terminated | truncated):
            histories[i].clear()
        if step % max(1, steps // 4) == 0:
            counts.append((step * envs, len(seen)))
    vec.close()
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", nargs="+", default=["BabyAI-GoToObjS4-v0", "BabyAI-MixedTrainLocal-v0"])
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=512)
    args = parser.parse_args()
    print(f"{'level':<28}{'obs':>4}  distinct prompts / frames")
    for level in args.levels:
        for nbr_obs in (1, 2, 3):
            counts = distinct_prompts(level, nbr_obs, args.envs, args.steps)
            print(f"{level:<28}{nbr_obs:>4}  " + "  ".join(f"{d}/{f}" for f, d in counts))


if __name__ == "__main__":
    main()
