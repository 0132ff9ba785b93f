"""`glamrl experiment`: runs trained in their own directories, skipped when finished, resumed when not,
a report of curves and times to the target, and a SLURM array of the same runs."""

import hashlib
import subprocess
import sys

import pytest

from glamrl.cli import main
from glamrl.run.log import read_log

TINY = """run:
  tensorboard: false
  eval_episodes: 0
env:
  id: BabyAI-TurnToObject-v0
  num_envs: 4
model:
  name: tiny-llama
  device: cpu
prompt:
  nbr_obs: 1
ppo:
  num_steps: 8
  minibatch_size: 16
  epochs: 2
  lr: 1.0e-3
  norm_adv: true
"""


def write_experiment(tmp_path, frames):
    (tmp_path / "tiny.yaml").write_text(TINY)
    path = tmp_path / "exp.yaml"
    path.write_text(f"""out: {tmp_path / 'out'}
frames: {frames}
target: 0.5
runs:
  tiny:
    config: {tmp_path / 'tiny.yaml'}
    seeds: [1, 2]
  tiny-lora:
    config: {tmp_path / 'tiny.yaml'}
    overrides: [model.lora=true, model.lora_r=2]
  random:
    agent: random
    episodes: 20
""")
    return path


@pytest.mark.parametrize("path", ["configs/experiments/cpu_paper.yaml", "configs/experiments/cpu_goto_local.yaml"])
def test_shipped_experiments_load(path):
    from glamrl.eval.experiment import load_experiment

    experiment = load_experiment(path)  # every run's config is built and checked
    assert experiment.tasks and all(spec.agent or spec.config for spec, _ in experiment.tasks)


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_experiment_trains_skips_resumes_and_reports(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    exp = write_experiment(tmp_path, frames=64)
    assert main(["experiment", str(exp)]) == 0
    out = tmp_path / "out"
    for name in ("tiny-seed1", "tiny-seed2", "tiny-lora-seed1"):
        assert read_log(out / name)[-1]["frames"] == 64
    assert (out / "random-seed1" / "eval.json").exists()
    report = (out / "report.md").read_text()
    assert "| tiny | 2 |" in report and "| tiny-lora | 1 |" in report and "random (evaluated)" in report
    assert report.startswith("IQM over seeds (of fewer than 4 seeds: their mean) [95% interval: rliable's")
    lora = next(line for line in report.splitlines() if line.startswith("| tiny-lora |")).split(" | ")
    assert lora[4] == "64"  # frames trained, whether or not it reached the target; one seed: no interval
    tiny = next(line for line in report.splitlines() if line.startswith("| tiny |")).split(" | ")
    assert tiny[4] == "64 [64, 64]"  # two seeds: rliable's interval over them
    random = [c.strip() for c in next(line for line in report.splitlines() if "random (evaluated)" in line).split("|")]
    success, low, high = map(float, random[7].replace("[", "").replace("]", "").replace(",", "").split())
    assert random[2] == "1" and 0 <= low <= success <= high <= 1  # one seed: over its 20 episodes
    assert main(["experiment", str(exp), "--report", "--aggregate", "mean"]) == 0
    assert (out / "report.md").read_text().startswith("Mean over seeds [95% interval")
    assert (out / "success_frames.png").stat().st_size > 0 and (out / "success_minutes.png").stat().st_size > 0
    capsys.readouterr()

    # a rerun skips every finished run and leaves its files alone
    logs = {name: digest(out / name / "log.csv") for name in ("tiny-seed1", "tiny-seed2", "tiny-lora-seed1")}
    assert main(["experiment", str(exp)]) == 0
    assert capsys.readouterr().out.count("finished, skipped") == 4
    assert logs == {name: digest(out / name / "log.csv") for name in logs}

    # more frames: every run resumes where it stopped
    exp = write_experiment(tmp_path, frames=96)
    assert main(["experiment", str(exp), "--task", "1"]) == 0  # one run only, as a SLURM array task does
    assert [r["update"] for r in read_log(out / "tiny-seed2")] == [1, 2, 3]
    assert read_log(out / "tiny-seed1")[-1]["frames"] == 64


def test_sbatch_array_has_one_task_per_run(tmp_path, capsys):
    exp = write_experiment(tmp_path, frames=64)
    script = tmp_path / "exp.sbatch"
    assert main(["experiment", str(exp), "--sbatch", str(script), "--time", "02:00:00", "--cpus", "4"]) == 0
    text = script.read_text()
    assert "#SBATCH --array=0-3\n" in text and "#SBATCH --time=02:00:00" in text and "--cpus-per-task=4" in text
    assert f'-m glamrl.cli experiment {exp} --task "$SLURM_ARRAY_TASK_ID"' in text
    assert "#   1: tiny-seed2" in text and "#   3: random-seed1" in text
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0  # valid bash
    assert not (tmp_path / "out").exists()  # nothing trained


@pytest.mark.parametrize(("edit", "message"), [
    ("frames: 64", "unknown key(s) ['colour']"),
    ("frames: -3", "frames must be a positive number"),
    ("    seeds: [1, 2]", "seeds must be a non-empty list"),
    ("tiny.yaml'}\n    seeds", "config file"),
    ("    episodes: 20", "episodes must be an integer"),
])
def test_bad_experiment_files_are_one_line_before_any_run(tmp_path, capsys, edit, message):
    text = write_experiment(tmp_path, frames=64).read_text()
    bad = {"frames: 64": "frames: 64\ncolour: red", "frames: -3": None, "    seeds: [1, 2]": "    seeds: []",
           "tiny.yaml'}\n    seeds": None, "    episodes: 20": "    episodes: many"}[edit]
    if edit == "frames: -3":
        text = text.replace("frames: 64", "frames: -3")
    elif edit == "tiny.yaml'}\n    seeds":
        text = text.replace(f"{tmp_path / 'tiny.yaml'}\n    seeds", f"{tmp_path / 'nope.yaml'}\n    seeds")
    else:
        text = text.replace(edit, bad)
    (tmp_path / "exp.yaml").write_text(text)
    assert main(["experiment", str(tmp_path / "exp.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "out").exists()
