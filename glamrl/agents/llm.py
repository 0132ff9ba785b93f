"""The GLAM agent: an LLM policy that reads the prompt and scores every action's text."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from glamrl.agents.base import Decision, draw_actions
from glamrl.agents.registry import AgentRequest
from glamrl.config import TrainConfig
from glamrl.llm.policy import LLMPolicy, TimedPrompt
from glamrl.prompts import PromptHistory
from glamrl.parallel.transfer import to_host


class LLMAgent:
    """Keeps each env's prompt history and asks `policy` for pi(a | prompt) and V(prompt).

    `action_names` are both the names its prompts list and the candidates it scores: the one
    home of the words the agent acts with (the PPO update and `glamrl play` read them here).
    """

    def __init__(
        self,
        policy: LLMPolicy,
        num_envs: int,
        action_names: Sequence[str],
        nbr_obs: int = 3,
        language: str = "en",
        greedy: bool = False,
        goal_header: str | None = None,
        temperature: float = 1.0,
    ) -> None:
        self.policy = policy
        self.goal_header = goal_header  # None: the language's "Goal of the agent"
        self.action_names = tuple(action_names)
        self.language = language
        self.greedy = greedy
        self.temperature = temperature  # sampling only; the recorded probabilities and log-probs stay the policy's
        self.histories = [PromptHistory(nbr_obs) for _ in range(num_envs)]

    def prompts(self, obs: dict[str, Any], envs: Sequence[int]) -> list[str]:
        """The prompts of envs `envs` for the batched observation `obs` (one entry per env in `envs`)."""
        return [
            self.histories[i].prompt(self.action_names, mission, sentences, self.language, self.goal_header)
            for i, mission, sentences in zip(envs, obs["mission"], obs["descriptions"])
        ]

    def inputs(self, obs: dict[str, Any], envs: Sequence[int]) -> list[str | TimedPrompt]:
        """What the policy reads for envs `envs`: their prompts, each with its observation's step count
        (`TimedPrompt`) when the policy's value head reads it (`model.critic_reads_step`) and `obs` carries it."""
        prompts = self.prompts(obs, envs)
        if not self.policy.config.critic_reads_step or "step" not in obs:
            return prompts
        return [TimedPrompt(p, int(t), int(m)) for p, t, m in zip(prompts, obs["step"], obs["max_steps"])]

    @torch.inference_mode()
    def act(self, obs: dict[str, Any], envs: Sequence[int] | None = None) -> Decision:
        """Decide for every env, or for envs `envs` only (`obs` then holds their rows, in that order: the rest of
        the envs' histories stay as they are)."""
        envs = range(len(self.histories)) if envs is None else envs
        inputs = self.inputs(obs, envs)
        out = self.policy(inputs, self.action_names)
        log_probs = out.log_probs.float()                                  # (N, A)
        actions = draw_actions(log_probs, self.greedy, self.temperature)  # (N,)
        chosen = log_probs.gather(1, actions[:, None]).squeeze(1)         # (N,)
        # the step's one host-device synchronisation: actions, log-probs and values come back together
        actions, probs, chosen, values = to_host(actions, log_probs.exp(), chosen, out.values.float())
        for i, sentences, a in zip(envs, obs["descriptions"], actions.tolist()):
            self.histories[i].record(sentences, self.action_names[a])
        return Decision(actions.numpy(), probs.numpy(), chosen, values, inputs)

    @torch.inference_mode()
    def values(self, obs: dict[str, Any], envs: Sequence[int]) -> torch.Tensor:
        """V of observation `obs` (batched over `envs`) without recording it: (len(envs),)."""
        return self.policy.values(self.inputs(obs, envs)).float().cpu()

    def end_episodes(self, done: np.ndarray) -> None:
        for history, d in zip(self.histories, done):
            if d:
                history.clear()


def build_model(cfg: TrainConfig) -> LLMPolicy:
    """agent.kind=llm's network (the registry's entry point): model.* scoring the prompt's action names."""
    return LLMPolicy(cfg.model, len(cfg.prompt.actions), cfg.prompt.nbr_obs)


def build_agent(r: AgentRequest) -> LLMAgent:
    """agent.kind=llm's agent (the registry's entry point)."""
    return LLMAgent(r.model, r.envs.num_envs, r.action_names, r.cfg.prompt.nbr_obs, r.cfg.env.language, r.greedy,
                    r.goal_header, r.temperature)
