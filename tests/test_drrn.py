"""DRRN: the Q targets by hand, the mission kept in every encoded text, exploration, the replay ring,
learning a small level, resume."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from glamrl.agents.drrn import DRRNAgent, DRRNetwork, Exploration
from glamrl.config import AgentConfig, ConfigError, DRRNConfig, load_train_config
from glamrl.envs import make_vector_env
from glamrl.envs.actions import ACTION_NAMES
from glamrl.envs.vocabulary import PAD, UNK, VOCABULARY, encode_texts, word_ids
from glamrl.prompts import build_prompt
from glamrl.rl.dqn import double_q_loss, linear_epsilon
from glamrl.rl.replay import ReplayMemory
from glamrl.rollout import step
from glamrl.run.dir import RunDir
from glamrl.run.metrics import LOG_METRICS
from glamrl.trainers.common import evaluate_policy
from glamrl.trainers.drrn import train_drrn

pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[1]

TINY = [  # epsilon-greedy double Q-learning at a high lr: learns TurnToObject in 1,600 frames
    "agent.kind=drrn", "env.id=BabyAI-TurnToObject-v0", "env.num_envs=8", "env.seed=2",
    "drrn.embedding_dim=32", "drrn.hidden_size=64", "drrn.learning_starts=160", "drrn.exploration=epsilon",
    "drrn.epsilon_decay_frames=800", "drrn.double_q=true", "drrn.target_update_every=20", "drrn.lr=1e-3",
    "drrn.train_every=1", "drrn.reward_scale=10", "drrn.max_tokens=96", "drrn.log_every=400", "run.tensorboard=false",
]


def test_double_q_target_uses_the_online_argmax_valued_by_the_target():
    q = torch.tensor([[1.0, 2.0], [0.5, 0.0]], requires_grad=True)
    next_online = torch.tensor([[0.0, 9.0], [3.0, 1.0]])   # picks action 1, then action 0
    next_target = torch.tensor([[5.0, 2.0], [4.0, 8.0]])   # values them 2.0 and 4.0
    loss = double_q_loss(q, next_online, next_target, torch.tensor([1, 0]), torch.tensor([1.0, 0.0]),
                         torch.tensor([False, True]), gamma=0.5)
    # targets: 1 + 0.5 * 2 = 2.0 (Q 2.0, error 0); terminated: 0 (Q 0.5, Huber 0.5 * 0.5^2 = 0.125)
    assert loss.item() == pytest.approx((0.0 + 0.125) / 2)
    # plain Q-learning (GLAM's): the target network's own max values o'
    plain = double_q_loss(q, next_target, next_target, torch.tensor([1, 0]), torch.tensor([1.0, 0.0]),
                          torch.tensor([False, False]), gamma=0.5)
    # targets: 1 + 0.5 * 5 = 3.5 (Q 2.0, Huber 1.5 - 0.5 = 1.0); 0 + 0.5 * 8 = 4.0 (Q 0.5, Huber 3.0)
    assert plain.item() == pytest.approx((1.0 + 3.0) / 2)
    assert linear_epsilon(0, 1.0, 0.1, 100) == 1.0 and linear_epsilon(50, 1.0, 0.1, 100) == pytest.approx(0.55)
    assert linear_epsilon(500, 1.0, 0.1, 100) == pytest.approx(0.1)


def test_word_vocabulary_maps_unknown_words_to_unk_and_keeps_the_last_words():
    ids = word_ids("You see a dax 2 steps left")
    assert ids[3] == UNK and VOCABULARY[ids[4]] == "2" and UNK not in ids[:3] + ids[4:]
    assert word_ids("Tu vois une clef rouge") == [VOCABULARY.index(w) for w in ("tu", "vois", "une", "clef", "rouge")]
    encoded = encode_texts(["go to the red ball", "a b"], max_tokens=3)
    assert encoded[0].tolist() == [VOCABULARY.index(w) for w in ("the", "red", "ball")]
    assert encoded[1, 2].item() == 0  # right-padded


def test_the_tokenizer_sizes_the_embedding_and_only_subwords_tell_unknown_words_apart():
    from glamrl.config import ConfigError
    from glamrl.envs.subwords import subword_tokenizer

    names = ("rotate left", "dax", "xolo", "chaise", "go forward", "toggle")
    rows = {}
    for tokenizer, size in [("subword", subword_tokenizer().get_vocab_size()), ("word", len(VOCABULARY))]:
        network = DRRNetwork(DRRNConfig(embedding_dim=8, hidden_size=8, tokenizer=tokenizer))
        assert network.embedding.num_embeddings == size
        agent = DRRNAgent(network, 1, names, nbr_obs=1)
        rows[tokenizer] = {tuple(row.tolist()) for row in agent.action_ids}
        assert int(agent.action_ids.max()) < size
    assert len(rows["subword"]) == 6 and len(rows["word"]) == 4  # dax, xolo, chaise: all one <unk> word
    assert DRRNConfig().tokenizer == "subword"
    with pytest.raises(ConfigError, match="drrn.tokenizer must be one of subword, word, got 'bpe'"):
        DRRNConfig(tokenizer="bpe")


def test_replay_memory_overwrites_the_oldest_and_round_trips():
    memory = ReplayMemory(capacity=5, obs_len=2)
    for start in (0, 3):
        n = 3
        obs = torch.arange(start, start + n)[:, None].repeat(1, 2)
        memory.add(obs, torch.arange(n), torch.ones(n), obs + 1, torch.zeros(n, dtype=torch.bool))
    assert len(memory) == 5 and memory.obs[:, 0].tolist() == [5, 1, 2, 3, 4]
    copy = ReplayMemory(capacity=5, obs_len=2)
    copy.load_state_dict(memory.state_dict())
    assert torch.equal(copy.obs, memory.obs) and copy.pos == memory.pos == 1


def test_replay_storage_grows_with_what_it_holds_up_to_capacity():
    # GLAM's 1.5M-frame memory of 512-token texts: 3.1 GB of int16 ids once full, nothing up front
    memory = ReplayMemory(capacity=DRRNConfig().replay_size, obs_len=512)
    assert memory.obs.numel() == 0 and memory.obs.dtype == torch.int16
    n = 5000
    obs = torch.randint(0, 30000, (n, 512))
    memory.add(obs, torch.zeros(n, dtype=torch.long), torch.ones(n), obs + 1, torch.zeros(n, dtype=torch.bool))
    assert len(memory.obs) == n and torch.equal(memory.obs[:n].long(), obs)  # int16 holds ids < 32768
    memory.add(obs[:10], torch.zeros(10, dtype=torch.long), torch.ones(10), obs[:10], torch.zeros(10, dtype=torch.bool))
    assert len(memory.obs) == 2 * n and len(memory) == n + 10                              # doubled, not 1.5M rows
    with pytest.raises(ValueError, match="int16"):
        memory.add(obs[:1] + 40000, torch.zeros(1, dtype=torch.long), torch.ones(1), obs[:1],
                   torch.zeros(1, dtype=torch.bool))


def test_drrn_learns_to_turn_towards_the_object_and_beats_random_on_the_same_seeds(tmp_path):
    # Measured (200 greedy eval episodes): DRRN after 1,600 frames 1.00 with env.seed 1, 2 and 3 (greedy before
    # training: 0.52, 0.00, 0.00); random ~0.17 (one action in six); 25-35 s on a shared 2-core machine.
    cfg = load_train_config(None, [*TINY, "drrn.total_frames=1600", "run.eval_episodes=200", "run.eval_greedy=true"])
    result = train_drrn(cfg, tmp_path / "run", progress=False, say=lambda _: None)
    random_cfg = dataclasses.replace(cfg, agent=AgentConfig(kind="random"))
    random_success = evaluate_policy(random_cfg, None)["success_rate"]
    print(f"random {random_success:.2f}, DRRN {result.success_before:.2f} -> {result.success_after:.2f}")
    assert random_success < 0.3  # one action in six succeeds
    assert result.success_after >= 0.9
    rows = RunDir(tmp_path / "run").read_log()
    assert [r["update"] for r in rows] == [1, 2, 3, 4] and rows[-1]["frames"] == 1600
    assert rows[-1]["loss"] >= 0 and rows[0]["success_rate"] < rows[-1]["success_rate"]
    assert rows[-1]["q_mean"] > 0 and 0 <= rows[-1]["epsilon"] <= 1  # DRRN's own columns reach log.csv
    assert set(rows[0]) <= set(LOG_METRICS)  # and each is documented


def test_drrn_resume_continues_with_its_replay_memory(tmp_path):
    run = tmp_path / "run"
    kept = [o for o in TINY if not o.startswith(("drrn.log_every=", "drrn.learning_starts="))]
    short = [*kept, "drrn.log_every=160", "drrn.learning_starts=80"]
    train_drrn(load_train_config(None, [*short, "drrn.total_frames=160"]), run, progress=False, say=lambda _: None)
    state = RunDir(run).load_checkpoint().to_dict()
    assert state["frames"] == 160 and state["replay"]["size"] == 160 and state["grad_steps"] == 11
    assert set(state) == {"trainer", "log_rows", "frames", "episodes", "duration", "policy", "optimizer", "rng",
                          "config", "target", "replay", "grad_steps"}  # the keys DRRN's checkpoints have always had
    result = train_drrn(load_train_config(None, [*short, "drrn.total_frames=320"]), run, resume=True,
                        progress=False, say=lambda _: None)
    assert result.log_rows == 2 and result.row == "log row"  # "trained 2 log rows", not "2 updates"
    assert RunDir(run).load_checkpoint().extra["replay"]["size"] == 320
    assert [r["update"] for r in RunDir(run).read_log()] == [1, 2]


UNTRAINED = ["agent.kind=drrn", "env.id=BabyAI-TurnToObject-v0", "env.num_envs=8", "drrn.embedding_dim=8",
             "drrn.hidden_size=8", "drrn.learning_starts=10000", "drrn.max_tokens=64", "drrn.log_every=32",
             "drrn.total_frames=640", "run.tensorboard=false"]  # no gradient step: a row of 32 one-step episodes


def test_drrn_stops_after_the_row_past_max_minutes_with_a_checkpoint(tmp_path):
    run = tmp_path / "run"
    result = train_drrn(load_train_config(None, [*UNTRAINED, "run.max_minutes=1e-6"]), run, progress=False,
                        say=lambda _: None)
    assert result.frames == 32 and [r["frames"] for r in RunDir(run).read_log()] == [32]
    assert RunDir(run).load_checkpoint().progress.log_rows == 1
    again = train_drrn(load_train_config(None, [*UNTRAINED, "run.max_minutes=1e-6"]), run, resume=True,
                       progress=False, say=lambda _: None)
    assert again.frames == 32 and len(RunDir(run).read_log()) == 1  # the time used up: a resume trains no further


def test_drrn_stops_after_the_first_row_that_reaches_stop_at_success(tmp_path):
    # seed 1, untrained (softmax over near-equal Q): rows of 0.06 to 0.19 success, then 0.22 at row 11
    run = tmp_path / "run"
    result = train_drrn(load_train_config(None, [*UNTRAINED, "run.stop_at_success=0.2"]), run, progress=False,
                        say=lambda _: None)
    rows = RunDir(run).read_log()
    assert rows[-1]["success_rate"] >= 0.2 and all(r["success_rate"] < 0.2 for r in rows[:-1])
    assert result.frames == rows[-1]["frames"] < 640 and RunDir(run).load_checkpoint().progress.frames == result.frames


def test_drrn_refuses_what_only_ppo_reads_in_one_line(tmp_path):
    for unread in ("run.probes=configs/probes/glam.yaml", "ppo.lr=0.1", "model.name=tiny-llama"):
        with pytest.raises(ConfigError, match=f"^{unread}: the drrn loop does not read it"):
            train_drrn(load_train_config(None, [*UNTRAINED, unread]), tmp_path / "run", progress=False,
                       say=lambda _: None)
    assert not (tmp_path / "run").exists()


def test_encoded_texts_keep_the_head_whole_and_cut_the_oldest_words():
    encoded = encode_texts(["red green blue grey purple", "door"], max_tokens=4, heads=["go to", "the red ball key"])
    assert [VOCABULARY[i] for i in encoded[0]] == ["go", "to", "grey", "purple"]
    assert [VOCABULARY[i] for i in encoded[1]] == ["the", "red", "ball", "key"]


@pytest.mark.parametrize("level, tokenizer", [("BabyAI-MixedTrainLocal-v0", "subword"),
                                              ("BabyAI-MixedTestLocal-v0", "subword"),
                                              ("BabyAI-MixedTrainLocal-v0", "word")])
def test_every_encoded_input_contains_the_mission_and_the_newest_observation(level, tokenizer):
    # 500 states of random play (the prompts are ~220 words, up to ~470): with a budget shorter than
    # most texts the action list, the goal and the newest description must all survive the cut.
    envs = make_vector_env(level, 5)
    network = DRRNetwork(DRRNConfig(embedding_dim=8, hidden_size=8, max_tokens=120, tokenizer=tokenizer))
    agent = DRRNAgent(network, 5, ACTION_NAMES, nbr_obs=3, exploration=Exploration("softmax"), seed=0)

    def read(text: str) -> list[int]:  # the whole text's ids
        return [i for i in network.encode_texts([text], 2048, None)[0].tolist() if i != PAD]

    obs, _ = envs.reset(seed=5)
    for _ in range(100):
        ids = agent.encode(obs, range(5))                                      # (5, 120)
        for i, (row, mission, sentences) in enumerate(zip(ids.tolist(), obs["mission"], obs["descriptions"])):
            words = [w for w in row if w != PAD]
            head = read(build_prompt(ACTION_NAMES, mission, [], []))
            assert words[: len(head)] == head                                  # action list and goal, whole
            newest = read(agent.histories[i].prompt(ACTION_NAMES, mission, sentences))[-10:]
            assert words[-10:] == newest                                       # the current observation's end
        s = step(envs, agent, obs)
        agent.end_episodes(s.done)
        obs = s.next_obs
    envs.close()


def test_exploration_distributions_and_sampling():
    q = torch.tensor([[1.0, 3.0, 2.0]])
    torch.testing.assert_close(Exploration("softmax", temperature=2.0).probs(q), torch.softmax(q / 2, dim=1))
    torch.testing.assert_close(Exploration("epsilon", epsilon=0.3).probs(q), torch.tensor([[0.1, 0.8, 0.1]]))
    assert Exploration("greedy").probs(q).tolist() == [[0.0, 1.0, 0.0]]
    # the agent's draws follow the distribution it reports
    envs = make_vector_env("BabyAI-GoToObjS4-v0", 4)
    agent = DRRNAgent(DRRNetwork(DRRNConfig(embedding_dim=8, hidden_size=8, max_tokens=64)), 4, ACTION_NAMES, 1,
                      exploration=Exploration("softmax", temperature=0.05), seed=1)
    obs, _ = envs.reset(seed=1)
    counts, expected = np.zeros(6), np.zeros(6)
    for _ in range(500):
        d = agent.act(obs)
        np.add.at(counts, d.actions, 1)
        expected += d.probs.sum(0)
        agent.end_episodes(np.ones(4, dtype=bool))
    assert np.abs(counts - expected).max() < 5 * np.sqrt(expected.max())
    envs.close()


def test_drrn_with_softmax_exploration_and_plain_q_target_learns_to_turn(tmp_path):
    # configs/drrn.yaml (softmax over Q, max_a' Q_target target, reward x 20) on TurnToObject, smaller and
    # faster: lr 1e-3, one gradient step per vector step of 8 envs.
    overrides = ["env.id=BabyAI-TurnToObject-v0", "env.num_envs=8", "env.seed=2", "drrn.embedding_dim=32",
                 "drrn.hidden_size=64", "drrn.train_every=1", "drrn.lr=1e-3", "drrn.max_tokens=96",
                 "drrn.log_every=800", "drrn.total_frames=2400", "run.eval_episodes=100", "run.eval_greedy=true",
                 "run.tensorboard=false"]
    cfg = load_train_config(ROOT / "configs" / "drrn.yaml", overrides)
    assert (cfg.drrn.exploration, cfg.drrn.double_q, cfg.drrn.reward_scale) == ("softmax", False, 20.0)
    result = train_drrn(cfg, tmp_path / "run", progress=False, say=lambda _: None)
    print(f"DRRN softmax {result.success_before:.2f} -> {result.success_after:.2f}")
    assert result.success_after >= 0.9


@pytest.mark.parametrize("bootstrap", [False, True])
def test_drrn_time_outs_are_terminal_unless_bootstrapped(tmp_path, bootstrap):
    # GoToObjS4 cut after two steps: most episodes time out; GLAM's Q target treats a time-out as the end
    run = tmp_path / "run"
    kept = [o for o in TINY if not o.startswith(("drrn.log_every=", "drrn.learning_starts=", "env.id="))]
    train_drrn(load_train_config(None, [*kept, "env.id=BabyAI-GoToObjS4-v0", "env.max_steps=2", "drrn.log_every=160", "drrn.learning_starts=80",
                                        "drrn.total_frames=160", f"drrn.bootstrap_truncation={str(bootstrap).lower()}"]),
               run, progress=False, say=lambda _: None)
    state = RunDir(run).load_checkpoint().to_dict()
    ends = int(state["replay"]["terminated"][:state["replay"]["size"]].sum())
    episodes = state["episodes"]
    assert episodes >= 60  # 8 envs x 20 steps, episodes of at most 2 steps
    assert (ends == episodes) if not bootstrap else (ends < episodes)
