"""`glamrl play`: one episode as a GIF or a PNG sheet, with the agent's action probabilities."""


import pytest
import torch
from PIL import Image

from glamrl.cli import main
from glamrl.eval.agents import AgentSpec, agent_builder
from glamrl.eval.render import play_episode
from glamrl.eval.suite import TESTS


def test_bot_episode_gif_ends_on_the_outcome(tmp_path, capsys):
    out = tmp_path / "episode.gif"
    assert main(["play", "--agent", "bot", "--env", "BabyAI-TurnToObject-v0", "--seed", "3", "--out", str(out)]) == 0
    assert "success after" in capsys.readouterr().out
    gif = Image.open(out)
    assert gif.n_frames == 2 and gif.size[0] > 600  # one decision, then the final state


def test_llm_moments_show_the_distribution_the_agent_sampled_from():
    torch.set_num_threads(1)
    build = agent_builder(AgentSpec(kind="llm", model="tiny-llama", device="cpu"))[1]
    decisions, agents = [], []

    def build_and_keep(envs, test):  # the real agent; its decisions kept to compare with the drawn moments
        agent = build(envs, test)
        act = agent.act
        agent.act = lambda obs: decisions.append(act(obs)) or decisions[-1]
        agents.append(agent)
        return agent

    moments, names = play_episode(TESTS["synonym_actions"], build_and_keep, seed=5, max_frames=3)
    assert names[0] == "rotate left" and len(moments) == 3
    for m, d in zip(moments, decisions):
        assert m.picture.ndim == 3 and m.probs.shape == (6,) and m.probs.sum() == pytest.approx(1, abs=1e-4)
        assert 0 <= m.action < 6 and m.mission and m.action == d.actions[0]
        with torch.inference_mode():  # what is drawn is what the synonyms score, the names the prompt lists
            scored = agents[0].policy(d.inputs, names).log_probs.exp()[0]
        assert "rotate left, rotate right, move ahead" in d.inputs[0]
        torch.testing.assert_close(torch.as_tensor(m.probs, dtype=torch.float32), scored, rtol=0, atol=1e-6)


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
