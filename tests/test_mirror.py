"""The left-right mirror (glamrl/envs/mirror.py) against its definition, the description of the flipped view, and
the PPO mirror term (ppo.mirror_coef) against a slow reference: two separate forwards."""

import contextlib
import doctest

import gymnasium as gym
import numpy as np
import pytest
import torch

import glamrl.envs  # noqa: F401  (registers the levels)
from glamrl.config import ModelConfig, PPOConfig, load_train_config
from glamrl.envs import mirror
from glamrl.envs.actions import ACTION_NAMES, FRENCH_ACTION_NAMES, SYNONYM_ACTION_NAMES
from glamrl.envs.describe import describe
from glamrl.envs.mirror import MirrorError, mirror_actions, mirror_prompt, mirror_sentences, swap_sides
from glamrl.errors import GlamrlError
from glamrl.llm.policy import LLMPolicy, TimedPrompt, mirror_input
from glamrl.prompts import PromptHistory
from glamrl.rl.buffer import Batch
from glamrl.rl.ppo import Mirror, accumulate_gradients, ppo_loss, symmetric_kl
from glamrl.run.dir import RunDir
from glamrl.trainers.ppo import train_ppo

pytestmark = pytest.mark.usefixtures("one_thread")


def random_view(rng: np.random.Generator) -> np.ndarray:
    """A 7x7x3 view of unseen, empty, wall, door, key, ball and box cells, sometimes carrying an object."""
    kinds = rng.choice([0, 1, 2, 4, 5, 6, 7], size=(7, 7), p=[0.2, 0.45, 0.15, 0.05, 0.05, 0.05, 0.05])
    image = np.stack([kinds, rng.integers(0, 6, (7, 7)), rng.integers(0, 3, (7, 7)) * (kinds == 4)], axis=-1)
    image[3, 6] = (rng.choice([1, 5, 6, 7]), rng.integers(0, 6), 0)  # the agent's cell: empty or what it carries
    return image.astype(np.uint8)


def flipped(image: np.ndarray) -> np.ndarray:
    """The view of the world reflected about the agent's line of sight: column x becomes column 6 - x."""
    return np.ascontiguousarray(image[::-1])


def test_the_module_examples_hold():
    assert doctest.testmod(mirror).failed == 0


@pytest.mark.parametrize("language", ["en", "fr"])
@pytest.mark.parametrize("faithful", [False, True])
def test_mirrored_description_is_the_description_of_the_flipped_view(language, faithful):
    rng = np.random.default_rng(0)
    for _ in range(500):
        image = random_view(rng)
        sentences = describe(image, language, faithful)
        assert mirror_sentences(sentences) == describe(flipped(image), language, faithful)
        assert mirror_sentences(mirror_sentences(sentences)) == sentences


def test_mirrored_description_of_real_goto_local_views():
    env = gym.make("BabyAI-GoToLocal-v0")
    obs, _ = env.reset(seed=5)
    rng = np.random.default_rng(5)
    seen_sides = set()
    for _ in range(200):
        sentences = describe(obs["image"])
        seen_sides |= {w for s in sentences for w in ("left", "right") if w in s}
        assert mirror_sentences(sentences) == describe(flipped(obs["image"]))
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(0, 3)))
        if terminated or truncated:
            obs, _ = env.reset(seed=int(rng.integers(1000)))
    assert seen_sides == {"left", "right"}


@pytest.mark.parametrize("language, actions, mission", [
    ("en", ACTION_NAMES, "go to the red ball on your left"),
    ("fr", FRENCH_ACTION_NAMES, "aller à la balle rouge à ta gauche, puis ouvrir la porte"),
])
@pytest.mark.parametrize("nbr_obs", [1, 3])
def test_mirror_prompt_is_the_prompt_of_the_mirrored_episode(language, actions, mission, nbr_obs):
    """An episode's prompts, and the prompts of the same episode in the mirrored world (views flipped, mission
    and actions taken mirrored): `mirror_prompt` turns the first into the second, and back."""
    rng = np.random.default_rng(nbr_obs)
    history, mirrored_history = PromptHistory(nbr_obs), PromptHistory(nbr_obs)
    for step in range(6):
        image, action = random_view(rng), actions[int(rng.integers(0, 6))]
        goal_header = "You have to" if step % 2 else None
        prompt = history.prompt(actions, mission, describe(image, language), language, goal_header)
        expected = mirrored_history.prompt(actions, swap_sides(mission), describe(flipped(image), language),
                                           language, goal_header)
        assert mirror_prompt(prompt) == expected
        assert mirror_prompt(expected) == prompt
        assert prompt.split(" \n ")[0] == expected.split(" \n ")[0]  # the possible actions, in the same order
        history.record(describe(image, language), action)
        mirrored_history.record(describe(flipped(image), language), swap_sides(action))


def test_a_timed_input_keeps_its_step():
    prompt = PromptHistory(1).prompt(ACTION_NAMES, "go to the box", ["You see a red box 2 steps left"])
    assert mirror_input(TimedPrompt(prompt, 3, 64)) == TimedPrompt(mirror_prompt(prompt), 3, 64)
    assert "2 steps right" in mirror_input(prompt)


def test_actions_map_to_their_mirror_images():
    assert mirror_actions(ACTION_NAMES) == [1, 0, 2, 3, 4, 5]
    assert mirror_actions(FRENCH_ACTION_NAMES) == [1, 0, 2, 3, 4, 5]  # "aller tout droit" is not a side
    assert mirror_actions(SYNONYM_ACTION_NAMES) == [1, 0, 2, 3, 4, 5]
    assert mirror_actions(["go forward", "turn right", "turn left"]) == [0, 2, 1]
    with pytest.raises(MirrorError, match="'turn left' has none"):
        mirror_actions(["turn left", "go forward"])


@pytest.mark.parametrize("text", ["hello", "Possible action of the agent: a \n Goal of the agent: m",
                                  "Possible action of the agent: a \n Goal of the agent: m \n Observation 0: x"])
def test_a_text_that_is_not_a_prompt_is_refused(text):
    with pytest.raises(MirrorError, match="cannot mirror"):
        mirror_prompt(text)


# ------------------------------------------------------------------- the PPO mirror term
def test_symmetric_kl_is_the_mean_of_both_kls():
    torch.manual_seed(0)
    log_p, log_q = torch.randn(5, 6).log_softmax(1), torch.randn(5, 6).log_softmax(1)
    P, Q = torch.distributions.Categorical(logits=log_p), torch.distributions.Categorical(logits=log_q)
    reference = ((torch.distributions.kl_divergence(P, Q) + torch.distributions.kl_divergence(Q, P)) / 2).mean()
    assert symmetric_kl(log_p, log_q).item() == pytest.approx(reference.item(), rel=1e-6)
    assert symmetric_kl(log_p, log_p).item() == 0


def _episode_prompts(n: int) -> list[str]:
    rng = np.random.default_rng(1)
    history, prompts = PromptHistory(2), []
    for _ in range(n):
        sentences = describe(random_view(rng))
        prompts.append(history.prompt(ACTION_NAMES, "go to the red ball", sentences))
        history.record(sentences, ACTION_NAMES[int(rng.integers(0, 3))])
    return prompts


@pytest.mark.parametrize("grad_accum", [1, 2])
def test_mirror_term_gradients_equal_two_separate_forwards(grad_accum):
    prompts = _episode_prompts(6)
    batch = Batch(prompts, torch.tensor([0, 1, 2, 0, 1, 2]), torch.full((6,), -1.7), torch.zeros(6),
                  torch.tensor([1.0, -1.0, 0.5, 2.0, -0.5, 0.0]), torch.ones(6), torch.zeros(6, dtype=torch.bool))
    cfg = PPOConfig(grad_accum=grad_accum, minibatch_size=6, mirror_coef=0.7)
    order = torch.tensor([[5, 0, 3, 1, 4, 2]])

    def fresh_policy():
        torch.manual_seed(0)
        return LLMPolicy(ModelConfig(name="tiny-llama", device="cpu", compute_dtype="float32"))

    fast = fresh_policy()
    stats = accumulate_gradients(fast, batch, order, ACTION_NAMES, cfg, Mirror(mirror_input, [1, 0, 2, 3, 4, 5]))

    slow = fresh_policy()  # the whole minibatch at once; the mirror images in a forward of their own
    idx = order[0]
    out = slow([prompts[i] for i in idx], ACTION_NAMES)
    mirrored = slow([mirror_prompt(prompts[i]) for i in idx], ACTION_NAMES).log_probs[:, [1, 0, 2, 3, 4, 5]]
    plain = ppo_loss(out.log_probs, out.values, batch.actions[idx], batch.log_probs[idx], batch.values[idx],
                     batch.advantages[idx], batch.returns[idx], cfg)
    kl = symmetric_kl(out.log_probs, mirrored)
    (plain.loss + cfg.mirror_coef * kl).backward()

    assert kl.item() > 1e-4  # a random policy is not mirror-symmetric: the term has something to do
    assert np.mean([s["mirror_kl"] for s in stats]) == pytest.approx(kl.item(), rel=1e-4)
    slow_grads = dict(slow.named_parameters())
    for name, w in fast.named_parameters():
        if w.grad is not None:
            torch.testing.assert_close(w.grad, slow_grads[name].grad, rtol=1e-4, atol=1e-6, msg=name)


def test_the_mirror_term_alone_undoes_a_one_turn_bias():
    """A policy first taught to turn left everywhere (the walk PPO found on GoToLocal), then trained on the mirror
    term alone (zero advantages, no value loss, no entropy): it ends up choosing turn right on a mirrored prompt
    as often as turn left on its original."""
    prompts = _episode_prompts(8)
    torch.manual_seed(0)
    policy = LLMPolicy(ModelConfig(name="tiny-llama", device="cpu", compute_dtype="float32"))
    optimizer = torch.optim.Adam([w for w in policy.parameters() if w.requires_grad], lr=3e-3)
    for _ in range(20):  # the one-turn bias
        optimizer.zero_grad()
        (-policy(prompts, ACTION_NAMES).log_probs[:, 0].mean()).backward()
        optimizer.step()
    batch = Batch(prompts, torch.zeros(8, dtype=torch.long), torch.full((8,), -1.8), torch.zeros(8),
                  torch.zeros(8), torch.zeros(8), torch.zeros(8, dtype=torch.bool))
    cfg = PPOConfig(minibatch_size=8, mirror_coef=1.0, entropy_coef=0.0, value_coef=0.0)
    kls = []
    for _ in range(60):
        optimizer.zero_grad()
        kls.append(accumulate_gradients(policy, batch, torch.arange(8)[None], ACTION_NAMES, cfg,
                                        Mirror(mirror_input, [1, 0, 2, 3, 4, 5]))[0]["mirror_kl"])
        optimizer.step()
    print(f"mirror KL {kls[0]:.4f} -> {kls[-1]:.6f}")
    assert kls[0] > 0.5  # turn left on both sides
    assert kls[-1] < 0.01 * kls[0]
    with torch.no_grad():
        p = policy(prompts, ACTION_NAMES).log_probs.exp()
        q = policy([mirror_prompt(x) for x in prompts], ACTION_NAMES).log_probs.exp()
    torch.testing.assert_close(p[:, 0], q[:, 1], atol=0.03, rtol=0)


def test_a_ppo_run_with_the_mirror_term_logs_it(tmp_path):
    cfg = load_train_config(None, [
        "env.id=BabyAI-TurnToObject-v0", "env.num_envs=4", "model.name=tiny-llama", "model.device=cpu",
        "model.train_layers=1", "ppo.num_steps=8", "ppo.minibatch_size=16", "ppo.epochs=2", "ppo.total_frames=64",
        "ppo.mirror_coef=0.5", "run.tensorboard=false", "run.eval_episodes=4"])
    train_ppo(cfg, tmp_path / "run", progress=False, say=lambda _: None)
    rows = RunDir(tmp_path / "run").read_log()
    assert len(rows) == 2 and all(r["mirror_kl"] > 0 for r in rows)


def test_the_mirror_term_is_refused_where_the_agent_reads_no_prompt():
    with pytest.raises(GlamrlError, match="ppo.mirror_coef=0.5 mirrors prompts, and agent.kind='symbolic'"):
        load_train_config(None, ["agent.kind=symbolic", "ppo.mirror_coef=0.5"])
    with pytest.raises(GlamrlError, match="mirror_coef"):
        load_train_config(None, ["ppo.mirror_coef=-1"])
    # a mirror run's config read by an agent PPO does not train (the bot replaying its frames, random)
    assert load_train_config(None, ["agent.kind=bot", "ppo.mirror_coef=0.5"]).ppo.mirror_coef == 0.5


def _update_misses(keep: bool) -> tuple[int, list[int]]:
    """How many mirror images of 6 collected prompts are new, and the frozen trunk's misses over two PPO epochs
    with the mirror term, inside `keeping()` or not (tiny-llama with its top block trained)."""
    prompts = _episode_prompts(6)
    torch.manual_seed(0)
    policy = LLMPolicy(ModelConfig(name="tiny-llama", device="cpu", compute_dtype="float32", train_layers=1))
    with torch.inference_mode(), policy.collecting():
        policy(prompts, ACTION_NAMES)
    batch = Batch(prompts, torch.zeros(6, dtype=torch.long), torch.full((6,), -1.8), torch.zeros(6),
                  torch.ones(6), torch.zeros(6), torch.zeros(6, dtype=torch.bool))
    cfg, images = PPOConfig(minibatch_size=6, mirror_coef=1.0), Mirror(mirror_input, [1, 0, 2, 3, 4, 5])
    misses = [policy.trunk.misses]
    with policy.keeping() if keep else contextlib.nullcontext():
        for epoch in range(2):
            accumulate_gradients(policy, batch, torch.arange(6)[None], ACTION_NAMES, cfg, images)
            misses.append(policy.trunk.misses - misses[0])
    return len({mirror_prompt(x) for x in prompts} - set(prompts)), misses[1:]


def test_the_mirror_images_frozen_trunk_is_computed_once_per_update():
    """With model.train_layers the collected prompts' lower blocks are cached; inside `keeping()` (PPO's epochs
    with the mirror term) the mirror images' are too, so the second epoch computes none of them again."""
    new_images, kept = _update_misses(keep=True)
    assert new_images > 0 and kept == [new_images, new_images]
    assert _update_misses(keep=False)[1] == [new_images, 2 * new_images]  # without: every epoch again
