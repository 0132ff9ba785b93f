"""PPO training end to end on tiny random models: learning, checkpoints, resume after kill -9."""

import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from glamrl.config import ModelConfig, load_train_config
from glamrl.envs.actions import ACTION_NAMES
from glamrl.run.dir import RunDir
from glamrl.run.metrics import LOG_METRICS
from glamrl.trainers.ppo import TrainingDiverged, train_ppo

TINY = [
    "env.id=BabyAI-TurnToObject-v0", "env.num_envs=8", "env.seed=3",
    "model.name=tiny-llama", "model.device=cpu",
    "ppo.num_steps=8", "ppo.minibatch_size=32", "ppo.epochs=4", "ppo.lr=1e-3",
    "ppo.gae_lambda=0.95", "ppo.norm_adv=true", "ppo.max_grad_norm=1.0", "model.normalize_by_length=true",
    "run.tensorboard=false",
]


pytestmark = pytest.mark.usefixtures("one_thread")


# float32 on every CPU (auto picks bf16 on AVX-512 BF16 and AMX, so the trajectories would differ by machine);
# float32 kernels still round differently on different CPUs, so a seed is chosen that learned on several.
# train_layers=1 (top block of 2, final norm, LM head, value head; embeddings and block 0 frozen and cached), in
# float32 on a 2-core AVX2 AMD EPYC (2026-12-02): seeds 2, 3, 4, 5 reached 1.0, 0.995, 1.0, 1.0; seed 1 0.855
# (in bf16 on AVX-512 BF16 it had reached 1.0); seed 2 still passes under env.seeding=spread, and on a 2-core
# Intel Xeon with AMX (2026-12-06). Full fine-tuning, 60 updates, on the AMD (env.seeding=offset): seeds 1, 3, 5
# reached >= 0.97, seeds 2 and 4 >= 0.99 by 40 updates. On the Intel Xeon (2026-12-06) seed 3 (offset) ended at
# 0.525 and seed 4 at 0.995 (offset) and 0.570 (spread, after 0.98 training success at update 20); seed 2
# (spread) at 1.000, its training episodes at 0.98 by update 20, the fastest there as on the AMD.
@pytest.mark.parametrize("extra", [["model.compute_dtype=float32", "env.seed=2"],
                                   ["model.compute_dtype=float32", "model.train_layers=1", "env.seed=2"]],
                         ids=["full", "train_layers"])
def test_ppo_learns_to_turn_towards_the_object_named_in_the_text(tmp_path, extra):
    given = {o.partition("=")[0] for o in extra}
    base = [o for o in TINY if o.partition("=")[0] not in given]
    cfg = load_train_config(None, [*base, "ppo.total_frames=3840", "run.eval_episodes=200", *extra])
    result = train_ppo(cfg, tmp_path / "run", progress=False, say=lambda _: None)
    print(f"success {result.success_before:.2f} -> {result.success_after:.2f}")
    assert result.success_before < 0.6  # only one of six actions succeeds
    assert result.success_after >= 0.9
    rows = RunDir(tmp_path / "run").read_log()
    assert [r["update"] for r in rows] == list(range(1, 61))
    assert rows[-1]["frames"] == 3840


def test_checkpoint_holds_trained_weights_and_resume_continues(tmp_path):
    run = tmp_path / "run"
    cfg = load_train_config(None, [*TINY, "ppo.total_frames=128"])
    train_ppo(cfg, run, progress=False, say=lambda _: None)
    state = RunDir(run).load_checkpoint().to_dict()
    assert (state["log_rows"], state["frames"]) == (2, 128)
    assert set(state) == {"trainer", "log_rows", "frames", "episodes", "duration", "policy", "optimizer", "rng",
                          "config"}  # the keys PPO's checkpoints have always had (ppo.value_norm adds value_norm)
    from glamrl.llm.policy import LLMPolicy

    fresh = LLMPolicy(cfg.model).trainable_state_dict()
    assert any(not torch.equal(fresh[k], v) for k, v in state["policy"].items())  # training changed weights

    longer = load_train_config(None, [*TINY, "ppo.total_frames=256"])
    result = train_ppo(longer, run, resume=True, progress=False, say=lambda _: None)
    assert result.log_rows == 4
    assert [r["update"] for r in RunDir(run).read_log()] == [1, 2, 3, 4]


def test_every_column_ppo_logs_reaches_log_csv_and_is_documented(tmp_path):
    train_ppo(load_train_config(None, [*TINY, "ppo.total_frames=128", "ppo.value_norm=true"]), tmp_path / "run",
              progress=False, say=lambda _: None)
    rows = RunDir(tmp_path / "run").read_log()
    assert rows[-1]["value_std"] > 0 and math.isfinite(rows[-1]["value_mean"])  # ppo.value_norm's statistics
    assert set(rows[0]) <= set(LOG_METRICS) and (tmp_path / "run" / "curves.png").exists()


def test_frozen_trunk_run_saves_only_the_top_and_resumes(tmp_path):
    run = tmp_path / "run"
    train_ppo(load_train_config(None, [*TINY, "ppo.total_frames=64", "model.train_layers=1"]), run,
          progress=False, say=lambda _: None)
    saved = RunDir(run).load_checkpoint().policy
    assert saved and all(k.startswith("value_head") or ".layers.1." in k or k.startswith(("llm.model.norm", "llm.lm_head"))
                         for k in saved), sorted(saved)
    result = train_ppo(load_train_config(None, [*TINY, "ppo.total_frames=128", "model.train_layers=1"]), run,
                   resume=True, progress=False, say=lambda _: None)
    assert result.log_rows == 2 and [r["update"] for r in RunDir(run).read_log()] == [1, 2]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the 1e40 reward overflows float32 on purpose
def test_non_finite_loss_stops_with_a_clear_error_and_keeps_the_checkpoint(tmp_path):
    run = tmp_path / "run"
    train_ppo(load_train_config(None, [*TINY, "ppo.total_frames=64"]), run, progress=False, say=lambda _: None)
    before = RunDir(run).load_checkpoint().to_dict()
    bad = load_train_config(None, [*TINY, "ppo.total_frames=128", "ppo.reward_scale=1e40"])  # inf in float32
    with pytest.raises(TrainingDiverged, match="non-finite PPO loss at update 2"):
        train_ppo(bad, run, resume=True, progress=False, say=lambda _: None)
    after = RunDir(run).load_checkpoint().to_dict()
    assert after["log_rows"] == before["log_rows"] == 1


def test_a_divergence_is_caught_in_the_weights_or_in_the_outputs():
    # a finite loss can still step the weights to where the outputs overflow: the check after each update, before
    # it is logged or saved, looks at both
    from glamrl.llm.policy import LLMPolicy
    from glamrl.rl.buffer import Batch
    from glamrl.trainers.ppo import diverged

    policy = LLMPolicy(ModelConfig(name="tiny-llama", device="cpu"))
    params = [w for w in policy.parameters() if w.requires_grad]
    prompts = ["Goal of the agent: go to the red ball \\n Observation 0: You see a wall 2 steps forward, \\n Action 0: "]
    batch = Batch(prompts, *(torch.zeros(1) for _ in range(6)))
    assert not diverged(policy, batch, ACTION_NAMES, params)
    with torch.no_grad():
        policy.value_head.mlp[-1].weight.fill_(1e38)  # finite weights, V overflows to inf
    assert diverged(policy, batch, ACTION_NAMES, params)
    with torch.no_grad():
        policy.value_head.mlp[-1].weight.fill_(0.0)
        params[0].view(-1)[0] = float("nan")
    assert diverged(policy, batch, ACTION_NAMES, params)


def test_resume_after_sigkill_has_no_duplicate_or_missing_rows(tmp_path):
    run = tmp_path / "run"
    args = [sys.executable, "-m", "glamrl.cli", "train", "--run-dir", str(run), "--no-progress"]
    overrides = [*TINY, "ppo.total_frames=1600"]  # 25 updates
    cfg_file = tmp_path / "tiny.yaml"
    cfg_file.write_text("run:\n  tensorboard: false\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([*args, "--config", str(cfg_file), *overrides],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    log = run / "log.csv"
    deadline = time.time() + 120
    while time.time() < deadline:
        if log.exists() and len(log.read_text().splitlines()) >= 4:  # header + 3 updates
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = RunDir(run).load_checkpoint().progress.log_rows
    assert killed_at >= 2

    done = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert f"resuming {run} after update {killed_at}" in done.stdout
    rows = RunDir(run).read_log()
    assert [r["update"] for r in rows] == list(range(1, 26))
    assert [r["frames"] for r in rows] == [64 * u for u in range(1, 26)]
    assert RunDir(run).load_checkpoint().progress.log_rows == 25


def test_npae_action_heads_train_through_the_same_loop(tmp_path):
    cfg = load_train_config(None, [*TINY, "ppo.total_frames=64", "model.pretrained=false", "model.use_action_heads=true"])
    result = train_ppo(cfg, tmp_path / "run", progress=False, say=lambda _: None)
    state = RunDir(tmp_path / "run").load_checkpoint().to_dict()
    assert result.log_rows == 1 and any(k.startswith("action_heads.") for k in state["policy"])


def test_stop_at_success_ends_after_the_first_update_that_reaches_it(tmp_path):
    run = tmp_path / "run"
    cfg = load_train_config(None, [*TINY, "ppo.total_frames=3840", "run.stop_at_success=0.3", "run.eval_episodes=0"])
    result = train_ppo(cfg, run, progress=False, say=lambda _: None)
    rows = RunDir(run).read_log()
    rates = [r.get("success_rate", 0.0) for r in rows]
    assert result.frames < 3840 and rates[-1] >= 0.3 and all(rate < 0.3 for rate in rates[:-1])
    assert RunDir(run).load_checkpoint().progress.log_rows == len(rows)  # stopped with a checkpoint of its last update
