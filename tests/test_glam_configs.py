"""The configs named after GLAM carry GLAM's settings, checked field by field against GLAM's own files; the
Flan-T5 ones fail offline in one line that says what to do instead."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from glamrl.config import load_train_config

ROOT = Path(__file__).resolve().parents[1]

# Read from GLAM's repository (flowersteam/Grounding_LLMs_with_online_RL): the Mixed_training campaign scripts
# experiments/campaign/Mixed_training/{GFlan-T5_large,NPAE-Flan-T5_large}.slurm, the config they load,
# experiments/configs/multi-node_slurm_cluster_config.yaml (rl_script_args), and train_language_agent.py.
GLAM_PPO = {
    "env.id": "BabyAI-MixedTrainLocal-v0",   # slurm: name_environment
    "env.num_envs": 32,                      # slurm: number_envs
    "ppo.total_frames": 1_500_000,           # slurm: num_steps (frames, all envs together)
    "ppo.num_steps": 40,                     # frames_per_proc
    "ppo.lr": 1e-6,                          # lr
    "ppo.adam_beta1": 0.9,                   # beta1
    "ppo.adam_beta2": 0.999,                 # beta2
    "ppo.adam_eps": 1e-5,                    # adam_eps
    "ppo.epochs": 4,                         # epochs
    "ppo.minibatch_size": 64,                # batch_size (transitions per optimizer step)
    "ppo.clip_eps": 0.2,                     # clip_eps, for the ratio and for the value change
    "ppo.clip_value": True,                  # PPOUpdater clips the value change to clip_eps
    "ppo.gamma": 0.99,                       # discount
    "ppo.gae_lambda": 0.99,                  # gae_lambda
    "ppo.entropy_coef": 0.01,                # entropy_coef
    "ppo.value_coef": 0.5,                   # value_loss_coef
    "ppo.max_grad_norm": 0.5,                # max_grad_norm
    "ppo.reward_scale": 20.0,                # reward_function: 20 * reward on success
    "ppo.norm_adv": False,                   # advantages used as computed
    "ppo.value_norm": False,                 # no normalisation of the value targets
    "ppo.bootstrap_truncation": False,       # GAE masks on done: a time-out is terminal
    "prompt.nbr_obs": 3,                     # nbr_obs
    "prompt.actions": ["turn left", "turn right", "go forward", "pick up", "drop", "toggle"],  # action_space
    "model.normalize_by_length": False,      # LogScoringModuleFn sums over the tokens
}
GLAM_LLM = {"model.name": "google/flan-t5-large",  # model_path .../llms/flan-t5-large, model_type seq2seq
            "model.pretrained": True, "model.use_action_heads": False}
GLAM_NPAE = {"model.name": "google/flan-t5-large",  # the same model_path, with:
             "model.pretrained": False,             # lamorel_args.llm_args.pretrained=false
             "model.load_embedding": True,          # rl_script_args.load_embedding=true
             "model.use_action_heads": True}        # rl_script_args.use_action_heads=true
# Where the configs keep glamrl's choice on purpose (docs/differences.md): GLAM's released score summed the
# action tokens' raw logits (model.score=sum_logits gives it).
OURS = {"model.score": "log_softmax"}
EMBEDDED = {"model.name": "smollm2-135m"}

CONFIGS = {
    "glam_paper": {**GLAM_PPO, **GLAM_LLM, **OURS},
    "glam_paper_smollm2": {**GLAM_PPO, **GLAM_LLM, **OURS, **EMBEDDED},
    "npae": {**GLAM_PPO, **GLAM_NPAE},
    "npae_smollm2": {**GLAM_PPO, **GLAM_NPAE, **EMBEDDED},
}


def field(cfg, dotted: str):
    section, name = dotted.split(".")
    return getattr(getattr(cfg, section), name)


@pytest.mark.parametrize("name", CONFIGS)
def test_config_carries_glams_settings_field_by_field(name):
    cfg = load_train_config(ROOT / "configs" / f"{name}.yaml")
    wrong = {key: (field(cfg, key), want) for key, want in CONFIGS[name].items()
             if field(cfg, key) != (pytest.approx(want) if isinstance(want, float) else want)}
    assert not wrong, f"configs/{name}.yaml: {{field: (ours, GLAM's)}} = {wrong}"
    assert cfg.agent.kind == "llm" and cfg.batch_size == 32 * 40


@pytest.mark.parametrize("name", ["glam_paper", "npae"])
def test_flan_t5_offline_is_one_line_naming_a_local_copy_and_the_embedded_config(name, tmp_path):
    # A fresh process without network: HF_HUB_OFFLINE=1 and an empty Hugging Face cache, whatever this
    # machine has cached.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"),
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "glamrl.cli", "train", "--config", f"configs/{name}.yaml",
                           "--run-dir", str(tmp_path / "run"), "--no-progress"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("glamrl: error: model 'google/flan-t5-large' is not a local path")
    for hint in ("model.name=/path/to/flan-t5-large", "model.name=smollm2-135m", "configs/glam_paper_smollm2.yaml",
                 "configs/npae_smollm2.yaml"):
        assert hint in lines[0], hint


# experiments/campaign/Mixed_training/DRRN.slurm (32 envs, num_steps 1500000) and the defaults of
# experiments/agents/drrn/drrn.py's DRRNAgent (train_language_agent.py passes max_steps = 4 x number_envs).
GLAM_DRRN = {
    "agent.kind": "drrn",
    "env.id": "BabyAI-MixedTrainLocal-v0",
    "env.num_envs": 32,
    "drrn.total_frames": 1_500_000,
    "prompt.nbr_obs": 3,                     # deque of 3 observations, 2 actions
    "drrn.embedding_dim": 128,
    "drrn.hidden_size": 128,
    "drrn.lr": 1e-4,
    "drrn.gamma": 0.9,
    "drrn.batch_size": 64,
    "drrn.learning_starts": 64,              # update() waits for one batch in memory
    "drrn.max_grad_norm": 5.0,               # clip=5
    "drrn.reward_scale": 20.0,
    "drrn.exploration": "softmax",           # act(sample=True): softmax over Q, in training and test
    "drrn.temperature": 1.0,
    "drrn.double_q": False,                  # max over the next Q-values
    "drrn.target_update_every": 1,           # no target network: the online network before this step
    "drrn.bootstrap_truncation": False,      # next Q zeroed on done
}
# experiments/slurm/train_symbolic_ppo.sh (--arch expert_filmcnn --procs 64 --frames-per-proc 40
# --recurrence 20 --frames 400000) and the defaults of GLAM's babyai/arguments.py and train_symbolic_ppo.py.
GLAM_SYMBOLIC = {
    "agent.kind": "symbolic",
    "env.id": "BabyAI-MixedTrainLocal-v0",
    "env.num_envs": 64,
    "ppo.num_steps": 40,
    "ppo.total_frames": 400_000,
    "symbolic.arch": "expert_filmcnn",
    "symbolic.recurrence": 20,
    "symbolic.memory": True,
    "symbolic.image_dim": 128,
    "symbolic.memory_dim": 128,
    "symbolic.instr_dim": 128,
    "symbolic.collect_mode": "train",        # acmodel.train() at construction, never eval() while collecting
    "ppo.lr": 1e-4,
    "ppo.adam_beta1": 0.9,
    "ppo.adam_beta2": 0.999,
    "ppo.adam_eps": 1e-5,                    # --optim-eps
    "ppo.minibatch_size": 1280,              # --batch-size
    "ppo.epochs": 4,                         # --ppo-epochs
    "ppo.clip_eps": 0.2,
    "ppo.gamma": 0.99,
    "ppo.gae_lambda": 0.99,
    "ppo.entropy_coef": 0.01,
    "ppo.value_coef": 0.5,
    "ppo.max_grad_norm": 0.5,
    "ppo.reward_scale": 20.0,                # --reward-scale 20
    "ppo.bootstrap_truncation": False,
}


@pytest.mark.parametrize(("name", "table"), [("drrn", GLAM_DRRN), ("symbolic", GLAM_SYMBOLIC)])
def test_baseline_config_carries_glams_settings_field_by_field(name, table):
    cfg = load_train_config(ROOT / "configs" / f"{name}.yaml")
    wrong = {key: (field(cfg, key), want) for key, want in table.items()
             if field(cfg, key) != (pytest.approx(want) if isinstance(want, float) else want)}
    assert not wrong, f"configs/{name}.yaml: {{field: (ours, GLAM's)}} = {wrong}"
    if name == "drrn":
        assert cfg.drrn.train_every * cfg.env.num_envs == 128  # one gradient step per 128 frames
        assert cfg.drrn.replay_size >= cfg.drrn.total_frames   # GLAM's 5M memory never dropped a transition


def test_defaults_are_glams_baseline_budgets():
    from glamrl.config import DRRNConfig, SymbolicConfig

    assert (DRRNConfig().total_frames, DRRNConfig().replay_size) == (1_500_000, 1_500_000)
    assert SymbolicConfig().collect_mode == "train"
    short = load_train_config(ROOT / "configs" / "drrn_200k.yaml")
    assert (short.drrn.total_frames, short.drrn.replay_size) == (200_000, 200_000)
    assert {k: v for k, v in short.to_dict().items() if k not in ("drrn", "run")} == \
        {k: v for k, v in load_train_config(ROOT / "configs" / "drrn.yaml").to_dict().items()
         if k not in ("drrn", "run")}
