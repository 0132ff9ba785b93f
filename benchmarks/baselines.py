"""The comparison agents' longer runs (not in CI): success per task kind, frames/s, wall time.

    python benchmarks/baselines.py [--only symbolic,drrn,bc,speed] [--symbolic-frames 1000000]
        [--drrn-frames 200000] [--bc-episodes 2000] [--eval-episodes 200] [--out runs/baselines.json]

- symbolic: configs/symbolic.yaml (symbolic PPO) on BabyAI-MixedTrainLocal-v0;
- drrn: configs/drrn.yaml on BabyAI-MixedTrainLocal-v0;
- bc: bot demonstrations of BabyAI-GoToObjS4-v0 cloned into the embedded SmolLM2 (configs/bc.yaml);
- speed: CPU frames/s of the symbolic agent (env alone, collection, whole PPO updates).
Each trained agent is evaluated on fresh episodes (seeds apart from training) with `glamrl eval`'s
code. Runs live in runs/bench-*; running again resumes them. The paper's anchors on
MixedTrainLocal: GLAM 0.89 at 1.5M frames, NPAE 0.17, DRRN 0.14, random 0.15.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from glamrl.agents.factory import make_agent, make_model, restore_agent
from glamrl.bc import train_bc
from glamrl.checkpoint import load_checkpoint
from glamrl.config import load_train_config
from glamrl.demos import record_demos, write_demos
from glamrl.rollout import evaluate, format_table, step
from glamrl.rundir import run_lock
from glamrl.train import EVAL_SEED_OFFSET, train
from glamrl.train_drrn import train_drrn

RUNS = Path("runs")


def evaluate_run(run_dir: Path, episodes: int) -> dict[str, Any]:
    """The run's trained agent on `episodes` fresh episodes of its own level, overall and per task."""
    cfg = load_train_config(run_dir / "config.yaml")
    envs = cfg.env.make_vector_env()
    agent, _ = restore_agent(run_dir, envs, greedy=False)
    try:
        return evaluate(envs, agent, episodes, seed=cfg.env.seed + EVAL_SEED_OFFSET)
    finally:
        envs.close()


def timed_training(name: str, config: str, overrides: list[str], trainer, *extra) -> tuple[Path, dict[str, float]]:
    """Train (or resume) runs/bench-NAME; frames/s and wall time of this invocation's training."""
    run_dir = RUNS / f"bench-{name}"
    cfg = load_train_config(config, overrides)
    resume = (run_dir / "config.yaml").exists()
    before = (load_checkpoint(run_dir) or {}).get("frames", 0) if resume else 0
    start = time.time()
    with run_lock(run_dir):
        result = trainer(cfg, *extra, run_dir, resume=resume)
    wall = time.time() - start
    return run_dir, {"frames": result.frames, "wall_s": wall, "frames_per_s": (result.frames - before) / wall}


def bench_symbolic(args: argparse.Namespace) -> dict[str, Any]:
    run_dir, timing = timed_training("symbolic", "configs/symbolic.yaml",
                                     [f"ppo.total_frames={args.symbolic_frames}", "run.eval_episodes=0"], train)
    return {**timing, **evaluate_run(run_dir, args.eval_episodes)}


def bench_drrn(args: argparse.Namespace) -> dict[str, Any]:
    run_dir, timing = timed_training("drrn", "configs/drrn.yaml", [f"drrn.total_frames={args.drrn_frames}"],
                                     train_drrn)
    return {**timing, **evaluate_run(run_dir, args.eval_episodes)}


def bench_bc(args: argparse.Namespace) -> dict[str, Any]:
    cfg = load_train_config("configs/bc.yaml")
    data = RUNS / f"demos-{cfg.env.id}-{args.bc_episodes}.jsonl"
    if not data.exists():
        envs = cfg.env.make_vector_env()
        records, _ = record_demos(envs, make_agent(load_train_config(None, ["agent.kind=bot"]), None, envs),
                                  args.bc_episodes, cfg.env.seed, cfg.prompt.actions, cfg.prompt.nbr_obs)
        write_demos(records, data)
    run_dir, timing = timed_training("bc", "configs/bc.yaml", ["run.eval_episodes=0"], train_bc, data)
    timing["records_per_s"] = timing.pop("frames_per_s")
    return {**timing, **evaluate_run(run_dir, args.eval_episodes)}


def bench_speed(args: argparse.Namespace) -> dict[str, Any]:
    """CPU frames/s (time.process_time, as benchmarks/env_speed.py) of the symbolic agent's PPO as
    configs/symbolic.yaml trains it: the vector env alone under random actions, collection (env +
    batched forward), and 4 whole updates (collection + PPO epochs), each over the same frames."""
    cfg = load_train_config("configs/symbolic.yaml", ["run.eval_episodes=0", "run.tensorboard=false",
                                                      *args.speed_overrides])
    cfg = dataclasses.replace(cfg, ppo=dataclasses.replace(cfg.ppo, total_frames=4 * cfg.batch_size))
    steps = 4 * cfg.ppo.num_steps  # as many frames as the 4 updates below
    envs = cfg.env.make_vector_env()
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    start = time.process_time()
    for _ in range(steps):
        envs.step(rng.integers(0, 6, envs.num_envs))
    env_fps = steps * envs.num_envs / (time.process_time() - start)
    agent = make_agent(cfg, make_model(cfg), envs)
    obs, _ = envs.reset(seed=0)
    start = time.process_time()
    for _ in range(steps):
        s = step(envs, agent, obs)
        agent.end_episodes(s.done)
        obs = s.next_obs
    collect_fps = steps * envs.num_envs / (time.process_time() - start)
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # the first optimizer imports torch._dynamo (~3 s): not per frame
    start = time.process_time()
    result = train(cfg, RUNS / "bench-symbolic-speed", progress=False)
    train_fps = result.frames / (time.process_time() - start)
    return {"env_fps": env_fps, "collect_fps": collect_fps, "train_fps": train_fps}


BENCHES = {"symbolic": bench_symbolic, "drrn": bench_drrn, "bc": bench_bc, "speed": bench_speed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(BENCHES), help="comma-separated: " + ", ".join(BENCHES))
    parser.add_argument("--symbolic-frames", type=int, default=1_000_000)
    parser.add_argument("--drrn-frames", type=int, default=200_000)
    parser.add_argument("--bc-episodes", type=int, default=2_000)
    parser.add_argument("--eval-episodes", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--speed-overrides", nargs="*", default=[], help="speed: config overrides, e.g. symbolic.image_dim=32")
    parser.add_argument("--out", type=Path, default=RUNS / "baselines.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {}
    for name in args.only.split(","):
        results[name] = BENCHES[name](args)
        figures = {k: round(v, 3) for k, v in results[name].items() if isinstance(v, (int, float))}
        table = format_table(results[name]) if "per_task" in results[name] else ""
        print(f"== {name}: {figures}\n{table}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
