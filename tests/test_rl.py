import math

import pytest
import torch

from glamrl.config import PPOConfig
from glamrl.rl.gae import compute_gae
from glamrl.rl.ppo import ppo_loss


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


def test_ppo_loss_gradient_pushes_up_advantaged_action():
    logits = torch.zeros(1, 3, requires_grad=True)
    log_probs = logits.log_softmax(1)
    out = ppo_loss(log_probs, torch.zeros(1), torch.tensor([2]), log_probs.detach()[:, 2], torch.zeros(1),
                   torch.tensor([1.0]), torch.zeros(1), PPOConfig(entropy_coef=0.0))
    out.loss.backward()
    assert logits.grad[0, 2] < 0 and logits.grad[0, 0] > 0
