"""glamrl: ground language models in BabyAI-Text with online reinforcement learning.

Importing glamrl registers the BabyAI-Text ids with gymnasium:

    import glamrl, gymnasium as gym
    env = gym.make("BabyAI-Text-MixedTrainLocal-v0")
"""

import glamrl.envs  # noqa: F401  (registers BabyAI-Text-<Level> for every BabyAI level)
