"""One agent factory for every kind: NPAE end to end, `glamrl eval --run` on runs of any kind, clear errors."""

import subprocess
import sys

import pytest
import torch

from glamrl.agents.factory import make_model, read_run
from glamrl.agents.registry import AgentKindError
from glamrl.cli import main
from glamrl.config import ConfigError, load_train_config
from glamrl.trainers.ppo import train_ppo
from glamrl.trainers.drrn import train_drrn

pytestmark = pytest.mark.usefixtures("one_thread")


def glamrl(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "glamrl.cli", *args], capture_output=True, text=True, timeout=timeout)


TINY_ENV = ["env.id=BabyAI-TurnToObject-v0", "env.num_envs=4", "run.tensorboard=false"]


def _embeddings(model) -> torch.Tensor:
    return model.llm.get_input_embeddings().weight.detach().clone()


def test_npae_config_copies_only_the_pretrained_embeddings():
    overrides = ["model.name=tiny-llama", "model.device=cpu"]
    npae = load_train_config("configs/npae.yaml", overrides)
    assert (npae.model.pretrained, npae.model.load_embedding, npae.model.use_action_heads) == (False, True, True)
    torch.manual_seed(0)
    pretrained = make_model(load_train_config(None, overrides))  # the tiny "pretrained" weights come from the seed
    torch.manual_seed(0)
    model = make_model(npae)
    torch.manual_seed(0)
    scratch = make_model(load_train_config("configs/npae.yaml", [*overrides, "model.load_embedding=false"]))
    assert torch.equal(_embeddings(model), _embeddings(pretrained))
    assert not torch.equal(_embeddings(scratch), _embeddings(pretrained))
    other = "model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(dict(model.llm.named_parameters())[other], dict(pretrained.llm.named_parameters())[other])
    assert model.action_heads is not None


def test_npae_trains_and_glamrl_eval_restores_it_from_the_run(tmp_path):
    run = tmp_path / "npae"
    cfg = load_train_config("configs/npae.yaml", [*TINY_ENV, "model.name=tiny-llama", "model.device=cpu",
                                                  "ppo.total_frames=32", "ppo.num_steps=8", "ppo.minibatch_size=16"])
    train_ppo(cfg, run, progress=False, say=lambda _: None)
    weights = read_run(run, "llm")[1].policy
    assert any(k.startswith("action_heads.") for k in weights)
    done = glamrl("eval", "--run", str(run), "--env", "BabyAI-TurnToObject-v0", "--episodes", "4", "--num-envs", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("llm on BabyAI-TurnToObject-v0")


def test_eval_run_of_another_kind_and_unknown_kinds_give_one_line(tmp_path, capsys):
    run = tmp_path / "drrn"
    train_drrn(load_train_config(None, [*TINY_ENV, "agent.kind=drrn", "drrn.total_frames=64", "drrn.log_every=32",
                                        "drrn.learning_starts=32", "drrn.batch_size=16"]), run,
               progress=False, say=lambda _: None)
    done = glamrl("eval", "--run", str(run), "--env", "BabyAI-TurnToObject-v0", "--episodes", "4")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("drrn on BabyAI-TurnToObject-v0")
    for args, message in [
        (["eval", "--agent", "llm", "--run", str(run)], "is a run of agent kind 'drrn', not 'llm'"),
        (["eval", "--run", str(tmp_path)], "is not a glamrl run directory"),
        (["eval", "--agent", "drrn"], "give --run with a trained drrn run"),
        (["eval", "--run", str(run), "--temperature", "0.5"],
         "a temperature applies to agents that sample from a policy (llm, symbolic), not to drrn"),
        (["train", "--config", "configs/npae.yaml", "agent.kind=wizard"], "agent.kind must be one of"),
    ]:
        assert main(args) == 2  # the CLI's own entry point, in process
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    with pytest.raises(AgentKindError, match="'drrn', not 'llm'"):
        make_model(load_train_config(None, ["agent.kind=llm", f"agent.init_from={run}", "model.name=tiny-llama"]))
    with pytest.raises(ConfigError):
        load_train_config(None, ["agent.kind=npae2"])


def test_agent_spec_names_a_fresh_or_a_trained_agent_without_changing_anything():
    from glamrl.eval.agents import AgentSpec, load_eval_model

    spec = AgentSpec(kind="random")
    cfg, model, label, _ = load_eval_model(spec, seed=3, language="fr")
    assert (cfg.agent.kind, model, label, cfg.env.seed) == ("random", None, "random", 3)
    assert cfg.prompt.actions[0] == "tourner à gauche"  # the language's own action names
    assert spec == AgentSpec(kind="random")  # a frozen spec: loading never rewrites it
    with pytest.raises(AgentKindError, match="give --agent"):
        load_eval_model(AgentSpec())
    with pytest.raises(AgentKindError, match="untrained"):
        load_eval_model(AgentSpec(kind="drrn"))
