"""BabyAI-Text environments: text descriptions, Mixed levels, the text wrapper, vector envs.

Importing this package registers with gymnasium glamrl's levels (`LEVEL_IDS`, raw
minigrid observations) and, for every BabyAI level `BabyAI-<Level>` (minigrid's and
glamrl's), the text env `BabyAI-Text-<Level>`: `gym.make("BabyAI-Text-MixedTrainLocal-v0")`
returns observations with "mission" and "descriptions".
"""

import gymnasium as gym
import minigrid  # noqa: F401  (registers minigrid's BabyAI-* ids)
from gymnasium.envs.registration import register

TEXT_PREFIX = "BabyAI-Text-"

LEVEL_IDS: dict[str, tuple[str, dict]] = {
    "BabyAI-MixedTrainLocal-v0": ("glamrl.envs.levels:MixedTrainLocal", {}),
    "BabyAI-MixedTestLocal-v0": ("glamrl.envs.levels:MixedTestLocal", {}),
    "BabyAI-PickUpSeqGoToLocal-v0": ("glamrl.envs.levels:MixedTrainLocal", {"task": "pick_up_seq_go_to"}),
    "BabyAI-PickUpSeqPickUpLocal-v0": ("glamrl.envs.levels:MixedTestLocal", {"task": "pick_up_seq_pick_up"}),
    "BabyAI-TurnToObject-v0": ("glamrl.envs.turn_to_object:TurnToObjectLevel", {}),
}
"""glamrl's registered ids -> (entry point, constructor kwargs)."""

for _env_id, (_entry_point, _kwargs) in LEVEL_IDS.items():
    register(id=_env_id, entry_point=_entry_point, kwargs=_kwargs)


def text_id(level_id: str) -> str:
    """`BabyAI-GoToLocal-v0` -> `BabyAI-Text-GoToLocal-v0`."""
    return TEXT_PREFIX + level_id.removeprefix("BabyAI-")


for _level_id in [i for i in gym.registry if i.startswith("BabyAI-") and not i.startswith(TEXT_PREFIX)]:
    if text_id(_level_id) not in gym.registry:
        register(id=text_id(_level_id), entry_point="glamrl.envs.factory:make_env", kwargs={"env_id": _level_id})

_LAZY = {  # public names, imported on first use (minigrid takes a second to import)
    "make_env": "factory", "make_vector_env": "factory",
    "finished_episodes": "factory", "EpisodeResult": "factory", "UnknownEnvError": "factory",
    "known_env_ids": "factory", "BabyAITextEnv": "text_env", "MixedTrainLocal": "levels", "MixedTestLocal": "levels",
    "UnknownTaskError": "levels", "TRAIN_TASKS": "levels", "TEST_TASKS": "levels",
}
__all__ = ["LEVEL_IDS", "TEXT_PREFIX", "text_id", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
