import math

import numpy as np
import pytest
import torch

from glamrl.config import ModelConfig, PPOConfig
from glamrl.rl.gae import compute_gae
from glamrl.rl.ppo import ppo_loss
from glamrl.run.dir import RunDir


def test_gae_with_termination_and_truncation_in_one_rollout():
    # one env, 4 steps: terminated at t=1, truncated (time limit) at t=2
    rewards = torch.tensor([[1.0], [0.0], [2.0], [0.5]])
    values = torch.tensor([[0.5], [0.4], [0.3], [0.2]])
    terminated = torch.tensor([[False], [True], [False], [False]])
    truncated = torch.tensor([[False], [False], [True], [False]])
    final_values = torch.tensor([[9.0], [9.0], [0.7], [9.0]])  # only t=2 is read
    adv, ret = compute_gae(rewards, values, terminated, truncated, final_values, torch.tensor([0.6]), 0.9, 0.8)
    # t=3: 0.5 + 0.9*0.6 - 0.2 = 0.84
    # t=2: bootstrap from V(final obs): 2 + 0.9*0.7 - 0.3 = 2.33, no flow from t=3
    # t=1: terminal: 0 - 0.4 = -0.4
    # t=0: 1 + 0.9*0.4 - 0.5 + 0.9*0.8*(-0.4) = 0.572
    assert adv.squeeze(1).tolist() == pytest.approx([0.572, -0.4, 2.33, 0.84])
    assert ret.squeeze(1).tolist() == pytest.approx([1.072, 0.0, 2.63, 1.04])


def test_gae_without_episode_end_is_discounted_td_sum():
    T = 3
    r, v = torch.ones(T, 2), torch.zeros(T, 2)
    no = torch.zeros(T, 2, dtype=torch.bool)
    adv, _ = compute_gae(r, v, no, no, v, torch.zeros(2), 0.5, 1.0)
    assert adv[:, 0].tolist() == pytest.approx([1.75, 1.5, 1.0])


def _two_env_rollout():
    """2 envs, 3 steps: env 0 times out at t=1 (reward 0); env 1 succeeds at t=0 (reward 2), then runs on."""
    from glamrl.rl.buffer import RolloutBuffer

    buffer = RolloutBuffer(3, 2)
    values = [[0.5, 0.4], [0.3, 0.2], [0.6, 0.1]]
    for t, (rewards, terminated, truncated) in enumerate([([0.0, 2.0], [False, True], [False, False]),
                                                          ([0.0, 0.0], [False, False], [True, False]),
                                                          ([1.0, 0.0], [False, False], [False, False])]):
        buffer.add(t, ["p0", "p1"], np.zeros(2, dtype=int), torch.zeros(2), torch.tensor(values[t]),
                   np.array(rewards), np.array(terminated), np.array(truncated))
    buffer.final_values[1, 0] = 0.9  # V(final observation) of env 0's time-out
    return buffer, torch.tensor([0.7, 0.8])  # V(s_T)


@pytest.mark.parametrize("bootstrap", [False, True])
def test_time_outs_end_the_return_unless_bootstrapped(bootstrap):
    from glamrl.rl.value_norm import NoValueNorm
    from glamrl.trainers.ppo import rollout_batch

    buffer, next_value = _two_env_rollout()
    batch, _ = rollout_batch(buffer, next_value, NoValueNorm(),
                             PPOConfig(gamma=0.9, gae_lambda=0.5, bootstrap_truncation=bootstrap))
    adv = batch.advantages.reshape(3, 2)
    # env 0: t=2: 1 + 0.9*0.7 - 0.6 = 1.03. t=1 (time-out): 0 + 0.9*F - 0.3, F = 0 (terminal) or 0.9 (bootstrapped),
    # no flow from t=2. t=0: 0 + 0.9*0.3 - 0.5 + 0.9*0.5*A1
    a1 = (0.9 * 0.9 if bootstrap else 0.0) - 0.3
    env0 = [0.27 - 0.5 + 0.45 * a1, a1, 1.03]
    # env 1: t=0 terminal success: 2 - 0.4 = 1.6. t=2: 0.9*0.8 - 0.1 = 0.62. t=1: 0.9*0.1 - 0.2 + 0.45*0.62 = 0.169
    env1 = [1.6, 0.169, 0.62]
    assert adv[:, 0].tolist() == pytest.approx(env0, abs=1e-6) and adv[:, 1].tolist() == pytest.approx(env1, abs=1e-6)
    torch.testing.assert_close(batch.returns, batch.advantages + buffer.values.reshape(-1))


def test_the_clipped_value_loss_keeps_the_plain_gradient_inside_the_band_when_statistics_move():
    # the statistics move far more than clip_eps between collection and update (returns jump from about 0 to
    # about 10): the value loss's band must still hold the head's output as the update starts
    from glamrl.rl.value_norm import ValueNormalizer
    from glamrl.trainers.ppo import rollout_batch

    norm = ValueNormalizer(decay=0.9)
    norm.update(torch.tensor([0.0, 0.1, -0.1, 0.05]))
    before = norm.stats()
    buffer, next_value = _two_env_rollout()
    buffer.rewards *= 10
    batch, _ = rollout_batch(buffer, next_value, norm, PPOConfig(gamma=0.9))
    # V_old re-expressed in the new statistics lies outside a band of clip_eps around the head's output
    assert ((norm.normalize(buffer.values * before[1] + before[0]) - buffer.values).abs() > 0.2).all()
    head = buffer.values.reshape(-1).clone().requires_grad_()  # the head's output as the update starts
    args = dict(log_probs=torch.full((6, 2), 0.5).log(), actions=torch.zeros(6, dtype=torch.long),
                old_log_probs=torch.full((6,), 0.5).log(), old_values=batch.values, advantages=batch.advantages,
                returns=batch.returns)
    clipped = ppo_loss(values=head, cfg=PPOConfig(), **args)
    plain = ppo_loss(values=head, cfg=PPOConfig(clip_value=False), **args)
    g_clipped, g_plain = (torch.autograd.grad(x.value_loss, head)[0] for x in (clipped, plain))
    assert (g_plain != 0).all()
    torch.testing.assert_close(g_clipped, g_plain)


def test_rollout_values_come_from_the_standardised_head():
    from glamrl.llm.policy import LLMPolicy
    from glamrl.rl.buffer import RolloutBuffer
    from glamrl.trainers.ppo import standardize_value_head

    torch.manual_seed(0)
    policy = LLMPolicy(ModelConfig(name="tiny-llama", device="cpu"))
    prompts = [[f"Goal of the agent: go to the {c} ball \\n Observation 0: You see a wall {n} steps forward, "
                f"\\n Action 0: " for c in ("red", "blue")] for n in range(1, 4)]
    buffer = RolloutBuffer(3, 2)
    with torch.inference_mode():
        for t, row in enumerate(prompts):
            buffer.add(t, row, np.zeros(2, dtype=int), torch.zeros(2), policy.values(row).float(),
                       np.zeros(2), np.zeros(2, dtype=bool), np.array([False, t == 1]))
        stored = buffer.values.clone()
        standardize_value_head(policy, buffer, [(1, np.array([1]), ["a final prompt"])])
        new = torch.stack([policy.values(row).float() for row in prompts])
        torch.testing.assert_close(buffer.values, new)
        torch.testing.assert_close(buffer.final_values[1, 1:], policy.values(["a final prompt"]).float())
    assert not torch.allclose(stored, new)


def test_ppo_loss_on_a_hand_computed_minibatch():
    cfg = PPOConfig(clip_eps=0.2, entropy_coef=0.01, value_coef=0.5)
    log_probs = torch.tensor([[0.5, 0.5], [0.8, 0.2]]).log()
    out = ppo_loss(
        log_probs=log_probs,
        values=torch.tensor([1.0, 0.0]),
        actions=torch.tensor([0, 1]),
        old_log_probs=torch.tensor([0.25, 0.2]).log(),  # ratios 2 (clipped to 1.2) and 1
        old_values=torch.tensor([0.5, 0.5]),
        advantages=torch.tensor([1.0, -2.0]),
        returns=torch.tensor([2.0, 0.0]),
        cfg=cfg,
    )
    entropy = (math.log(2) + -(0.8 * math.log(0.8) + 0.2 * math.log(0.2))) / 2
    assert out.policy_loss.item() == pytest.approx(-(1.2 - 2.0) / 2)
    assert out.value_loss.item() == pytest.approx((1.69 + 0.09) / 2)  # clipped value terms win
    assert out.entropy.item() == pytest.approx(entropy)
    assert out.loss.item() == pytest.approx(0.4 - 0.01 * entropy + 0.5 * 0.89)
    assert out.clipfrac.item() == pytest.approx(0.5)
    assert out.approx_kl.item() == pytest.approx(((2 - 1) - math.log(2)) / 2)


def test_unclipped_value_loss_is_the_plain_squared_error_and_keeps_its_gradient():
    # V moved 0.5 from V_old = 0.5 towards G = 2: the clipped loss stops the gradient there, the plain one does not
    values = torch.tensor([1.0], requires_grad=True)
    args = dict(log_probs=torch.tensor([[0.5, 0.5]]).log(), actions=torch.tensor([0]),
                old_log_probs=torch.tensor([0.5]).log(), old_values=torch.tensor([0.5]),
                advantages=torch.tensor([0.0]), returns=torch.tensor([2.0]))
    clipped = ppo_loss(values=values, cfg=PPOConfig(clip_eps=0.2), **args)
    assert clipped.value_loss.item() == pytest.approx(1.3 ** 2)
    assert torch.autograd.grad(clipped.value_loss, values)[0].item() == 0.0
    plain = ppo_loss(values=values, cfg=PPOConfig(clip_eps=0.2, clip_value=False), **args)
    assert plain.value_loss.item() == pytest.approx(1.0)
    assert torch.autograd.grad(plain.value_loss, values)[0].item() == pytest.approx(2 * (1.0 - 2.0))


def test_ppo_loss_gradient_pushes_up_advantaged_action():
    logits = torch.zeros(1, 3, requires_grad=True)
    log_probs = logits.log_softmax(1)
    out = ppo_loss(log_probs, torch.zeros(1), torch.tensor([2]), log_probs.detach()[:, 2], torch.zeros(1),
                   torch.tensor([1.0]), torch.zeros(1), PPOConfig(entropy_coef=0.0))
    out.loss.backward()
    assert logits.grad[0, 2] < 0 and logits.grad[0, 0] > 0


def test_value_normalizer_statistics_by_hand_and_round_trip():
    from glamrl.rl.value_norm import ValueNormalizer

    norm = ValueNormalizer(decay=0.5)
    assert norm.stats() == (0.0, 1.0)
    norm.update(torch.tensor([0.0, 2.0]))          # debiased: this rollout's mean 1, E[x^2] 2 -> std 1
    assert norm.stats() == pytest.approx((1.0, 1.0))
    norm.update(torch.tensor([4.0, 4.0]))
    # EMAs: mean 0.5*0.5 + 0.5*4 = 2.25, E[x^2] 0.5*1 + 0.5*16 = 8.5, weight 0.75
    mean, std = 2.25 / 0.75, math.sqrt(8.5 / 0.75 - (2.25 / 0.75) ** 2)
    assert norm.stats() == pytest.approx((mean, std))
    x = torch.tensor([-3.0, 0.0, 7.5])
    torch.testing.assert_close(norm.denormalize(norm.normalize(x)), x)
    torch.testing.assert_close(norm.normalize(x), (x - mean) / std)
    copy = ValueNormalizer(decay=0.5)
    copy.load_state_dict(norm.state_dict())
    assert copy.stats() == norm.stats()


TINY_PPO = ["env.id=BabyAI-TurnToObject-v0", "env.num_envs=4", "model.name=tiny-llama", "model.device=cpu",
            "prompt.nbr_obs=1", "ppo.num_steps=8", "ppo.minibatch_size=16", "ppo.epochs=1", "ppo.lr=1e-3",
            "ppo.value_lr=1e-2", "run.eval_episodes=0", "run.tensorboard=false"]
"""A tiny random Llama's PPO run: 32 frames per update, the value head at its own learning rate."""


def test_value_lr_gives_the_value_head_its_own_group_and_value_norm_resumes(tmp_path):
    from glamrl.config import load_train_config
    from glamrl.llm.policy import LLMPolicy
    from glamrl.trainers.ppo import parameter_groups, train_ppo

    torch.set_num_threads(1)
    policy = LLMPolicy(ModelConfig(name="tiny-llama", device="cpu"))
    plain, split = parameter_groups(policy, PPOConfig(lr=1e-4)), parameter_groups(policy, PPOConfig(lr=1e-4, value_lr=1e-2))
    head = {id(w) for w in policy.value_head.parameters()}
    assert len(plain) == 1 and [g["lr"] for g in split] == [1e-4, 1e-2]
    assert {id(w) for w in split[1]["params"]} == head and not head & {id(w) for w in split[0]["params"]}
    assert len(split[0]["params"]) + len(split[1]["params"]) == len(plain[0]["params"])

    tiny = [*TINY_PPO, "ppo.value_norm=true", "ppo.value_norm_decay=0.5"]
    run = tmp_path / "run"
    train_ppo(load_train_config(None, [*tiny, "ppo.total_frames=32"]), run, progress=False, say=lambda _: None)
    first = RunDir(run).load_checkpoint().extra["value_norm"]
    assert first["weight"].item() == pytest.approx(0.5)  # one rollout folded in
    train_ppo(load_train_config(None, [*tiny, "ppo.total_frames=64"]), run, resume=True, progress=False,
          say=lambda _: None)
    restored = RunDir(run).load_checkpoint().extra["value_norm"]
    assert restored["weight"].item() == pytest.approx(0.75)  # restored, then one more


def test_set_learning_rates_constant_or_linear_to_zero_in_frames():
    from glamrl.trainers.ppo import set_learning_rates

    w, v = torch.zeros(2, requires_grad=True), torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.Adam([{"params": [w], "lr": 1e-4}, {"params": [v], "lr": 1e-2}])
    for frames in (0, 300, 999):
        assert set_learning_rates(optimizer, [1e-4, 1e-2], PPOConfig(total_frames=1000), frames) == 1e-4
        assert [g["lr"] for g in optimizer.param_groups] == [1e-4, 1e-2]
    annealed = PPOConfig(total_frames=1000, anneal_lr=True)
    for frames, scale in ((0, 1.0), (250, 0.75), (900, 0.1)):
        assert set_learning_rates(optimizer, [1e-4, 1e-2], annealed, frames) == pytest.approx(1e-4 * scale)
        assert [g["lr"] for g in optimizer.param_groups] == pytest.approx([1e-4 * scale, 1e-2 * scale])


def test_anneal_lr_logs_each_update_rate_and_a_resume_continues_from_the_configured_rates(tmp_path):
    from glamrl.config import load_train_config
    from glamrl.trainers.ppo import train_ppo

    torch.set_num_threads(1)
    tiny = [*TINY_PPO, "ppo.anneal_lr=true"]
    run = tmp_path / "run"  # 32 frames per update: 2 updates over 64 frames, then 2 more to 128 on resume
    train_ppo(load_train_config(None, [*tiny, "ppo.total_frames=64"]), run, progress=False, say=lambda _: None)
    train_ppo(load_train_config(None, [*tiny, "ppo.total_frames=128"]), run, resume=True, progress=False,
              say=lambda _: None)
    # the schedule of each invocation's total: 1 - 0/64, 1 - 32/64, then 1 - 64/128, 1 - 96/128 (from the configured
    # 1e-3, not from the restored optimizer's last rate, which would give 0.25 and 0.125)
    rates = [row["learning_rate"] for row in RunDir(run).read_log()]
    assert rates == pytest.approx([1e-3, 5e-4, 5e-4, 2.5e-4])
    groups = RunDir(run).load_checkpoint().optimizer["param_groups"]
    assert [g["lr"] for g in groups] == pytest.approx([2.5e-4, 2.5e-3])  # the value head's group too
