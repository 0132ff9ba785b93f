"""BabyAI's symbolic PPO baseline (ACModel): the 7x7x3 view and the mission, no language model.

    view (7, 7, 3) ─ stem ─ 2 FiLM blocks ─ max-pool ─ [LSTM memory] ─ actor (6 logits) / critic (V)
    mission words ─ embedding ─ GRU ─┘ (scales and shifts the FiLM blocks' features)

Two image encoders, `symbolic.arch`:

- expert_filmcnn: BabyAI's `expert_filmcnn`, the network GLAM's symbolic PPO baseline trained (GLAM's
  copy of babyai/model.py, run with --arch expert_filmcnn --recurrence 20, memory and a GRU on). The
  view's 3 integer channels (object, colour, state) go in as floats. Stem: conv 2x2 pad 1 (3 → 128)
  + batch norm + ReLU + max-pool 2, conv 3x3 pad 1 (128 → 128) + batch norm + ReLU + max-pool 2
  (7x7 → 8x8 → 4x4 → 2x2). Two FiLM blocks at 2x2, each conv 3x3 + batch norm + ReLU → conv 3x3 →
  gamma(mission) * x + beta(mission) → batch norm → ReLU, without a residual (the second ends in
  `image_dim` channels), then a max-pool to 1x1 (BabyAI's ReLU after it changes nothing on ReLU
  outputs, so it is left out). Linear layers start as BabyAI's
  `initialize_parameters`: weights N(0, 1) with every row scaled to unit norm, biases 0.
- small: glamrl's fast variant at the same geometry: BabyAI 1.1's bag-of-words cell embedding in
  `image_dim` channels, no batch norm, residual FiLM blocks, PyTorch's default init.

Batch norm normalises with its minibatch's statistics in the PPO update (train mode). While the PPO
loop collects (`ACModel.collecting()`), the agent acts as BabyAI and GLAM collected, in train mode
(`symbolic.collect_mode=train`, the default): each step is normalised with the statistics of the N envs'
current frames, and the running statistics follow them; the rollout's last values (all N envs) too.
A call on fewer envs (a time-limit bootstrap of 1-3 envs, with ppo.bootstrap_truncation, which BabyAI
lacked) uses the running statistics, so that it neither moves them nor depends on 1-3 frames.
`symbolic.collect_mode=eval` collects on the running statistics throughout, leaving them untouched: the
policy that collects is then the one evaluated, at the price of a PPO ratio that is not 1 on an update's
first minibatch (measured after 4 updates of configs/symbolic.yaml: mean |ratio - 1| 0.04, max 0.19,
where train-mode collection gives 0.016 and 0.07; both far inside the 0.2 clip). Evaluation always acts
in eval mode, as BabyAI's did. In the update the image encoder runs once over a minibatch's frames
(BabyAI ran it step by step, over 64), so its statistics are those of all its frames.

Memory (`symbolic.memory`): each env carries an LSTM state across its episode, stored with every
observation item. With `symbolic.recurrence` R > 1, PPO replays each sequence of R steps from the
state stored at its first step, carrying the state forward through the network (backpropagation
through time) and zeroing it where an episode starts inside the sequence; R = 1 re-scores every step
from its own stored state. (BabyAI also wrote the replayed states back into its batch for the next
epoch; as sequences always start at the same steps, only their first steps' stored states are read.)

The mission is read with the closed word vocabulary (`glamrl.envs.vocabulary`). It trains with the
same PPO loop as the LLM (glamrl/trainers/ppo.py): `Decision.inputs` holds each env's observation item
(image, mission ids, memory), which the PPO update hands back to `ACModel.forward`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from glamrl.agents.base import Decision, WholeNetwork, draw_actions
from glamrl.agents.registry import AgentRequest
from glamrl.config import SymbolicConfig, TrainConfig
from glamrl.envs.actions import ACTION_NAMES
from glamrl.envs.vocabulary import PAD, VOCABULARY, encode_texts

CELL_VALUES = 16        # each of the 3 channels (object, colour, state) takes fewer than 16 values
MISSION_TOKENS = 24     # missions are cut to their last 24 words
EXPERT_CHANNELS = 128   # BabyAI's expert_filmcnn: the stem's and the first FiLM block's width, whatever image_dim
HEAD_HIDDEN = 64        # BabyAI's actor and critic: Linear → 64 → tanh → Linear


@dataclass
class SymbolicOutput:
    log_probs: Tensor   # (B, A)
    values: Tensor      # (B,)


def babyai_init(module: nn.Module) -> None:
    """BabyAI's `initialize_parameters` for nn.Linear: weights N(0, 1), each row scaled to unit norm; bias 0."""
    if isinstance(module, nn.Linear):
        with torch.no_grad():
            module.weight.normal_(0.0, 1.0)
            module.weight /= module.weight.norm(dim=1, keepdim=True)
            if module.bias is not None:
                module.bias.zero_()


def norm(channels: int, batch_norm: bool) -> nn.Module:
    return nn.BatchNorm2d(channels) if batch_norm else nn.Identity()


def conv_pool(in_channels: int, out_channels: int, kernel: int, batch_norm: bool) -> list[nn.Module]:
    """conv (padding 1) [→ batch norm] → ReLU → max-pool 2: a stem stage."""
    conv = nn.Conv2d(in_channels, out_channels, kernel, padding=1)
    return [conv, *([nn.BatchNorm2d(out_channels)] if batch_norm else []), nn.ReLU(), nn.MaxPool2d(2)]


class FiLMBlock(nn.Module):
    """conv → [BN] → ReLU → conv, scaled and shifted by the mission (FiLM) → [BN] → ReLU [+ the input].

    expert_filmcnn: batch norm, no residual (BabyAI's ExpertControllerFiLM); small: no norm, residual.
    """

    def __init__(self, in_channels: int, out_channels: int, instr_dim: int, batch_norm: bool, residual: bool) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, in_channels, 3, padding=1)
        self.norm1 = norm(in_channels, batch_norm)
        self.conv2 = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm2 = norm(out_channels, batch_norm)
        self.film = nn.Linear(instr_dim, 2 * out_channels)  # gamma and beta (BabyAI: two Linear layers)
        self.residual = residual

    def forward(self, x: Tensor, instr: Tensor) -> Tensor:
        gamma, beta = self.film(instr)[:, :, None, None].chunk(2, dim=1)   # (B, C_out, 1, 1) each
        out = self.conv2(F.relu(self.norm1(self.conv1(x))))                # (B, C_out, H, W)
        out = F.relu(self.norm2(gamma * out + beta))
        return x + out if self.residual else out


class ACModel(WholeNetwork):
    """Actor-critic over (view, mission, memory) items; `forward(items[, resets])` → log pi (B, A), V (B,)."""

    def __init__(self, config: SymbolicConfig) -> None:
        super().__init__()
        self.config = config
        self._collecting = False  # inside collecting(): the agent acts in config.collect_mode
        expert = config.arch == "expert_filmcnn"
        C, D = config.image_dim, config.instr_dim
        width = EXPERT_CHANNELS if expert else C
        if expert:  # the raw 3 channels
            self.cells = None
        else:       # a bag of words: the sum of each cell's 3 value embeddings
            self.cells = nn.Embedding(3 * CELL_VALUES, C)
            self.register_buffer("offsets", torch.arange(3) * CELL_VALUES, persistent=False)
        self.stem = nn.Sequential(*conv_pool(3 if expert else C, width, 2, expert),    # (B, width, 4, 4)
                                  *conv_pool(width, width, 3, expert))                 # (B, width, 2, 2)
        self.words = nn.Embedding(len(VOCABULARY), D, padding_idx=PAD)
        self.mission_gru = nn.GRU(D, D, batch_first=True)
        self.film = nn.ModuleList([FiLMBlock(width, width, D, batch_norm=expert, residual=not expert),
                                   FiLMBlock(width, C, D, batch_norm=expert, residual=not expert)])
        self.memory = nn.LSTMCell(C, config.memory_dim) if config.memory else None
        E = config.memory_dim if config.memory else C
        self.actor = nn.Sequential(nn.Linear(E, HEAD_HIDDEN), nn.Tanh(), nn.Linear(HEAD_HIDDEN, len(ACTION_NAMES)))
        self.critic = nn.Sequential(nn.Linear(E, HEAD_HIDDEN), nn.Tanh(), nn.Linear(HEAD_HIDDEN, 1))
        if expert:
            self.apply(babyai_init)

    @property
    def memory_size(self) -> int:
        """Floats of recurrent state per env (h and c of the LSTM), 0 without memory."""
        return 2 * self.config.memory_dim if self.memory is not None else 0

    def step(self, images: Tensor, missions: Tensor, memory: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """One step of B envs: images (B, 7, 7, 3) int, missions (B, L) ids, memory (B, memory_size)
        → logits (B, A), V (B,), the new memory (B, memory_size)."""
        h, memory = self.remember(self.encode(images, missions)[None], memory)   # (B, E), (B, memory_size)
        return self.actor(h), self.critic(h).squeeze(1), memory

    def encode(self, images: Tensor, missions: Tensor) -> Tensor:
        """images (B, 7, 7, 3) int, missions (B, L) ids → the FiLM-conditioned view (B, image_dim)."""
        x = images.float() if self.cells is None else self.bag_of_words(images)   # (B, 7, 7, 3 or C)
        x = self.stem(x.permute(0, 3, 1, 2))                                      # (B, width, 2, 2)
        instr = self.read_missions(missions)                                      # (B, D)
        for block in self.film:
            x = block(x, instr)                                                   # (B, width or C, 2, 2)
        return F.max_pool2d(x, 2).flatten(1)                                      # (B, C)

    def remember(self, h: Tensor, memory: Tensor, resets: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Run the memory over R steps of S envs: h (R, S, C) encoded views, memory (S, memory_size) before the
        first step, resets (R, S) bool where it restarts from zero → outputs (R * S, E) step-major, last memory.

        Without memory the outputs are the views themselves.
        """
        if self.memory is None:
            return h.flatten(0, 1), memory
        outputs = []
        for i in range(len(h)):
            if resets is not None:
                memory = memory * (~resets[i]).unsqueeze(1)                       # (S, 2M), zero at episode starts
            hx, cx = self.memory(h[i], memory.chunk(2, dim=1))                    # (S, M) each
            memory = torch.cat([hx, cx], dim=1)
            outputs.append(hx)
        return torch.cat(outputs), memory                                         # (R * S, M), (S, 2M)

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

    def forward(self, items: Sequence[tuple[Tensor, Tensor, Tensor]], action_names: Sequence[str] | None = None,
                resets: Tensor | None = None) -> SymbolicOutput:
        """PPO's call on stored items (image, mission ids, memory); `action_names` is unused (fixed actions).

        Without `resets`, every item is scored alone from its stored memory. With `resets` (R, S) bool, the
        R * S items are S sequences of R steps, step-major (step 0 of every sequence first): the memory
        stored with step 0 is carried through the sequence, zeroed before the steps where `resets` is set.
        """
        images, missions, memory = (torch.stack(parts) for parts in zip(*items))   # (B, ...) each
        R = 1 if resets is None else len(resets)
        h = self.encode(images, missions)                                          # (B, C)
        h, _ = self.remember(h.view(R, len(h) // R, -1), memory[: len(h) // R], resets)   # (B, E)
        return SymbolicOutput(F.log_softmax(self.actor(h), dim=-1), self.critic(h).squeeze(1))

    def value_parameters(self) -> Iterator[nn.Parameter]:
        """The critic's parameters (`ppo.value_lr` trains them at their own learning rate)."""
        return self.critic.parameters()

    @contextlib.contextmanager
    def collecting(self) -> Iterator[None]:
        """The block in which the PPO loop collects a rollout: the agent acts there in `symbolic.collect_mode`."""
        before, self._collecting = self._collecting, True
        try:
            yield
        finally:
            self._collecting = before

    def acting(self, whole_batch: bool) -> contextlib.AbstractContextManager:
        """The mode the agent acts in: train mode (batch statistics, running statistics updated) for a call on
        all N envs inside `collecting()` with collect_mode=train, as BabyAI collected; eval mode (running
        statistics, untouched) anywhere else: evaluation, calls on a few envs, collect_mode=eval."""
        train = self._collecting and self.config.collect_mode == "train" and whole_batch
        return in_mode(self, train)


@contextlib.contextmanager
def in_mode(model: nn.Module, train: bool) -> Iterator[None]:
    """`model` in train or eval mode inside the block (batch norm on batch or running statistics), then as it was."""
    was_training = model.training
    model.train(train)
    try:
        yield
    finally:
        model.train(was_training)


class SymbolicAgent:
    """Acts in N envs from the symbolic view; keeps each env's LSTM memory (if any) over its episode."""

    def __init__(self, model: ACModel, num_envs: int, action_names: Sequence[str] = ACTION_NAMES,
                 greedy: bool = False, temperature: float = 1.0) -> None:
        self.model = model
        self.greedy = greedy
        self.temperature = temperature  # sampling only (`AgentRequest.temperature`)
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
        with self.model.acting(whole_batch=True):
            logits, values, self.memory = self.model.step(images, missions, memory)
        log_probs = F.log_softmax(logits, dim=-1)                                        # (N, A)
        actions = draw_actions(log_probs, self.greedy, self.temperature)                 # (N,)
        chosen = log_probs.gather(1, actions[:, None]).squeeze(1)                       # (N,)
        return Decision(actions.numpy(), log_probs.exp().numpy(), chosen, values, items)

    @torch.no_grad()
    def values(self, obs: dict[str, Any], envs: Sequence[int]) -> Tensor:
        """V of `obs` (batched over `envs`) from their current memory, without advancing it: (len(envs),)."""
        with self.model.acting(whole_batch=len(envs) == len(self.memory)):
            return self.model(self.items(obs, envs)).values

    def end_episodes(self, done: np.ndarray) -> None:
        self.memory[torch.as_tensor(done, dtype=torch.bool)] = 0.0


def build_model(cfg: TrainConfig) -> ACModel:
    """agent.kind=symbolic's network (the registry's entry point), from symbolic.*."""
    return ACModel(cfg.symbolic)


def build_agent(r: AgentRequest) -> SymbolicAgent:
    """agent.kind=symbolic's agent (the registry's entry point)."""
    return SymbolicAgent(r.model, r.envs.num_envs, r.action_names, r.greedy, r.temperature)
