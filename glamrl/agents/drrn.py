"""DRRN (He et al. 2016): Q(o, a) from a GRU encoding of the observation text and one of the action's text.

The observation text is GLAM's prompt without the action list: the goal and the last
`nbr_obs` descriptions with the actions between them, as words of BabyAI-Text's closed
vocabulary (`glamrl.envs.vocabulary`; unknown words read `<unk>`). Each action's name
is encoded by a second GRU; an MLP over the pair gives Q. Training (replay memory,
double Q-learning, epsilon-greedy exploration) lives in `glamrl/train_drrn.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from glamrl.agents.base import Decision
from glamrl.config import DRRNConfig
from glamrl.envs.vocabulary import PAD, VOCABULARY, encode_texts
from glamrl.prompts import PromptHistory


class DRRNetwork(nn.Module):
    """Q-values of the candidate actions for a batch of encoded observations."""

    def __init__(self, config: DRRNConfig, action_names: Sequence[str]) -> None:
        super().__init__()
        self.config = config
        self.action_names = tuple(action_names)
        E, H = config.embedding_dim, config.hidden_size
        self.embedding = nn.Embedding(len(VOCABULARY), E, padding_idx=PAD)
        self.obs_encoder = nn.GRU(E, H, batch_first=True)
        self.action_encoder = nn.GRU(E, H, batch_first=True)
        self.q_head = nn.Sequential(nn.Linear(2 * H, H), nn.ReLU(), nn.Linear(H, 1))
        self.register_buffer("action_ids", encode_texts(self.action_names, 8), persistent=False)  # (A, 8)

    def _encode(self, gru: nn.GRU, ids: Tensor) -> Tensor:
        """(B, L) right-padded ids -> (B, H) GRU state at each sequence's last word."""
        lengths = (ids != PAD).sum(1).clamp(min=1)                          # (B,)
        ids = ids[:, : int(lengths.max())]                                  # (B, L') drop the all-padding tail
        out, _ = gru(self.embedding(ids))                                   # (B, L', H)
        return out[torch.arange(len(ids)), lengths - 1]

    def forward(self, obs_ids: Tensor) -> Tensor:
        """(B, L) observation ids -> (B, A) Q-values."""
        h_obs = self._encode(self.obs_encoder, obs_ids)                   # (B, H)
        h_act = self._encode(self.action_encoder, self.action_ids)        # (A, H)
        B, A = len(h_obs), len(h_act)
        pairs = torch.cat([h_obs[:, None].expand(B, A, -1), h_act[None].expand(B, A, -1)], dim=-1)  # (B, A, 2H)
        return self.q_head(pairs).squeeze(-1)

    def trainable_state_dict(self) -> dict[str, Tensor]:
        return {name: p.detach() for name, p in self.state_dict().items()}

    def load_trainable_state_dict(self, state: dict[str, Tensor]) -> None:
        self.load_state_dict(state)


class DRRNAgent:
    """Keeps each env's text history; acts epsilon-greedily on the network's Q-values.

    `Decision.prompts` holds each env's encoded observation, (L,) int64, for the replay memory.
    """

    def __init__(self, network: DRRNetwork, num_envs: int, nbr_obs: int, language: str = "en",
                 epsilon: float = 0.0, seed: int | None = None) -> None:
        self.network = network
        self.language = language
        self.epsilon = epsilon
        self.rng = np.random.default_rng(seed)
        self.histories = [PromptHistory(nbr_obs) for _ in range(num_envs)]

    def encode(self, obs: dict[str, Any], envs: Sequence[int]) -> Tensor:
        """(len(envs), max_tokens) ids of the observation texts of `envs` (histories not updated)."""
        texts = [self.histories[i].prompt((), mission, sentences, self.language)
                 for i, mission, sentences in zip(envs, obs["mission"], obs["descriptions"])]
        return encode_texts(texts, self.network.config.max_tokens)

    @torch.no_grad()
    def act(self, obs: dict[str, Any]) -> Decision:
        ids = self.encode(obs, range(len(self.histories)))                 # (N, L)
        actions = self.network(ids).argmax(dim=1).numpy()                  # (N,)
        explore = self.rng.random(len(actions)) < self.epsilon
        actions[explore] = self.rng.integers(0, len(self.network.action_names), int(explore.sum()))
        names = self.network.action_names
        for history, sentences, a in zip(self.histories, obs["descriptions"], actions.tolist()):
            history.record(sentences, names[a])
        return Decision(actions=actions.astype(np.int64), prompts=list(ids))

    def end_episodes(self, done: np.ndarray) -> None:
        for history, d in zip(self.histories, done):
            if d:
                history.clear()
