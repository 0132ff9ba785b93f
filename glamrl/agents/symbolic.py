"""BabyAI's symbolic PPO baseline (ACModel-like): the 7x7x3 view and the mission, no language model.

    view (7, 7, 3) ─ bag-of-words cell embedding ─ conv, pool ─ conv, pool ─ 2 FiLM blocks ─ max-pool
    mission words ─ embedding ─ GRU ────────────────────────────────────┘ (conditioning)
    ─ [LSTM memory] ─ actor (6 logits) / critic (V)

The image path has the geometry of BabyAI's `expert_filmcnn`, the architecture GLAM's PPO
baseline trained (7x7 → 2x2 conv → 8x8 → pool → 4x4 → 3x3 conv → pool → FiLM at 2x2 → 1x1),
on BabyAI 1.1's bag-of-words cell embedding; without BabyAI's batch norm. Pooling before the
FiLM blocks makes a forward and backward pass ~1.7x cheaper than FiLM at 7x7 (BabyAI 1.1's
`endpool`) at 32 channels on one CPU thread, where PPO's 4 epochs of them dominate a frame's cost.

The mission is read with the closed word vocabulary (`glamrl.envs.vocabulary`). With
`symbolic.memory`, each env carries an LSTM state across its episode; the state at
each decision is stored with the observation, so PPO re-scores transitions from their
stored memory (a recurrence of 1: no backpropagation through time; GLAM's baseline used 20).

It trains with the same PPO loop as the LLM (glamrl/train.py): `Decision.prompts` holds
each env's observation item (image, mission ids, memory), which the PPO update hands
back to `ACModel.forward` as it hands prompts to the LLM policy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from glamrl.agents.base import Decision
from glamrl.config import SymbolicConfig
from glamrl.envs.actions import ACTION_NAMES
from glamrl.envs.vocabulary import PAD, VOCABULARY, encode_texts

CELL_VALUES = 16        # each of the 3 channels (object, colour, state) takes fewer than 16 values
MISSION_TOKENS = 24     # missions are cut to their last 24 words


@dataclass
class SymbolicOutput:
    log_probs: Tensor   # (B, A)
    values: Tensor      # (B,)


class FiLMBlock(nn.Module):
    """conv → ReLU → conv, scaled and shifted by the mission (FiLM), → ReLU, plus a residual."""

    def __init__(self, channels: int, instr_dim: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.film = nn.Linear(instr_dim, 2 * channels)

    def forward(self, x: Tensor, instr: Tensor) -> Tensor:
        gamma, beta = self.film(instr)[:, :, None, None].chunk(2, dim=1)   # (B, C, 1, 1) each
        out = self.conv2(F.relu(self.conv1(x)))                           # (B, C, H, W)
        return x + F.relu(gamma * out + beta)


class ACModel(nn.Module):
    """Actor-critic over (view, mission[, memory]) items; `forward(items)` → log pi (B, A), V (B,)."""

    def __init__(self, config: SymbolicConfig) -> None:
        super().__init__()
        self.config = config
        self.action_names = tuple(ACTION_NAMES)
        C, D = config.image_dim, config.instr_dim
        self.cells = nn.Embedding(3 * CELL_VALUES, C)
        self.register_buffer("offsets", torch.arange(3) * CELL_VALUES, persistent=False)
        self.stem = nn.Sequential(nn.Conv2d(C, C, 2, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # (B, C, 4, 4)
                                  nn.Conv2d(C, C, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))   # (B, C, 2, 2)
        self.words = nn.Embedding(len(VOCABULARY), D, padding_idx=PAD)
        self.mission_gru = nn.GRU(D, D, batch_first=True)
        self.film = nn.ModuleList([FiLMBlock(C, D) for _ in range(2)])
        self.memory = nn.LSTMCell(C, config.memory_dim) if config.memory else None
        E = config.memory_dim if config.memory else C
        self.actor = nn.Sequential(nn.Linear(E, 64), nn.Tanh(), nn.Linear(64, len(ACTION_NAMES)))
        self.critic = nn.Sequential(nn.Linear(E, 64), nn.Tanh(), nn.Linear(64, 1))

    @property
    def memory_size(self) -> int:
        """Floats of recurrent state per env (h and c of the LSTM), 0 without memory."""
        return 2 * self.config.memory_dim if self.memory is not None else 0

    def step(self, images: Tensor, missions: Tensor, memory: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """images (B, 7, 7, 3) int, missions (B, L) ids, memory (B, memory_size) → logits (B, A), V (B,), new memory."""
        x = self.bag_of_words(images)                                      # (B, 7, 7, C)
        x = self.stem(x.permute(0, 3, 1, 2))                               # (B, C, 2, 2)
        instr = self.read_missions(missions)                              # (B, D)
        for block in self.film:
            x = block(x, instr)
        h = F.max_pool2d(x, 2).flatten(1)                                  # (B, C)
        if self.memory is not None:
            hx, cx = self.memory(h, memory.chunk(2, dim=1))
            h, memory = hx, torch.cat([hx, cx], dim=1)                     # (B, M), (B, 2M)
        return self.actor(h), self.critic(h).squeeze(1), memory

    def bag_of_words(self, images: Tensor) -> Tensor:
        """images (B, 7, 7, 3) int → the sum of each cell's 3 value embeddings (B, 7, 7, C).

        Computed as a multi-hot (B, 7, 7, 3 * CELL_VALUES) times the embedding table: the same
        sum as `self.cells(ids).sum(3)`, whose backward (a scatter-add of B * 147 rows) is slower.
        """
        hot = torch.zeros(*images.shape[:3], 3 * CELL_VALUES, device=images.device)
        hot.scatter_(3, images.long() + self.offsets, 1.0)                 # (B, 7, 7, 3 * CELL_VALUES)
        return hot @ self.cells.weight                                     # (B, 7, 7, C)

    def read_missions(self, missions: Tensor) -> Tensor:
        """missions (B, L) ids → the mission GRU's last state (B, D), run once per distinct mission.

        A batch repeats each episode's mission at each of its steps, so the distinct ones are few.
        """
        distinct, inverse = torch.unique(missions, dim=0, return_inverse=True)   # (U, L), (B,)
        lengths = (distinct != PAD).sum(1).clamp(min=1)                           # (U,)
        words, _ = self.mission_gru(self.words(distinct[:, : int(lengths.max())]))  # (U, L', D)
        return words[torch.arange(len(distinct)), lengths - 1][inverse]           # (B, D)

    def forward(self, items: Sequence[tuple[Tensor, Tensor, Tensor]], action_names: Sequence[str] | None = None
                ) -> SymbolicOutput:
        """PPO's call on stored items (image, mission ids, memory); `action_names` is unused (fixed actions)."""
        images, missions, memory = (torch.stack(parts) for parts in zip(*items))
        logits, values, _ = self.step(images, missions, memory)
        return SymbolicOutput(F.log_softmax(logits, dim=-1), values)

    def trainable_state_dict(self) -> dict[str, Tensor]:
        return {name: p.detach() for name, p in self.state_dict().items()}

    def load_trainable_state_dict(self, state: dict[str, Tensor]) -> None:
        self.load_state_dict(state)

    def collecting(self) -> contextlib.AbstractContextManager:
        """Nothing to keep from a collection (the LLM policy's frozen-trunk cache has no counterpart here)."""
        return contextlib.nullcontext()


class SymbolicAgent:
    """Acts in N envs from the symbolic view; keeps each env's LSTM memory (if any) over its episode."""

    def __init__(self, model: ACModel, num_envs: int, action_names: Sequence[str] = ACTION_NAMES,
                 greedy: bool = False) -> None:
        self.model = model
        self.greedy = greedy
        self.action_names = tuple(action_names)  # labels only: the symbolic agent reads no text
        self.memory = torch.zeros(num_envs, model.memory_size)            # (N, memory_size)

    def items(self, obs: dict[str, Any], envs: Sequence[int]) -> list[tuple[Tensor, Tensor, Tensor]]:
        """The model's input items for `envs` (one per env in `envs`)."""
        images = torch.as_tensor(np.asarray(obs["image"]), dtype=torch.uint8)          # (n, 7, 7, 3)
        missions = encode_texts(list(obs["mission"]), MISSION_TOKENS)                    # (n, L)
        return list(zip(images, missions, self.memory[list(envs)]))

    @torch.no_grad()
    def act(self, obs: dict[str, Any]) -> Decision:
        items = self.items(obs, range(len(self.memory)))
        images, missions, memory = (torch.stack(parts) for parts in zip(*items))
        logits, values, self.memory = self.model.step(images, missions, memory)
        log_probs = F.log_softmax(logits, dim=-1)                                        # (N, A)
        actions = log_probs.argmax(1) if self.greedy else torch.multinomial(log_probs.exp(), 1).squeeze(1)
        chosen = log_probs.gather(1, actions[:, None]).squeeze(1)                       # (N,)
        return Decision(actions.numpy(), log_probs.exp().numpy(), chosen, values, items)

    @torch.no_grad()
    def values(self, obs: dict[str, Any], envs: Sequence[int]) -> Tensor:
        """V of `obs` (batched over `envs`) from their current memory, without advancing it: (len(envs),)."""
        return self.model(self.items(obs, envs)).values

    def end_episodes(self, done: np.ndarray) -> None:
        self.memory[torch.as_tensor(done, dtype=torch.bool)] = 0.0
