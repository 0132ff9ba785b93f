"""Action-probability probes: pi(a | probe) logged at every update of a run, cut on resume, plotted."""

import csv
from collections import defaultdict

import pytest
import torch

from glamrl.cli import main
from glamrl.config import load_train_config
from glamrl.envs.actions import ACTION_NAMES
from glamrl.eval.probes import ProbeError, load_probes
from glamrl.trainers.ppo import train_ppo

PROBES = "configs/probes/turn_to_object.yaml"
TINY = ["env.id=BabyAI-TurnToObject-v0", "env.num_envs=2", "model.name=tiny-llama", "model.device=cpu",
        "ppo.num_steps=4", "ppo.minibatch_size=8", "ppo.epochs=1", "ppo.lr=1e-2", "run.tensorboard=false",
        f"run.probes={PROBES}"]


def read_rows(run):
    with open(run / "probes.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_shipped_probe_files_build_glam_prompts():
    for path in (PROBES, "configs/probes/glam.yaml"):
        probes = load_probes(path, ACTION_NAMES)
        assert len(probes) >= 4
        for p in probes:
            assert p.prompt.startswith("Possible action of the agent: turn left") and p.prompt.endswith("Action 0: ")
    assert "You see a red ball 1 step left, " in load_probes(PROBES, ACTION_NAMES)[0].prompt


def test_probe_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just a string\n")
    with pytest.raises(ProbeError, match="probe 0 of .*bad.yaml"):
        load_probes(bad, ACTION_NAMES)
    with pytest.raises(ProbeError, match="not found"):
        load_probes(tmp_path / "none.yaml", ACTION_NAMES)


@pytest.mark.parametrize("text, error", [
    ("- name: a\n  prompt: x\n  prompt: y\n", r"^probe file .*bad.yaml: key 'prompt' is given twice"),
    ("- name: a\n  promt: x\n", r"^probe 0 of .*bad.yaml: unknown config key 'promt'; known keys: mission, name"),
    ("- prompt: x\n- name: 3\n  prompt: y\n", r"^probe 1 of .*bad.yaml: name must be str, got 3"),
    ("- mission: go\n  observation: You see a wall\n", r"^probe 0 of .*bad.yaml: observation must be a list"),
    ("- mission: go\n", r"^probe 0 of .*bad.yaml needs 'prompt' \(a string\) or 'mission' and 'observation'"),
    ("- prompt: x\n  mission: go\n  observation: [You see a wall]\n", r"needs .*, not both$"),
])
def test_probe_files_are_read_as_strictly_as_train_configs(tmp_path, text, error):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ProbeError, match=error) as raised:
        load_probes(bad, ACTION_NAMES)
    assert "\n" not in str(raised.value)  # one line


def test_run_logs_probes_every_update_and_resume_cuts_them(tmp_path):
    torch.set_num_threads(1)
    run = tmp_path / "run"
    train_ppo(load_train_config(None, [*TINY, "ppo.total_frames=16"]), run, progress=False, say=lambda _: None)
    rows = read_rows(run)
    assert sorted({int(r["update"]) for r in rows}) == [0, 1, 2]
    probs = defaultdict(float)
    for r in rows:
        probs[r["update"], r["probe"]] += float(r["prob"])
    assert len(probs) == 3 * 4 and all(abs(p - 1) < 1e-4 for p in probs.values())  # a distribution per probe
    first = [float(r["prob"]) for r in rows if r["update"] == "0"]
    last = [float(r["prob"]) for r in rows if r["update"] == "2"]
    assert first != last  # the policy the probes read is the one being trained

    csv_path = run / "probes.csv"
    csv_path.write_text(csv_path.read_text() + "3,24,ghost,turn left,1.0\n")  # a row of an update killed midway
    train_ppo(load_train_config(None, [*TINY, "ppo.total_frames=32"]), run, resume=True, progress=False,
          say=lambda _: None)
    updates = [int(r["update"]) for r in read_rows(run)]
    assert sorted(set(updates)) == [0, 1, 2, 3, 4] and updates.count(3) == 4 * len(ACTION_NAMES)

    assert main(["plot", str(run), "--probes", "--out", str(tmp_path / "probes.png")]) == 0
    assert (tmp_path / "probes.png").stat().st_size > 5000
