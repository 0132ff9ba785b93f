"""model.compute_dtype=auto: bf16 where the hardware has fast bf16 kernels, float32 elsewhere, logged and recorded."""

import warnings

import pytest
import torch
import yaml

from glamrl.config import ConfigError, ModelConfig, load_train_config
from glamrl.run.dir import RunDir
from glamrl.envs.actions import ACTION_NAMES
from glamrl.llm import precision
from glamrl.llm.policy import LLMPolicy
from glamrl.llm.precision import Hardware, auto_compute_dtype, choose_compute_dtype, cpu_flags
from glamrl.trainers.ppo import train_ppo

REAL_FACTS = precision.hardware_facts  # before conftest's no_fast_bf16 replaces it in each test
AVX2 = {"fpu", "sse2", "avx", "avx2", "fma"}  # the AMD EPYC this project's machines often are
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}  # oneDNN "supports" bf16 here, by emulation


@pytest.mark.parametrize(("facts", "expected"), [
    (Hardware("cuda", cuda_bf16=True), torch.bfloat16),                           # Ampere and later
    (Hardware("cuda", cuda_bf16=False), torch.float32),                           # V100, T4: emulated
    (Hardware("cpu", cpu_flags=AVX512 | {"avx512_bf16"}, mkldnn_bf16=True), torch.bfloat16),  # Cooper Lake, Zen 4
    (Hardware("cpu", cpu_flags=AVX512 | {"avx512_bf16", "amx_bf16", "amx_tile"}, mkldnn_bf16=True), torch.bfloat16),
    (Hardware("cpu", cpu_flags=AVX2, mkldnn_bf16=False), torch.float32),
    (Hardware("cpu", cpu_flags=AVX512, mkldnn_bf16=True), torch.float32),          # Skylake-X: no bf16 instructions
    (Hardware("cpu", cpu_flags={"amx_bf16"}, mkldnn_bf16=False), torch.float32),   # a torch build without oneDNN
    (Hardware("cpu"), torch.float32),                                             # no /proc/cpuinfo
], ids=["cuda-bf16", "cuda-old", "avx512-bf16", "amx", "avx2", "avx512", "no-onednn", "unknown"])
def test_auto_picks_bf16_only_where_its_kernels_are_fast(facts, expected):
    dtype, why = auto_compute_dtype(facts)
    assert dtype == expected
    assert why  # said in the log


def test_cpu_flags_come_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: fpu avx2 amx_bf16\n\nprocessor\t: 1\n"
                       "flags\t\t: fpu\n")
    assert cpu_flags(cpuinfo) == {"fpu", "avx2", "amx_bf16"}
    assert cpu_flags(tmp_path / "absent") == frozenset()


@pytest.mark.parametrize(("fast", "settings", "expected"), [
    (True, {}, torch.bfloat16),
    (False, {}, torch.float32),
    (True, {"compute_dtype": "float32"}, torch.float32),
    (False, {"compute_dtype": "bfloat16"}, torch.bfloat16),  # honoured, with a warning
    (False, {"dtype": "bfloat16"}, torch.bfloat16),          # bf16 weights compute in bf16
])
def test_explicit_settings_win_over_auto(monkeypatch, fast, settings, expected):
    flags = {"avx512_bf16"} if fast else AVX2
    monkeypatch.setattr(precision, "hardware_facts", lambda device: Hardware("cpu", cpu_flags=flags, mkldnn_bf16=fast))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dtype, _ = choose_compute_dtype(ModelConfig(name="tiny-llama", device="cpu", **settings), torch.device("cpu"))
    assert dtype == expected
    assert any("emulated" in str(w.message) for w in caught) == (expected == torch.bfloat16 and not fast)


def test_config_accepts_auto_and_reads_null_as_auto():
    assert ModelConfig().compute_dtype == "auto"
    assert load_train_config(None, ["model.compute_dtype=null"]).model.compute_dtype == "auto"
    with pytest.raises(ConfigError, match="model.compute_dtype must be auto, float32 or bfloat16"):
        ModelConfig(compute_dtype="float16")


TINY = ["env.id=BabyAI-TurnToObject-v0", "env.num_envs=2", "model.name=tiny-llama", "model.device=cpu",
        "ppo.num_steps=4", "ppo.minibatch_size=4", "ppo.epochs=1", "run.tensorboard=false"]


@pytest.mark.usefixtures("one_thread")
def test_auto_on_a_cpu_without_fast_bf16_runs_float32_says_so_records_it_and_resumes(tmp_path):
    run, said = tmp_path / "run", []
    train_ppo(load_train_config(None, [*TINY, "ppo.total_frames=8"]), run, progress=False, say=said.append)
    assert "model.compute_dtype: float32 (auto: CPU without amx_bf16 or avx512_bf16)" in said
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["model"]["compute_dtype"] == "auto"  # the setting, as given
    assert saved["resolved"] == {"run.reuse_memory": "true", "run.kernel_cache": "64", "model.compute_dtype": "float32",
                                 "model.compile": "false", "model.gradient_checkpointing": "true",
                                 "model.inference_batching": "bucketed"}
    assert RunDir(run).read_config().model.compute_dtype == "auto"

    result = train_ppo(load_train_config(run / "config.yaml", ["ppo.total_frames=16"]), run, resume=True,
                   progress=False, say=said.append)
    assert result.log_rows == 2


def test_auto_on_this_machine_follows_its_real_facts(monkeypatch):
    monkeypatch.setattr(precision, "hardware_facts", REAL_FACTS)
    expected, why = auto_compute_dtype(REAL_FACTS(torch.device("cpu")))
    print(f"this machine: {expected} ({why})")
    policy = LLMPolicy(ModelConfig(name="tiny-llama", device="cpu"))
    assert policy.compute_dtype == expected
    assert policy.resolved["model.compute_dtype"].value == str(expected).removeprefix("torch.")
    with torch.no_grad():
        out = policy(["Goal of the agent: go to the red ball \n Action 0: "], ACTION_NAMES)
    assert out.log_probs.dtype == torch.float32 and torch.isfinite(out.log_probs).all()
