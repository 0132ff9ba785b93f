"""Every agent kind and every training loop, in one table that the config, the factory, the loops and the
commands read (in the spirit of gymnasium's `register()` and rl-zoo's `ALGOS`).

    register(AgentKind("drrn", agent="glamrl.agents.drrn:build_agent", model="glamrl.agents.drrn:build_model",
                       trainers=("drrn",), section="drrn"))
    kind = agent_kind("drrn")       # unknown: an AgentKindError naming the known kinds
    kind.trains, kind.trainer.name  # True, "drrn": `glamrl train` runs kind.trainer.loop
    kind_names()                    # what agent.kind may be

Entry points are "module:function" strings imported on first use, so that this table (which config
validation reads) imports no torch and no model code; a test or a plugin may pass the functions themselves.
Adding a kind is a `register` call beside these and the kind's own module: its `build_model(cfg)` (the
trainable network) and `build_agent(request)` (the agent acting in envs with it).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from glamrl.errors import GlamrlError

if TYPE_CHECKING:
    from gymnasium.vector import SyncVectorEnv
    from torch import nn

    from glamrl.agents.base import Agent
    from glamrl.config import TrainConfig


class AgentKindError(GlamrlError, ValueError):
    """An agent kind that does not fit: unknown, untrainable, or not the kind of the run or the loop given."""


@dataclass(frozen=True)
class AgentRequest:
    """What an agent is built from (`glamrl.agents.factory.make_agent`): everything a kind's `build_agent` reads."""

    cfg: TrainConfig
    model: nn.Module | None
    """the kind's network (`build_model`'s, trained or not); None for a kind without one (random, bot)."""
    envs: SyncVectorEnv
    action_names: tuple[str, ...]
    """the names of actions 0..5 the agent lists and scores (text agents) or carries as labels."""
    greedy: bool = False
    """argmax actions instead of sampling."""
    temperature: float = 1.0
    """sample from the policy's probabilities raised to 1/temperature and renormalised (below 1: sharper); only
    the kinds that `AgentKind.tempers` are built with another value than 1."""
    goal_header: str | None = None
    """replaces the prompt's "Goal of the agent" (text agents); None keeps it."""


class ModelBuilder(Protocol):
    def __call__(self, cfg: TrainConfig) -> nn.Module:
        """The kind's untrained network for `cfg` (its weights drawn from torch's current seed)."""
        ...


class AgentBuilder(Protocol):
    def __call__(self, request: AgentRequest) -> Agent:
        """The kind's agent acting in `request.envs` with `request.model`."""
        ...


def _add(table: dict[str, Any], entry: Trainer | AgentKind, what: str) -> None:
    """Put `entry` in `table` under its name, which must be new there."""
    if entry.name in table:
        raise ValueError(f"{what} {entry.name!r} is already registered")
    table[entry.name] = entry


def load(entry: str | Callable[..., Any]) -> Callable[..., Any]:
    """The function an entry point names: itself, or "module:function" imported now."""
    if callable(entry):
        return entry
    module, _, name = entry.partition(":")
    return getattr(importlib.import_module(module), name)


# ------------------------------------------------------------------------------------------- trainers
SHARED_SECTIONS = ("env", "prompt", "agent", "run")
"""The config sections every training loop reads (of `run`, all but the `LOOP_RUN_FIELDS` it leaves out)."""
LOOP_RUN_FIELDS = ("checkpoint_every", "max_minutes", "stop_at_success", "probes", "sharding", "check_replicas")
"""The `run` fields a training loop honours itself, when it does; every other one the shared session honours
for all loops (evaluation, logging, trackers)."""


@dataclass(frozen=True)
class Trainer:
    """A training loop: the config it reads, how it counts, and (for `glamrl train`) the function that runs it."""

    name: str
    """what a checkpoint records as its `trainer`, and what `AgentKind.trainers` names."""
    row: str
    """what one row of its log is, in words (update, log row)."""
    sections: tuple[str, ...]
    """its own config sections, besides `SHARED_SECTIONS` and the kind's `section`."""
    run_fields: tuple[str, ...]
    """the `LOOP_RUN_FIELDS` it honours: another one set to other than its default is refused."""
    frames_field: str | None = None
    """its training budget in frames, dotted (ppo.total_frames); None: counted otherwise (bc.epochs)."""
    loop: str | Callable[..., Any] | None = None
    """what `glamrl train` runs for the kinds it trains first: (cfg, run_dir, resume, progress, say) ->
    TrainResult; None: a loop with a command of its own (glamrl bc)."""

    def __post_init__(self) -> None:
        if unknown := set(self.run_fields) - set(LOOP_RUN_FIELDS):
            raise ValueError(f"trainer {self.name}: {', '.join(sorted(unknown))} are not LOOP_RUN_FIELDS")

    def total_frames(self, cfg: TrainConfig) -> int:
        """`cfg`'s training budget in frames (`frames_field`)."""
        section, name = self.frames_field.split(".")
        return getattr(getattr(cfg, section), name)


TRAINERS: dict[str, Trainer] = {}


def register_trainer(new: Trainer) -> Trainer:
    """Add a training loop, which agent kinds registered after it may name. A name already registered is refused."""
    _add(TRAINERS, new, "trainer")
    return new


def trainer(name: str) -> Trainer:
    """The training loop `name` (a key of `TRAINERS`)."""
    return TRAINERS[name]


# ---------------------------------------------------------------------------------------- agent kinds
@dataclass(frozen=True)
class AgentKind:
    """One value of `agent.kind`: how its agent (and network) is built, which loops train it, what it reads."""

    name: str
    agent: str | AgentBuilder
    """builds the agent acting in envs (or "module:function" naming that function)."""
    model: str | ModelBuilder | None = None
    """builds the trainable network (or "module:function"); None for a kind with nothing to train (random, bot)."""
    trainers: tuple[str, ...] = ()
    """the `TRAINERS` that train it, `glamrl train`'s first; () with no `model`: evaluation only."""
    section: str | None = None
    """the config section its network reads (model, drrn, symbolic); None: none of its own."""
    zero_shot: bool = False
    """whether its fresh, untrained agent is worth running too (llm: a pretrained model), with --agent KIND."""
    tempers: bool = False
    """whether its agent draws actions from a policy's probabilities, which `AgentRequest.temperature` sharpens
    or flattens (llm, symbolic); DRRN explores by its own drrn.* settings."""

    def __post_init__(self) -> None:
        if (self.model is None) != (not self.trainers):
            raise ValueError(f"agent kind {self.name}: a kind with a network has trainers, one without has none")
        if unknown := [t for t in self.trainers if t not in TRAINERS]:
            raise ValueError(f"agent kind {self.name}: unknown trainers {', '.join(unknown)}")
        if self.trainers and trainer(self.trainers[0]).loop is None:
            raise ValueError(f"agent kind {self.name}: its first trainer, {self.trainers[0]}, is what glamrl train "
                             f"runs, and has no loop")

    @property
    def trains(self) -> bool:
        """Whether it has a network to train (and a run of it has weights to restore)."""
        return self.model is not None

    @property
    def trainer(self) -> Trainer | None:
        """The loop `glamrl train` runs for it; None for an evaluation-only kind."""
        return trainer(self.trainers[0]) if self.trainers else None

    @property
    def runs_fresh(self) -> bool:
        """Whether `glamrl eval --agent KIND` may run it without a trained run: evaluation-only and zero-shot kinds."""
        return not self.trains or self.zero_shot

    def build_model(self, cfg: TrainConfig) -> nn.Module:
        return load(self.model)(cfg)

    def build_agent(self, request: AgentRequest) -> Agent:
        return load(self.agent)(request)


KINDS: dict[str, AgentKind] = {}


def register(kind: AgentKind) -> AgentKind:
    """Add an agent kind: from then on `agent.kind` may name it, and the factory, the loops and the commands
    build, train and run it. A name already registered is refused."""
    _add(KINDS, kind, "agent kind")
    return kind


def unregister(name: str) -> None:
    """Remove the agent kind `name` (a test's, a plugin's)."""
    del KINDS[name]


def kind_names() -> tuple[str, ...]:
    """Every registered agent kind, in registration order."""
    return tuple(KINDS)


def agent_kind(name: str) -> AgentKind:
    """The registered agent kind `name`; unknown: an AgentKindError naming the known ones."""
    if name not in KINDS:
        raise AgentKindError(f"unknown agent kind {name!r}; known kinds: {', '.join(KINDS)}")
    return KINDS[name]


def kinds_where(test: Callable[[AgentKind], bool]) -> tuple[str, ...]:
    """The names of the registered kinds that pass `test`, e.g. `kinds_where(lambda k: not k.trains)`."""
    return tuple(name for name, kind in KINDS.items() if test(kind))


def check_trains(kind: str, loop: str) -> AgentKind:
    """The agent kind `kind`, if the training loop `loop` trains it; else an AgentKindError naming those it does."""
    found = agent_kind(kind)
    if loop not in found.trainers:
        trained = kinds_where(lambda k: loop in k.trainers)
        raise AgentKindError(f"the {loop} loop trains agent kind{'s' * (len(trained) > 1)} {', '.join(trained)}, "
                             f"not {kind!r}")
    return found


# ------------------------------------------------------------------------------------------- the table
register_trainer(Trainer("ppo", row="update", sections=("ppo",), run_fields=LOOP_RUN_FIELDS,
                         frames_field="ppo.total_frames", loop="glamrl.trainers.ppo:train_ppo"))
register_trainer(Trainer("drrn", row="log row", sections=("drrn",),
                         run_fields=("checkpoint_every", "max_minutes", "stop_at_success"),
                         frames_field="drrn.total_frames", loop="glamrl.trainers.drrn:train_drrn"))
# behavioural cloning checkpoints at each log row (bc.log_every) and plays no episodes to stop at a success rate
register_trainer(Trainer("bc", row="log row", sections=("bc",), run_fields=("max_minutes",)))

register(AgentKind("llm", agent="glamrl.agents.llm:build_agent", model="glamrl.agents.llm:build_model",
                   trainers=("ppo", "bc"), section="model", zero_shot=True, tempers=True))
register(AgentKind("drrn", agent="glamrl.agents.drrn:build_agent", model="glamrl.agents.drrn:build_model",
                   trainers=("drrn",), section="drrn"))
register(AgentKind("symbolic", agent="glamrl.agents.symbolic:build_agent",
                   model="glamrl.agents.symbolic:build_model", trainers=("ppo",), section="symbolic", tempers=True))
register(AgentKind("random", agent="glamrl.agents.random:build_agent"))
register(AgentKind("bot", agent="glamrl.agents.bot:build_agent"))
