"""A run is its config, and frames are its budget: a resume may change only the caps (recorded in the run's
config history), default run directories and experiments tell configs apart, every trainer stops at its frames
however it was resumed, and what is shown of a run (export card, report, results) is that run's."""

import json

import pytest
import yaml

from glamrl.cli import main
from glamrl.config import RESUMABLE, load_train_config
from glamrl.demos import DemoFileError, read_demos
from glamrl.envs.actions import ACTION_NAMES
from glamrl.experiment import load_experiment, report
from glamrl.run.dir import RunDir
from glamrl.trainers.bc import train_bc
from glamrl.trainers.drrn import train_drrn
from glamrl.trainers.ppo import train_ppo

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["env.id=BabyAI-TurnToObject-v0", "env.num_envs=2", "model.name=tiny-llama", "model.device=cpu",
        "ppo.num_steps=4", "ppo.minibatch_size=4", "ppo.epochs=1", "run.tensorboard=false", "prompt.nbr_obs=1"]
DRRN = ["agent.kind=drrn", "env.id=BabyAI-TurnToObject-v0", "env.num_envs=8", "drrn.embedding_dim=16",
        "drrn.hidden_size=16", "drrn.learning_starts=10000", "drrn.max_tokens=64", "run.tensorboard=false"]
QUIET = {"progress": False, "say": lambda _: None}


def one_line(capsys, args):
    code = main(args)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("glamrl: error: "), err
    return err


# ------------------------------------------------------------------ 1. one config per run directory
def test_a_resume_refuses_every_changed_key_and_records_the_caps_it_grows(tmp_path, capsys):
    run, config = tmp_path / "run", tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(load_train_config(None, TINY).to_dict()))
    assert main(["train", "--config", str(config), "--run-dir", str(run), "--no-progress", "ppo.total_frames=8"]) == 0
    before = (run / "config.yaml").read_text()
    changes = ["ppo.lr=0.5", "ppo.epochs=2", "ppo.gamma=0.5", "ppo.clip_eps=0.1", "env.num_envs=4"]
    err = one_line(capsys, ["train", "--run-dir", str(run), "--no-progress", *changes])
    for key in ("ppo.lr", "ppo.epochs", "ppo.gamma", "ppo.clip_eps", "env.num_envs"):
        assert key in err  # every changed key, not the first three
    assert (run / "config.yaml").read_text() == before and [r["update"] for r in RunDir(run).read_log()] == [1]

    assert main(["train", "--run-dir", str(run), "--no-progress", "ppo.total_frames=16", "run.max_minutes=60"]) == 0
    assert [r["update"] for r in RunDir(run).read_log()] == [1, 2]
    history = yaml.safe_load((run / "config_history.yaml").read_text())
    assert [(h["key"], h["old"], h["new"]) for h in history] == [("ppo.total_frames", 8, 16),
                                                                 ("run.max_minutes", None, 60)]
    assert all(h["time"] for h in history)
    state = RunDir(run).load_checkpoint().to_dict()
    assert state["config"]["ppo"]["total_frames"] == 16  # the checkpoint carries the grown cap, not the old one


def test_a_resume_may_change_how_the_passes_without_gradients_are_batched(tmp_path):
    """model.inference_batching gives the same scores up to rounding: runs saved before it existed read as null
    (model.batching), as they ran, and a resume may set it."""
    run, config = tmp_path / "run", tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(load_train_config(None, TINY).to_dict()))
    assert main(["train", "--config", str(config), "--run-dir", str(run), "--no-progress", "ppo.total_frames=8"]) == 0
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["model"]["inference_batching"] == "auto" and saved["resolved"]["model.inference_batching"] == "padded"
    del saved["model"]["inference_batching"]  # as runs saved before the field wrote it
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    assert RunDir(run).read_config().model.inference_batching is None
    assert main(["train", "--run-dir", str(run), "--no-progress", "ppo.total_frames=16",
                 "model.inference_batching=auto"]) == 0
    assert [r["update"] for r in RunDir(run).read_log()] == [1, 2]
    history = yaml.safe_load((run / "config_history.yaml").read_text())
    assert sorted((h["key"], h["old"], h["new"]) for h in history) == [("model.inference_batching", None, "auto"),
                                                                       ("ppo.total_frames", 8, 16)]


# ------------------------------------------------------------------ 2. default run directories
def test_default_run_directories_tell_configs_apart_but_not_their_caps():
    base = load_train_config("configs/turn_to_object.yaml")
    other_lr = load_train_config("configs/turn_to_object.yaml", ["ppo.lr=1e-3"])
    longer = load_train_config("configs/turn_to_object.yaml", ["ppo.total_frames=999", "run.max_minutes=5"])
    assert RunDir.default(base).path != RunDir.default(other_lr).path
    assert RunDir.default(base).path == RunDir.default(longer).path
    assert "ppo.total_frames" in RESUMABLE and "ppo.lr" not in RESUMABLE


# ------------------------------------------------------------------ 3. experiments: finished is this run, finished
def fake_run(directory, cfg, rows):
    """A run directory holding `cfg` and a log of `rows` (update, frames, success_rate; None: no episode ended)."""
    RunDir(directory).path.mkdir(parents=True)
    RunDir(directory).write_config(cfg)
    lines = ["update,frames,episodes,duration,success_rate,num_frames_mean"]
    lines += [f"{u},{f},{u},{u * 10.0},{'' if s is None else s},{'' if s is None else 3.0}" for u, f, s in rows]
    (directory / "log.csv").write_text("\n".join(lines) + "\n")


def experiment_file(tmp_path, name, overrides):
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"out: {tmp_path / 'out'}\nframes: 64\nruns:\n  tiny:\n    config: configs/turn_to_object.yaml\n"
                    f"    overrides: {json.dumps(overrides)}\n")
    return path


def test_an_experiment_does_not_adopt_another_experiments_run(tmp_path, capsys):
    first = experiment_file(tmp_path, "first", [])
    spec, seed = load_experiment(first).tasks[0]
    from glamrl.experiment import train_overrides
    cfg = load_train_config(spec.config, train_overrides(load_experiment(first), spec, seed))
    fake_run(tmp_path / "out" / "tiny-seed1", cfg, [(1, 64, 0.5)])
    assert main(["experiment", str(first)]) == 0
    assert "finished, skipped" in capsys.readouterr().out

    second = experiment_file(tmp_path, "second", ["env.id=BabyAI-GoToRedBall-v0", "ppo.lr=0.001"])
    log = (tmp_path / "out" / "tiny-seed1" / "log.csv").read_text()
    assert main(["experiment", str(second)]) == 2
    out, err = capsys.readouterr()
    line = next(line for line in out.splitlines() if "tiny-seed1" in line)
    assert "mismatch" in line and "env.id" in line and "ppo.lr" in line and "finished" not in line
    assert len(err.strip().splitlines()) == 1
    assert (tmp_path / "out" / "tiny-seed1" / "log.csv").read_text() == log
    report(load_experiment(second))
    assert "| tiny | 0 |  |  |  |  |  |  |" in (tmp_path / "out" / "report.md").read_text()  # not the second's


def test_the_report_shows_the_last_row_that_finished_episodes(tmp_path):
    first = experiment_file(tmp_path, "first", [])
    experiment = load_experiment(first)
    spec, seed = experiment.tasks[0]
    from glamrl.experiment import train_overrides
    cfg = load_train_config(spec.config, train_overrides(experiment, spec, seed))
    fake_run(tmp_path / "out" / "tiny-seed1", cfg, [(1, 32, 0.25), (2, 64, None)])
    report(experiment)
    row = next(line for line in (tmp_path / "out" / "report.md").read_text().splitlines() if line.startswith("| tiny"))
    assert row.split(" | ")[6] == "0.250" and "nan" not in row


# ------------------------------------------------------------------ 4. frames are the budget
def test_drrn_trains_its_frames_in_rows_of_at_most_log_every_and_resumes_by_frames(tmp_path):
    run = tmp_path / "run"
    train_drrn(load_train_config(None, [*DRRN, "drrn.total_frames=100", "drrn.log_every=64"]), run, **QUIET)
    assert [r["frames"] for r in RunDir(run).read_log()] == [64, 104]  # 100 frames to within one vector step of 8 envs
    train_drrn(load_train_config(None, [*DRRN, "drrn.total_frames=200", "drrn.log_every=64"]), run, resume=True,
               **QUIET)
    assert [r["frames"] for r in RunDir(run).read_log()] == [64, 104, 168, 200]
    short = tmp_path / "short"
    train_drrn(load_train_config(None, [*DRRN, "drrn.total_frames=512", "drrn.log_every=2048"]), short, **QUIET)
    assert [r["frames"] for r in RunDir(short).read_log()] == [512]


def test_the_minutes_cap_counts_the_runs_training_time_over_every_invocation(tmp_path):
    run = tmp_path / "run"
    capped = [*TINY, "ppo.total_frames=64", "run.max_minutes=1e-6"]
    train_ppo(load_train_config(None, capped), run, **QUIET)
    assert [r["update"] for r in RunDir(run).read_log()] == [1]  # stopped after its first update
    train_ppo(load_train_config(None, capped), run, resume=True, **QUIET)
    assert [r["update"] for r in RunDir(run).read_log()] == [1]  # the cap is used up: no whole cap again
    train_ppo(load_train_config(None, [*TINY, "ppo.total_frames=64", "run.max_minutes=60"]), run, resume=True, **QUIET)
    assert RunDir(run).read_log()[-1]["frames"] == 64


# ------------------------------------------------------------------ 4, 5, 6. behavioural cloning
@pytest.fixture
def demos(tmp_path):
    path = tmp_path / "demos.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"Goal of the agent: go to the ball {i}\nAction 0: ",
                                        "action": ACTION_NAMES[i % 2], "action_index": i % 2, "nbr_obs": 1}) + "\n"
                            for i in range(40)))
    return path


BC = [*(o for o in TINY if not o.startswith("ppo.")), "bc.epochs=1", "bc.batch_size=16", "bc.log_every=1",
      "bc.lr=1e-3"]  # BC reads no ppo.* field: it refuses them


def test_bc_resumes_at_the_record_it_reached_whatever_the_batch_size(demos, tmp_path):
    run = tmp_path / "bc"
    train_bc(load_train_config(None, BC), demos, run, **QUIET)
    assert [r["frames"] for r in RunDir(run).read_log()] == [16, 32, 40]
    train_bc(load_train_config(None, [*BC[:-4], "bc.epochs=2", "bc.batch_size=8", "bc.log_every=1", "bc.lr=1e-3"]),
             demos, run, resume=True, **QUIET)
    frames = [r["frames"] for r in RunDir(run).read_log()]
    assert frames == [16, 32, 40, 48, 56, 64, 72, 80]  # epoch 2 once, the frames never running backwards


def test_a_bc_run_refuses_another_config_with_bcs_advice(demos, tmp_path, capsys):
    run, other = tmp_path / "bc", tmp_path / "other.yaml"
    train_bc(load_train_config(None, BC), demos, run, **QUIET)
    other.write_text(yaml.safe_dump(load_train_config(None, [*BC[:-1], "bc.lr=0.5"]).to_dict()))
    err = one_line(capsys, ["bc", "--data", str(demos), "--config", str(other), "--run-dir", str(run)])
    assert "bc.lr" in err and f"glamrl bc --data {demos}" in err and "bc.epochs=N" in err
    assert "glamrl train" not in err and "ppo.total_frames=N" not in err


def test_the_export_card_of_a_bc_run_says_it_was_cloned(demos, tmp_path):
    from glamrl.export import export_run

    run = tmp_path / "bc"
    train_bc(load_train_config(None, BC), demos, run, **QUIET)
    export_run(run, tmp_path / "export")
    card = (tmp_path / "export" / "README.md").read_text()
    assert "with PPO" not in card and "PPO update" not in card and "Online PPO" not in card
    assert "cloned from demonstrations" in card and "3 optimizer steps of behavioural cloning on 40" in card


def test_demos_of_another_history_length_are_refused(demos, tmp_path):
    with pytest.raises(DemoFileError, match=r"--nbr-obs 1, but the config's prompt.nbr_obs is 3"):
        read_demos(demos, ACTION_NAMES, nbr_obs=3)
    assert len(read_demos(demos, ACTION_NAMES, nbr_obs=1)) == 40


# ------------------------------------------------------------------ 6. --overwrite leaves nothing of the old run
def test_overwrite_removes_the_old_runs_results(tmp_path):
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.write_config(load_train_config(None, TINY))
    (run.path / "eval.json").write_text(json.dumps({"success_rate": 1.0}))
    (run.path / "suite").mkdir()
    (run.path / "suite" / "paper.json").write_text(json.dumps({"tests": {}}))
    (run.path / "notes.txt").write_text("mine")
    run.clear()
    assert sorted(p.name for p in run.path.rglob("*")) == ["notes.txt", "suite"]


def test_an_evaluation_of_another_agent_or_level_is_not_adopted(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text(f"out: {tmp_path / 'out'}\nenv: BabyAI-GoToRedBall-v0\nruns:\n  base:\n    agent: random\n")
    (tmp_path / "out" / "base-seed1").mkdir(parents=True)
    (tmp_path / "out" / "base-seed1" / "eval.json").write_text(json.dumps(
        {"agent": "bot", "env": "BabyAI-GoToLocal-v0", "success_rate": 1.0}))
    assert main(["experiment", str(path), "--task", "0"]) == 2
    line = next(line for line in capsys.readouterr().out.splitlines() if "base-seed1" in line)
    assert "mismatch" in line and "agent 'bot', not 'random'" in line and "BabyAI-GoToLocal-v0" in line
