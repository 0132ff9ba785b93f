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
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from glamrl.agents.factory import make_agent, restore_model
from glamrl.agents.registry import AgentKindError
from glamrl.errors import GlamrlError
from glamrl.llm.heads import step_features
from glamrl.llm.policy import prompt_of
from glamrl.rl.gae import compute_gae
from glamrl.rl.value_norm import ValueNormalizer
from glamrl.rollout import step
from glamrl.stats import MIN_REPEATS, explainable_variance, one_frame_per_visit

# what a critic reads, as the grouping key of the ceiling: (prompts, steps into the episode) -> one key a frame
CRITIC_INPUTS = {
    "V(prompt)": lambda prompts, elapsed: list(prompts),
    "V(prompt, step count)": lambda prompts, elapsed: list(zip(prompts, elapsed.tolist())),
}


def collect(run: Path, steps: int, seed: int
            ) -> tuple[list[str], np.ndarray, np.ndarray, torch.Tensor, np.ndarray, np.ndarray, np.ndarray]:
    """(prompts, returns, head values, hidden states, steps into the episode, the episodes' step limits, episode
    ids) of `steps` steps of the run's envs, step-major."""
    cfg, policy, state = restore_model(run)
    if cfg.agent.kind != "llm":
        raise AgentKindError(f"{run} holds a {cfg.agent.kind} agent: the probe reads an LLM policy's hidden "
                             f"states; give an llm run")
    norm = None
    if cfg.ppo.value_norm:
        norm = ValueNormalizer(cfg.ppo.value_norm_decay)
        norm.load_state_dict(state.extra["value_norm"])
    real = norm.denormalize if norm is not None else (lambda v: v)
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


def main(argv: list[str] | None = None) -> int:
    """Print the ceilings, the probe and the head; bad input (a GlamrlError) prints one line and exits 2."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a trained llm run directory")
    parser.add_argument("--steps", type=int, default=64, help="steps of the run's envs (frames = steps x num_envs)")
    parser.add_argument("--seed", type=int, default=12345, help="env seed (away from training's)")
    args = parser.parse_args(argv)
    try:
        report(args.run, args.steps, args.seed)
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


if __name__ == "__main__":
    sys.exit(main())
