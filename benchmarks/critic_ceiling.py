"""How much of the return's variance a critic that reads the prompt can explain, on a trained run's own states.

    python -m benchmarks.critic_ceiling runs/goto_cpu                  # 64 steps of its envs
    python -m benchmarks.critic_ceiling runs/goto_cpu --steps 128 --seed 7

PPO logs the explained variance of V(prompt) against the GAE returns, and beside it `critic_ceiling`: the
ceiling below for the critic's own inputs, on each rollout. Where the prompt does not
determine the return (one observation aliases many cells; the policy samples; the reward depends on
the episode's step count, which no prompt shows), no critic reaches 1. This collects `--steps` steps
of the run's envs with its trained policy (sampling, as in training), computes the returns as the
update does (GAE with the run's gamma and lambda, values in the returns' units), and prints:

  ceiling    for each critic input in CRITIC_INPUTS (the prompt; the prompt with the episode's step
             count, what a time-aware critic could reach), the share of the returns' variance that the
             best function of that input explains (`glamrl.stats.explainable_variance`: ANOVA's
             adjusted R^2, 1 - within-input mean square / total variance), on one frame per (input,
             episode): a prompt repeated within an episode repeats its return, and counting every
             repeat reads the ceiling high. Figures printed before this dedup were measured on all the
             consecutive frames, which read about 2x high where prompts repeat. nan where fewer than
             `glamrl.stats.MIN_REPEATS` (30) kept frames repeat an input: one observation of GoToLocalS6N3
             repeated 7-12 times in 1,024 frames, too few to tell a ceiling of 0.2 from 0.8; the
             probe is then the measure.
  probes     held-out explained variance of a ridge regression to the returns, fitted on half the episodes
             and tested on the other half (the best linear critic on those features, on episodes it has
             not seen), from the value head's input (the hidden state), from the step count's features
             alone (`glamrl.llm.heads.step_features`) and from both (`model.critic_reads_step`'s input).
             Figures printed before 2026-12-04 split by frame, which leaks an episode's return into its
             held-out frames (0.43 against below 0 on one GoToLocal run's 2,048 frames)
  head       the squared correlation of the trained value head's outputs with the returns (the explained
             variance of the best affine map of V: what the head's ranking of states is worth)

    python -m benchmarks.critic_ceiling runs/goto_local --replay 48 --rollouts 6

Where prompts do not repeat (GoToLocal: 462 distinct prompts in 464 (prompt, episode) frames), no rollout can
tell a prompt's return noise from its mean. `--replay S` measures it by replaying instead (`replay`): the policy
plays `--episodes` episodes (default S) from env seed `--seed`, S of their frames are drawn uniformly (so states
come as often as training sees them), and from each the env is replayed (its seed, then the recorded actions)
and the policy plays on `--rollouts` K times, each to the episode's end, as in training (sampling; a time-out
ends the return unless the run bootstraps it). It prints (`replay_statistics`, 95% intervals over 1,000
resamples of the states):

  ceiling    of the best V(state): the ANOVA ceiling of the S x K returns grouped by state. The state (the
             grid, the step count, the prompt history) determines the prompt and the step count, so this
             bounds both critic inputs' ceilings from above.
  head       the explained variance of the trained head's V(state) on those returns (what training logs, on
             independent returns), and its share of the ceiling: a lower bound on its share of its own
             inputs' ceiling.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from glamrl.agents.factory import make_agent, restore_model
from glamrl.agents.llm import LLMAgent
from glamrl.agents.registry import AgentKindError
from glamrl.config import TrainConfig
from glamrl.errors import GlamrlError
from glamrl.llm.heads import step_features
from glamrl.llm.policy import LLMPolicy, prompt_of
from glamrl.rl.gae import compute_gae
from glamrl.rl.value_norm import ValueNormalizer
from glamrl.rollout import step
from glamrl.stats import MIN_REPEATS, explainable_variance, one_frame_per_visit

# what a critic reads, as the grouping key of the ceiling: (prompts, steps into the episode) -> one key a frame
CRITIC_INPUTS = {
    "V(prompt)": lambda prompts, elapsed: list(prompts),
    "V(prompt, step count)": lambda prompts, elapsed: list(zip(prompts, elapsed.tolist())),
}


def restore_critic(run: Path) -> tuple[TrainConfig, LLMPolicy, Callable[[torch.Tensor], torch.Tensor]]:
    """A trained llm run's config, policy, and the map from its value head's outputs to the returns' units (the
    value normaliser's inverse where `ppo.value_norm`)."""
    cfg, policy, state = restore_model(run)
    if cfg.agent.kind != "llm":
        raise AgentKindError(f"{run} holds a {cfg.agent.kind} agent: the benchmark reads an LLM policy's value "
                             f"head; give an llm run")
    if not cfg.ppo.value_norm:
        return cfg, policy, lambda v: v
    norm = ValueNormalizer(cfg.ppo.value_norm_decay)
    norm.load_state_dict(state.extra["value_norm"])
    return cfg, policy, norm.denormalize


def collect(run: Path, steps: int, seed: int
            ) -> tuple[list[str], np.ndarray, np.ndarray, torch.Tensor, np.ndarray, np.ndarray, np.ndarray]:
    """(prompts, returns, head values, hidden states, steps into the episode, the episodes' step limits, episode
    ids) of `steps` steps of the run's envs, step-major."""
    cfg, policy, real = restore_critic(run)
    envs = cfg.env.make_vector_env()
    agent = make_agent(cfg, policy, envs)
    obs, _ = envs.reset(seed=seed)
    prompts, values, rewards, terminated, truncated, final_values, elapsed, episodes = [], [], [], [], [], [], [], []
    limits = []
    t = np.zeros(cfg.env.num_envs, dtype=int)  # steps each env's episode has taken so far
    episode = np.arange(cfg.env.num_envs)      # the id of each env's current episode
    with torch.no_grad():
        for _ in range(steps):
            s = step(envs, agent, obs)
            prompts += [prompt_of(x) for x in s.decision.inputs]  # model.critic_reads_step: (prompt, step)s
            elapsed.append(t.copy())
            limits.append(np.asarray(obs["max_steps"]).copy())
            episodes.append(episode.copy())
            t = np.where(s.done, 0, t + 1)
            episode = np.where(s.done, episode.max() + 1 + np.cumsum(s.done) - 1, episode)
            values.append(real(s.decision.values.float()))
            rewards.append(torch.as_tensor(s.rewards * cfg.ppo.reward_scale, dtype=torch.float32))
            terminated.append(torch.as_tensor(s.terminated))
            truncated.append(torch.as_tensor(s.truncated))
            final = torch.zeros(cfg.env.num_envs)
            cut = np.flatnonzero(s.truncated & ~s.terminated)
            if len(cut):  # a time-limit cut bootstraps from V(final observation), as in training
                final[cut] = real(agent.values(s.final_obs(cut), cut).float())
            final_values.append(final)
            agent.end_episodes(s.done)
            obs = s.next_obs
        next_value = real(agent.values(obs, range(cfg.env.num_envs)).float())
        # the head's input, in float32 (training reads it under model.compute_dtype: bf16 differs by rounding)
        hidden = torch.cat([policy.scorer(prompts[i:i + 64], None).hidden.float() for i in range(0, len(prompts), 64)])
    V = torch.stack(values)                                                             # (T, N)
    _, returns = compute_gae(torch.stack(rewards), V, torch.stack(terminated), torch.stack(truncated),
                             torch.stack(final_values), next_value, cfg.ppo.gamma, cfg.ppo.gae_lambda)
    envs.close()
    return (prompts, returns.reshape(-1).numpy(), V.reshape(-1).numpy(), hidden, np.concatenate(elapsed),
            np.concatenate(limits), np.concatenate(episodes))


PENALTIES = (10, 100, 1000, 10000)
"""The ridge penalties the probe tries, on standardised features."""


def ridge_probe(hidden: torch.Tensor, returns: np.ndarray, episodes: np.ndarray, penalty: float, seed: int = 0) -> float:
    """Held-out explained variance of ridge regression from standardised `hidden` (n, H) to `returns` (n,), fitted
    on half the episodes (`episodes` (n,): each frame's episode id) and tested on the other half's frames.

    Split by episode, not by frame: an episode's frames share most of their return and, where the agent bumps into
    a wall, their prompt, so a test frame would have near-copies among the fitted ones, and a probe with more
    features than frames would score by remembering them (on a GoToLocal run, 2,048 frames: 0.43 split by frame,
    below 0 split by episode)."""
    X = hidden.double().numpy()
    ids = np.random.default_rng(seed).permutation(np.unique(episodes))
    in_fit = np.isin(episodes, ids[: len(ids) // 2])
    mean, std = X[in_fit].mean(0), X[in_fit].std(0) + 1e-6
    X = (X - mean) / std
    fit, test = X[in_fit], X[~in_fit]
    baseline = returns[in_fit].mean()
    w = np.linalg.solve(fit.T @ fit + penalty * np.eye(X.shape[1]), fit.T @ (returns[in_fit] - baseline))
    error = returns[~in_fit] - (test @ w + baseline)
    return float(1 - error.var() / returns[~in_fit].var())


@dataclass
class Replayed:
    """`replay`'s measurement: K rollouts of the policy from each of S states drawn from its own frames."""

    returns: np.ndarray  # (S, K) discounted returns from each state to its episode's end, x ppo.reward_scale
    values: np.ndarray   # (S,) the value head's V at each state, in the returns' units
    episodes: int        # the episodes played to draw the states from
    frames: int          # their frames
    successes: int       # how many of them succeeded


def play(cfg: TrainConfig, agent: LLMAgent, envs: list[gym.Env], obs: list[dict[str, Any]], real: Callable
         ) -> tuple[list[list[int]], list[list[str]], np.ndarray, np.ndarray, np.ndarray]:
    """Let `agent`'s policy play single envs `envs` from observations `obs` (its histories as they stand), sampling
    as in training, until each episode ends. Returns each env's actions and prompts, and (N,) each: the discounted
    return from `obs` (x ppo.reward_scale; a time-out is bootstrapped from V of its last observation where
    `ppo.bootstrap_truncation`), V at `obs` in the returns' units, and whether the episode succeeded."""
    n = len(envs)
    actions: list[list[int]] = [[] for _ in range(n)]
    prompts: list[list[str]] = [[] for _ in range(n)]
    returns, discount, success = np.zeros(n), np.ones(n), np.zeros(n, dtype=bool)
    start_values = None
    active = list(range(n))
    while active:
        decision = agent.act(batched([obs[i] for i in active]), active)
        if start_values is None:  # the first step, where every env plays
            start_values = real(decision.values).numpy()
        ended, timed_out = [], []
        for i, x, a in zip(active, decision.inputs, decision.actions.tolist()):
            actions[i].append(a)
            prompts[i].append(prompt_of(x))
            obs[i], reward, terminated, truncated, _ = envs[i].step(a)
            returns[i] += discount[i] * reward * cfg.ppo.reward_scale
            discount[i] *= cfg.ppo.gamma
            success[i] = terminated and reward > 0
            if terminated or truncated:
                ended.append(i)
            if truncated and not terminated and cfg.ppo.bootstrap_truncation:
                timed_out.append(i)
        if timed_out:
            last = agent.values(batched([obs[i] for i in timed_out]), timed_out)
            returns[timed_out] += discount[timed_out] * real(last).numpy()
        active = [i for i in active if i not in ended]
    return actions, prompts, returns, start_values, success


def batched(obs: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Single envs' observations as one vector env's batch (what `LLMAgent.inputs` reads)."""
    return {key: [o[key] for o in obs] for key in obs[0]}


BATCH = 24
"""The envs `replay` plays at once: whole states' rollouts (at least one state's), so that the policy scores
batches of prompts while some episodes run longer than others."""


def replay(run: Path, states: int, rollouts: int, episodes: int, seed: int) -> Replayed:
    """Play `episodes` episodes of `run`'s policy from env seed `seed` (episode k: seed + k), draw `states` of their
    frames uniformly, and from each, replayed (the episode's seed, then its actions), let the policy play on
    `rollouts` times. A replay that does not reach the recorded prompt is an error: the env must be deterministic
    given its seed and the actions (BabyAI's levels are)."""
    cfg, policy, real = restore_critic(run)
    per_batch = max(1, BATCH // rollouts)  # states played at once
    cfg = dataclasses.replace(cfg, env=dataclasses.replace(cfg.env, num_envs=per_batch * rollouts))
    vector = cfg.env.make_vector_env()
    envs, agent = list(vector.envs), make_agent(cfg, policy, vector)
    torch.manual_seed(seed)  # the policy's draws

    def start(i: int, episode: int, prefix: list[int]) -> dict[str, Any]:
        """Env i at step len(prefix) of episode `episode`, the agent's history of it recorded."""
        agent.histories[i].clear()
        obs, _ = envs[i].reset(seed=seed + episode)
        for a in prefix:
            agent.histories[i].record(obs["descriptions"], agent.action_names[a])
            obs = envs[i].step(a)[0]
        return obs

    # 1. the policy's own episodes, a batch at a time
    played: list[tuple[list[int], list[str]]] = []  # each episode's actions and prompts
    successes = 0
    for first in range(0, episodes, len(envs)):
        ks = range(first, min(first + len(envs), episodes))
        actions, prompts, _, _, success = play(cfg, agent, envs[:len(ks)], [start(i, k, []) for i, k in enumerate(ks)],
                                               real)
        played += zip(actions, prompts)
        successes += int(success.sum())
    frames = [(k, t) for k, (actions, _) in enumerate(played) for t in range(len(actions))]
    if states > len(frames):
        raise GlamrlError(f"--replay {states} states from {len(frames)} frames: give more --episodes")
    chosen = [frames[f] for f in np.random.default_rng(seed).choice(len(frames), size=states, replace=False)]

    # 2. each state replayed `rollouts` times, and played on to its episode's end
    returns, values = np.zeros((states, rollouts)), np.zeros(states)
    for first in range(0, states, per_batch):
        batch = chosen[first:first + per_batch]
        obs: list[dict[str, Any]] = []
        for j, (k, t) in enumerate(batch):
            obs += [start(j * rollouts + i, k, played[k][0][:t]) for i in range(rollouts)]
            reached = prompt_of(agent.inputs(batched(obs[j * rollouts:j * rollouts + 1]), [j * rollouts])[0])
            if reached != played[k][1][t]:
                raise GlamrlError(f"replaying episode {k} to step {t} gave another prompt than playing it: "
                                  f"{cfg.env.id} is not deterministic given its seed and the actions")
        n = len(batch) * rollouts
        _, _, batch_returns, start_values, _ = play(cfg, agent, envs[:n], obs, real)
        returns[first:first + len(batch)] = batch_returns.reshape(len(batch), rollouts)
        values[first:first + len(batch)] = start_values[::rollouts]
    vector.close()
    return Replayed(returns, values, episodes, len(frames), successes)


STATISTICS = ("ceiling", "explained", "share", "correlation")
"""`replay_statistics`' figures: the ceiling of V(state), the critic's explained variance, its share of the ceiling,
and the squared correlation of the critic with the returns (the explained variance of its best affine map)."""


def replay_statistics(returns: np.ndarray, values: np.ndarray, reps: int = 1000, seed: int = 0
                      ) -> dict[str, tuple[float, float, float]]:
    """From `returns` (S, K), K independent returns of each of S states, and a critic's `values` (S,) at them:
    the ceiling of the best V(state) (ANOVA's, `explainable_variance` grouped by state), the critic's explained
    variance on the returns, 1 - Var(G - V) / Var(G), its share of the ceiling, and its squared correlation with
    the returns (`STATISTICS`); each as (estimate, 2.5%, 97.5%) over `reps` resamples of the states."""
    def measure(rows: np.ndarray) -> tuple[float, float, float]:
        g, v = returns[rows], np.repeat(values[rows, None], returns.shape[1], axis=1)      # (S, K) each
        if g.var() == 0:  # nothing to explain
            return math.nan, math.nan, math.nan, math.nan
        ceiling = explainable_variance(np.repeat(np.arange(len(rows)), returns.shape[1]).tolist(), g.ravel())
        explained = 1 - (g - v).var(ddof=1) / g.var(ddof=1)
        correlation = np.corrcoef(g.ravel(), v.ravel())[0, 1] ** 2 if v.var() > 0 else math.nan  # a constant critic
        return ceiling, explained, explained / ceiling, correlation

    estimate = measure(np.arange(len(returns)))
    rng = np.random.default_rng(seed)
    draws = np.array([measure(rng.integers(0, len(returns), len(returns))) for _ in range(reps)])  # (reps, 4)
    bounds = [np.percentile(d[~np.isnan(d)], [2.5, 97.5]) if (~np.isnan(d)).any() else (math.nan, math.nan)
              for d in draws.T]  # without the resamples whose returns, or values, are all equal
    return {name: (estimate[i], *bounds[i]) for i, name in enumerate(STATISTICS)}


def main(argv: list[str] | None = None) -> int:
    """Print the ceilings, the probe and the head; bad input (a GlamrlError) prints one line and exits 2."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a trained llm run directory")
    parser.add_argument("--steps", type=int, default=64, help="steps of the run's envs (frames = steps x num_envs)")
    parser.add_argument("--seed", type=int, default=12345, help="env seed (away from training's)")
    parser.add_argument("--replay", type=int, metavar="S", default=None,
                        help="measure by replay instead, from S states drawn from the policy's own episodes")
    parser.add_argument("--rollouts", type=int, metavar="K", default=6, help="with --replay: rollouts per state")
    parser.add_argument("--episodes", type=int, default=None,
                        help="with --replay: episodes to draw the states from (default S)")
    args = parser.parse_args(argv)
    try:
        if args.replay is None:
            report(args.run, args.steps, args.seed)
        else:
            report_replay(args.run, args.replay, args.rollouts, args.episodes or args.replay, args.seed)
    except GlamrlError as err:
        print(f"critic_ceiling: error: {err}", file=sys.stderr)
        return 2
    return 0


def report(run: Path, steps: int, seed: int) -> None:
    """Collect `steps` steps of `run`'s envs from env seed `seed` and print what a critic can explain."""
    if steps < 1:
        raise GlamrlError(f"--steps {steps}: the benchmark needs at least one step of the envs; give --steps 64")
    if not run.is_dir():
        raise GlamrlError(f"{run} is not a directory; give a run directory written by glamrl train")
    prompts, returns, values, hidden, elapsed, limits, episodes = collect(run, steps, seed)
    print(f"{run}: {len(returns)} frames, {len(set(prompts))} distinct prompts, {len(set(episodes.tolist()))} "
          f"episodes, returns mean {returns.mean():.2f} std {returns.std():.2f}")
    for name, key in CRITIC_INPUTS.items():
        keys = key(prompts, elapsed)
        kept = one_frame_per_visit(keys, episodes.tolist())
        repeats = len(kept) - len(set(keys))  # every input is kept at least once
        ceiling = explainable_variance(keys, returns, episodes.tolist(), min_repeats=MIN_REPEATS)
        print(f"ceiling of the best {name}: {ceiling:.3f} ({len(kept)} frames, one per (input, episode), "
              f"{len(set(keys))} distinct inputs, {repeats} repeats"
              f"{'' if repeats >= MIN_REPEATS else f'; nan below {MIN_REPEATS}: give more --steps'})")
    steps_read = step_features(torch.as_tensor(elapsed), torch.as_tensor(limits)).double()  # (n, STEP_FEATURES)
    print("probes (ridge, fitted on half the episodes, tested on the others; the best penalty chosen on them, so if "
          "anything high):")
    for name, features in (("the hidden state (V(prompt)'s input)", hidden.double()),
                           ("the step count alone (model.critic_reads_step's features)", steps_read),
                           ("both (model.critic_reads_step's input)", torch.cat([hidden.double(), steps_read], 1))):
        probes = {penalty: ridge_probe(features, returns, episodes, penalty) for penalty in PENALTIES}
        best = max(probes, key=probes.get)
        print(f"  {name}: {probes[best]:.3f} at penalty {best:g} "
              f"({', '.join(f'{k:g}: {v:.3f}' for k, v in probes.items())})")
    print(f"head (squared correlation of V with the returns): {np.corrcoef(values, returns)[0, 1] ** 2:.3f}")


def report_replay(run: Path, states: int, rollouts: int, episodes: int, seed: int) -> None:
    """Measure by `replay` and print the ceiling of V(state) and the head against it."""
    if states < 2 or rollouts < 2 or episodes < 1:
        raise GlamrlError(f"--replay {states} --rollouts {rollouts} --episodes {episodes}: the ceiling needs at least "
                          f"2 states, 2 rollouts of each and 1 episode; give --replay 48 --rollouts 6")
    if not run.is_dir():
        raise GlamrlError(f"{run} is not a directory; give a run directory written by glamrl train")
    r = replay(run, states, rollouts, episodes, seed)
    print(f"{run}: {states} states drawn from the {r.frames} frames of {r.episodes} episode(s) of the policy "
          f"({r.successes} succeeded), {rollouts} rollouts from each; returns mean {r.returns.mean():.2f} "
          f"std {r.returns.std():.2f}, within a state {np.sqrt(r.returns.var(axis=1, ddof=1).mean()):.2f}")
    stats = replay_statistics(r.returns, r.values)
    line = {name: f"{v:.3f} ({low:.3f}-{high:.3f})" for name, (v, low, high) in stats.items()}
    print(f"ceiling of the best V(state), above those of V(prompt) and V(prompt, step count): {line['ceiling']}")
    print(f"head: explained variance {line['explained']}; its share of that ceiling {line['share']}, at least its "
          f"share of its own inputs' ceiling; squared correlation {line['correlation']} (95% intervals over "
          f"resampled states)")


if __name__ == "__main__":
    sys.exit(main())
