"""Demonstrations: an agent's episodes as (prompt, action) records in a JSONL file, one record per step.

    {"prompt": "...Action 0: ", "action": "turn left", "action_index": 0, "mission": "go to the red ball",
     "nbr_obs": 3, "task": "go_to", "episode": 3, "step": 0, "episode_return": 0.9, "success": true}

`prompt` is GLAM's prompt (glamrl/prompts.py) of the decision, with the action names
and history length given; behavioural cloning (glamrl/trainers/bc.py) learns `action` from it. A
record is read back only if its `action` is the name the cloning config gives its
`action_index`, and its `nbr_obs` (the observations its prompt keeps) is the config's prompt.nbr_obs
(`read_demos`): demonstrations recorded with other action names (another language, other words) or
another history length are refused, not cloned into prompts the policy will never see.
Episodes are played as in evaluation (`glamrl.rollout.run_episodes`): episode k from seed + k, whatever
`num_envs`, and the records in episode order. `glamrl demos` plays the training seeds (`--seed`), not the
evaluation ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.vector import SyncVectorEnv

from glamrl.agents.base import Agent, Decision
from glamrl.envs import EpisodeResult
from glamrl.errors import GlamrlError
from glamrl.files import atomic_output
from glamrl.prompts import PromptHistory
from glamrl.rollout import evaluate


class DemoFileError(GlamrlError, ValueError):
    """A demonstration file that is missing, empty, not glamrl's JSONL records, or not the data of the run resumed."""


Annotate = Callable[[int, dict[str, Any]], dict[str, Any]]
"""(env index, the batched observation the agent acts on) -> more fields for that env's record of the decision,
read before the envs step (the env's state is the decision's)."""


class RecordingAgent:
    """Wraps an agent and keeps the (prompt, action) pairs of each env's current episode, with `annotate`'s fields."""

    def __init__(self, agent: Agent, num_envs: int, action_names: Sequence[str], nbr_obs: int, language: str,
                 annotate: Annotate | None = None) -> None:
        self.agent, self.action_names, self.language, self.nbr_obs = agent, list(action_names), language, nbr_obs
        self.annotate = annotate
        self.histories = [PromptHistory(nbr_obs) for _ in range(num_envs)]
        self.current: list[list[dict[str, Any]]] = [[] for _ in range(num_envs)]
        self.ended: list[list[dict[str, Any]]] = [[] for _ in range(num_envs)]  # each env's last finished episode

    def act(self, obs: dict[str, Any]) -> Decision:
        decision = self.agent.act(obs)
        for i, (mission, sentences, a) in enumerate(zip(obs["mission"], obs["descriptions"], decision.actions)):
            prompt = self.histories[i].prompt(self.action_names, mission, sentences, self.language)
            name = self.action_names[int(a)]
            self.current[i].append({"prompt": prompt, "action": name, "action_index": int(a), "mission": mission,
                                    "nbr_obs": self.nbr_obs, **(self.annotate(i, obs) if self.annotate else {})})
            self.histories[i].record(sentences, name)
        return decision

    def end_episodes(self, done: np.ndarray) -> None:
        self.agent.end_episodes(done)
        for i in np.flatnonzero(done):
            self.ended[i], self.current[i] = self.current[i], []
            self.histories[i].clear()


def record_demos(envs: SyncVectorEnv, agent: Agent, episodes: int, seed: int, action_names: Sequence[str],
                 nbr_obs: int = 3, language: str = "en", progress: bool = False,
                 annotate: Annotate | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """`episodes` episodes of `agent` (episode k from `seed + k`) as records, and `evaluate`'s summary of them;
    `annotate` adds fields to each record."""
    recorder = RecordingAgent(agent, envs.num_envs, action_names, nbr_obs, language, annotate)
    records: list[dict[str, Any]] = []

    def keep(k: int, ep: EpisodeResult) -> None:
        for t, r in enumerate(recorder.ended[ep.env_index]):
            records.append({**r, "task": ep.task, "episode": k, "step": t,
                            "episode_return": ep.episode_return, "success": ep.success})

    summary = evaluate(envs, recorder, episodes, seed, progress=progress, on_episode=keep)
    records.sort(key=lambda r: r["episode"])  # stable: each episode's steps stay in order
    return records, summary


def write_demos(records: list[dict[str, Any]], path: Path) -> Path:
    """The records as JSONL at `path`, written atomically."""
    with atomic_output(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    return path


def read_demos(path: Path, action_names: Sequence[str], nbr_obs: int | None = None) -> list[dict[str, Any]]:
    """The records of a demonstration file, each naming its action as `action_names` does and (when given, for
    records that say it) keeping `nbr_obs` observations; `DemoFileError` names the first bad line (blank lines
    are skipped)."""
    if not path.is_file():
        raise DemoFileError(f"demonstration file not found: {path}")
    records = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            where = f"{path}:{number}"
            try:
                line = raw.decode("utf-8")
                if not line.strip():
                    continue
                record = json.loads(line)
            except UnicodeDecodeError:
                raise DemoFileError(f"{where} is not UTF-8 text (expected one JSON record per line)") from None
            except json.JSONDecodeError:
                raise DemoFileError(f"{where} is not JSON (expected one record per line)") from None
            _check_record(record, where, action_names)
            if nbr_obs is not None and record.get("nbr_obs", nbr_obs) != nbr_obs:
                raise DemoFileError(
                    f"{where} was recorded with --nbr-obs {record['nbr_obs']}, but the config's prompt.nbr_obs is "
                    f"{nbr_obs}: record the demonstrations with --nbr-obs {nbr_obs}, or set "
                    f"prompt.nbr_obs={record['nbr_obs']}")
            records.append(record)
    if not records:
        raise DemoFileError(f"{path} holds no demonstration")
    return records


def _check_record(record: Any, where: str, action_names: Sequence[str]) -> None:
    """Refuse a record that is not a (prompt, action, action_index) of glamrl demos with these action names."""
    if not isinstance(record, dict) or not {"prompt", "action", "action_index"} <= record.keys():
        raise DemoFileError(f"{where} lacks 'prompt', 'action' and 'action_index' (write it with glamrl demos)")
    for key, kind, noun in (("prompt", str, "a string"), ("action", str, "a string"), ("action_index", int, "an integer")):
        if type(record[key]) is not kind:  # True, 1.5 and "0" are no action index
            raise DemoFileError(f"{where}: {key} must be {noun}, got {record[key]!r}")
    index, action = record["action_index"], record["action"]
    if not 0 <= index < len(action_names):
        raise DemoFileError(f"{where}: action_index {index} is outside 0..{len(action_names) - 1}")
    if action != action_names[index]:
        raise DemoFileError(
            f"{where}: action {action!r} (index {index}) is not the config's prompt.actions[{index}] = "
            f"{action_names[index]!r}; record the demonstrations with the config's actions and language, or set "
            f"prompt.actions (and env.language) to theirs")
