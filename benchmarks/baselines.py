"""The comparison agents' longer runs (not in CI): success per task kind, frames/s, wall time.

    python benchmarks/baselines.py [--only speed,symbolic,drrn,bc] [--symbolic-config configs/symbolic.yaml]
        [--symbolic-frames 1000000] [--minutes M] [--drrn-frames 200000] [--bc-episodes 2000]
        [--eval-episodes 200] [--threads 1] [--figures docs/figures] [--out runs/baselines.json]

- speed: CPU frames/s (one process, --threads torch threads) of the vector env alone, then for each
  symbolic network, GLAM's (configs/symbolic.yaml) and the fast one (configs/symbolic_small.yaml),
  collection and --speed-updates whole PPO updates: a short timed segment of each, so that one run
  says how they compare on its machine;
- symbolic: --symbolic-config (default configs/symbolic.yaml, GLAM's expert_filmcnn network, recurrence
  20) on BabyAI-MixedTrainLocal-v0, up to --symbolic-frames or --minutes of wall time (run.max_minutes:
  it stops cleanly after the update that crosses it, with a checkpoint);
- drrn: configs/drrn.yaml on BabyAI-MixedTrainLocal-v0;
- bc: bot demonstrations of BabyAI-GoToObjS4-v0 cloned into the embedded SmolLM2 (configs/bc.yaml).
Each trained agent is evaluated on fresh episodes (seeds apart from training) with `glamrl eval`'s
code: success overall and per task kind, with 95% intervals (in --out). The PPO runs' learning curve
(success rate and entropy against frames) goes to FIGURES/baseline_{config}.png. Runs live in
runs/bench-*; running again resumes them (another --minutes: as long again). The paper's anchors on
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
from glamrl.trainers.bc import train_bc
from glamrl.config import load_train_config
from glamrl.demos import record_demos, write_demos
from glamrl.eval.plot import plot_runs
from glamrl.rollout import evaluate, format_table, step
from glamrl.run.dir import RunDir
from glamrl.trainers.common import train_run_dir
from glamrl.trainers.ppo import train_ppo
from glamrl.trainers.drrn import train_drrn

RUNS = Path("runs")
SYMBOLIC_CONFIGS = ("configs/symbolic.yaml", "configs/symbolic_small.yaml")  # GLAM's network, the fast one


def evaluate_run(run_dir: Path, episodes: int) -> dict[str, Any]:
    """The run's trained agent on `episodes` fresh episodes of its own level, overall and per task."""
    cfg = load_train_config(run_dir / "config.yaml")
    envs = cfg.env.make_vector_env()
    agent, _ = restore_agent(run_dir, envs, greedy=False)
    try:
        return evaluate(envs, agent, episodes, seed=cfg.env.eval_seed)
    finally:
        envs.close()


def timed_training(name: str, config: str, overrides: list[str], trainer, *extra) -> tuple[Path, dict[str, float]]:
    """Train (or resume) runs/bench-NAME; frames/s and wall time of this invocation's training.

    A run directory that holds another config than `config` (+ `overrides`) is refused, not resumed.
    """
    run = RunDir(RUNS / f"bench-{name}")
    saved = run.load_checkpoint()  # a run resumed: what it had trained before
    before = 0 if saved is None else saved.progress.frames
    start = time.time()
    result = train_run_dir(run, load_train_config(config, overrides), overrides,
                           loop=lambda cfg, run_dir, **how: trainer(cfg, *extra, run_dir, **how))
    wall = time.time() - start
    return run.path, {"frames": result.frames, "wall_s": wall, "frames_per_s": (result.frames - before) / wall}


def bench_symbolic(args: argparse.Namespace) -> dict[str, Any]:
    name = Path(args.symbolic_config).stem
    limit = [f"run.max_minutes={args.minutes}"] if args.minutes else []
    run_dir, timing = timed_training(name, args.symbolic_config, [f"ppo.total_frames={args.symbolic_frames}",
                                                                  "run.eval_episodes=0", *limit], train_ppo)
    curve = plot_runs([run_dir], args.figures / f"baseline_{name}.png", metrics=("success_rate", "entropy"))
    return {**timing, "curve": str(curve), **evaluate_run(run_dir, args.eval_episodes)}


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
    """CPU frames/s (time.process_time, as benchmarks/env_speed.py) of the symbolic agent's PPO as each of
    SYMBOLIC_CONFIGS trains it: the vector env alone under random actions, then per config collection
    (env + batched forward) and --speed-updates whole updates (collection + PPO epochs)."""
    configs = {Path(c).stem: load_train_config(c, ["run.eval_episodes=0", "run.tensorboard=false",
                                                   *args.speed_overrides]) for c in SYMBOLIC_CONFIGS}
    first = next(iter(configs.values()))
    steps = args.speed_updates * first.ppo.num_steps  # as many frames as the updates below
    envs = first.env.make_vector_env()
    envs.reset(seed=0)
    rng = np.random.default_rng(0)
    start = time.process_time()
    for _ in range(steps):
        envs.step(rng.integers(0, 6, envs.num_envs))
    results: dict[str, Any] = {"env_fps": steps * envs.num_envs / (time.process_time() - start)}
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # the first optimizer imports torch._dynamo (~3 s): not per frame
    for name, cfg in configs.items():
        frames = args.speed_updates * cfg.batch_size
        cfg = dataclasses.replace(cfg, ppo=dataclasses.replace(cfg.ppo, total_frames=frames))
        agent = make_agent(cfg, make_model(cfg), envs)
        obs, _ = envs.reset(seed=0)
        start = time.process_time()
        for _ in range(steps):
            s = step(envs, agent, obs)
            agent.end_episodes(s.done)
            obs = s.next_obs
        results[f"{name}_collect_fps"] = steps * envs.num_envs / (time.process_time() - start)
        start = time.process_time()
        result = train_ppo(cfg, RUNS / f"bench-speed-{name}", progress=False)
        results[f"{name}_train_fps"] = result.frames / (time.process_time() - start)
    return results


def report(result: dict[str, Any]) -> str:
    """A bench's figures; for an evaluated agent, its success with the 95% interval and the per-task table."""
    figures = {k: round(v, 3) for k, v in result.items() if isinstance(v, (int, float))}
    if "per_task" not in result:
        return str(figures)
    low, high = result["success_ci"]
    return f"{figures}\nsuccess {result['success_rate']:.3f} (95% CI {low:.3f}-{high:.3f})\n{format_table(result)}"


BENCHES = {"speed": bench_speed, "symbolic": bench_symbolic, "drrn": bench_drrn, "bc": bench_bc}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(BENCHES), help="comma-separated: " + ", ".join(BENCHES))
    parser.add_argument("--symbolic-config", default=SYMBOLIC_CONFIGS[0], help="symbolic: the config trained")
    parser.add_argument("--symbolic-frames", type=int, default=1_000_000)
    parser.add_argument("--minutes", type=float, default=None,
                        help="symbolic: stop after the update that crosses this many minutes of wall time")
    parser.add_argument("--drrn-frames", type=int, default=200_000)
    parser.add_argument("--bc-episodes", type=int, default=2_000)
    parser.add_argument("--eval-episodes", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--speed-updates", type=int, default=4, help="speed: whole PPO updates timed per config")
    parser.add_argument("--speed-overrides", nargs="*", default=[],
                        help="speed: config overrides of both configs, e.g. env.num_envs=32")
    parser.add_argument("--figures", type=Path, default=Path("docs/figures"), help="where the learning curves go")
    parser.add_argument("--out", type=Path, default=RUNS / "baselines.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = {}
    for name in args.only.split(","):
        results[name] = BENCHES[name](args)
        print(f"== {name}: {report(results[name])}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
