"""The contracts of glamrl's parts: what every agent does (`Agent`), what learning agents add
(`ActorCritic`), and what every trainable network offers its training loop (`Trainable`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor, nn


@dataclass
class Decision:
    """What an agent chose for a batch of N environments."""

    actions: np.ndarray                    # (N,) int64, minigrid action indices 0..5
    probs: np.ndarray                      # (N, A) float, the policy's distribution (actions are drawn from it,
                                           # or from its argmax or its tempered form: `draw_actions`)
    log_probs: torch.Tensor | None = None  # (N,) log pi(action | observation), learning agents only
    values: torch.Tensor | None = None     # (N,) value estimates, learning agents only
    inputs: list[Any] | None = None        # (N,) what the policy read, kept to re-score or replay it: prompt
                                           # strings (llm; TimedPrompts with model.critic_reads_step), encoded
                                           # texts (drrn), (image, mission, memory) items (symbolic)


def draw_actions(log_probs: Tensor, greedy: bool = False, temperature: float = 1.0) -> Tensor:
    """One action per row of `log_probs` (N, A): the argmax when `greedy`, else a draw from softmax(log_probs /
    temperature), the policy itself at temperature 1 and sharper below it. Returns (N,) int64."""
    if greedy:
        return log_probs.argmax(dim=1)
    probs = log_probs.exp() if temperature == 1.0 else torch.softmax(log_probs / temperature, dim=1)
    return torch.multinomial(probs, 1).squeeze(1)


class Agent(Protocol):
    """An agent acting in a vector env of N BabyAI-Text copies.

    `obs` is the vector env's batched observation: a dict with "mission" (N strings),
    "descriptions" (N tuples of sentences), "image" (N, 7, 7, 3) and "direction" (N,).
    """

    action_names: tuple[str, ...]
    """the names of actions 0..5 as this agent knows them: agents that read text (llm, drrn) list
    them in their prompts and score or encode exactly these; the others carry them as labels."""

    def act(self, obs: dict[str, Any]) -> Decision:
        """Choose one action per environment."""
        ...

    def end_episodes(self, done: np.ndarray) -> None:
        """Forget the memory of the environments whose episode just ended (`done`: (N,) bool)."""
        ...


class ActorCritic(Agent, Protocol):
    """An agent trained by PPO (llm, npae, symbolic): it also estimates values."""

    def values(self, obs: dict[str, Any], envs: Sequence[int]) -> Tensor:
        """(len(envs),) V of the observations `obs` of envs `envs`, without recording a step."""
        ...


class Trainable(Protocol):
    """A network a training loop trains and checkpoints (LLMPolicy, DRRNetwork, ACModel)."""

    def __call__(self, inputs: list[Any], action_names: Sequence[str], *args: Any) -> Any:
        """Scores of `Decision.inputs` over the actions `action_names` (PPO: log-probabilities and values)."""
        ...

    def trainable_state_dict(self) -> dict[str, Tensor]:
        """What a checkpoint keeps: the trained tensors only (all of them, or LoRA adapters and heads)."""
        ...

    def load_trainable_state_dict(self, state: dict[str, Tensor]) -> None:
        ...

    def collecting(self) -> contextlib.AbstractContextManager:
        """The block in which a rollout is collected (the LLM's frozen trunk keeps its outputs there)."""
        ...

    def collection_metrics(self) -> dict[str, float]:
        """What the last `collecting()` block measured, for PPO's log row (the LLM's trunk cache)."""
        ...


class ActorCriticNetwork(Trainable, Protocol):
    """A network PPO trains (LLMPolicy, ACModel): its value head can take its own learning rate."""

    def value_parameters(self) -> Iterator[nn.Parameter]:
        """The value head's parameters (`ppo.value_lr`)."""
        ...


class WholeNetwork(nn.Module):
    """A network trained whole, with nothing to keep from a collection: its checkpoint is its state dict."""

    def trainable_state_dict(self) -> dict[str, Tensor]:
        """Every weight and buffer (batch norm's running statistics too)."""
        return {name: p.detach() for name, p in self.state_dict().items()}

    def load_trainable_state_dict(self, state: dict[str, Tensor]) -> None:
        self.load_state_dict(state)

    def collecting(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def collection_metrics(self) -> dict[str, float]:
        return {}
