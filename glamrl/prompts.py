"""The prompt the language model reads: GLAM's exact layout, in English or French.

    Possible action of the agent: turn left, turn right, go forward, pick up, drop, toggle \\n
     Goal of the agent: go to the green ball \\n
     Observation 0: You see a wall 2 steps left, \\n Action 0: go forward \\n
     Observation 1: You see a green ball 1 step forward, \\n Action 1: 

(one line in reality: every `\\n` is a newline character inside a single string). The
prompt keeps the last `nbr_obs` observations and the actions taken after all but the
last one, numbered from 0, and always ends with "Action {i}: " (trailing space) so the
model scores an action's text as its continuation.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

HEADERS = {
    "en": ("Possible action of the agent:", "Goal of the agent"),
    "fr": ("Actions possibles pour l'agent:", "But de l'agent"),
}
"""(action list header, goal header) per language; the prompt writes the goal header followed by ": "."""


def build_prompt(
    actions: Sequence[str],
    mission: str,
    observations: Sequence[Sequence[str]],
    past_actions: Sequence[str],
    language: str = "en",
    goal_header: str | None = None,
) -> str:
    """GLAM's prompt from the action names, the mission and the kept history.

    `observations[i]` is the list of description sentences of observation i (oldest
    first); `past_actions[i]` is the action taken after it, so there is one fewer
    action than observations in the prompt of a decision. `goal_header` replaces the
    language's "Goal of the agent" before the colon (the suite's intro tests: "You have to",
    giving "You have to: go to the green ball", as GLAM's tests did).
    """
    actions_header, default_goal_header = HEADERS[language]
    goal_header = default_goal_header if goal_header is None else goal_header
    prompt = actions_header + ",".join(f" {a}" for a in actions)
    prompt += f" \n {goal_header}: {mission}"
    for i, sentences in enumerate(observations):
        prompt += f" \n Observation {i}: " + "".join(f"{s}, " for s in sentences)
        prompt += f"\n Action {i}: "
        if i < len(past_actions):
            prompt += past_actions[i]
    return prompt


class PromptHistory:
    """The (observation, action) pairs of one episode that the next prompt keeps."""

    def __init__(self, nbr_obs: int) -> None:
        self.past: deque[tuple[Sequence[str], str]] = deque(maxlen=nbr_obs - 1)

    def record(self, sentences: Sequence[str], action_name: str) -> None:
        """Remember an observation and the action taken after it."""
        self.past.append((tuple(sentences), action_name))

    def clear(self) -> None:
        self.past.clear()

    def prompt(self, actions: Sequence[str], mission: str, sentences: Sequence[str], language: str = "en",
               goal_header: str | None = None) -> str:
        """The prompt of a decision on the current observation `sentences`."""
        observations = [obs for obs, _ in self.past] + [sentences]
        return build_prompt(actions, mission, observations, [a for _, a in self.past], language, goal_header)
