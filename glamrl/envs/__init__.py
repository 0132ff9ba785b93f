"""BabyAI-Text environments: text descriptions, Mixed levels, the text wrapper, vector envs.

Importing this package registers glamrl's level ids with gymnasium (string entry
points, nothing heavy is imported until an env is made).
"""

from gymnasium.envs.registration import register

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

_LAZY = {  # public names, imported on first use (minigrid takes a second to import)
    "make_env": "factory", "make_vector_env": "factory",
    "finished_episodes": "factory", "EpisodeResult": "factory", "UnknownEnvError": "factory",
    "known_env_ids": "factory", "BabyAITextEnv": "text_env", "MixedTrainLocal": "levels", "MixedTestLocal": "levels",
    "UnknownTaskError": "levels", "TRAIN_TASKS": "levels", "TEST_TASKS": "levels",
}
__all__ = ["LEVEL_IDS", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
