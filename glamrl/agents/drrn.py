"""DRRN (He et al. 2016): Q(o, a) from a GRU encoding of the observation text and one of the action's text.

The observation text is GLAM's prompt, as GLAM's DRRN read it: the action list, the goal
and the last `nbr_obs` descriptions with the actions between them, read by `drrn.tokenizer`:
subword pieces (`glamrl.envs.subwords`: one per word of BabyAI-Text, an unknown word spelled
out) or the closed word vocabulary (`glamrl.envs.vocabulary`: an unknown word reads `<unk>`).
A text longer than `max_tokens` pieces keeps its head (action list and goal) whole and
loses its oldest observations first. Each action's name is encoded by a second GRU; an
MLP over the pair gives Q. The agent owns the action names: the ones its text lists are
the ones it encodes and scores. It acts by sampling softmax(Q / temperature), as GLAM's
DRRN did in training and test, or epsilon-greedily (`Exploration`). Training (replay
memory, Q-learning) lives in `glamrl/trainers/drrn.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from glamrl.agents.base import Decision, WholeNetwork
from glamrl.agents.registry import AgentRequest
from glamrl.config import DRRNConfig, TrainConfig
from glamrl.envs.subwords import encode_subwords, subword_tokenizer
from glamrl.envs.vocabulary import PAD, VOCABULARY, encode_texts
from glamrl.prompts import PromptHistory, build_prompt

ACTION_TOKENS = 16  # pieces of an action name kept by the action encoder (a spelled-out word takes one per letter)

TextEncoder = Callable[[Sequence[str], int, Sequence[str] | None], Tensor]
"""(texts, max_tokens, heads) -> (len(texts), max_tokens) ids: `glamrl.envs.vocabulary.encode_texts`'s contract."""


def text_encoder(tokenizer: str) -> tuple[int, TextEncoder]:
    """The vocabulary size and the encoder of `drrn.tokenizer` (subword or word)."""
    if tokenizer == "word":
        return len(VOCABULARY), encode_texts
    return subword_tokenizer().get_vocab_size(), encode_subwords


@dataclass(frozen=True)
class Exploration:
    """How the agent draws an action from its Q-values."""

    kind: str = "softmax"
    """"softmax": sample softmax(Q / temperature); "epsilon": argmax, or uniform with probability epsilon;
    "greedy": argmax."""
    temperature: float = 1.0
    epsilon: float = 0.0

    def probs(self, q: Tensor) -> Tensor:
        """(N, A) Q-values -> (N, A) the distribution actions are drawn from."""
        if self.kind == "softmax":
            return torch.softmax(q / self.temperature, dim=1)
        best = torch.nn.functional.one_hot(q.argmax(dim=1), q.shape[1]).float()    # (N, A)
        if self.kind == "greedy":
            return best
        return (1 - self.epsilon) * best + self.epsilon / q.shape[1]


class DRRNetwork(WholeNetwork):
    """Q-values of candidate actions (encoded names) for a batch of encoded observations."""

    def __init__(self, config: DRRNConfig) -> None:
        super().__init__()
        self.config = config
        E, H = config.embedding_dim, config.hidden_size
        vocab_size, self.encode_texts = text_encoder(config.tokenizer)  # the ids its embedding table reads
        self.embedding = nn.Embedding(vocab_size, E, padding_idx=PAD)
        self.obs_encoder = nn.GRU(E, H, batch_first=True)
        self.action_encoder = nn.GRU(E, H, batch_first=True)
        self.q_head = nn.Sequential(nn.Linear(2 * H, H), nn.ReLU(), nn.Linear(H, 1))

    def _encode(self, gru: nn.GRU, ids: Tensor) -> Tensor:
        """(B, L) right-padded ids -> (B, H) GRU state at each sequence's last piece."""
        lengths = (ids != PAD).sum(1).clamp(min=1)                          # (B,)
        ids = ids[:, : int(lengths.max())]                                  # (B, L') drop the all-padding tail
        out, _ = gru(self.embedding(ids))                                   # (B, L', H)
        return out[torch.arange(len(ids)), lengths - 1]

    def forward(self, obs_ids: Tensor, action_ids: Tensor) -> Tensor:
        """(B, L) observation ids and (A, ACTION_TOKENS) action-name ids -> (B, A) Q-values."""
        h_obs = self._encode(self.obs_encoder, obs_ids)                   # (B, H)
        h_act = self._encode(self.action_encoder, action_ids)             # (A, H)
        B, A = len(h_obs), len(h_act)
        pairs = torch.cat([h_obs[:, None].expand(B, A, -1), h_act[None].expand(B, A, -1)], dim=-1)  # (B, A, 2H)
        return self.q_head(pairs).squeeze(-1)


class DRRNAgent:
    """Keeps each env's text history; draws actions from the network's Q-values by `exploration`.

    `Decision.inputs` holds each env's encoded observation, (L,) int64, for the replay memory.
    """

    def __init__(self, network: DRRNetwork, num_envs: int, action_names: Sequence[str], nbr_obs: int,
                 language: str = "en", goal_header: str | None = None,
                 exploration: Exploration = Exploration(), seed: int | None = None) -> None:
        self.network = network
        self.action_names = tuple(action_names)
        self.action_ids = network.encode_texts(self.action_names, ACTION_TOKENS, None)  # (A, ACTION_TOKENS)
        self.language = language
        self.goal_header = goal_header
        self.exploration = exploration
        self.rng = np.random.default_rng(seed)
        self.histories = [PromptHistory(nbr_obs) for _ in range(num_envs)]

    def encode(self, obs: dict[str, Any], envs: Sequence[int]) -> Tensor:
        """(len(envs), max_tokens) ids of the observation texts of `envs` (histories not updated)."""
        texts, heads = [], []
        for i, mission, sentences in zip(envs, obs["mission"], obs["descriptions"]):
            head = build_prompt(self.action_names, mission, [], [], self.language, self.goal_header)
            text = self.histories[i].prompt(self.action_names, mission, sentences, self.language, self.goal_header)
            texts.append(text[len(head):])  # the observations and actions after the head
            heads.append(head)
        return self.network.encode_texts(texts, self.network.config.max_tokens, heads)

    def q_values(self, obs_ids: Tensor) -> Tensor:
        """(B, L) encoded observations -> (B, A) Q-values over this agent's action names."""
        return self.network(obs_ids, self.action_ids)

    @torch.no_grad()
    def act(self, obs: dict[str, Any]) -> Decision:
        ids = self.encode(obs, range(len(self.histories)))                 # (N, L)
        probs = self.exploration.probs(self.q_values(ids)).numpy()         # (N, A)
        draws = self.rng.random((len(probs), 1))                           # (N, 1)
        actions = np.minimum((draws >= probs.cumsum(axis=1)).sum(axis=1), probs.shape[1] - 1)  # (N,) inverse CDF
        for history, sentences, a in zip(self.histories, obs["descriptions"], actions.tolist()):
            history.record(sentences, self.action_names[a])
        return Decision(actions=actions.astype(np.int64), probs=probs, inputs=list(ids))

    def end_episodes(self, done: np.ndarray) -> None:
        for history, d in zip(self.histories, done):
            if d:
                history.clear()


def build_model(cfg: TrainConfig) -> DRRNetwork:
    """agent.kind=drrn's network (the registry's entry point), from drrn.*."""
    return DRRNetwork(cfg.drrn)


def build_agent(r: AgentRequest) -> DRRNAgent:
    """agent.kind=drrn's agent (the registry's entry point), exploring as in evaluation: the training loop sets
    its own schedule."""
    d = r.cfg.drrn
    exploration = Exploration("greedy") if r.greedy else Exploration(d.exploration, d.temperature, d.eval_epsilon)
    return DRRNAgent(r.model, r.envs.num_envs, r.action_names, r.cfg.prompt.nbr_obs, r.cfg.env.language,
                     r.goal_header, exploration, seed=r.cfg.env.seed)
