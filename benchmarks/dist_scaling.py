"""DD-PPO scaling on this machine: 1 rank against K ranks on the same total frames and global batch.

    python benchmarks/dist_scaling.py [--model tiny-llama|smollm2-135m] [--ranks 2] [--updates 4]

Both runs train the same config on MixedTrainLocal for `--updates` updates of the same
global batch (`--envs` envs x `--steps` frames in all): one process with all the cores,
then K torchrun ranks with `--envs / K` envs and cores / K threads each. It prints each
run's steady frames/s (median over updates after the first) and the scaling efficiency
= speed-up / K. On a 2-core machine the ranks share the cores that one process had, so
the efficiency says what the gradient all-reduce and the per-rank overheads cost, not
what more hardware buys.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from glamrl.run.dir import RunDir


def run(model: str, ranks: int, envs: int, steps: int, updates: int, threads: int, root: Path) -> tuple[float, float]:
    """(steady frames/s, wall seconds) of one `glamrl train` with `ranks` ranks."""
    run_dir = root / f"{ranks}ranks"
    overrides = [f"model.name={model}", "model.device=cpu", "env.id=BabyAI-MixedTrainLocal-v0",
                 f"env.num_envs={envs // ranks}", f"ppo.num_steps={steps}", f"ppo.minibatch_size={envs * steps // ranks // 2}",
                 "ppo.epochs=1", f"ppo.total_frames={envs * steps * updates}", "run.tensorboard=false", "ppo.lr=1e-5"]
    config = root / "empty.yaml"
    config.write_text("run:\n  eval_episodes: 0\n")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
                "-m", "glamrl"] if ranks > 1 else [sys.executable, "-m", "glamrl"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    start = time.time()
    subprocess.run([*launcher, "train", "--config", str(config), "--run-dir", str(run_dir), "--no-progress",
                    *overrides], check=True, env=env, stdout=subprocess.DEVNULL)
    wall = time.time() - start
    fps = [row["FPS"] for row in RunDir(run_dir).read_log()[1:]]
    return statistics.median(fps), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--envs", type=int, default=8, help="envs of the global batch (split among the ranks)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--updates", type=int, default=4)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        one_fps, one_wall = run(args.model, 1, args.envs, args.steps, args.updates, cores, Path(tmp))
        k_fps, k_wall = run(args.model, args.ranks, args.envs, args.steps, args.updates,
                            max(1, cores // args.ranks), Path(tmp))
    speedup = k_fps / one_fps
    print(f"{args.model}, {args.envs * args.steps} frames per update, {args.updates} updates, {cores} cores")
    print(f"{'ranks':>6}{'frames/s':>10}{'wall s':>8}")
    print(f"{1:>6}{one_fps:>10.2f}{one_wall:>8.1f}")
    print(f"{args.ranks:>6}{k_fps:>10.2f}{k_wall:>8.1f}")
    print(f"speed-up {speedup:.2f}x, scaling efficiency {speedup / args.ranks:.0%}")


if __name__ == "__main__":
    main()
