"""Tests never reach a model hub: everything they load is built locally or shipped in a wheel."""

import os
import subprocess
import sys

import pytest
import torch

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test`: one test process per core (pytest -n auto)
    os.environ["OMP_NUM_THREADS"] = "1"  # so are the glamrl processes the tests start
    torch.set_num_threads(1)


@pytest.fixture
def one_thread():
    """Tiny models run fastest on one thread (and do not fight a second process for the cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def no_fast_bf16(monkeypatch):
    """`model.compute_dtype=auto` picks bf16 on a CPU with AMX or AVX-512 BF16 and float32 elsewhere, but the
    suite's tolerances are float32's: in-process tests see a CPU without fast bf16 kernels (the project's AVX2
    machines) whichever machine runs them. tests/test_precision.py checks the choice on both kinds of facts and
    on this machine's real ones; tests that run glamrl in a subprocess get the real choice."""
    from glamrl.llm import precision

    monkeypatch.setattr(precision, "hardware_facts", lambda device: precision.Hardware(device.type))


@pytest.fixture
def runs_in_process(monkeypatch):
    """`glamrl experiment`'s runs (`python -m glamrl.cli ...` commands) run in this process: one interpreter start
    instead of one per run. The runner's own subprocess path is tested in test_experiment.py."""
    from glamrl import experiment
    from glamrl.cli import main

    real_run = subprocess.run
    glamrl = [sys.executable, "-m", "glamrl.cli"]

    def run(command, *args, **kwargs):
        if list(command[:3]) != glamrl:
            return real_run(command, *args, **kwargs)
        return subprocess.CompletedProcess(command, main(command[3:]))

    monkeypatch.setattr(experiment.subprocess, "run", run)  # the module's, seen by all
