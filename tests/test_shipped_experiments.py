"""Every experiment file shipped in configs/experiments/ runs end to end, shrunk: the same runs, agents, levels and
overrides, with a tiny model, a few frames and a few evaluation episodes, then the report."""

import json
from pathlib import Path

import pytest
import yaml

from glamrl.agents.registry import agent_kind
from glamrl.cli import main
from glamrl.config import load_train_config
from glamrl.run.dir import RunDir

SHIPPED = sorted(Path("configs/experiments").glob("*.yaml"))
FRAMES = 32


def shrunk_overrides(config: str, overrides: list[str], clone: bool = False) -> list[str]:
    """The run's own overrides, then what makes it tiny: 2 envs, a 2-block random model, 16-frame updates (a
    clone: one epoch in batches of 4 records)."""
    cfg = load_train_config(config, overrides)
    tiny = ["env.num_envs=2", "run.eval_episodes=0", "run.tensorboard=false"]
    if clone:
        tiny += ["bc.batch_size=4", "bc.epochs=1"]
    elif cfg.agent.kind == "drrn":
        tiny += ["drrn.learning_starts=4", "drrn.batch_size=4", "drrn.log_every=8"]
    else:
        steps = max(8, cfg.symbolic.recurrence) if cfg.agent.kind == "symbolic" else 8
        tiny += [f"ppo.num_steps={steps}", f"ppo.minibatch_size={steps}", "ppo.epochs=1"]
    if not clone:  # a run's own frames too (a curriculum's first step)
        tiny.append(f"{agent_kind(cfg.agent.kind).trainer.frames_field}={FRAMES}")
    if cfg.agent.kind == "llm":
        tiny += ["model.name=tiny-llama", "model.compile=false"]
        if cfg.model.train_layers is not None:
            tiny.append("model.train_layers=1")
    merged = dict(o.split("=", 1) for o in [*overrides, *tiny])  # a key given twice is refused: tiny's wins
    return [f"{key}={value}" for key, value in merged.items()]


def shrink(path: Path, out: Path) -> Path:
    """A copy of the experiment file `path` whose runs are tiny (first seed only) and write into `out`."""
    data = yaml.safe_load(path.read_text())
    data.update(out=str(out), frames=FRAMES, minutes=None)
    for spec in data["runs"].values():
        spec["seeds"] = spec.get("seeds", [1])[:1]
        if "suite" in spec:
            spec["suite_episodes"] = 1
        if "agent" in spec:
            spec["episodes"] = 2
        else:
            spec["overrides"] = shrunk_overrides(spec["config"], spec.get("overrides", []), "clone" in spec)
            if "clone" in spec:
                spec["clone"] = 2
    tiny = out.parent / f"tiny_{path.name}"
    tiny.write_text(yaml.safe_dump(data, sort_keys=False))
    return tiny


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_experiment_runs_end_to_end_shrunk(path, tmp_path, capsys, runs_in_process):
    tiny = shrink(path, tmp_path / "out")
    assert main(["experiment", str(tiny)]) == 0
    data = yaml.safe_load(tiny.read_text())
    for name, spec in data["runs"].items():
        run = tmp_path / "out" / f"{name}-seed{spec['seeds'][0]}"
        if "suite" in spec:
            assert json.loads((run / "suite.json").read_text())["complete"], name
        if "agent" in spec:
            assert (run / "eval.json").is_file()
        elif "clone" in spec:  # one epoch over the records of its demonstrations
            demos = tmp_path / "out" / f"{name}-seed{spec['seeds'][0]}-demos.jsonl"
            assert RunDir(run).read_log()[-1]["frames"] == len(demos.read_text().splitlines()) > 0, name
        else:
            assert RunDir(run).read_log()[-1]["frames"] >= FRAMES, name
    report = (tmp_path / "out" / "report.md").read_text()
    rows = [line.split(" | ")[0] for line in report.splitlines() if line.startswith("| ")]
    for name, spec in data["runs"].items():  # "| NAME", "| NAME (from SOURCE)", "| NAME (evaluated)"
        label = name + (f" (clone of {spec['clone']} bot episodes)" if "clone" in spec else "") + (
            f" (from {spec['init_from']})" if "init_from" in spec else "")
        assert f"| {label}" in rows or f"| {name} (evaluated)" in rows, (name, rows)
    capsys.readouterr()
