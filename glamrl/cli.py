"""`glamrl` command line: eval, train, demos, bc, plot."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from glamrl.config import AGENT_KINDS
from glamrl.errors import GlamrlError

EXAMPLES = """examples:
  glamrl eval --agent bot --env BabyAI-MixedTestLocal-v0 --episodes 200
  glamrl eval --agent llm --model smollm2-135m --env BabyAI-MixedTrainLocal-v0 --episodes 50
  glamrl train --config configs/quickstart.yaml --run-dir runs/quick ppo.lr=1e-5
  glamrl demos --agent bot --env BabyAI-GoToObjS4-v0 --episodes 500 --out demos.jsonl
  glamrl bc --data demos.jsonl --config configs/bc.yaml --run-dir runs/bc
  glamrl train --config configs/quickstart.yaml agent.init_from=runs/bc
  glamrl plot runs/quick runs/other --out curves.png
"""


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_episode_args(parser: argparse.ArgumentParser) -> None:
    """The level and the episodes to run: shared by eval and demos."""
    parser.add_argument("--env", default="BabyAI-MixedTrainLocal-v0", help="BabyAI-Text level id")
    parser.add_argument("--episodes", type=positive_int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--num-envs", type=positive_int, default=4)
    parser.add_argument("--task", default=None, help="restrict a Mixed level to one task kind")
    parser.add_argument("--language", choices=("en", "fr"), default="en")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="glamrl", description=__doc__, epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser("eval", help="evaluate an agent: success rate, return, length, per task")
    ev.add_argument("--agent", choices=AGENT_KINDS, default=None,
                    help="agent kind (with --run: checked against the run's; default: the run's)")
    add_episode_args(ev)
    ev.add_argument("--model", default="smollm2-135m", help="llm agent: model name or path")
    ev.add_argument("--run", type=Path, default=None, help="evaluate the trained agent of this run dir (any kind)")
    ev.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    ev.add_argument("--device", default="auto")
    ev.add_argument("--greedy", action="store_true", help="llm agent: argmax instead of sampling")
    ev.add_argument("--out", type=Path, default=None, help="write the results as JSON")

    tr = sub.add_parser("train", help="train an agent: llm, npae or symbolic with PPO, drrn off-policy (resumes a run dir)")
    tr.add_argument("--config", type=Path, default=None, help="YAML config (not needed to resume)")
    tr.add_argument("--run-dir", type=Path, default=None, help="default: runs/{env}-{model}-seed{seed}")
    tr.add_argument("--no-progress", action="store_true")
    tr.add_argument("overrides", nargs="*", help="dotted overrides, e.g. ppo.lr=1e-5 env.num_envs=8")

    de = sub.add_parser("demos", help="record an agent's episodes as (prompt, action) JSONL records")
    de.add_argument("--agent", choices=("bot", "random"), default=None, help="default: bot (without --run)")
    de.add_argument("--run", type=Path, default=None, help="record the trained agent of this run dir")
    add_episode_args(de)
    de.add_argument("--greedy", action="store_true", help="--run: the trained agent's argmax actions")
    de.add_argument("--nbr-obs", type=positive_int, default=3, help="observations kept in each recorded prompt")
    de.add_argument("--out", type=Path, required=True, help="JSONL file, one record per step")

    bc = sub.add_parser("bc", help="behavioural cloning of demonstrations into an LLM (resumes an existing run dir)")
    bc.add_argument("--data", type=Path, required=True, help="JSONL demonstrations from glamrl demos")
    bc.add_argument("--config", type=Path, default=None, help="YAML config (model, prompt, bc sections)")
    bc.add_argument("--run-dir", type=Path, required=True)
    bc.add_argument("--no-progress", action="store_true")
    bc.add_argument("overrides", nargs="*", help="dotted overrides, e.g. bc.lr=1e-4 model.lora=true")

    pl = sub.add_parser("plot", help="PNG of success rate and return against frames")
    pl.add_argument("runs", nargs="+", type=Path)
    pl.add_argument("--out", type=Path, default=Path("curves.png"))
    return parser


def cmd_eval(args: argparse.Namespace) -> None:
    from glamrl.envs import make_vector_env
    from glamrl.rollout import evaluate, format_table

    envs = make_vector_env(args.env, args.num_envs, task=args.task, language=args.language)
    agent = make_eval_agent(args, envs)
    summary = evaluate(envs, agent, args.episodes, seed=args.seed, progress=True)
    summary = {"agent": args.agent, "env": args.env, "seed": args.seed, **summary}
    print(f"{args.agent} on {args.env} ({args.episodes} episodes, seed {args.seed})")
    print(format_table(summary))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2))


def make_eval_agent(args: argparse.Namespace, envs):
    """The agent `glamrl eval` runs: a run's trained agent (--run), or a fresh one of kind --agent."""
    from glamrl.agents.factory import AgentKindError, make_agent, make_model, restore_agent
    from glamrl.config import AgentConfig, EnvConfig, ModelConfig, PromptConfig, TrainConfig
    from glamrl.envs.actions import ACTION_NAMES, FRENCH_ACTION_NAMES

    if args.run is not None:
        agent, cfg = restore_agent(args.run, envs, language=args.language, greedy=args.greedy, kind=args.agent)
        args.agent = cfg.agent.kind
        return agent
    if args.agent is None:
        raise AgentKindError("give --agent (a fresh agent) or --run (a trained one)")
    if args.agent in ("drrn", "symbolic"):
        raise AgentKindError(f"a fresh {args.agent} agent is untrained: give --run with a trained {args.agent} run")
    actions = FRENCH_ACTION_NAMES if args.language == "fr" else ACTION_NAMES
    cfg = TrainConfig(
        env=EnvConfig(id=args.env, seed=args.seed, task=args.task, language=args.language),  # envs: built by the caller
        prompt=PromptConfig(actions=list(actions)),
        model=ModelConfig(name=args.model, dtype=args.dtype, device=args.device) if args.agent == "llm" else ModelConfig(),
        agent=AgentConfig(kind=args.agent),
    )
    return make_agent(cfg, make_model(cfg), envs, greedy=args.greedy)


def cmd_demos(args: argparse.Namespace) -> None:
    from glamrl.demos import record_demos, write_demos
    from glamrl.envs import make_vector_env
    from glamrl.envs.actions import ACTION_NAMES, FRENCH_ACTION_NAMES
    from glamrl.rollout import format_table

    if args.agent is None and args.run is None:
        args.agent = "bot"
    envs = make_vector_env(args.env, args.num_envs, task=args.task, language=args.language)
    agent = make_eval_agent(args, envs)
    actions = FRENCH_ACTION_NAMES if args.language == "fr" else ACTION_NAMES
    records, summary = record_demos(envs, agent, args.episodes, args.seed, actions, args.nbr_obs, args.language,
                                    progress=True)
    write_demos(records, args.out)
    print(f"{args.agent} on {args.env}: {args.episodes} episodes, {len(records)} records in {args.out}")
    print(format_table(summary))


def cmd_bc(args: argparse.Namespace) -> None:
    from glamrl.bc import train_bc
    from glamrl.config import load_train_config
    from glamrl.plot import plot_runs
    from glamrl.rundir import run_lock
    from glamrl.train import resolve_config

    cfg = load_train_config(args.config, args.overrides) if args.config else None
    cfg, resume = resolve_config(args.run_dir, cfg, args.overrides)
    with run_lock(args.run_dir):
        result = train_bc(cfg, args.data, args.run_dir, resume=resume, progress=not args.no_progress)
    png = plot_runs([args.run_dir], args.run_dir / "curves.png", metrics=("loss",))
    print(f"cloned for {result.updates} steps ({result.frames} records); logs, checkpoints and {png.name} "
          f"in {args.run_dir}")


def cmd_train(args: argparse.Namespace) -> None:
    from glamrl.config import ConfigError, load_train_config
    from glamrl.plot import plot_runs
    from glamrl.rundir import run_lock
    from glamrl.train import default_run_dir, resolve_config, train

    cfg = load_train_config(args.config, args.overrides) if args.config else None
    run_dir = args.run_dir or (default_run_dir(cfg) if cfg else None)
    if run_dir is None:
        raise ConfigError("give --config (a new run) or --run-dir (a run to resume)")
    cfg, resume = resolve_config(run_dir, cfg, args.overrides)
    if cfg.agent.kind == "drrn":  # off-policy; llm and symbolic train with PPO
        from glamrl.train_drrn import train_drrn as train
    with run_lock(run_dir):
        result = train(cfg, run_dir, resume=resume, progress=not args.no_progress)
    png = plot_runs([run_dir], run_dir / "curves.png")
    print(f"trained {result.updates} updates, {result.frames} frames; logs, checkpoints and {png.name} in {run_dir}")
    if result.success_before is not None and result.success_after is not None:
        print(f"success rate: {result.success_before:.3f} before -> {result.success_after:.3f} after")


def cmd_plot(args: argparse.Namespace) -> None:
    from glamrl.plot import plot_runs

    print(plot_runs(args.runs, args.out))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        {"eval": cmd_eval, "train": cmd_train, "demos": cmd_demos, "bc": cmd_bc,
         "plot": cmd_plot}[args.command](args)
    except KeyboardInterrupt:
        print("glamrl: interrupted", file=sys.stderr)
        return 130
    except GlamrlError as err:  # bad input: one line; anything else is a bug and keeps its traceback
        print(f"glamrl: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
