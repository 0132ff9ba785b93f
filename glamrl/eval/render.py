"""One episode as pictures: `glamrl play` writes a GIF or a PNG contact sheet.

Each frame shows minigrid's picture of the level (the agent's 7x7 view highlighted),
the mission and the text observation the agent read, and the action it chose with the
probability of every action. The last frame shows the final state and the outcome.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np

from glamrl.config import EnvConfig
from glamrl.eval.suite import AgentBuilder, SuiteTest
from glamrl.files import atomic_output
from glamrl.rollout import step
from glamrl.run.checkpoint import seeded

FRAME_MS = 800          # GIF frame duration
LAST_FRAME_MS = 2500
SHEET_COLUMNS = 4
MAX_SENTENCES = 9       # description sentences shown per frame
SUFFIXES = {"gif": ".gif", "png": ".png"}  # the file name each format is written under


class RecordFrames(gym.Wrapper):
    """Keeps the level's RGB picture after every reset and step (the env needs render_mode="rgb_array")."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.frames: list[np.ndarray] = []

    def reset(self, **kwargs):
        out = self.env.reset(**kwargs)
        self.frames.append(self.env.render())
        return out

    def step(self, action):
        out = self.env.step(action)
        self.frames.append(self.env.render())
        return out


@dataclass
class Moment:
    """What one frame shows."""

    picture: np.ndarray             # (H, W, 3) uint8
    mission: str
    descriptions: Sequence[str]
    probs: np.ndarray | None        # (A,) pi(a | observation); None on the last frame
    action: int | None
    outcome: str | None = None      # the last frame's "success, return 0.92"


def play_episode(test: SuiteTest, build_agent: AgentBuilder, seed: int, max_frames: int = 200,
                 env: EnvConfig | None = None) -> tuple[list[Moment], list[str]]:
    """Run one episode of `test` under the env settings `test.env_config(env)` from `reset(seed=seed)`, the global
    RNGs seeded with `seed` (as an evaluation's first episode); return its moments and the agent's action names."""
    settings = dataclasses.replace(test.env_config(env), num_envs=1)
    envs = settings.make_vector_env(render_mode="rgb_array", wrapper=lambda e: RecordFrames(test.wrap(e)))
    recorder: RecordFrames = envs.envs[0]
    agent = build_agent(envs, test)
    names = list(agent.action_names)  # text agents: the names they score
    moments: list[Moment] = []
    with seeded(seed):
        obs, _ = envs.reset(seed=seed)
        agent.end_episodes(np.ones(1, dtype=bool))
        while len(moments) < max_frames:
            picture = recorder.frames[-1]
            s = step(envs, agent, obs)
            action = int(s.decision.actions[0])
            probs = np.asarray(s.decision.probs[0], dtype=np.float64)  # what the action was drawn from
            moments.append(Moment(picture, obs["mission"][0], obs["descriptions"][0], probs, action))
            if s.done[0]:
                (ep,) = s.episodes
                final = s.infos["final_obs"][0]
                result = "success" if ep.success else "failure"
                outcome = f"{result} after {ep.episode_length} steps, return {ep.episode_return:.2f}"
                moments.append(Moment(recorder.frames[-2], final["mission"], final["descriptions"], None, None,
                                      outcome))
                break
            obs = s.next_obs
    envs.close()
    return moments, names


def draw_frames(moments: Sequence[Moment], action_names: Sequence[str], title: str) -> list[np.ndarray]:
    """One RGB image per moment: picture | mission, observation, action probabilities."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(10, 4.6), dpi=80)
    images = []
    for t, m in enumerate(moments):
        fig.clf()
        grid = fig.add_gridspec(2, 2, width_ratios=(1, 1.25), height_ratios=(1.15, 1), left=0.01, right=0.97,
                                top=0.93, bottom=0.11, wspace=0.32, hspace=0.25)
        ax_pic = fig.add_subplot(grid[:, 0])
        ax_pic.imshow(m.picture)
        ax_pic.set_axis_off()
        ax_pic.set_title(f"{title}  step {t}", fontsize=10)
        ax_text = fig.add_subplot(grid[0, 1])
        ax_text.set_axis_off()
        lines = textwrap.wrap(f"Mission: {m.mission}", 62)
        shown = [f"  {s}" for s in m.descriptions[:MAX_SENTENCES]]
        lines += ["Observation:", *shown] + (["  ..."] if len(m.descriptions) > MAX_SENTENCES else [])
        if m.outcome:
            lines += ["", f"Episode over: {m.outcome}"]
        ax_text.text(0, 1, "\n".join(lines), va="top", ha="left", fontsize=9, family="monospace",
                     transform=ax_text.transAxes)
        ax_bar = fig.add_subplot(grid[1, 1])
        if m.probs is not None:
            colours = ["tab:orange" if a == m.action else "tab:blue" for a in range(len(action_names))]
            ax_bar.barh(range(len(action_names)), m.probs, color=colours)
            ax_bar.set_yticks(range(len(action_names)), action_names, fontsize=9)
            ax_bar.invert_yaxis()
            ax_bar.set(xlim=(0, 1), xlabel="probability")
            ax_bar.set_title(f"chosen: {action_names[m.action]}", fontsize=10)
        else:
            ax_bar.set_axis_off()
        fig.canvas.draw()
        images.append(np.asarray(fig.canvas.buffer_rgba())[..., :3].copy())
    plt.close(fig)
    return images


def write_episode(images: Sequence[np.ndarray], out: Path, fmt: str = "gif") -> Path:
    """A looping GIF (the last frame held longer) or a PNG sheet of every frame, `SHEET_COLUMNS` wide (atomically)."""
    from PIL import Image

    frames = [Image.fromarray(im) for im in images]
    if fmt == "gif":
        durations = [FRAME_MS] * (len(frames) - 1) + [LAST_FRAME_MS]
        with atomic_output(out) as tmp:
            frames[0].save(tmp, format="GIF", save_all=True, append_images=frames[1:], duration=durations, loop=0)
        return out
    w, h = frames[0].size
    cols = min(SHEET_COLUMNS, len(frames))
    rows = -(-len(frames) // cols)
    sheet = Image.new("RGB", (cols * w, rows * h), "white")
    for i, frame in enumerate(frames):
        sheet.paste(frame, ((i % cols) * w, (i // cols) * h))
    with atomic_output(out) as tmp:
        sheet.save(tmp, format="PNG")
    return out
