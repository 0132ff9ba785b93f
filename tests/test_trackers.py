"""run.tracker: a real `glamrl train` sends log.csv's stream to W&B (offline) and to trackio (a local store),
read back with each package's own records; no network."""

import json
import math
import os
import subprocess
import sys

import pytest

from glamrl.cli import main
from glamrl.config import ConfigError, load_train_config, load_yaml
from glamrl.run.dir import RunDir
from glamrl.run.metrics import tag

TINY = ("env:\n  id: BabyAI-TurnToObject-v0\n  num_envs: 4\nmodel:\n  name: tiny-llama\n  device: cpu\n"
        "ppo:\n  total_frames: 48\n  num_steps: 4\n  minibatch_size: 16\n  epochs: 1\n")
PROJECT = "glamrl-test"


def train(tmp_path, tracker: str) -> tuple:
    """`glamrl train` of 3 tiny PPO updates with run.tracker=`tracker`, W&B and trackio kept in tmp_path."""
    config, run = tmp_path / "tiny.yaml", tmp_path / "run"
    config.write_text(TINY)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true",
           "TRACKIO_DIR": str(tmp_path / "trackio"), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "glamrl.cli", "train", "--config", str(config), "--run-dir", str(run),
                           "--no-progress", f"run.tracker={tracker}", f"run.tracker_project={PROJECT}"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return run, RunDir(run).read_log()


def expected(rows: list[dict[str, float]]) -> dict[tuple[int, str], float]:
    """{(frames, tag): value}: what a tracker should hold for log.csv's rows (empty cells are not sent)."""
    return {(int(row["frames"]), tag(k)): v for row in rows for k, v in row.items() if not math.isnan(v)}


def wandb_records(run_file) -> list:
    """The records of a .wandb file, parsed by W&B's protobuf `Record` out of the LevelDB-log framing it writes
    (a 7-byte file header, 32 KiB blocks, 7-byte chunk headers: crc, length, type)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block, full, last = run_file.read_bytes(), 32 * 1024, 1, 4
    assert data[:4] == b":W&B"
    records, pos, payload = [], 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        payload += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (full, last):
            record = pb.Record()
            record.ParseFromString(payload)
            records.append(record)
            payload = b""
    return records


def test_wandb_offline_run_holds_log_csv_scalars_config_and_curves(tmp_path):
    run, rows = train(tmp_path, "wandb")
    (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    records = wandb_records(run_file)
    history = {(r.history.step.num, ".".join(i.nested_key) or i.key): json.loads(i.value_json)
               for r in records if r.WhichOneof("record_type") == "history" for i in r.history.item}
    scalars = {key: v for key, v in history.items() if not key[1].startswith(("_", "curves"))}  # W&B's own: _step
    assert scalars == expected(rows) and len(rows) == 3  # the same numbers, to the last digit
    assert history[int(rows[-1]["frames"]), "curves._type"] == "image-file"  # the run's curves.png, at the end
    (header,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    config = {u.key: json.loads(u.value_json) for u in header.config.update if u.key != "_wandb"}
    assert header.display_name == "run" and config == load_yaml(run / "config.yaml")  # `resolved` included
    assert config["run"]["tracker"] == "wandb" and "resolved" in config


def test_trackio_local_run_holds_log_csv_scalars_config_and_curves(tmp_path, monkeypatch):
    run, rows = train(tmp_path, "trackio")
    from trackio import sqlite_storage  # its store's folder is read when trackio is imported: point it here

    monkeypatch.setattr(sqlite_storage, "TRACKIO_DIR", tmp_path / "trackio")
    logs = sqlite_storage.SQLiteStorage.get_logs(PROJECT, "run")
    scalars = {(e["step"], k): v for e in logs for k, v in e.items() if k not in ("step", "timestamp", "curves")}
    assert scalars == expected(rows) and len(rows) == 3  # the same numbers, to the last digit
    (image,) = [e["curves"] for e in logs if "curves" in e]
    assert image["_type"] == "trackio.image" and (tmp_path / "trackio" / "media" / image["file_path"]).exists()
    config = {k: v for k, v in sqlite_storage.SQLiteStorage.get_run_config(PROJECT, "run").items()
              if not k.startswith("_")}  # trackio's own: _Created, _Group
    assert config == load_yaml(run / "config.yaml") and config["run"]["tracker"] == "trackio"


def test_a_tracker_not_installed_is_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now fails as if it were not installed
    (tmp_path / "tiny.yaml").write_text(TINY)
    assert main(["train", "--config", str(tmp_path / "tiny.yaml"), "--run-dir", str(tmp_path / "run"),
                 "--no-progress", "run.tracker=wandb"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "pip install 'glamrl[wandb]'" in err
    assert not (tmp_path / "run" / "config.yaml").exists()  # refused before the run was recorded


def test_an_unknown_tracker_is_refused():
    with pytest.raises(ConfigError, match="run.tracker must be one of none, wandb, trackio, got 'mlflow'"):
        load_train_config(None, ["run.tracker=mlflow"])
