"""The Python API: `glamrl.train`, `glamrl.load_policy`, `glamrl.make_env` in a custom loop, as
docs/getting-started.md shows it."""

import subprocess
import sys

import pytest
import torch
import yaml

import glamrl
from glamrl.config import load_train_config
from glamrl.envs.factory import make_env
from glamrl.export import export_run
from glamrl.prompts import PromptHistory
from glamrl.run.dir import RunDir

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"env": {"id": "BabyAI-TurnToObject-v0", "num_envs": 2, "seed": 4},
        "model": {"name": "tiny-llama", "device": "cpu", "lora": True},
        "ppo": {"num_steps": 4, "minibatch_size": 4, "epochs": 1, "lr": 1e-2, "total_frames": 16},
        "run": {"tensorboard": False}, "prompt": {"nbr_obs": 2}}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("api")
    (root / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    return glamrl.train(root / "tiny.yaml", ["ppo.lr=5e-3"], run_dir=root / "run")


def test_a_custom_loop_trains_loads_and_acts(run):
    assert RunDir(run).read_config().ppo.lr == 5e-3  # the YAML with its overrides
    policy = glamrl.load_policy(run)
    env = glamrl.make_env("BabyAI-TurnToObject-v0")
    obs, _ = env.reset(seed=1)
    for step in range(4):
        log_probs = policy.scores(obs)                          # (1, A), this observation with its history
        (action,) = policy.act(obs, greedy=True)
        assert action == int(log_probs.argmax()) and log_probs.exp().sum().item() == pytest.approx(1, abs=1e-5)
        obs, reward, terminated, truncated, _ = env.step(int(action))
        if terminated or truncated:
            obs, _ = env.reset(seed=2 + step)
            policy.reset()
    assert policy.action_names[0] == "turn left"


def test_scores_of_prompts_and_other_action_names(run):
    policy = glamrl.load_policy(run)
    obs, _ = glamrl.make_env("BabyAI-TurnToObject-v0").reset(seed=1)
    prompt = PromptHistory(2).prompt(policy.action_names, obs["mission"], obs["descriptions"])  # no history yet
    assert torch.allclose(policy.scores([prompt]), policy.scores(obs))
    synonyms = ["rotate left", "rotate right", "move ahead", "take it", "put down", "use it"]
    other = policy.scores(prompt, synonyms)  # other words for the six actions: other scores
    assert other.shape == (1, 6) and not torch.allclose(other, policy.scores(prompt))
    actions = policy.act([obs, obs, obs])  # three envs, sampled
    assert actions.shape == (3,) and set(actions.tolist()) <= set(range(6))


def test_load_policy_reads_an_export_as_the_run(run, tmp_path):
    export_run(run, tmp_path / "export")
    obs, _ = glamrl.make_env("BabyAI-TurnToObject-v0").reset(seed=3)
    assert torch.allclose(glamrl.load_policy(tmp_path / "export").scores(obs), glamrl.load_policy(run).scores(obs),
                          atol=1e-5)


def test_train_takes_a_config_object_with_overrides(tmp_path):
    cfg = load_train_config(None, [f"{s}.{k}={v}" for s, fields in TINY.items() for k, v in fields.items()])
    run = glamrl.train(cfg, ["ppo.total_frames=8"], run_dir=tmp_path / "run")
    assert run == tmp_path / "run" and RunDir(run).read_config().ppo.total_frames == 8


def test_importing_glamrl_stays_cheap():
    code = "import sys, glamrl; print(sorted(m for m in ('torch', 'transformers', 'glamrl.api') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert glamrl.train is glamrl.api.train and glamrl.make_env is make_env  # a plain function, not a package
