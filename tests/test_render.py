"""`glamrl play`: one episode as a GIF or a PNG sheet, with the agent's action probabilities."""

import argparse

import pytest
import torch
from PIL import Image

from glamrl.cli import main
from glamrl.eval.agents import agent_builder
from glamrl.eval.render import play_episode
from glamrl.eval.suite import TESTS


def test_bot_episode_gif_ends_on_the_outcome(tmp_path, capsys):
    out = tmp_path / "episode.gif"
    assert main(["play", "--agent", "bot", "--env", "BabyAI-TurnToObject-v0", "--seed", "3", "--out", str(out)]) == 0
    assert "success after" in capsys.readouterr().out
    gif = Image.open(out)
    assert gif.n_frames == 2 and gif.size[0] > 600  # one decision, then the final state


def test_llm_moments_show_a_distribution_over_the_test_actions():
    torch.set_num_threads(1)
    args = argparse.Namespace(agent="llm", model="tiny-llama", run=None, dtype="float32", device="cpu",
                              greedy=False, seed=1)
    moments, names = play_episode(TESTS["synonym_actions"], agent_builder(args)[1], seed=5, max_frames=3)
    assert names[0] == "rotate left" and len(moments) == 3
    for m in moments:
        assert m.picture.ndim == 3 and m.probs.shape == (6,) and m.probs.sum() == pytest.approx(1, abs=1e-4)
        assert 0 <= m.action < 6 and m.mission


def test_random_png_sheet_and_bad_input(tmp_path, capsys):
    sheet = tmp_path / "sheet.png"
    assert main(["play", "--agent", "random", "--test", "french", "--seed", "2", "--max-frames", "5",
                 "--format", "png-sheet", "--out", str(sheet)]) == 0
    w, h = Image.open(sheet).size
    assert w > 4 * 600 and h > 2 * 300  # 4 columns, 2 rows of frames
    assert main(["play", "--agent", "bot", "--env", "BabyAI-Nope-v0", "--out", str(tmp_path / "x.gif")]) == 2
    (tmp_path / "file").write_text("")
    assert main(["play", "--agent", "bot", "--out", str(tmp_path / "file" / "x.gif")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "BabyAI-Nope-v0" in err[0] and "cannot write" in err[1]
