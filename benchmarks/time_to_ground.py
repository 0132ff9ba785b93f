"""Minutes to ground a level: train the embedded SmolLM2 until its training episodes reach a success
rate, and say how long it took and where the time went.

    python -m benchmarks.time_to_ground                          # top-4 blocks, LoRA, full fine-tuning
    python -m benchmarks.time_to_ground --variants top4 --minutes 20 --target 0.9 --seed 2

Each variant is `glamrl train --config configs/goto_cpu.yaml` (BabyAI-GoToObjS4-v0) with
`run.stop_at_success=TARGET` and `run.max_minutes=MINUTES`, in its own process and run directory
(runs/ground-VARIANT-seedS; running again resumes an unfinished one, so use --fresh to measure
anew). Printed per variant: frames and wall-clock minutes of training to the first update whose
training episodes reached the target (or "not reached" within the cap), and the split of the
wall time between collection, PPO update and the rest (model loading and the evaluations before
and after training, `run.eval_episodes` episodes each). Name the CPU with the figures: it is printed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from glamrl.eval.provenance import machine
from glamrl.experiment import time_to_target
from glamrl.run.dir import RunDir

CONFIG = "configs/goto_cpu.yaml"
VARIANTS = {
    "top4": [],                                                      # the config: top 4 of 30 blocks train
    "lora": ["model.train_layers=null", "model.lora=true", "model.lora_r=8", "ppo.lr=3.0e-4"],
    "full": ["model.train_layers=null", "ppo.lr=1.0e-5"],
}


def ground(variant: str, args: argparse.Namespace) -> dict:
    """Train one variant to the target (or its cap); its times."""
    run_dir = Path("runs") / f"ground-{variant}-seed{args.seed}"
    if args.fresh and run_dir.exists():
        shutil.rmtree(run_dir)
    command = [sys.executable, "-m", "glamrl.cli", "train", "--config", CONFIG, "--run-dir", str(run_dir),
               "--no-progress", f"env.seed={args.seed}", f"run.stop_at_success={args.target}",
               f"run.max_minutes={args.minutes}", f"run.eval_episodes={args.eval_episodes}",
               f"ppo.total_frames={args.max_frames}", *VARIANTS[variant], *args.overrides]
    start = time.time()
    subprocess.run(command, check=True)
    wall = time.time() - start
    rows = RunDir(run_dir).read_log()
    frames_per_update = rows[0]["frames"] if rows else 0
    collect = sum(frames_per_update / r["collect_FPS"] for r in rows) / 60
    update = sum(frames_per_update / r["update_FPS"] for r in rows) / 60
    reached = time_to_target(rows, args.target)
    return {"variant": variant, "frames": reached[0] if reached else None, "minutes": reached[1] if reached else None,
            "trained_frames": rows[-1]["frames"] if rows else 0, "collect_min": collect, "update_min": update,
            "other_min": wall / 60 - collect - update, "wall_min": wall / 60,
            "last_success": rows[-1].get("success_rate") if rows else None,
            "last_length": rows[-1].get("num_frames_mean") if rows else None,
            "explained_variance": [r.get("explained_variance") for r in rows]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated: " + ", ".join(VARIANTS))
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--minutes", type=float, default=20.0, help="cap of each variant's training")
    parser.add_argument("--max-frames", type=int, default=16384)
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fresh", action="store_true", help="delete the variants' run directories first")
    parser.add_argument("--out", type=Path, default=Path("runs/time_to_ground.json"))
    parser.add_argument("overrides", nargs="*", help="config overrides for every variant, e.g. ppo.value_norm=true")
    args = parser.parse_args()
    print(f"CPU: {machine()['cpu']}; {CONFIG}, target success {args.target}, cap {args.minutes} min per variant",
          flush=True)
    results = []
    for variant in args.variants.split(","):
        results.append(ground(variant, args))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"cpu": machine()['cpu'], "args": vars(args) | {"out": str(args.out)},
                                        "results": results}, indent=2))
    print(f"\n| variant | frames to {args.target} | training minutes to {args.target} | collection min | "
          f"update min | loading + evaluations min | wall min | last success | last length |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        reached = (f"{r['frames']:.0f} | {r['minutes']:.1f}" if r["frames"] is not None
                   else f"not reached ({r['trained_frames']:.0f} trained) | -")
        print(f"| {r['variant']} | {reached} | {r['collect_min']:.1f} | {r['update_min']:.1f} | "
              f"{r['other_min']:.1f} | {r['wall_min']:.1f} | {r['last_success']} | {r['last_length']} |")


if __name__ == "__main__":
    main()
