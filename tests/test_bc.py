"""Bot demonstrations and behavioural cloning: records, clone a tiny LLM, beat random, then PPO from it."""

import csv
import dataclasses
import json
import subprocess
import sys

import pytest
import torch

from glamrl.agents.factory import make_model, restore_agent
from glamrl.agents.registry import AgentKindError
from glamrl.run.dir import RunDir
from glamrl.trainers.bc import train_bc
from glamrl.run.checkpoint import CheckpointMismatchError, load_checkpoint
from glamrl.config import AgentConfig, ConfigError, load_train_config
from glamrl.demos import DemoFileError, read_demos
from glamrl.envs.actions import ACTION_NAMES
from glamrl.llm.heads import STEP_FEATURES
from glamrl.rollout import evaluate
from glamrl.trainers.common import TrainerMismatchError, evaluate_policy
from glamrl.trainers.ppo import train_ppo

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["env.id=BabyAI-TurnToObject-v0", "env.num_envs=8", "env.seed=2", "prompt.nbr_obs=1",
        "model.name=tiny-llama", "model.device=cpu", "run.tensorboard=false",
        "bc.lr=2e-3", "bc.epochs=6", "bc.batch_size=16", "bc.log_every=20"]


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("demos") / "bot.jsonl"
    done = subprocess.run([sys.executable, "-m", "glamrl.cli", "demos", "--agent", "bot", "--env",
                           "BabyAI-TurnToObject-v0", "--episodes", "200", "--nbr-obs", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out


def test_demos_hold_one_record_per_bot_step(demos):
    records = read_demos(demos, ACTION_NAMES)
    assert len(records) == 200  # the bot needs one turn per TurnToObject episode
    first = json.loads(demos.read_text().splitlines()[0])
    assert set(first) == {"prompt", "action", "action_index", "mission", "nbr_obs", "task", "episode", "step",
                          "episode_return", "success"}
    assert first["prompt"].endswith("Action 0: ") and first["mission"] in first["prompt"]
    assert all(r["success"] and r["action"] in ("turn left", "turn right") for r in records)
    side = {"left": "turn left", "right": "turn right"}  # the bot turns towards the object the text places
    assert all(side[r["prompt"].split(" step ")[1].split(",")[0]] == r["action"] for r in records)


def test_cloning_a_tiny_llm_beats_random_and_ppo_starts_from_it(demos, tmp_path):
    # Measured (200 eval episodes, env.seed 1 and 2): cloned 0.995 and 1.000, untrained 0.00-0.01, random 0.17;
    # the loss falls from ~7 to ~0.015 over the 78 steps.
    run = tmp_path / "bc"
    cfg = load_train_config(None, TINY)
    result = train_bc(cfg, demos, run, progress=False, say=lambda _: None)
    assert result.log_rows == 4 and RunDir(run).load_checkpoint().progress.log_rows == 4
    saved = load_checkpoint(RunDir(run).last_checkpoint, RunDir(run).backup_checkpoint)  # the dict on disk
    assert set(saved) == {"trainer", "log_rows", "frames", "episodes", "duration", "policy", "optimizer",
                          "rng", "config", "data", "steps"}  # the common keys (episodes 0), BC's data and steps
    assert saved["steps"] == 78
    rows = RunDir(run).read_log()
    assert [r["update"] for r in rows] == [1, 2, 3, 4] and [r["steps"] for r in rows] == [20, 40, 60, 78]
    assert rows[-1]["loss"] < rows[0]["loss"] / 10

    eval_cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, eval_episodes=100))
    random_success = evaluate_policy(dataclasses.replace(eval_cfg, agent=AgentConfig(kind="random")), None)
    envs = cfg.env.make_vector_env()
    agent, _ = restore_agent(run, envs, kind="llm")
    cloned = evaluate(envs, agent, 100, seed=cfg.env.eval_seed)
    print(f"random {random_success['success_rate']:.2f}, cloned {cloned['success_rate']:.2f}")
    assert random_success["success_rate"] < 0.3 and cloned["success_rate"] >= 0.8

    not_bc = [o for o in TINY if not o.startswith("bc.")]  # PPO reads no bc.* field: it refuses them
    ppo = load_train_config(None, [*not_bc, f"agent.init_from={run}", "ppo.total_frames=64", "ppo.num_steps=8",
                                   "ppo.minibatch_size=64", "ppo.lr=1e-9", "run.eval_episodes=100"])
    after = train_ppo(ppo, tmp_path / "ppo", progress=False, say=lambda _: None)
    assert after.success_before >= 0.8  # PPO's first evaluation already sees the cloned policy
    with pytest.raises(TrainerMismatchError, match=f"trained by bc, not ppo: .*agent.init_from={run}"):
        train_ppo(ppo, run, resume=True, progress=False, say=lambda _: None)  # PPO cannot resume a BC run

    # BC trains no value head, so a critic that reads the step count starts its own head from the clone's trunk;
    # a PPO run's trained head is not given up that way
    clone = RunDir(run).load_checkpoint().policy
    reads_step = [*not_bc, "model.critic_reads_step=true"]
    mine = make_model(load_train_config(None, [*reads_step, f"agent.init_from={run}"])).trainable_state_dict()
    assert mine["value_head.mlp.0.weight"].shape[1] == clone["value_head.mlp.0.weight"].shape[1] + STEP_FEATURES
    assert mine.keys() == clone.keys()
    assert all(torch.equal(mine[k], v) for k, v in clone.items() if not k.startswith("value_head."))
    with pytest.raises(CheckpointMismatchError, match="model.critic_reads_step=False"):
        make_model(load_train_config(None, [*reads_step, f"agent.init_from={tmp_path / 'ppo'}"]))


def test_bc_stops_after_the_row_past_max_minutes_and_refuses_what_it_cannot_honour(demos, tmp_path):
    run = tmp_path / "bc"
    result = train_bc(load_train_config(None, [*TINY, "run.max_minutes=1e-6"]), demos, run, progress=False,
                      say=lambda _: None)  # of 78 steps, the first row's 20 (bc.log_every)
    assert result.log_rows == 1 and [r["steps"] for r in RunDir(run).read_log()] == [20]
    assert RunDir(run).load_checkpoint().progress.log_rows == 1
    for unread in ("run.stop_at_success=0.5", "run.checkpoint_every=2", "ppo.lr=0.1"):
        with pytest.raises(ConfigError, match=f"^{unread}: the bc loop does not read it"):
            train_bc(load_train_config(None, [*TINY, unread]), demos, tmp_path / "other", progress=False,
                     say=lambda _: None)
    assert not (tmp_path / "other").exists()
    with pytest.raises(AgentKindError, match="the bc loop trains agent kind llm, not 'drrn'"):
        train_bc(load_train_config(None, ["agent.kind=drrn", "prompt.nbr_obs=1"]), demos, tmp_path / "other",
                 progress=False, say=lambda _: None)


def test_bc_resumes_a_checkpoint_that_counted_its_rows_in_optimizer_steps(demos, tmp_path):
    run = RunDir(tmp_path / "bc")
    train_bc(load_train_config(None, [*TINY, "run.max_minutes=1e-6"]), demos, run.path, progress=False,
             say=lambda _: None)  # one row, of 20 steps
    # as BC wrote it before `log_rows` and `steps`: the steps as "update", in the checkpoint and in the log
    for path in (run.last_checkpoint, run.backup_checkpoint):
        if path.exists():
            state = torch.load(path, weights_only=True)
            state.pop("log_rows")
            torch.save({**state, "update": state.pop("steps")}, path)
    with open(run.log, newline="") as f:
        rows = list(csv.DictReader(f))
    with open(run.log, "w", newline="") as f:
        writer = csv.DictWriter(f, [c for c in rows[0] if c != "steps"], extrasaction="ignore")
        writer.writeheader()
        writer.writerows({**r, "update": r["steps"]} for r in rows)
    result = train_bc(load_train_config(None, TINY), demos, run.path, resume=True, progress=False,
                      say=lambda _: None)
    rows = run.read_log()
    assert [r["update"] for r in rows] == [20, 21, 22, 23] and [r["steps"] for r in rows[1:]] == [40, 60, 78]
    assert result.log_rows == 23 and run.load_checkpoint().extra["steps"] == 78


def test_bad_demonstration_files_are_one_clear_error(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x", "action": "turn left", "action_index": 0}\nnot json\n')
    with pytest.raises(DemoFileError, match="bad.jsonl:2 is not JSON"):
        read_demos(bad, ACTION_NAMES)
    with pytest.raises(DemoFileError, match="not found"):
        read_demos(tmp_path / "missing.jsonl", ACTION_NAMES)
