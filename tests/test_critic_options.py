"""The two critic options of the GoToLocal ablation: a value head that reads the episode's step count
(model.critic_reads_step) and critic-free advantages (ppo.advantage=batch_baseline)."""

import math

import numpy as np
import pytest
import torch

from glamrl.config import ConfigError, ModelConfig, PPOConfig, load_train_config
from glamrl.envs.actions import ACTION_NAMES
from glamrl.rl.gae import discounted_returns
from glamrl.run.checkpoint import CheckpointMismatchError
from glamrl.run.dir import RunDir
from glamrl.trainers.ppo import train_ppo

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = "Goal of the agent: go to the red ball \\n Observation 0: You see a wall 2 steps forward, \\n Action 0: "
TINY = [  # a real level with episodes of several steps, time-outs included (max_steps 6)
    "env.id=BabyAI-GoToLocalS6N3-v0", "env.num_envs=4", "env.max_steps=6", "env.seed=3",
    "model.name=tiny-llama", "model.device=cpu", "prompt.nbr_obs=1",
    "ppo.num_steps=8", "ppo.minibatch_size=16", "ppo.epochs=1", "ppo.lr=1e-3", "ppo.norm_adv=true",
    "run.tensorboard=false",
]


def reference_returns(rewards, terminated, truncated, gamma):
    """G_t summed forward, one env and one step at a time, up to the episode's end or the rollout's."""
    T, N = rewards.shape
    out = torch.zeros(T, N)
    for n in range(N):
        for t in range(T):
            g, discount = 0.0, 1.0
            for k in range(t, T):
                g += discount * rewards[k, n].item()
                if terminated[k, n] or truncated[k, n]:
                    break
                discount *= gamma
            out[t, n] = g
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batch_baseline_returns_match_a_slow_loop_on_random_rollouts(seed):
    g = torch.Generator().manual_seed(seed)
    T, N, gamma = 17, 5, 0.9
    rewards = torch.randn(T, N, generator=g)
    terminated = torch.rand(T, N, generator=g) < 0.15
    truncated = (torch.rand(T, N, generator=g) < 0.1) & ~terminated
    torch.testing.assert_close(discounted_returns(rewards, terminated | truncated, gamma),
                               reference_returns(rewards, terminated, truncated, gamma))


def test_batch_baseline_advantages_are_the_returns_less_their_mean():
    from glamrl.rl.buffer import RolloutBuffer
    from glamrl.rl.value_norm import NoValueNorm
    from glamrl.trainers.ppo import rollout_batch

    g = torch.Generator().manual_seed(4)
    T, N = 6, 3
    rewards = torch.rand(T, N, generator=g)
    terminated, truncated = torch.rand(T, N, generator=g) < 0.2, torch.rand(T, N, generator=g) < 0.2
    buffer = RolloutBuffer(T, N)
    for t in range(T):
        buffer.add(t, ["p"] * N, np.zeros(N, dtype=int), torch.zeros(N), torch.full((N,), 9.0),  # values unread
                   rewards[t].numpy(), terminated[t].numpy(), truncated[t].numpy())
    batch, explained = rollout_batch(buffer, None, NoValueNorm(), PPOConfig(gamma=0.8, advantage="batch_baseline"))
    returns = reference_returns(rewards, terminated, truncated, 0.8)
    torch.testing.assert_close(batch.advantages, (returns - returns.mean()).reshape(-1))
    assert math.isnan(explained)


def filled_buffer(inputs, returns, done):
    """A rollout buffer holding `inputs` (T lists of N), with `done` (T, N) ending its episodes; the returns are
    handed to critic_ceiling as the batch carries them, step-major."""
    from glamrl.rl.buffer import RolloutBuffer

    T, N = done.shape
    buffer = RolloutBuffer(T, N)
    for t in range(T):
        buffer.add(t, inputs[t], np.zeros(N, dtype=int), torch.zeros(N), torch.zeros(N), np.zeros(N),
                   done[t].numpy(), np.zeros(N, dtype=bool))
    return buffer, returns.reshape(-1)


def reference_ceiling(inputs, returns, done):
    """The ceiling from each env's episodes walked one step at a time: the (input, episode) pairs kept one frame
    each, drawn as explainable_variance draws them, then one-way ANOVA's adjusted R^2 written out."""
    from glamrl.stats import one_frame_per_visit

    T, N = done.shape
    keys, values, episodes = [], [], []
    for t in range(T):
        for n in range(N):
            episode = sum(bool(done[k, n]) for k in range(t))  # episodes env n ended before step t
            keys.append(inputs[t][n]), values.append(float(returns[t, n])), episodes.append((n, episode))
    kept = one_frame_per_visit(keys, episodes)
    y = np.array([values[i] for i in kept])
    groups = {}
    for i, v in zip(kept, y):
        groups.setdefault(keys[i], []).append(v)
    within = sum(((np.array(g) - np.mean(g)) ** 2).sum() for g in groups.values())
    return 1 - (within / (len(y) - len(groups))) / y.var(ddof=1)


def test_the_critic_ceiling_keeps_one_frame_per_prompt_and_episode():
    from glamrl.llm.policy import TimedPrompt
    from glamrl.trainers.ppo import critic_ceiling

    g = torch.Generator().manual_seed(0)
    T, N = 40, 4  # about 40 episodes, 5 prompts: over 100 repeats, above MIN_REPEATS
    done = torch.rand(T, N, generator=g) < 0.25
    prompts = [[f"prompt {int(k)}" for k in row] for row in torch.randint(0, 5, (T, N), generator=g)]
    returns = torch.randn(T, N, generator=g) + torch.tensor([[int(p[-1]) for p in row] for row in prompts])
    expected = reference_ceiling(prompts, returns, done)
    assert 0.3 < expected < 1  # the returns follow the prompt, with noise
    assert critic_ceiling(*filled_buffer(prompts, returns, done)) == pytest.approx(expected)
    # normalised returns (the value head's units) give the same ceiling
    assert critic_ceiling(*filled_buffer(prompts, 3 * returns - 1, done)) == pytest.approx(expected)

    # returns that are a function of the prompt: all explained; the critic reading the step: keyed by both
    exact = torch.tensor([[float(p[-1]) for p in row] for row in prompts])
    assert critic_ceiling(*filled_buffer(prompts, exact, done)) == pytest.approx(1.0)
    timed = [[TimedPrompt(p, t % 3, 6) for p in row] for t, row in enumerate(prompts)]
    assert critic_ceiling(*filled_buffer(timed, returns, done)) == pytest.approx(reference_ceiling(timed, returns,
                                                                                                   done))


def test_the_critic_ceiling_does_not_count_a_prompt_repeated_within_an_episode():
    from glamrl.stats import MIN_REPEATS, explainable_variance
    from glamrl.trainers.ppo import critic_ceiling

    # one env, E = 40 episodes of 4 steps, each with its own return: "wall" starts every episode, then the agent
    # bumps 3 times into a wall only that episode shows. The bumps' repeats share their episode's return, so
    # counting them makes groups without spread and reads most of the variance as explained.
    E = 40
    returns = (torch.arange(E) % 7 * 0.5).repeat_interleave(4).reshape(4 * E, 1)
    done = torch.zeros(4 * E, 1, dtype=torch.bool)
    done[3::4] = True
    inputs = [["wall"] if t % 4 == 0 else [f"bump {t // 4}"] for t in range(4 * E)]
    ceiling = critic_ceiling(*filled_buffer(inputs, returns, done))
    assert ceiling == pytest.approx(reference_ceiling(inputs, returns, done))
    # kept: n 2E, k E + 1, the spread all in "wall": 1 - (SS / (E - 1)) / (2 SS / (2E - 1)); nothing to explain
    assert ceiling == pytest.approx(1 - (2 * E - 1) / (2 * (E - 1)))
    every_frame = explainable_variance([x for row in inputs for x in row], returns.reshape(-1).tolist())
    assert every_frame == pytest.approx(1 - (4 * E - 1) / (4 * (3 * E - 1)))  # n 4E, k E + 1: reads 0.67
    # one input seen in every episode explains nothing
    assert critic_ceiling(*filled_buffer([["wall"]] * (4 * E), returns, done)) == pytest.approx(0.0)

    # the first 4 episodes repeat "wall" 3 times: too few to estimate a ceiling from, however it would read
    assert 8 - 5 < MIN_REPEATS
    assert math.isnan(critic_ceiling(*filled_buffer(inputs[:16], returns[:16], done[:16])))
    assert explainable_variance([x for row in inputs[:16] for x in row], returns[:16].reshape(-1).tolist(),
                                [t // 4 for t in range(16)]) == pytest.approx(1 - 7 / 6)  # without the minimum


def test_the_critic_ceiling_is_nan_for_inputs_that_are_not_prompts():
    from glamrl.trainers.ppo import critic_ceiling

    done = torch.zeros(4, 2, dtype=torch.bool)
    inputs = [[{"image": np.zeros(3), "memory": torch.zeros(2)}] * 2 for _ in range(4)]  # the symbolic agent's
    assert math.isnan(critic_ceiling(*filled_buffer(inputs, torch.randn(4, 2), done)))


def test_the_step_feature_changes_v_but_not_the_action_log_probs():
    from glamrl.llm.policy import LLMPolicy, TimedPrompt

    torch.manual_seed(0)
    policy = LLMPolicy(ModelConfig(name="tiny-llama", device="cpu", critic_reads_step=True))
    inputs = [TimedPrompt(PROMPT, 0, 20), TimedPrompt(PROMPT, 5, 20), TimedPrompt(PROMPT, 19, 20), PROMPT]
    with torch.no_grad():
        out = policy(inputs, ACTION_NAMES)
        plain = LLMPolicy(ModelConfig(name="tiny-llama", device="cpu"))  # the same LM, a head without steps
        plain.load_state_dict({k: v for k, v in policy.state_dict().items() if not k.startswith("value_head")},
                              strict=False)
        reference = plain([PROMPT], ACTION_NAMES).log_probs
    torch.testing.assert_close(out.log_probs, reference.expand(4, -1))  # the scores read the prompt alone
    v0, v5, v19, unknown = out.values.tolist()
    assert len({v0, v5, v19}) == 3 and math.isnan(unknown)  # no step given: no value
    torch.testing.assert_close(policy.values(inputs[:3]), out.values[:3])


def test_the_agent_reads_the_envs_step_count_into_its_inputs():
    from glamrl.agents.llm import LLMAgent
    from glamrl.envs import make_vector_env
    from glamrl.llm.policy import LLMPolicy

    policy = LLMPolicy(ModelConfig(name="tiny-llama", device="cpu", critic_reads_step=True))
    envs = make_vector_env("BabyAI-GoToLocalS6N3-v0", 3, max_steps=3)
    agent = LLMAgent(policy, 3, ACTION_NAMES, nbr_obs=1)
    obs, _ = envs.reset(seed=0)
    elapsed = np.zeros(3, dtype=int)
    for _ in range(7):
        d = agent.act(obs)
        assert [x.step for x in d.inputs] == elapsed.tolist() and {x.max_steps for x in d.inputs} == {3}
        obs, _, terminated, truncated, infos = envs.step(d.actions)
        done = terminated | truncated
        if truncated.any():  # the final observation of a time-out is valued at the limit
            cut = np.flatnonzero(truncated)
            final = {key: [infos["final_obs"][i][key] for i in cut] for key in infos["final_obs"][cut[0]]}
            assert [x.step for x in agent.inputs(final, cut)] == [3] * len(cut)
        agent.end_episodes(done)
        elapsed = np.where(done, 0, elapsed + 1)
    envs.close()


@pytest.mark.parametrize("option", [
    ["model.critic_reads_step=true"],
    # the standardised head and the bootstrapped time-outs value their frames again, steps included
    ["model.critic_reads_step=true", "model.value_head_init=standardized", "ppo.bootstrap_truncation=true"],
    ["ppo.advantage=batch_baseline"],
], ids=["critic_reads_step", "critic_reads_step-standardized-bootstrapped", "batch_baseline"])
def test_ppo_trains_with_each_option_and_resumes(tmp_path, option):
    from glamrl.llm.policy import LLMPolicy

    run = tmp_path / "run"
    cfg = load_train_config(None, [*TINY, *option, "ppo.total_frames=32"])
    train_ppo(cfg, run, progress=False, say=lambda _: None)
    saved = RunDir(run).load_checkpoint().policy
    torch.manual_seed(cfg.env.seed)
    fresh = LLMPolicy(cfg.model).trainable_state_dict()
    changed = {k for k, v in saved.items() if not torch.equal(fresh[k], v)}
    rows = RunDir(run).read_log()
    if cfg.model.critic_reads_step:
        hidden = fresh["value_head.mlp.0.weight"].shape[1] - 5
        assert saved["value_head.mlp.0.weight"].shape[1] == hidden + 5  # the head's step features are saved
        assert any(k.startswith("value_head") for k in changed) and math.isfinite(rows[-1]["explained_variance"])
    else:
        assert not any(k.startswith("value_head") for k in changed)  # no critic trained
        assert rows[-1]["value_loss"] == 0 and math.isnan(rows[-1]["explained_variance"])
    assert any(not k.startswith("value_head") for k in changed)  # the policy learned
    assert all(not r["critic_ceiling"] > 1 for r in rows)  # logged, nan where no prompt repeats

    result = train_ppo(load_train_config(None, [*TINY, *option, "ppo.total_frames=64"]), run, resume=True,
                       progress=False, say=lambda _: None)
    assert result.frames == 64 and [r["update"] for r in RunDir(run).read_log()] == [1, 2]


def test_resuming_with_another_critic_reads_step_is_refused_in_one_line(tmp_path):
    run = tmp_path / "run"
    train_ppo(load_train_config(None, [*TINY, "model.critic_reads_step=true", "ppo.total_frames=32"]), run,
              progress=False, say=lambda _: None)
    with pytest.raises(CheckpointMismatchError, match="model.critic_reads_step=True") as err:
        train_ppo(load_train_config(None, [*TINY, "ppo.total_frames=64"]), run, resume=True, progress=False,
                  say=lambda _: None)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(("overrides", "message"), [
    (["ppo.advantage=mc"], "ppo.advantage must be one of gae, batch_baseline, got 'mc'"),
    (["ppo.advantage=batch_baseline", "ppo.value_norm=true"], "ppo.value_norm=true needs a critic"),
    (["ppo.advantage=batch_baseline", "ppo.bootstrap_truncation=true"], "ppo.bootstrap_truncation=true needs a critic"),
    (["ppo.advantage=batch_baseline", "model.critic_reads_step=true"], "model.critic_reads_step=true feeds the critic"),
    (["model.critic_reads_step=2"], "model.critic_reads_step must be bool"),
])
def test_bad_critic_options_are_refused_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_train_config(None, [*TINY, *overrides])
    assert "\n" not in str(err.value)


def test_a_kind_without_an_llm_value_head_refuses_critic_reads_step_in_one_line():
    from glamrl.trainers.common import check_reads

    cfg = load_train_config(None, ["agent.kind=symbolic", "model.critic_reads_step=true", "env.num_envs=2",
                                   "ppo.num_steps=4", "ppo.minibatch_size=4"])
    with pytest.raises(ConfigError, match="model.critic_reads_step=True: the ppo loop does not read it") as err:
        check_reads(cfg, "ppo")
    assert "\n" not in str(err.value)


def test_a_standardised_step_reading_head_standardises_the_hidden_state_alone():
    import copy

    from glamrl.llm.heads import STEP_FEATURES, ValueHead, step_features

    torch.manual_seed(0)
    head = ValueHead(8, STEP_FEATURES)
    reference = copy.deepcopy(head)
    hidden = torch.randn(32, 8) * 0.1 + 0.9
    head.standardize_input(hidden)
    probe, extra = torch.randn(4, 8), step_features(torch.tensor([0, 3, 6, 9]), torch.tensor([9, 9, 9, 9]))
    mean, std = hidden.mean(0), hidden.std(0)
    torch.testing.assert_close(head(probe, extra), reference((probe - mean) / std, extra), atol=1e-5, rtol=1e-5)
    assert extra[:, 0].tolist() == pytest.approx([0, 1 / 3, 2 / 3, 1]) and extra.abs().max() <= 1


def test_a_step_reading_critic_travels_with_its_export(tmp_path):
    from glamrl.agents.factory import restore_model
    from glamrl.export import export_run
    from glamrl.llm.policy import LLMPolicy, PolicyStateError, TimedPrompt

    train_ppo(load_train_config(None, [*TINY, "model.critic_reads_step=true", "ppo.total_frames=32"]), tmp_path / "run",
              progress=False, say=lambda _: None)
    manifest = export_run(tmp_path / "run", tmp_path / "out")
    assert manifest.critic_reads_step and manifest.hidden_size == 64
    inputs = [TimedPrompt(PROMPT, step, 6) for step in range(4)]
    loaded = LLMPolicy(ModelConfig(name=str(tmp_path / "out"), device="cpu", critic_reads_step=True))
    with torch.no_grad():
        values, trained = loaded.values(inputs), restore_model(tmp_path / "run", device="cpu")[1].values(inputs)
    torch.testing.assert_close(values, trained, atol=1e-5, rtol=0)
    assert values.unique().numel() == 4  # V reads the step
    with pytest.raises(PolicyStateError, match="critic_reads_step=true"):
        LLMPolicy(ModelConfig(name=str(tmp_path / "out"), device="cpu"))
