"""glamrl: ground language models in BabyAI-Text with online reinforcement learning.

Importing glamrl registers the BabyAI-Text ids with gymnasium:

    import glamrl, gymnasium as gym
    env = gym.make("BabyAI-Text-MixedTrainLocal-v0")

The Python API (`glamrl.api`, imported on first use): `glamrl.train(config)` returns a run directory,
`glamrl.load_policy(run_or_export_dir)` a policy with `act` and `scores`, `glamrl.make_env(id, **options)` a
BabyAI-Text env.
"""

import glamrl.envs  # noqa: F401  (registers BabyAI-Text-<Level> for every BabyAI level)

_API = ("Policy", "load_policy", "make_env", "train")


def __getattr__(name: str):
    """The API's names, imported on first use (it imports torch and transformers)."""
    if name in _API:
        from glamrl import api

        return getattr(api, name)
    raise AttributeError(f"module 'glamrl' has no attribute {name!r}")
