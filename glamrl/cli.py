"""`glamrl` command line: eval (one level or a suite), train, demos, bc, plot, results, play, export."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from glamrl.agents.registry import agent_kind, kind_names, kinds_where
from glamrl.config import EnvConfig, ModelConfig, PromptConfig
from glamrl.errors import GlamrlError
from glamrl.files import disk_failure
from glamrl.run.dir import RunDir, check_output
from glamrl.seeds import SEEDINGS
from glamrl.stats import AGGREGATES

if TYPE_CHECKING:
    from gymnasium.vector import SyncVectorEnv

    from glamrl.agents.base import Agent
    from glamrl.config import TrainConfig
    from glamrl.eval.agents import AgentSpec
    from glamrl.run.checkpoint import Progress

EXAMPLES = """examples:
  glamrl eval --agent bot --env BabyAI-MixedTestLocal-v0 --episodes 200
  glamrl eval --agent llm --model smollm2-135m --env BabyAI-MixedTrainLocal-v0 --episodes 50
  glamrl train --config configs/turn_to_object.yaml --run-dir runs/quick ppo.lr=1e-5
  glamrl demos --agent bot --env BabyAI-GoToObjS4-v0 --episodes 500 --out demos.jsonl
  glamrl bc --data demos.jsonl --config configs/bc.yaml --run-dir runs/bc
  glamrl train --config configs/turn_to_object.yaml agent.init_from=runs/bc
  glamrl plot runs/quick runs/other --out curves.png
  glamrl plot runs/quick --metrics success_rate,entropy --smooth 10
  glamrl eval --suite paper --agent bot --episodes 50 --out suite/bot.json
  glamrl results suite/ --out tables/
  glamrl play --agent llm --run runs/quick --env BabyAI-TurnToObject-v0 --seed 3 --out episode.gif
  glamrl export --run runs/quick --out exports/quick
  glamrl config ppo          # every field of a config section: type, default, help
"""


def int_at_least(minimum: int):
    """An argparse type: an integer >= `minimum`."""
    kind = "positive" if minimum == 1 else "non-negative" if minimum == 0 else f">= {minimum}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind} integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a {kind} integer, got {value}")
        return value

    return parse


positive_int, non_negative_int = int_at_least(1), int_at_least(0)


def positive_float(text: str) -> float:
    """An argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def name_list(text: str) -> tuple[str, ...]:
    """An argparse type: comma-separated names, none of them empty."""
    names = tuple(name.strip() for name in text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected names separated by commas, got {text!r}")
    return names


class FlagError(GlamrlError, ValueError):
    """Command-line flags that cannot apply to what the command runs."""


def refuse(args: argparse.Namespace, flags: tuple[str, ...], why: str) -> None:
    """Raise `FlagError` if any of `flags` (argparse dests) was given: `why` ends the sentence."""
    given = [f"--{flag.replace('_', '-')}" for flag in flags if getattr(args, flag, None) not in (None, False)]
    if given:
        raise FlagError(f"{' and '.join(given)} cannot apply {why}")


def add_episode_args(parser: argparse.ArgumentParser) -> None:
    """The level and the episodes to run: shared by eval and demos."""
    parser.add_argument("--env", default=None,
                        help=f"BabyAI-Text level id (default: the run's env.id, else {EnvConfig.id}; another "
                             "level than the run's has its own tasks and step limit; with --suite: the level "
                             "the tests change the text of)")
    parser.add_argument("--episodes", type=positive_int, default=100)
    parser.add_argument("--seed", type=non_negative_int, default=EnvConfig.seed,
                        help="eval: the seed's evaluation episodes (--seeding), whatever --num-envs (the episodes "
                             "a run with env.seed=SEED is evaluated on); demos: episode k from seed + k")
    parser.add_argument("--num-envs", type=positive_int, default=None,
                        help=f"envs played side by side, a batch of prompts per step (default: the run's "
                             f"env.num_envs, else {EnvConfig.num_envs}); the episodes are the same whatever the count")
    parser.add_argument("--task", default=None, help="restrict a Mixed level to one task kind (default: the run's)")
    parser.add_argument("--language", choices=("en", "fr"), default=None, help="default: the run's, else en")


def add_seeding_arg(parser: argparse.ArgumentParser) -> None:
    """How --seed becomes the evaluation episodes' seeds: shared by eval and play."""
    parser.add_argument("--seeding", choices=SEEDINGS, default=None,
                        help="env.seeding (default: the run's, else spread): spread plays episode k from "
                             "SEED x 2**32 + 2**31 + k, offset (runs written before env.seeding) from "
                             "SEED + 1000000 + k")


def seeded_env(env: EnvConfig, args: argparse.Namespace) -> EnvConfig:
    """`env` with --seed and --seeding (default: `env`'s own): its `eval_seed` is episode 0's seed."""
    import dataclasses

    return dataclasses.replace(env, seed=args.seed, seeding=args.seeding or env.seeding)


def agent_spec(args: argparse.Namespace, default_kind: str | None = None) -> AgentSpec:
    """The `AgentSpec` that the agent options of `eval`, `play` and `demos` name; options that cannot apply to
    that agent are refused."""
    from glamrl.eval.agents import AgentSpec

    kind = args.agent if args.agent is not None or args.run is not None else default_kind
    if args.run is not None:
        refuse(args, ("model", "dtype"), f"with --run: the run's model is the one in {args.run}")
    elif kind is not None and not agent_kind(kind).trains:
        refuse(args, ("model", "dtype", "device", "greedy", "temperature"),
               f"to --agent {kind}, which has no network: only to {', '.join(kinds_where(lambda k: k.zero_shot))} "
               f"agents")
    if args.greedy:
        refuse(args, ("temperature",), "with --greedy, which takes the most likely action")
    given = {key: getattr(args, key) for key in ("model", "dtype", "device", "temperature")
             if getattr(args, key) is not None}
    return AgentSpec(kind=kind, run=args.run, greedy=args.greedy, **given)


def add_agent_args(parser: argparse.ArgumentParser) -> None:
    """The agent to run, fresh (`--agent`, `--model`) or trained (`--run`): shared by eval, play and demos."""
    parser.add_argument("--agent", choices=kind_names(), default=None,
                        help="agent kind (with --run: checked against the run's; default: the run's)")
    parser.add_argument("--model", default=None,
                        help=f"llm agent: model name or path (a `glamrl export` dir too; default {ModelConfig.name})")
    parser.add_argument("--run", type=Path, default=None,
                        help="the trained agent of this run dir (any kind), on the run's env settings by default")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default=None,
                        help=f"a fresh llm agent's weights (default {ModelConfig.dtype})")
    parser.add_argument("--device", default=None, help="llm: cpu, cuda, cuda:N, auto (default: the run's, else auto)")
    parser.add_argument("--greedy", action="store_true", help="llm agent: argmax instead of sampling")
    parser.add_argument("--temperature", type=positive_float, default=None,
                        help="llm and symbolic agents: sample from softmax(log pi / T), sharper below 1 (default 1: "
                             "the policy as trained)")


def add_command(sub: argparse._SubParsersAction, name: str, command: Callable[[argparse.Namespace], None],
                help: str) -> argparse.ArgumentParser:
    """Declare the subcommand `name`, which `main` runs as `command(args)` (the parsed `args.command_fn`)."""
    parser = sub.add_parser(name, help=help)
    parser.set_defaults(command_fn=command)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="glamrl", description=__doc__, epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    ev = add_command(sub, "eval", cmd_eval, "evaluate an agent: success rate, return, length, per task")
    add_agent_args(ev)
    add_episode_args(ev)
    add_seeding_arg(ev)
    ev.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    ev.add_argument("--suite", default=None,
                    help="run a generalisation suite (paper, french, all); its tests set env and language")
    ev.add_argument("--tests", default=None, help="comma-separated suite tests, e.g. french,invented_words")

    tr = add_command(sub, "train", cmd_train,
                     "train an agent: llm, npae or symbolic with PPO, drrn off-policy (resumes a run dir)")
    tr.add_argument("--config", type=Path, default=None, help="YAML config (not needed to resume)")
    tr.add_argument("--run-dir", type=Path, default=None, help="default: runs/{env}-{model}-seed{seed}-{config hash}")
    tr.add_argument("--overwrite", action="store_true", help="delete what --run-dir holds and start afresh")
    tr.add_argument("--no-progress", action="store_true")
    tr.add_argument("overrides", nargs="*", help="dotted overrides, e.g. ppo.lr=1e-5 env.num_envs=8")

    de = add_command(sub, "demos", cmd_demos, "record an agent's episodes as (prompt, action) JSONL records")
    add_agent_args(de)  # default: the bot
    add_episode_args(de)
    de.add_argument("--nbr-obs", type=positive_int, default=PromptConfig.nbr_obs, help="observations kept in each recorded prompt")
    de.add_argument("--out", type=Path, required=True, help="JSONL file, one record per step")

    bc = add_command(sub, "bc", cmd_bc,
                     "behavioural cloning of demonstrations into an LLM (resumes an existing run dir)")
    bc.add_argument("--data", type=Path, required=True, help="JSONL demonstrations from glamrl demos")
    bc.add_argument("--config", type=Path, default=None, help="YAML config (model, prompt, bc sections)")
    bc.add_argument("--run-dir", type=Path, required=True)
    bc.add_argument("--no-progress", action="store_true")
    bc.add_argument("overrides", nargs="*", help="dotted overrides, e.g. bc.lr=1e-4 model.lora=true")

    pl = add_command(sub, "plot", cmd_plot, "PNG of log.csv's metrics (success rate and return) against frames")
    pl.add_argument("runs", nargs="+", type=Path)
    pl.add_argument("--out", type=Path, default=Path("curves.png"))
    pl.add_argument("--metrics", type=name_list, default=None,
                    help="log.csv columns to draw, comma-separated, one subplot each (default: "
                         "success_rate,return_mean; docs/reference/metrics.md lists them)")
    pl.add_argument("--smooth", type=positive_int, default=None,
                    help="draw each run's moving average over this many rows (default: 1, as logged); "
                         "success rates and mean returns and lengths pooled over the rows' episodes")
    pl.add_argument("--x", choices=("frames", "minutes"), default=None,
                    help="the x axis: frames (default), or minutes of training (log.csv's duration)")
    pl.add_argument("--rows", action="store_true",
                    help="one panel per group of runs (seeds together), each over the others in grey, for one "
                         "metric (default: success_rate): many groups read apart")
    pl.add_argument("--probes", action="store_true", help="draw the run's probes.csv (pi(a | probe)) instead")
    pl.add_argument("--overwrite", action="store_true", help="replace an --out that glamrl did not write")

    ex = add_command(sub, "export", cmd_export,
                     "write a run's policy as a Hugging Face model directory (+ value head, card)")
    ex.add_argument("--run", type=Path, required=True, help="run directory with a checkpoint")
    ex.add_argument("--out", type=Path, required=True, help="directory to write (must be absent or empty)")
    ex.add_argument("--merge-lora", action="store_true", help="LoRA runs: merged full weights, not an adapter")
    ex.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")

    pp = add_command(sub, "play", cmd_play,
                     "one episode as a GIF (or a PNG sheet): picture, text, action probabilities")
    add_agent_args(pp)
    pp.add_argument("--env", default=None,
                    help=f"BabyAI-Text level id (default: the test's, else the run's env.id, else {EnvConfig.id})")
    pp.add_argument("--test", default=None, help="play under a suite test, e.g. french or invented_words")
    pp.add_argument("--seed", type=non_negative_int, default=EnvConfig.seed,
                    help="plays the first episode of `glamrl eval --seed SEED` (with --seeding offset, episode k "
                         "of it is --seed SEED+k)")
    add_seeding_arg(pp)
    pp.add_argument("--language", choices=("en", "fr"), default=None, help="default: the run's, else en")
    pp.add_argument("--format", choices=("gif", "png-sheet"), default="gif")
    pp.add_argument("--max-frames", type=positive_int, default=200)
    pp.add_argument("--out", type=Path, default=Path("episode.gif"))

    xp = add_command(sub, "experiment", cmd_experiment,
                     "train several agents at equal frames (resumable), then plot and tabulate")
    xp.add_argument("file", type=Path, help="experiment YAML (e.g. configs/experiments/cpu_paper.yaml)")
    xp.add_argument("--task", type=non_negative_int, action="append", default=None,
                    help="train only this task (run) id; repeatable (SLURM: $SLURM_ARRAY_TASK_ID)")
    xp.add_argument("--report", action="store_true", help="only the plots and the table of what has run")
    xp.add_argument("--sbatch", type=Path, default=None, help="write a SLURM array job (one task per run) and stop")
    xp.add_argument("--overwrite", action="store_true",
                    help="replace a --sbatch file or an OUT/report.md that glamrl did not write")
    xp.add_argument("--time", default="24:00:00", help="--sbatch: the time limit of each task")
    xp.add_argument("--cpus", type=positive_int, default=8, help="--sbatch: CPUs per task")
    xp.add_argument("--aggregate", choices=AGGREGATES, default="iqm",
                    help="the report's times and successes over seeds: interquartile mean or mean (rliable)")

    cf = add_command(sub, "config", cmd_config, "every config field with its type, default and help")
    cf.add_argument("section", nargs="?", default=None, help="one section only: env, prompt, model, ppo, ...")

    rs = add_command(sub, "results", cmd_results,
                     "table (Markdown, CSV) and bar chart of suite JSONs over agents and seeds")
    rs.add_argument("inputs", nargs="+", type=Path, help="suite JSONs, or folders searched for them")
    rs.add_argument("--out", type=Path, default=Path("results"), help="folder for results.md, .csv and .png")
    rs.add_argument("--aggregate", choices=AGGREGATES, default="iqm",
                    help="over seeds: interquartile mean or mean, with rliable's 95%% bootstrap intervals")
    return parser


def cmd_play(args: argparse.Namespace) -> None:
    from glamrl.eval.agents import builder, eval_env, load_eval_model
    from glamrl.eval.render import SUFFIXES, draw_frames, play_episode, write_episode
    from glamrl.eval.suite import SuiteTest, applicable, select_tests
    from glamrl.envs import make_env

    fmt = "gif" if args.format == "gif" else "png"
    check_output(args.out, suffixes=(SUFFIXES[fmt],))
    if args.test is not None:
        refuse(args, ("language",), f"with --test {args.test}: the test sets its language")
        (test,) = select_tests(None, args.test)
    if args.env is not None:
        make_env(args.env)  # an unknown id fails here, before the agent loads
    spec = agent_spec(args)
    cfg, model, label, _ = load_eval_model(spec, args.seed, args.language)
    env = seeded_env(eval_env(cfg.env, args.env, language=args.language), args)
    if args.test is None:
        test = SuiteTest("play", "one episode", language=env.language)
    elif skipped := applicable([test], env)[1]:
        raise FlagError(f"--test {test.name} cannot apply: {skipped[test.name]}")
    moments, names = play_episode(test, builder(cfg, model, spec.greedy, spec.temperature), env.eval_seed,
                                  args.max_frames, env)
    level = test.env_config(env).id
    where = level if args.test is None else f"{test.name}, {level}"
    images = draw_frames(moments, names, f"{label} | {where} seed {args.seed}")
    write_episode(images, args.out, fmt)
    outcome = moments[-1].outcome or f"stopped after {len(moments)} frames"
    print(f"{label} on {where}, seed {args.seed}: {outcome}; {len(images)} frames in {args.out}")


def cmd_experiment(args: argparse.Namespace) -> None:
    from glamrl.experiment import load_experiment, report, report_files, run_dir, run_tasks, write_sbatch

    experiment = load_experiment(args.file)
    if args.sbatch is not None:
        check_output(args.sbatch, "--sbatch", suffixes=(".sbatch", ".sh"), overwrite=args.overwrite)
        write_sbatch(experiment, args.file, args.sbatch, time=args.time, cpus=args.cpus)
        print(f"wrote {args.sbatch}: {len(experiment.tasks)} array tasks; submit it with sbatch {args.sbatch}")
        for i, (spec, seed) in enumerate(experiment.tasks):
            print(f"  task {i}: {run_dir(experiment, spec, seed)}")
        return
    md, *plots = report_files(experiment)
    reporting = args.task is None or args.report
    if reporting:  # before any run
        check_output(md, "the experiment's report", overwrite=args.overwrite)
        for png in plots:
            check_output(png, "the experiment's plot")
    if not args.report:
        run_tasks(experiment, args.task)
    if reporting:
        written = report(experiment, aggregate=args.aggregate)
        print(md.read_text(), end="")
        print(f"wrote {', '.join(map(str, written))}")


def cmd_config(args: argparse.Namespace) -> None:
    import textwrap

    from glamrl.config import field_help

    for f in field_help(args.section):
        print(f"{f.key} ({f.type}, default {f.default!r})")
        if f.help:
            print(textwrap.fill(f.help, width=100, initial_indent="    ", subsequent_indent="    "))


def cmd_results(args: argparse.Namespace) -> None:
    from glamrl.eval.results import write_results

    table, paths = write_results(args.inputs, args.out, aggregate=args.aggregate)
    print(table)
    print("wrote " + ", ".join(str(p) for p in paths))


def eval_agent(args: argparse.Namespace,
               default_kind: str | None = None) -> tuple[Agent, TrainConfig, SyncVectorEnv, Progress | None]:
    """(the agent, its config, its --num-envs envs, the run's checkpoint progress or None) of `eval` on one level
    and of `demos`. The config's env is the run's (a fresh agent's: the defaults), with the level, task and language
    flags given, and --seed."""
    import dataclasses

    from glamrl.agents.factory import make_agent
    from glamrl.eval.agents import eval_env, load_eval_model
    from glamrl.envs import make_env

    if args.env is not None:
        make_env(args.env, task=args.task)  # an unknown id or task fails here, before the agent loads
    spec = agent_spec(args, default_kind)
    cfg, model, _, progress = load_eval_model(spec, args.seed, args.language)
    env = dataclasses.replace(eval_env(cfg.env, args.env, args.task, args.language), seed=args.seed)
    cfg = dataclasses.replace(cfg, env=env)  # its num_envs stays the run's: the run's own settings hold with it
    envs = dataclasses.replace(env, num_envs=args.num_envs or env.num_envs).make_vector_env()
    return make_agent(cfg, model, envs, greedy=spec.greedy, temperature=spec.temperature), cfg, envs, progress


def cmd_eval(args: argparse.Namespace) -> None:
    """`glamrl eval` on one level. The JSON holds the summary, the env settings, the episodes' seeds (episode k
    played from `env.eval_seed` + k, on `num_envs` envs) and the `provenance` record (`glamrl.eval.provenance`)."""
    if args.suite is not None or args.tests is not None:
        return cmd_suite(args)
    import dataclasses

    from glamrl.eval.provenance import provenance
    from glamrl.eval.results import describe_drawing
    from glamrl.files import write_text
    from glamrl.rollout import evaluate, format_table

    if args.out:
        check_output(args.out, suffixes=(".json",))
    agent, cfg, envs, progress = eval_agent(args)
    cfg = dataclasses.replace(cfg, env=seeded_env(cfg.env, args))
    env, seed = cfg.env, cfg.env.eval_seed
    summary = evaluate(envs, agent, args.episodes, seed=seed, progress=True)
    summary = {"agent": cfg.agent.kind, "env": env.id, "task": env.task, "max_steps": env.max_steps,
               "faithful": env.faithful, "language": env.language, "seed": args.seed, "seeding": env.seeding,
               "eval_seed": seed, "num_envs": envs.num_envs, **summary,
               "provenance": provenance(cfg, run_dir=args.run, progress=progress, greedy=args.greedy,
                                        temperature=args.temperature or 1.0, num_envs=envs.num_envs,
                                        first_seed=seed, episodes=args.episodes)}
    drawn = args.greedy or args.temperature is not None  # said where not the default sampling
    drawing = f", {describe_drawing(args.greedy, args.temperature or 1.0)}" if drawn else ""
    print(f"{summary['agent']} on {env.id} ({args.episodes} episodes from seed {seed}{drawing})")
    print(format_table(summary))
    if args.out:
        write_text(args.out, json.dumps(summary, indent=2))
        print(f"wrote {args.out}")


def cmd_suite(args: argparse.Namespace) -> None:
    """`glamrl eval --suite`: every test of the suite, one JSON; bad names, agents or paths fail first.

    The JSON names the suite only when all its tests were asked (`--tests` makes it "custom"), and is
    `complete` once every test asked has run (it is rewritten after each test). The tests play under the run's
    env settings (a fresh agent's: the defaults; `--env` moves the level), each test's own level or language
    written as its `overrides`; every test plays episode k from `env.eval_seed` + k, on `num_envs` envs. Run
    again after a stop, it keeps the tests that the unfinished --out file played of the same agent and episodes
    (`glamrl.eval.suite.resumable_tests`) and plays the rest.
    """
    import dataclasses
    import time

    from glamrl.eval.agents import builder, eval_env, load_eval_model
    from glamrl.eval.provenance import provenance
    from glamrl.eval.suite import applicable, format_header, format_row, resumable_tests, run_suite, select_tests
    from glamrl.envs import make_env
    from glamrl.files import write_text

    tests = select_tests(args.suite, args.tests)
    refuse(args, ("task", "language"), "to --suite or --tests: the tests play all the level's tasks (or the run's "
                                       "env.task), each in its own language")
    suite = "custom" if args.tests is not None else args.suite or "paper"
    if args.out:
        check_output(args.out, suffixes=(".json",))
    if args.env is not None:
        make_env(args.env)  # an unknown id fails here, before the agent loads
    spec = agent_spec(args)
    cfg, model, label, progress = load_eval_model(spec, args.seed)
    env = seeded_env(eval_env(cfg.env, args.env), args)
    tests, skipped = applicable(tests, env)
    build = builder(cfg, model, spec.greedy, spec.temperature)
    seed, num_envs = env.eval_seed, args.num_envs or env.num_envs
    origin = provenance(dataclasses.replace(cfg, env=env), run_dir=args.run, progress=progress, greedy=args.greedy,
                        temperature=spec.temperature, num_envs=num_envs, first_seed=seed, episodes=args.episodes)
    record = {"suite": suite, "agent": label, "seed": args.seed, "seeding": env.seeding, "eval_seed": seed,
              "episodes_per_test": args.episodes, "num_envs": num_envs, "skipped": skipped, "provenance": origin}
    names = {test.name for test in tests}
    played = {k: v for k, v in resumable_tests(args.out, record).items() if k in names} if args.out else {}
    print(f"{label}: {len(tests)} tests on {env.id}, {args.episodes} episodes each, evaluation seeds from {seed}")
    for name, why in skipped.items():
        print(f"{name}: skipped, does not apply: {why}")
    if played:
        print(f"resuming {args.out}: {len(played)} of its tests played these episodes of this agent already")
    print(format_header())
    for name, result in played.items():
        print(format_row(name, result))
    start = time.time() - sum(r.get("wall_time_s", 0) for r in played.values())

    def save(results: dict) -> None:  # after every test, so that a long suite stopped early keeps what it ran
        if args.out:
            write_text(args.out, json.dumps({**record, "complete": len(results) == len(tests),
                                             "wall_time_s": round(time.time() - start, 2), "tests": results},
                                            indent=2))

    save(run_suite(tests, build, args.episodes, seed, num_envs, progress=True,  # again: where every test was kept
                   say=lambda line: print(line, flush=True), after_test=save, env=env, played=played))
    print(f"{len(tests)} tests in {time.time() - start:.1f}s")


def cmd_demos(args: argparse.Namespace) -> None:
    from glamrl.demos import record_demos, write_demos
    from glamrl.envs.actions import action_names
    from glamrl.rollout import format_table

    check_output(args.out, suffixes=(".jsonl",))
    agent, cfg, envs, _ = eval_agent(args, default_kind="bot")
    env = cfg.env
    records, summary = record_demos(envs, agent, args.episodes, args.seed, action_names(env.language), args.nbr_obs,
                                    env.language, progress=True)
    write_demos(records, args.out)
    print(f"{cfg.agent.kind} on {env.id}: {args.episodes} episodes, {len(records)} records in {args.out}")
    print(format_table(summary))


def cmd_bc(args: argparse.Namespace) -> None:
    from glamrl.config import load_train_config
    from glamrl.trainers.bc import train_bc
    from glamrl.trainers.common import train_run_dir

    cfg = load_train_config(args.config, args.overrides) if args.config else None
    run = RunDir(args.run_dir)
    result = train_run_dir(run, cfg, args.overrides, command=f"glamrl bc --data {args.data}",
                           loop=lambda c, run_dir, **how: train_bc(c, args.data, run_dir, **how),
                           progress=not args.no_progress)
    print(f"cloned {result.frames} records ({result.log_rows} log rows); logs, checkpoints and {run.curves.name} "
          f"in {args.run_dir}")


def cmd_train(args: argparse.Namespace) -> None:
    from glamrl.parallel import distributed

    distributed.init()  # under torchrun: join the other ranks; alone: nothing
    try:
        train_run(args)
    except distributed.StoppedByMainRank:  # rank 0 refused the run and reports why; this rank exits quietly
        return


def train_run(args: argparse.Namespace, cfg: TrainConfig | None = None) -> Path:
    """Train (or resume) the run that `args` names, `cfg` in place of --config and its overrides where given
    (`glamrl.api.train`); returns the run directory."""
    from glamrl.config import ConfigError, load_train_config
    from glamrl.parallel import distributed
    from glamrl.trainers.common import train_run_dir

    if cfg is None and args.config:
        cfg = load_train_config(args.config, args.overrides)
    if args.run_dir is None and cfg is None:
        raise ConfigError("give --config (a new run) or --run-dir (a run to resume)")
    run = RunDir(args.run_dir) if args.run_dir is not None else RunDir.default(cfg)
    result = train_run_dir(run, cfg, args.overrides, overwrite=args.overwrite, progress=not args.no_progress)
    if not distributed.current().is_main:
        return run.path
    print(f"trained {result.log_rows} {result.row}s, {result.frames} frames; logs, checkpoints and {run.curves.name} "
          f"in {run}")
    if result.success_before is not None and result.success_after is not None:
        print(f"success rate: {result.success_before:.3f} before -> {result.success_after:.3f} after")
    return run.path


def cmd_export(args: argparse.Namespace) -> None:
    from glamrl.export import export_run

    manifest = export_run(args.run, args.out, merge_lora=args.merge_lora, overwrite=args.overwrite)
    print(f"exported {args.run} to {args.out} ({manifest.weights} weights, value head, model card README.md)")


def cmd_plot(args: argparse.Namespace) -> None:
    from glamrl.eval.plot import DEFAULT_METRICS, SUFFIXES, plot_rows, plot_runs

    if args.probes:
        refuse(args, ("metrics", "smooth", "x", "rows"), "with --probes, which draws probes.csv, not log.csv")
    if args.rows and args.metrics and len(args.metrics) > 1:
        raise FlagError(f"--rows draws one metric, got --metrics {','.join(args.metrics)}")
    if args.probes and len(args.runs) > 1:  # one plot per run, in its directory
        outs = [RunDir(run).probes_plot for run in args.runs]
    else:
        outs = [args.out]
    for out in outs:
        check_output(out, suffixes=SUFFIXES, overwrite=args.overwrite)
    if args.probes:
        from glamrl.eval.probes import plot_probes

        for run, out in zip(args.runs, outs):
            print(plot_probes(run, out))
        return
    if args.rows:
        print(plot_rows(args.runs, args.out, x=args.x or "frames", metric=(args.metrics or DEFAULT_METRICS)[0],
                        smooth=args.smooth or 1))
    else:
        print(plot_runs(args.runs, args.out, x=args.x or "frames", metrics=args.metrics or DEFAULT_METRICS,
                        smooth=args.smooth or 1))


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, a scheduler's time limit), raised in the main thread so that it stops a command as Ctrl-C
    does, with one line and an exit status, rather than killing the process mid-line; a run resumes from its
    last checkpoint either way (checkpoints are written atomically)."""


def _terminate(signum, frame) -> None:
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    """Run one command. The error boundary: bad input (a GlamrlError) and the disk refusing a write print one
    `glamrl: error:` line and exit 2; Ctrl-C and SIGTERM print one line and exit 130 and 143 (128 + the signal,
    as a shell reports it); anything else is a bug and keeps its traceback."""
    args = build_parser().parse_args(argv)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        args.command_fn(args)
    except Terminated:
        print("glamrl: terminated (SIGTERM); a run resumes from its last checkpoint", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("glamrl: interrupted", file=sys.stderr)
        return 130
    except GlamrlError as err:
        print(f"glamrl: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a write outside the atomic writer (TensorBoard, an append) that the disk refused
        reason = disk_failure(err)
        if reason is None:
            raise
        print(f"glamrl: error: cannot write {err.filename or 'a file'}: {reason}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, previous)  # given back to a caller that runs main() in its process (tests)
    return 0


if __name__ == "__main__":
    sys.exit(main())
