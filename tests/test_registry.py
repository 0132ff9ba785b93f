"""The registry of agent kinds and training loops: a kind added through `register` alone trains, resumes and
evaluates with one config; every loop refuses, in one line, what it would ignore."""

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import glamrl
from glamrl.agents.base import Decision, WholeNetwork
from glamrl.agents.factory import make_model, restore_model
from glamrl.agents.registry import (KINDS, LOOP_RUN_FIELDS, SHARED_SECTIONS, TRAINERS, AgentKind, AgentKindError,
                                    AgentRequest, agent_kind, check_trains, kind_names, register, unregister)
from glamrl.cli import main
from glamrl.config import ConfigError, RunConfig, TrainConfig, load_train_config
from glamrl.envs.actions import ACTION_NAMES
from glamrl.run.dir import RunDir
from glamrl.trainers.common import check_reads

pytestmark = pytest.mark.usefixtures("one_thread")

VIEW = 7 * 7 * 3  # the symbolic view, flattened


@dataclass
class Scores:
    log_probs: Tensor   # (B, A)
    values: Tensor      # (B,)


class LinearPolicy(WholeNetwork):
    """pi(a | view) and V(view), each linear in the 7x7x3 view: the smallest network PPO can train."""

    def __init__(self) -> None:
        super().__init__()
        self.actor = nn.Linear(VIEW, len(ACTION_NAMES))
        self.critic = nn.Linear(VIEW, 1)

    def forward(self, inputs: list[Tensor], action_names: Sequence[str]) -> Scores:
        x = torch.stack(inputs)                                                # (B, VIEW)
        return Scores(F.log_softmax(self.actor(x), dim=-1), self.critic(x).squeeze(1))

    def value_parameters(self) -> Iterator[nn.Parameter]:
        return self.critic.parameters()


class LinearAgent:
    """Acts in N envs from their views with a `LinearPolicy`; remembers nothing."""

    def __init__(self, model: LinearPolicy, action_names: Sequence[str], greedy: bool) -> None:
        self.model, self.action_names, self.greedy = model, tuple(action_names), greedy

    @staticmethod
    def inputs(obs: dict[str, Any]) -> list[Tensor]:
        return list(torch.as_tensor(np.asarray(obs["image"]), dtype=torch.float32).flatten(1) / 10)  # (VIEW,) each

    @torch.no_grad()
    def act(self, obs: dict[str, Any]) -> Decision:
        inputs = self.inputs(obs)
        out = self.model(inputs, self.action_names)
        actions = out.log_probs.argmax(1) if self.greedy else torch.multinomial(out.log_probs.exp(), 1).squeeze(1)
        chosen = out.log_probs.gather(1, actions[:, None]).squeeze(1)
        return Decision(actions.numpy(), out.log_probs.exp().numpy(), chosen, out.values, inputs)

    @torch.no_grad()
    def values(self, obs: dict[str, Any], envs: Sequence[int]) -> Tensor:
        return self.model(self.inputs(obs), self.action_names).values

    def end_episodes(self, done: np.ndarray) -> None:
        """Nothing to forget."""


def build_linear_agent(r: AgentRequest) -> LinearAgent:
    return LinearAgent(r.model, r.action_names, r.greedy)


@pytest.fixture
def linear_kind() -> Iterator[AgentKind]:
    """The toy kind `linear`, trained by PPO, registered for one test."""
    kind = register(AgentKind("linear", agent=build_linear_agent, model=lambda cfg: LinearPolicy(),
                              trainers=("ppo",)))
    yield kind
    unregister("linear")


TINY = ["agent.kind=linear", "env.id=BabyAI-TurnToObject-v0", "env.num_envs=4", "env.seed=3", "ppo.num_steps=8",
        "ppo.minibatch_size=32", "ppo.epochs=2", "ppo.lr=1e-2", "run.tensorboard=false"]


def test_a_kind_registered_alone_trains_resumes_and_evaluates(linear_kind, tmp_path, capsys):
    run = tmp_path / "run"
    assert "linear" in kind_names() and agent_kind("linear").trainer is TRAINERS["ppo"]
    cfg = load_train_config(None, [*TINY, "ppo.total_frames=64"])  # 2 updates of 4 envs x 8 steps
    torch.manual_seed(cfg.env.seed)
    untrained = make_model(cfg).actor.weight.detach().clone()

    assert glamrl.train(cfg, run_dir=run) == run  # `glamrl train`'s path: the registry names the loop
    rows = RunDir(run).read_log()
    assert [r["update"] for r in rows] == [1, 2] and rows[-1]["frames"] == 64
    assert all(np.isfinite(r["loss"]) and np.isfinite(r["approx_kl"]) for r in rows)
    state = RunDir(run).load_checkpoint().to_dict()
    assert (state["trainer"], state["log_rows"], state["frames"]) == ("ppo", 2, 64)
    assert set(state["policy"]) == {"actor.weight", "actor.bias", "critic.weight", "critic.bias"}

    _, trained, _ = restore_model(run)  # the kind read back from config.yaml, its weights from the checkpoint
    assert isinstance(trained, LinearPolicy) and not torch.equal(trained.actor.weight, untrained)

    assert glamrl.train(load_train_config(None, [*TINY, "ppo.total_frames=96"]), run_dir=run) == run  # resumed
    assert [r["update"] for r in RunDir(run).read_log()] == [1, 2, 3]
    assert RunDir(run).load_checkpoint().progress.log_rows == 3

    capsys.readouterr()
    assert main(["eval", "--run", str(run), "--episodes", "4", "--num-envs", "2"]) == 0
    assert capsys.readouterr().out.startswith("linear on BabyAI-TurnToObject-v0")


def test_unregistering_a_kind_removes_it_everywhere(linear_kind):
    load_train_config(None, ["agent.kind=linear"])
    unregister("linear")
    with pytest.raises(ConfigError, match="agent.kind must be one of llm, drrn, symbolic, random, bot, got 'linear'"):
        load_train_config(None, ["agent.kind=linear"])
    with pytest.raises(AgentKindError, match="unknown agent kind 'linear'; known kinds: llm, drrn"):
        agent_kind("linear")
    register(linear_kind)  # for the fixture to take away


def test_a_kind_is_registered_once_and_with_trainers_that_exist(linear_kind):
    with pytest.raises(ValueError, match="already registered"):
        register(AgentKind("linear", agent=build_linear_agent))
    with pytest.raises(ValueError, match="unknown trainers a2c"):
        AgentKind("toy", agent=build_linear_agent, model=lambda cfg: LinearPolicy(), trainers=("a2c",))
    with pytest.raises(ValueError, match="a kind with a network has trainers"):
        AgentKind("toy", agent=build_linear_agent, model=lambda cfg: LinearPolicy())
    with pytest.raises(ValueError, match="its first trainer, bc, is what glamrl train runs"):
        AgentKind("toy", agent=build_linear_agent, model=lambda cfg: LinearPolicy(), trainers=("bc",))


def test_the_built_in_kinds_and_their_loops():
    assert kind_names() == ("llm", "drrn", "symbolic", "random", "bot")
    assert {name: agent_kind(name).trainers for name in kind_names()} == {
        "llm": ("ppo", "bc"), "drrn": ("drrn",), "symbolic": ("ppo",), "random": (), "bot": ()}
    assert [name for name in kind_names() if agent_kind(name).runs_fresh] == ["llm", "random", "bot"]
    with pytest.raises(AgentKindError, match="the ppo loop trains agent kinds llm, symbolic, not 'drrn'"):
        check_trains("drrn", "ppo")
    with pytest.raises(AgentKindError, match="the bc loop trains agent kind llm, not 'symbolic'"):
        check_trains("symbolic", "bc")
    assert set(LOOP_RUN_FIELDS) <= {f.name for f in dataclasses.fields(RunConfig)}  # the rest: the session's


@pytest.mark.parametrize("overrides, loop, refused", [
    (["agent.kind=drrn", "run.probes=configs/probes/glam.yaml"], "drrn", "run.probes=configs/probes/glam.yaml"),
    (["agent.kind=drrn", "ppo.lr=0.1", "model.lora=true"], "drrn", "model.lora=True, ppo.lr=0.1"),
    (["bc.lr=0.1"], "ppo", "bc.lr=0.1: the ppo loop does not read it"),
    (["agent.kind=symbolic", "model.name=tiny-llama"], "ppo", "model.name=tiny-llama"),
    (["run.stop_at_success=0.5"], "bc", "run.stop_at_success=0.5"),
    (["run.checkpoint_every=3", "ppo.epochs=2"], "bc", "ppo.epochs=2, run.checkpoint_every=3"),
])
def test_a_field_the_loop_does_not_read_is_refused_in_one_line(overrides, loop, refused):
    with pytest.raises(ConfigError) as err:
        check_reads(load_train_config(None, overrides), loop)
    assert refused in str(err.value) and "\n" not in str(err.value) and "leave" in str(err.value)


@pytest.mark.parametrize("overrides, loop", [
    (["agent.kind=drrn", "drrn.lr=0.1", "run.max_minutes=5", "run.stop_at_success=0.9", "run.checkpoint_every=2"],
     "drrn"),
    (["agent.kind=symbolic", "symbolic.memory=false", "ppo.lr=0.1", "run.probes=x.yaml", "run.eval_episodes=3"],
     "ppo"),
    (["model.lora=true", "bc.lr=0.1", "run.max_minutes=5", "run.eval_greedy=true"], "bc"),
])
def test_what_the_loop_reads_passes(overrides, loop):
    check_reads(load_train_config(None, overrides), loop)


def test_glamrl_train_refuses_an_unread_field_and_an_evaluation_only_kind(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--run-dir", str(run), "--config", "configs/drrn.yaml", "run.probes=x.yaml"]) == 2
    err = capsys.readouterr().err.strip()
    assert "run.probes=x.yaml: the drrn loop does not read it" in err and "\n" not in err
    assert not (run / "config.yaml").exists()
    assert main(["train", "--run-dir", str(run), "--config", "configs/drrn.yaml", "agent.kind=bot"]) == 2
    err = capsys.readouterr().err.strip()
    assert "agent.kind=bot is evaluated, not trained: glamrl eval --agent bot" in err and "\n" not in err


def test_every_config_section_is_read_by_some_loop():
    read = {*SHARED_SECTIONS, *(s for t in TRAINERS.values() for s in t.sections),
            *(k.section for k in KINDS.values() if k.section)}
    assert read == {f.name for f in dataclasses.fields(TrainConfig)}
