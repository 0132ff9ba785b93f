"""How agents draw their actions from a policy: sampled (the policy as trained), greedy, or at a temperature
(`glamrl eval --temperature`), for every kind that samples from one."""

import copy

import numpy as np
import pytest
import torch

from glamrl.agents.base import draw_actions
from glamrl.agents.factory import make_agent, make_model
from glamrl.agents.registry import AgentKindError
from glamrl.config import load_train_config

pytestmark = pytest.mark.usefixtures("one_thread")

PROBS = torch.tensor([0.5, 0.3, 0.1, 0.05, 0.04, 0.01])


def tempered(probs: torch.Tensor, temperature: float) -> torch.Tensor:
    """The reference: the probabilities raised to 1 / temperature, renormalised."""
    powered = probs.double() ** (1 / temperature)
    return powered / powered.sum()


@pytest.mark.parametrize("temperature", [0.25, 0.5, 1.0, 2.0])
def test_draws_follow_the_tempered_policy(temperature):
    n = 40_000
    log_probs = PROBS.log().expand(n, -1)                                   # (n, 6)
    torch.manual_seed(0)
    counts = torch.bincount(draw_actions(log_probs, temperature=temperature), minlength=6).double()
    expected = tempered(PROBS, temperature) * n
    # each count within 5 binomial standard deviations of the reference's expectation
    assert torch.all((counts - expected).abs() <= 5 * (expected * (1 - expected / n)).sqrt() + 1), (counts, expected)


def test_temperature_one_is_the_policy_and_greedy_is_the_argmax():
    log_probs = torch.log_softmax(torch.randn(64, 6, generator=torch.Generator().manual_seed(1)), dim=1)
    torch.manual_seed(3)
    drawn = draw_actions(log_probs)
    torch.manual_seed(3)
    assert torch.equal(drawn, torch.multinomial(log_probs.exp(), 1).squeeze(1))
    assert torch.equal(draw_actions(log_probs, greedy=True), log_probs.argmax(1))
    assert torch.equal(draw_actions(log_probs, temperature=1e-4), log_probs.argmax(1))  # the limit is the argmax


@pytest.mark.parametrize("config, overrides", [
    (None, ["model.name=tiny-llama", "model.device=cpu", "prompt.nbr_obs=1"]),
    ("configs/symbolic.yaml", ["ppo.minibatch_size=40"]),
])
def test_agents_draw_at_their_temperature_and_record_the_policys_probabilities(config, overrides):
    cfg = load_train_config(config, ["env.id=BabyAI-GoToLocalS6N3-v0", "env.num_envs=4", *overrides])
    torch.manual_seed(0)
    model = make_model(cfg)
    envs = cfg.env.make_vector_env()
    obs, _ = envs.reset(seed=0)
    sampled = make_agent(cfg, model, envs).act(copy.deepcopy(obs))
    greedy = make_agent(cfg, model, envs, greedy=True).act(copy.deepcopy(obs))
    cold = make_agent(cfg, model, envs, temperature=1e-4).act(copy.deepcopy(obs))
    np.testing.assert_array_equal(cold.actions, greedy.actions)
    np.testing.assert_array_equal(greedy.actions, sampled.probs.argmax(1))
    np.testing.assert_allclose(cold.probs, sampled.probs, rtol=1e-5, atol=1e-6)  # the policy's, not the tempered
    chosen = np.log(cold.probs[np.arange(4), cold.actions])
    np.testing.assert_allclose(cold.log_probs.numpy(), chosen, rtol=1e-4, atol=1e-5)


def test_the_llm_agent_acts_for_a_subset_of_its_envs_as_it_would_for_all():
    """act(obs, envs) decides for envs `envs` only, from their rows of `obs`: the same probabilities and prompts as
    acting for every env, and only their histories record a step."""
    cfg = load_train_config(None, ["env.id=BabyAI-GoToLocalS6N3-v0", "env.num_envs=4", "model.name=tiny-llama",
                                   "model.device=cpu", "prompt.nbr_obs=2"])
    torch.manual_seed(0)
    model = make_model(cfg)
    envs = cfg.env.make_vector_env()
    obs, _ = envs.reset(seed=0)
    every, part = make_agent(cfg, model, envs, greedy=True), make_agent(cfg, model, envs, greedy=True)
    whole = every.act(obs)
    subset = [3, 1]
    rows = {key: [value[i] for i in subset] for key, value in obs.items()}
    some = part.act(rows, subset)
    np.testing.assert_allclose(some.probs, whole.probs[subset], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(some.actions, whole.actions[subset])
    assert some.inputs == [whole.inputs[i] for i in subset]
    # a step recorded for envs 3 and 1 only: their next prompts are those after acting for all, the others' as new
    after, stepped = part.prompts(obs, range(4)), every.prompts(obs, range(4))
    fresh = make_agent(cfg, model, envs).prompts(obs, range(4))
    assert [after[i] == stepped[i] for i in range(4)] == [False, True, False, True]
    assert [after[i] == fresh[i] for i in range(4)] == [True, False, True, False]
    envs.close()


def test_kinds_that_do_not_sample_from_a_policy_refuse_a_temperature():
    cfg = load_train_config(None, ["env.id=BabyAI-GoToLocalS6N3-v0", "env.num_envs=2", "agent.kind=random"])
    envs = cfg.env.make_vector_env()
    with pytest.raises(AgentKindError, match=r"sample from a policy \(llm, symbolic\), not to random"):
        make_agent(cfg, None, envs, temperature=0.5)
    assert make_agent(cfg, None, envs, temperature=1.0) is not None
