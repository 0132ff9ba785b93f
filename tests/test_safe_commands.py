"""The commands beside `train` (export, bc, demos, results, play, plot, eval --out) held to its standard:
bad input is one line before any work, a refused write loses nothing and leaves no partial file, and a
run directory's own files are never an output. Each test is one class of defect: one line, exit 2, nothing lost."""

import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from glamrl.run.dir import RunDir
from glamrl.cli import main
from glamrl.config import ConfigError, load_train_config
from glamrl.trainers.ppo import train_ppo
from glamrl.trainers.drrn import train_drrn
from test_safe_runs import NO_MODEL, TINY, assert_one_line, run_cli, snapshot, tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")

TURN = "BabyAI-TurnToObject-v0"
BC = [f"env.id={TURN}", "env.num_envs=2", "prompt.nbr_obs=1", "model.name=tiny-llama", "model.device=cpu",
      "run.tensorboard=false", "bc.batch_size=8", "bc.log_every=1", "bc.epochs=1"]
SYMBOLIC = ["agent.kind=symbolic", f"env.id={TURN}", "env.num_envs=2", "ppo.num_steps=20", "ppo.minibatch_size=40",
            "ppo.epochs=1", "ppo.total_frames=40", "symbolic.image_dim=8", "symbolic.instr_dim=8",
            "symbolic.memory_dim=8", "run.tensorboard=false"]
DRRN = ["agent.kind=drrn", f"env.id={TURN}", "env.num_envs=2", "drrn.embedding_dim=8", "drrn.hidden_size=8",
        "drrn.batch_size=8", "drrn.replay_size=64", "drrn.learning_starts=8", "drrn.log_every=16",
        "drrn.total_frames=32", "run.tensorboard=false"]


def bc_config(tmp_path: Path) -> Path:
    """`tiny_config` without its ppo section, which behavioural cloning does not read (and so refuses)."""
    path, sections = tmp_path / "bc.yaml", yaml.safe_load(tiny_config(tmp_path).read_text())
    path.write_text(yaml.safe_dump({name: fields for name, fields in sections.items() if name != "ppo"}))
    return path


LIMIT = 4096  # bytes: `ulimit -f` for the write-failure tests; every output below is larger, config.yaml smaller


def checksums(root: Path) -> dict[str, str]:
    """sha256 of every file under `root` (the run's .lock aside), by relative path."""
    return {k: hashlib.sha256(v).hexdigest() for k, v in snapshot(root).items()}


def glamrl(*args: str, max_file_bytes: int | None = None) -> subprocess.CompletedProcess:
    """`glamrl ARGS` in a fresh process, optionally under a file-size limit (as `ulimit -f` sets it)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so that a write past the limit fails with EFBIG

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "glamrl.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env, preexec_fn=limit if max_file_bytes else None)


def assert_one_error(done: subprocess.CompletedProcess, *fragments: str) -> str:
    """Exit 2, no traceback, and one `glamrl: error:` line, the last (progress bars may come before it)."""
    err = done.stderr
    assert done.returncode == 2 and "Traceback" not in err, err
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    assert err.count("glamrl: error: ") == 1 and lines[-1].startswith("glamrl: error: "), err
    for fragment in fragments:
        assert fragment in lines[-1], err
    return lines[-1]


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(".*tmp-*"))


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A one-update tiny PPO run (the config of `tiny_config`, ppo.total_frames=8); copy it before changing it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("trained") / "run"
    train_ppo(load_train_config(None, [*TINY, "ppo.total_frames=8"]), run, progress=False, say=lambda _: None)
    torch.set_num_threads(threads)
    return run


@pytest.fixture(scope="module")
def demos(tmp_path_factory) -> Path:
    """16 bot demonstrations of TurnToObject, one observation per prompt, English action names."""
    out = tmp_path_factory.mktemp("demos") / "bot.jsonl"
    assert main(["demos", "--agent", "bot", "--env", TURN, "--episodes", "16", "--num-envs", "2", "--nbr-obs", "1",
                 "--out", str(out)]) == 0
    return out


def copy_run(run: Path, tmp_path: Path, name: str = "run") -> Path:
    return Path(shutil.copytree(run, tmp_path / name))


def suite_file(path: Path, agent: str = "bot", episodes: int = 10, complete: bool = True, **tests: float) -> Path:
    results = {name: {"success_rate": s, "mean_return": s / 2, "success_ci": [max(0, s - 0.1), min(1, s + 0.1)],
                      "episodes": episodes} for name, s in (tests or {"no_change": 1.0}).items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"suite": "paper", "agent": agent, "complete": complete, "tests": results}))
    return path


# ------------------------------------------------------------------ one output-path check, before any work
@pytest.mark.parametrize(("command", "message"), [
    (["play", "--agent", "bot", "--env", TURN, "--out", "ep.xyz"], "ending in .gif"),
    (["play", "--agent", "bot", "--env", TURN, "--out", "ep_noext"], "ending in .gif"),
    (["play", "--agent", "bot", "--env", TURN, "--format", "png-sheet", "--out", "ep.gif"], "ending in .png"),
    (["play", "--agent", "bot", "--env", TURN, "--out", "/sys/x.gif"], "not writable"),
    (["demos", "--agent", "bot", "--env", TURN, "--episodes", "2", "--out", "a_file/d.jsonl"], "is a file"),
    (["eval", "--agent", "bot", "--env", TURN, "--episodes", "2", "--out", "a_file/e.json"], "is a file"),
    (["eval", "--agent", "bot", "--env", TURN, "--episodes", "2", "--out", "e.csv"], "ending in .json"),
    (["eval", "--suite", "paper", "--agent", "bot", "--episodes", "2", "--out", "."], "is a directory"),
    (["plot", "RUN", "--out", "x.txt"], "ending in .png"),
    (["results", "SUITE", "--out", "a_file"], "is a file"),
    (["export", "--run", "RUN", "--out", "."], "current directory"),
    (["export", "--run", "RUN", "--out", "a_file"], "is a file"),
])
def test_a_bad_out_is_one_line_before_any_work(trained, tmp_path, monkeypatch, capsys, command, message):
    monkeypatch.chdir(tmp_path)
    Path("a_file").write_text("keep")
    suite = suite_file(tmp_path / "suites" / "bot.json")
    before = checksums(tmp_path)
    args = [str(trained) if a == "RUN" else str(suite) if a == "SUITE" else a for a in command]
    code, err = run_cli(capsys, *args)
    assert_one_line(code, err, message)
    assert capsys.readouterr().out == ""  # no episode ran, nothing was drawn
    assert checksums(tmp_path) == before and not temporaries(tmp_path)


# ------------------------------------------------------------------ a run's own files are never an output
def test_outputs_into_a_runs_data_are_refused_and_the_run_resumes(trained, tmp_path, capsys):
    run, cfg = copy_run(trained, tmp_path), tiny_config(tmp_path)
    suite = suite_file(tmp_path / "bot.json")
    before = checksums(tmp_path)
    episodes = ["--agent", "bot", "--env", TURN, "--episodes", "2"]
    for args, message in [
        (["export", "--run", run, "--out", run / "exp"], "lies inside the run directory"),
        (["export", "--run", run, "--out", run / "checkpoints", "--overwrite"], "lies inside the run directory"),
        (["export", "--run", run, "--out", run, "--overwrite"], "is the run directory"),
        (["export", "--run", run, "--out", tmp_path, "--overwrite"], f"holds the run directory {run}"),
        (["eval", *episodes, "--out", run / "checkpoints" / "e.json"], "checkpoints of the run directory"),
        (["eval", "--suite", "paper", *episodes, "--out", run / "config.yaml" / "s.json"], "is a file"),
        (["demos", *episodes, "--out", run / "tb" / "d.jsonl"], "tb of the run directory"),
        (["play", "--agent", "bot", "--env", TURN, "--out", run / "checkpoints" / "e.gif"], "checkpoints of"),
        (["plot", run, "--out", run / "checkpoints" / "c.png"], "checkpoints of the run directory"),
        (["results", suite, "--out", run / "checkpoints"], "checkpoints of the run directory"),
        (["train", "--config", cfg, "--run-dir", run / "checkpoints"], "inside checkpoints"),
    ]:
        assert_one_line(*run_cli(capsys, *map(str, args)), message)
    assert checksums(tmp_path) == before
    assert main(["train", "--run-dir", str(run), "--no-progress", "ppo.total_frames=16"]) == 0
    assert [r["update"] for r in RunDir(run).read_log()] == [1, 2]  # resumed, not restarted
    assert main(["eval", *episodes, "--out", str(run / "eval.json")]) == 0  # beside the run's data is fine



def test_export_overwrite_never_deletes_a_run_inside_the_export(trained, tmp_path, capsys):
    exports = tmp_path / "exports"
    assert main(["export", "--run", str(trained), "--out", str(exports)]) == 0
    capsys.readouterr()
    run = copy_run(trained, exports, "myrun")  # trained into the export folder afterwards
    before = checksums(exports)
    code, err = run_cli(capsys, "export", "--run", str(run), "--out", str(exports), "--overwrite")
    assert_one_line(code, err, f"--out {exports} holds the run directory {run}", "choose a directory")
    assert checksums(exports) == before and RunDir(run).is_run


@pytest.mark.parametrize("suffix", [".png", ".pdf", ".svg"])
def test_plot_replaces_only_a_figure_glamrl_wrote(trained, tmp_path, capsys, suffix):
    mine, figure = tmp_path / f"mine{suffix}", tmp_path / f"curves{suffix}"
    mine.write_text("the user's own figure")
    assert_one_line(*run_cli(capsys, "plot", str(trained), "--out", str(mine)),
                    f"--out {mine} exists and glamrl did not write it", "--overwrite")
    assert mine.read_text() == "the user's own figure"
    for out, flags in [(figure, []), (figure, []), (mine, ["--overwrite"]), (mine, [])]:  # then: its own figure
        assert main(["plot", str(trained), "--out", str(out), *flags]) == 0
    assert mine.read_bytes() != b"the user's own figure"

def test_overwrite_deletes_only_what_a_run_wrote(trained, tmp_path, capsys):
    cfg = tiny_config(tmp_path)
    folder = tmp_path / "precious"
    (folder / "sub").mkdir(parents=True)
    (folder / "precious.txt").write_text("keep me")
    (folder / "sub" / "data.csv").write_text("1,2\n")
    before = checksums(folder)
    code, err = run_cli(capsys, "train", "--config", str(cfg), "--run-dir", str(folder), "--overwrite", NO_MODEL)
    assert_one_line(code, err, "not a glamrl run directory", "nothing was deleted")
    assert checksums(folder) == before and sorted(p.name for p in folder.iterdir()) == ["precious.txt", "sub"]

    # a folder holding a run's files but no run: a new run would overwrite them
    (folder / "log.csv").write_text("mine\n")
    code, err = run_cli(capsys, "train", "--config", str(cfg), "--run-dir", str(folder), NO_MODEL)
    assert_one_line(code, err, "log.csv", "no config.yaml")
    assert (folder / "log.csv").read_text() == "mine\n"

    # a run: its own files go, the user's stay
    run = copy_run(trained, tmp_path)
    (run / "eval.json").write_text("{}")
    (run / "notes").mkdir()
    assert main(["train", "--config", str(cfg), "--run-dir", str(run), "--overwrite", "--no-progress",
                 "ppo.total_frames=8", "ppo.lr=1e-3"]) == 0
    assert (run / "eval.json").read_text() == "{}" and (run / "notes").is_dir()
    assert [r["update"] for r in RunDir(run).read_log()] == [1]
    assert RunDir(run).load_checkpoint().config["ppo"]["lr"] == 1e-3


# ------------------------------------------------------------------ the disk refusing a write
@pytest.mark.parametrize("loop", ["ppo", "bc", "drrn"])
def test_a_checkpoint_write_past_a_file_size_limit_is_one_line_and_keeps_the_checkpoints(
        trained, demos, tmp_path, loop):
    run = tmp_path / "run"
    if loop == "ppo":
        copy_run(trained, tmp_path)
        more = ["train", "--run-dir", run, "ppo.total_frames=16"]
    elif loop == "bc":
        assert main(["bc", "--data", str(demos), "--config", str(bc_config(tmp_path)), "--run-dir", str(run),
                     "--no-progress", *BC]) == 0
        more = ["bc", "--data", demos, "--run-dir", run, "bc.epochs=2"]
    else:
        train_drrn(load_train_config(None, DRRN), run, progress=False, say=lambda _: None)
        more = ["train", "--run-dir", run, "drrn.total_frames=64"]
    saved = checksums(RunDir(run).checkpoints)
    done = glamrl(*more, "--no-progress", max_file_bytes=LIMIT)
    assert_one_error(done, f"cannot write {RunDir(run).last_checkpoint}", "File too large",
                     "previous checkpoints")
    assert checksums(RunDir(run).checkpoints) == saved and not temporaries(run)


def test_outputs_past_a_file_size_limit_are_one_line_and_leave_no_partial_file(trained, demos, tmp_path):
    for args, out in [
        (["play", "--agent", "bot", "--env", TURN, "--out", tmp_path / "ep.gif"], tmp_path / "ep.gif"),
        (["demos", "--agent", "bot", "--env", TURN, "--episodes", "16", "--out", tmp_path / "d.jsonl"],
         tmp_path / "d.jsonl"),
        (["export", "--run", trained, "--out", tmp_path / "exp"], tmp_path / "exp"),
    ]:
        done = glamrl(*args, max_file_bytes=LIMIT)
        assert_one_error(done, f"cannot write {out}", "File too large")
        assert not out.exists() and not temporaries(tmp_path), args[0]


def test_a_killed_exports_temporaries_are_removed_by_the_next_one(trained, tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()  # a writer killed mid-export: its PID is no longer alive
    stale = [tmp_path / f".exp.tmp-{gone.pid}-1", tmp_path / f".exp.old-{gone.pid}-2",
             tmp_path / f".exp.tmp-{os.getpid()}-3"]  # a PID reused: this process began after it (1970)
    for folder in stale:
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"x" * 1000)
    kept = [tmp_path / f".exp.tmp-{os.getpid()}-{time.time_ns()}", tmp_path / f".other.tmp-{gone.pid}-4"]  # alive; not this output's
    for folder in kept:
        folder.mkdir()
    assert main(["export", "--run", str(trained), "--out", str(tmp_path / "exp")]) == 0
    assert not any(p.exists() for p in stale) and all(p.exists() for p in kept)


# ------------------------------------------------------------------ every algorithm's section: one range check
@pytest.mark.parametrize("override", [
    "bc.max_grad_norm=-1", "bc.lr=0", "drrn.max_grad_norm=-1", "drrn.reward_scale=-5", "drrn.lr=-1",
    "drrn.learning_starts=-1", "drrn.gamma=1.5",
])
def test_impossible_values_of_every_section_are_refused_before_any_work(tmp_path, capsys, override):
    for command in (["train", "--config", str(tiny_config(tmp_path))],
                    ["bc", "--data", "missing.jsonl", "--config", str(bc_config(tmp_path))]):
        code, err = run_cli(capsys, *command, "--run-dir", str(tmp_path / "r"), NO_MODEL, override)
        assert_one_line(code, err, override.partition("=")[0])
        assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(("name", "value"), [("max_grad_norm", -1), ("lr", 0), ("reward_scale", -5)])
def test_the_sections_refuse_the_same_values_with_the_same_words(name, value):
    messages = set()
    for section in ("ppo", "drrn", "bc"):
        if name == "reward_scale" and section == "bc":
            continue
        with pytest.raises(ConfigError) as refused:
            load_train_config(None, [f"{section}.{name}={value}"])
        messages.add(str(refused.value).removeprefix(f"{section}."))
    assert messages == {f"{name} must be > 0, got {float(value)}"}


# ------------------------------------------------------------------ results: each file once, equal pools only
def test_results_count_each_file_once_and_refuse_what_cannot_be_pooled(tmp_path, capsys):
    bot = suite_file(tmp_path / "s" / "bot.json")
    for inputs in ([bot, bot], [bot.parent, bot]):
        assert main(["results", *map(str, inputs), "--out", str(tmp_path / "t")]) == 0
        assert "| test | bot (1 seed) |" in (tmp_path / "t" / "results.md").read_text()
    shutil.copy(bot, tmp_path / "copy.json")
    suite_file(tmp_path / "killed.json", complete=False)
    suite_file(tmp_path / "other_size.json", episodes=40, no_change=0.5)
    (tmp_path / "empty.json").write_text(json.dumps({"agent": "x", "tests": {}}))
    (tmp_path / "no_rate.json").write_text(json.dumps({"agent": "x", "tests": {"a": {"mean_return": 1}}}))
    (tmp_path / "strings.json").write_text(json.dumps(
        {"agent": "x", "tests": {"a": {"success_rate": "1", "mean_return": 1, "success_ci": [0, 1]}}}))
    for name, message in [("copy.json", "hold the same results"), ("killed.json", "incomplete suite"),
                          ("other_size.json", "ran 10 episodes"), ("empty.json", "holds no test results"),
                          ("no_rate.json", "lacks success_rate"), ("strings.json", "not numbers")]:
        code, err = run_cli(capsys, "results", str(bot), str(tmp_path / name), "--out", str(tmp_path / "u"))
        assert_one_line(code, err, message)
    assert not (tmp_path / "u").exists()

    # a seed that ran fewer tests is marked in the cells it lacks
    suite_file(tmp_path / "two" / "a.json", no_change=1.0, french=0.5)
    suite_file(tmp_path / "two" / "b.json", no_change=0.8)
    assert main(["results", str(tmp_path / "two"), "--out", str(tmp_path / "t2")]) == 0
    assert "| french | 0.500 (1 of 2 seeds) |" in (tmp_path / "t2" / "results.md").read_text()  # one seed: no interval


def test_a_partial_suite_is_not_labelled_complete(tmp_path, capsys):
    out = tmp_path / "partial.json"
    assert main(["eval", "--suite", "paper", "--tests", "no_change", "--agent", "bot", "--episodes", "2",
                 "--num-envs", "1", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["suite"] == "custom" and list(data["tests"]) == ["no_change"]


# ------------------------------------------------------------------ bc: records checked against the config
@pytest.mark.parametrize(("change", "message"), [
    ({"action_index": "0"}, "action_index must be an integer, got '0'"),
    ({"action_index": 1.5}, "action_index must be an integer"),
    ({"action_index": True}, "action_index must be an integer"),
    ({"action_index": 9}, "outside 0..5"),
    ({"prompt": 42}, "prompt must be a string"),
    ({"action": "fly away"}, "action 'fly away'"),
    (b"\xff\xfe{}\n", "not UTF-8"),
    ("french", "tourner"),
])
def test_bc_refuses_records_that_do_not_fit_the_config(demos, tmp_path, capsys, change, message):
    lines = demos.read_text().splitlines()
    data = tmp_path / "bad.jsonl"
    if change == "french":
        assert main(["demos", "--agent", "bot", "--env", TURN, "--episodes", "2", "--language", "fr", "--nbr-obs", "1",
                     "--out", str(data)]) == 0
        capsys.readouterr()
    elif isinstance(change, bytes):
        data.write_bytes(("\n".join(lines[:3]) + "\n").encode() + change)
    else:
        data.write_text("\n".join([*lines[:3], json.dumps({**json.loads(lines[3]), **change})]) + "\n")
    run = tmp_path / "run"
    code, err = run_cli(capsys, "bc", "--data", str(data), "--config", str(bc_config(tmp_path)),
                        "--run-dir", str(run), *BC)
    assert_one_line(code, err, message, "" if change == "french" else "bad.jsonl:4")
    assert not run.exists()  # nothing was written


def test_bc_resumes_only_on_the_data_it_was_cloned_from(demos, tmp_path, capsys):
    cfg, run, other = bc_config(tmp_path), tmp_path / "run", tmp_path / "other.jsonl"
    other.write_text("".join(demos.read_text().splitlines(keepends=True)[1:]))
    assert main(["bc", "--data", str(demos), "--config", str(cfg), "--run-dir", str(run), "--no-progress", *BC]) == 0
    assert RunDir(run).load_checkpoint().extra["data"]["sha256"] == hashlib.sha256(demos.read_bytes()).hexdigest()
    before = checksums(run)
    code, err = run_cli(capsys, "bc", "--data", str(other), "--run-dir", str(run), "bc.epochs=2")
    assert_one_line(code, err, f"was cloned from {demos}", f"agent.init_from={run}")
    assert checksums(run) == before
    # the same data extends the run on purpose (bc.epochs), other data starts a new run from it
    assert main(["bc", "--data", str(demos), "--run-dir", str(run), "--no-progress", "bc.epochs=2"]) == 0
    assert RunDir(run).load_checkpoint().extra["steps"] == 4  # 16 records in batches of 8, two epochs
    assert main(["bc", "--data", str(other), "--config", str(cfg), "--run-dir", str(tmp_path / "more"),
                 "--no-progress", *BC, f"agent.init_from={run}"]) == 0


def test_fsdp_is_refused_by_bc_which_shards_nothing_and_by_train_without_torchrun(demos, tmp_path, capsys):
    fsdp = ["run.sharding=fsdp", "model.batching=padded"]
    bc = ["bc", "--data", str(demos), "--config", str(bc_config(tmp_path)), "--run-dir", str(tmp_path / "r"), *BC]
    train = ["train", "--config", str(tiny_config(tmp_path)), "--run-dir", str(tmp_path / "r")]
    for command, why in ((bc, "the bc loop does not read it"), (train, "torchrun")):
        code, err = run_cli(capsys, *command, *fsdp)
        assert_one_line(code, err, "run.sharding=fsdp", why)
        assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------ starts and resumes
def test_a_start_refused_by_its_probe_file_leaves_nothing(tmp_path, capsys):
    cfg, run = tiny_config(tmp_path), tmp_path / "run"
    code, err = run_cli(capsys, "train", "--config", str(cfg), "--run-dir", str(run), "run.probes=/nope.yaml")
    assert_one_line(code, err, "/nope.yaml")
    assert not run.exists()
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    assert_one_line(*run_cli(capsys, "train", "--config", str(cfg), "--run-dir", str(run), "run.probes=/nope.yaml"))
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]


def test_a_run_started_from_another_resumes_once_that_one_is_gone(trained, tmp_path, capsys):
    cfg, start, run = tiny_config(tmp_path), copy_run(trained, tmp_path, "start"), tmp_path / "run"
    assert main(["train", "--config", str(cfg), "--run-dir", str(run), "--no-progress", "ppo.total_frames=8",
                 f"agent.init_from={start}"]) == 0
    shutil.rmtree(start)
    assert main(["train", "--run-dir", str(run), "--no-progress", "ppo.total_frames=16"]) == 0
    assert [r["update"] for r in RunDir(run).read_log()] == [1, 2]
    code, err = run_cli(capsys, "train", "--config", str(cfg), "--run-dir", str(tmp_path / "new"),
                        f"agent.init_from={start}")
    assert_one_line(code, err, f"agent.init_from={start}", "not a glamrl run directory")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize(("start", "change"), [
    ([*TINY, "ppo.total_frames=8", "model.lora=true", "model.lora_r=4"], "model.lora_r=2"),
    (SYMBOLIC, "symbolic.image_dim=4"),
    (DRRN, "drrn.replay_size=16"),
    (DRRN, "drrn.tokenizer=word"),
], ids=["llm-lora", "symbolic", "drrn", "drrn-tokenizer"])
def test_an_architecture_change_on_resume_or_init_from_is_one_line(tmp_path, capsys, start, change):
    run = tmp_path / "run"
    config = tmp_path / "start.yaml"
    config.write_text(json.dumps(load_train_config(None, start).to_dict()))  # JSON is YAML
    assert main(["train", "--config", str(config), "--run-dir", str(run), "--no-progress"]) == 0
    before = checksums(run)
    field = change.partition("=")[0]
    code, err = run_cli(capsys, "train", "--run-dir", str(run), "--no-progress", change)
    assert_one_line(code, err, f"{run} holds a run with another config", field)  # before any checkpoint is read
    assert checksums(run) == before  # config.yaml too: the refused override is not recorded
    if field != "drrn.replay_size":  # the replay memory is not part of the weights a new run starts from
        code, err = run_cli(capsys, "train", "--config", str(config), "--run-dir", str(tmp_path / "new"),
                            f"agent.init_from={run}", change)
        assert_one_line(code, err, f"agent.init_from={run}", field)
        assert not (tmp_path / "new").exists()


# ------------------------------------------------------------------ damaged inputs: one line
def test_damaged_inputs_are_one_line(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    log = (run / "log.csv").read_text().splitlines()
    (run / "log.csv").write_text("\n".join([log[0], log[1].replace(log[1].split(",")[3], "abc", 1)]) + "\n")
    assert_one_line(*run_cli(capsys, "plot", str(run), "--out", str(tmp_path / "c.png")), "log.csv:2", "not a number")
    (run / "config.yaml").write_text("env: [unclosed\n")
    assert_one_line(*run_cli(capsys, "plot", str(run), "--out", str(tmp_path / "c.png")), "not valid YAML")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    code, err = run_cli(capsys, "eval", "--agent", "llm", "--model", str(model), "--env", TURN, "--episodes", "1")
    assert_one_line(code, err, "no tokenizer")
    assert not (tmp_path / "c.png").exists()



@pytest.mark.parametrize(("damage", "message"), [
    (lambda rows: [rows[0], rows[1].replace(rows[1].split(",")[0], "x1", 1), *rows[2:]], "log.csv:2: column 'update'"),
    (lambda rows: [rows[0], rows[1] + ",7", *rows[2:]], "log.csv:2 has another number of cells"),
    (lambda rows: [rows[0], rows[1].encode()[:-3].decode() + "\udcff", *rows[2:]], "log.csv:2 is not UTF-8"),
])
def test_a_damaged_log_is_one_line_on_resume_and_kept(trained, tmp_path, capsys, damage, message):
    run = copy_run(trained, tmp_path)
    rows = (run / "log.csv").read_text().splitlines()
    (run / "log.csv").write_bytes(("\n".join(damage(rows)) + "\n").encode("utf-8", "surrogateescape"))
    before = checksums(run)
    code, err = run_cli(capsys, "train", "--run-dir", str(run), "--no-progress", "ppo.total_frames=16")
    assert_one_line(code, err, message)
    assert checksums(run) == before  # config.yaml and its history too: the resume stopped before rewriting them


def test_a_row_torn_by_a_kill_is_skipped_by_readers_and_resume(trained, tmp_path, capsys):
    run = copy_run(trained, tmp_path)
    with open(run / "log.csv", "a") as f:
        f.write("2,4,16,1")  # the last row, cut short: no line end
    assert [r["update"] for r in RunDir(run).read_log()] == [1]
    assert main(["plot", str(run), "--out", str(tmp_path / "c.png")]) == 0
    assert main(["train", "--run-dir", str(run), "--no-progress", "ppo.total_frames=16"]) == 0
    assert [r["update"] for r in RunDir(run).read_log()] == [1, 2]

# ------------------------------------------------------------------ two ranks
def test_a_config_error_that_only_rank_0_sees_is_reported_by_rank_0(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("env: [unclosed\n")  # only rank 0 reads the run directory
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "-m", "glamrl.cli", "train", "--run-dir", str(run)],
                          capture_output=True, text=True, timeout=300, env=env)
    output = done.stdout + done.stderr
    assert done.returncode != 0 and output.count("glamrl: error: ") == 1, output
    assert "not valid YAML" in output and "terminate called" not in output and "SIGABRT" not in output
    root_cause = output.split("Root Cause")[1]
    assert "rank      : 0" in root_cause and "exitcode  : 2" in root_cause, output
