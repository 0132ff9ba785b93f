"""model.compile=auto: compiled blocks for models large enough where inductor works and a block of theirs runs
faster compiled, eager elsewhere, said in one line and recorded; true where inductor cannot work stops in one line;
the first update's compile time is said once.
(tests/test_numerics.py checks that compiled blocks compute what eager ones do.)"""

import dataclasses
import re

import pytest
import torch
import yaml
from transformers.modeling_layers import GradientCheckpointingLayer

from benchmarks.gpu_bench import _compiled
from glamrl.cli import main
from glamrl.config import ConfigError, ModelConfig, Resolved, load_train_config
from glamrl.llm import compiled
from glamrl.llm.compiled import CompileError
from glamrl.llm.loading import load_model
from glamrl.llm.recompute import checkpoint_blocks
from glamrl.llm.policy import LLMPolicy
from glamrl.trainers.ppo import train_ppo

TINY = ["env.id=BabyAI-TurnToObject-v0", "env.num_envs=2", "model.name=tiny-llama", "model.device=cpu",
        "ppo.num_steps=4", "ppo.minibatch_size=4", "ppo.epochs=1", "run.tensorboard=false", "run.eval_episodes=0"]
NO_CXX = "no C++ compiler found for inductor"

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def no_cxx(monkeypatch):
    """A machine where inductor's CPU backend finds no C++ compiler."""
    monkeypatch.setattr(compiled, "find_cxx", lambda: None)


@pytest.fixture
def large(monkeypatch):
    """The tiny models count as large enough for auto to compile them, and their blocks time faster compiled (2 ms
    against eager's 3: what `auto` decides from its timing is tested below, the timing itself apart)."""
    monkeypatch.setattr(compiled, "AUTO_MIN_PARAMETERS", 0)
    monkeypatch.setattr(compiled, "time_block", lambda model, device, dtype: (0.002, 0.003))


def test_config_defaults_to_auto_and_checks_the_value():
    assert ModelConfig().compile == "auto"
    assert load_train_config(None, ["model.compile=true"]).model.compile is True
    with pytest.raises(ConfigError, match="model.compile must be auto, true or false, got 'yes'"):
        ModelConfig(compile="yes")


def test_auto_keeps_a_tiny_model_eager_without_probing_inductor(monkeypatch):
    monkeypatch.setattr(compiled, "inductor_problem", lambda device: pytest.fail("probed inductor"))
    policy = LLMPolicy(ModelConfig(name="tiny-llama", device="cpu"))
    assert policy.compiled_blocks is None
    resolved = policy.resolved["model.compile"]
    assert resolved.value == "false"
    assert resolved.why.startswith("auto: ") and "parameters, under 50M" in resolved.why


@pytest.mark.usefixtures("large")
def test_auto_compiles_every_block_of_a_large_enough_model_where_inductor_works():
    assert compiled.inductor_problem(torch.device("cpu")) is None  # this machine has g++
    policy = LLMPolicy(ModelConfig(name="tiny-llama", device="cpu"))
    why = "auto: 0.1M parameters, and one block's passes 2.0 ms compiled against 3.0 ms eager on this CPU"
    assert policy.resolved["model.compile"] == Resolved("true", why)
    blocks = policy.llm.model.layers
    assert policy.compiled_blocks.count == len(blocks) and all(b._compiled_call_impl is not None for b in blocks)


@pytest.mark.usefixtures("large")
def test_auto_compiles_train_layers_on_a_cpu_only_with_several_observations(monkeypatch):
    config = ModelConfig(name="tiny-llama", device="cpu", train_layers=1)
    glam = LLMPolicy(config, observations=3)  # GLAM's 3 observations: compiled, the prefix store off
    assert glam.compiled_blocks is not None and glam.trunk.prefixes is None
    assert glam.resolved["model.compile"].value == "true"
    monkeypatch.setattr(compiled, "inductor_problem", lambda device: pytest.fail("probed inductor"))
    policy = LLMPolicy(config)  # one: eager, with the store
    assert policy.compiled_blocks is None and policy.trunk.prefixes is not None
    assert policy.resolved["model.compile"].why.startswith("auto: model.train_layers=1 on a CPU with one observation")
    monkeypatch.undo()
    forced = LLMPolicy(dataclasses.replace(config, compile=True))
    assert forced.compiled_blocks is not None


@pytest.mark.usefixtures("large")
def test_auto_runs_eagerly_where_the_compiled_block_times_slower_and_says_so_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(compiled, "time_block", lambda model, device, dtype: (0.0316, 0.02))  # 1.58x slower
    said = []
    train_ppo(load_train_config(None, [*TINY, "ppo.total_frames=8"]), tmp_path / "run", progress=False, say=said.append)
    lines = [line for line in said if line.startswith("model.compile")]
    assert lines == ["model.compile: false (auto: 0.1M parameters, but one block's passes 31.6 ms compiled against "
                     "20.0 ms eager on this CPU, so the blocks run eagerly)"]
    assert _compiled(lines) == "no"
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["resolved"]["model.compile"] == "false"


@pytest.mark.usefixtures("large")
@pytest.mark.parametrize(("compiled_s", "eager_s", "compiling"), [
    (0.1088, 0.1089, True), (0.109, 0.1, True), (0.111, 0.1, False)])  # within TRIAL_MARGIN (1.1) of eager: compiled
def test_auto_compiles_unless_the_compiled_block_is_clearly_slower(monkeypatch, compiled_s, eager_s, compiling):
    monkeypatch.setattr(compiled, "time_block", lambda model, device, dtype: (compiled_s, eager_s))
    policy = LLMPolicy(ModelConfig(name="tiny-llama", device="cpu"))
    assert (policy.compiled_blocks is not None) == compiling
    assert policy.resolved["model.compile"].value == str(compiling).lower()


@pytest.mark.parametrize(("name", "dtype", "checkpointed"), [
    ("tiny-llama", torch.float32, False), ("tiny-llama", torch.bfloat16, False), ("tiny-llama", torch.float32, True),
    ("tiny-t5", torch.float32, False), ("tiny-t5", torch.bfloat16, True)])
def test_the_block_timing_runs_a_copy_of_the_model_s_block_both_ways_once_per_process(name, dtype, checkpointed):
    loaded = load_model(ModelConfig(name=name, device="cpu"))
    if checkpointed:  # as the update will run it: the copies recompute in their backward passes
        checkpoint_blocks(loaded.model)
    timed = set(compiled._TIMED)
    before = {key: value.clone() for key, value in loaded.model.state_dict().items()}
    compiled_s, eager_s = compiled.time_block(loaded.model, torch.device("cpu"), dtype)
    assert 0 < compiled_s < 1 and 0 < eager_s < 1  # the fastest of its passes, on a tiny block
    state = loaded.model.state_dict()
    assert state.keys() == before.keys() and all(torch.equal(state[key], before[key]) for key in before)
    assert all(p.grad is None for p in loaded.model.parameters())  # its backward passes ran on a copy
    blocks = [m for m in loaded.model.modules() if isinstance(m, GradientCheckpointingLayer)]
    assert all(block._compiled_call_impl is None for block in blocks)  # the model's blocks stay eager
    assert all(block.gradient_checkpointing == checkpointed for block in blocks)
    assert compiled.time_block(loaded.model, torch.device("cpu"), dtype) == (compiled_s, eager_s)  # timed once
    assert len(set(compiled._TIMED) - timed) <= 1  # one entry per kind of block, checkpointing included


@pytest.mark.usefixtures("large", "no_cxx")
def test_auto_without_a_cxx_compiler_runs_eagerly_and_says_so_in_one_line(tmp_path):
    said = []
    train_ppo(load_train_config(None, [*TINY, "ppo.total_frames=8"]), tmp_path / "run", progress=False, say=said.append)
    lines = [line for line in said if line.startswith("model.compile")]
    assert lines == [f"model.compile: false (auto: {NO_CXX}, so the blocks run eagerly)"]
    assert _compiled(lines) == "no"  # benchmarks/gpu.sh's 'compiled' column
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["resolved"]["model.compile"] == "false"


@pytest.mark.usefixtures("no_cxx")
def test_true_without_a_cxx_compiler_stops_in_one_line_before_the_run_directory(tmp_path, capsys):
    with pytest.raises(CompileError, match=re.escape(f"model.compile=true, but {NO_CXX}: install g++")):
        LLMPolicy(ModelConfig(name="tiny-llama", device="cpu", compile=True))
    run = tmp_path / "run"
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({"env": {"id": "BabyAI-TurnToObject-v0"}}))
    assert main(["train", "--config", str(config), "--run-dir", str(run), "--no-progress", *TINY,
                 "ppo.total_frames=8", "model.compile=true"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"glamrl: error: model.compile=true, but {NO_CXX}")
    assert not run.exists()


def test_compiled_run_says_its_first_update_s_compile_time_once(tmp_path):
    said = []
    train_ppo(load_train_config(None, [*TINY, "ppo.total_frames=16", "model.compile=true"]), tmp_path / "run",
          progress=False, say=said.append)
    lines = [line for line in said if line.startswith("model.compile")]
    assert lines[0] == "model.compile: true (model.compile=true)"
    assert len(lines) == 2 and float(lines[1].split()[1]) > 0  # not again after update 2
    assert lines[1].endswith(" s compiling the 2 blocks' passes, up to the end of update 1 "
                             "(later passes of the same kinds reuse them)")
    assert _compiled(lines) == f"yes, {float(lines[1].split()[1]):.0f} s"  # benchmarks/gpu.sh's 'compiled' column
