import pytest
import yaml

from glamrl.eval.plot import agent_label, group_runs, plot_runs
from glamrl.run.log import LogNotFoundError, RunLogger


def _run(root, name: str, seed: int, lr: float, updates: int):
    run_dir = root / name
    run_dir.mkdir()
    config = {"env": {"id": "BabyAI-GoToLocal-v0", "seed": seed}, "ppo": {"lr": lr}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    with RunLogger(run_dir, tensorboard=False) as logger:
        for update in range(1, updates + 1):
            logger.log({"update": update, "frames": 64 * update,
                        "success_rate": min(1.0, 0.05 * update + 0.1 * seed), "return_mean": 0.03 * update})
    return run_dir


@pytest.fixture
def runs(tmp_path):
    return [_run(tmp_path, "a_s1", 1, 1e-4, 20), _run(tmp_path, "b_lr", 1, 1e-3, 15),
            _run(tmp_path, "a_s2", 2, 1e-4, 12)]


def test_runs_differing_only_by_seed_are_grouped(runs):
    a1, b, a2 = runs
    assert group_runs(runs) == [[a1, a2], [b]]


def test_plot_writes_a_png(runs, tmp_path):
    out = plot_runs(runs, tmp_path / "plots" / "curves.png")
    data = out.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


def test_missing_log_is_a_named_error(runs, tmp_path):
    (tmp_path / "empty_run").mkdir()
    with pytest.raises(LogNotFoundError, match="empty_run"):
        plot_runs([*runs, tmp_path / "empty_run"], tmp_path / "curves.png")


def test_legend_names_the_agent_kind_and_config(tmp_path):
    configs = {
        "glam": {"model": {"name": "smollm2-135m", "lora": True}},
        "npae": {"model": {"name": "smollm2-135m", "pretrained": False, "use_action_heads": True}},
        "drrn": {"agent": {"kind": "drrn"}},
        "sym": {"agent": {"kind": "symbolic"}, "symbolic": {"memory": True}},
    }
    run_dirs = []
    for name, config in configs.items():
        run = _run(tmp_path, name, 1, 1e-4, 3)
        (run / "config.yaml").write_text(yaml.safe_dump({**config, "env": {"id": "BabyAI-GoToObjS4-v0"}}))
        run_dirs.append(run)
    assert [agent_label(r) for r in run_dirs] == [
        "llm smollm2-135m lora on GoToObjS4", "npae smollm2-135m on GoToObjS4", "drrn on GoToObjS4",
        "symbolic memory on GoToObjS4"]
    plot_runs(run_dirs, tmp_path / "compare.png")
