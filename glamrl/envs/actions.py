"""The six BabyAI-Text actions (minigrid indices 0..5) and their names in the prompt."""

ACTION_NAMES: tuple[str, ...] = ("turn left", "turn right", "go forward", "pick up", "drop", "toggle")
"""English names, the default in prompts (minigrid's `done` action is not exposed)."""

SYNONYM_ACTION_NAMES: tuple[str, ...] = ("rotate left", "rotate right", "move ahead", "take", "release", "switch")
"""Synonyms for the generalisation test (same order)."""

FRENCH_ACTION_NAMES: tuple[str, ...] = (
    "tourner à gauche", "tourner à droite", "aller tout droit", "attraper", "lâcher", "basculer",
)
"""French names (same order), as in GLAM's French experiment."""


def action_names(language: str) -> tuple[str, ...]:
    """The default action names of `language` ("en" or "fr")."""
    return FRENCH_ACTION_NAMES if language == "fr" else ACTION_NAMES
