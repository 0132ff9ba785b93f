"""The generalisation suite: substitutions reach the prompt, the bot is unaffected, errors come first."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

from glamrl.envs.actions import ACTION_NAMES, FRENCH_ACTION_NAMES, SYNONYM_ACTION_NAMES
from glamrl.eval.agents import AgentSpec, agent_builder
from glamrl.stats import mean_interval, wilson_interval
from glamrl.eval.substitutions import WordSubstitution
from glamrl.eval.suite import SUITES, TESTS, SuiteTest, register_test, run_suite, select_tests

SEEDS = range(1_000_000, 1_000_030)
ENGLISH_VOCABULARY = {
    "you", "see", "carry", "step", "steps", "forward", "left", "right", "wall", "door", "key", "ball", "box",
    "red", "green", "blue", "purple", "yellow", "grey", "turn", "go", "pick", "up", "drop", "toggle", "goal",
    "possible", "open", "closed", "locked", "then", "after", "put", "next", "the", "to", "and",
}


@pytest.fixture(scope="module")
def llm_builder():
    torch.set_num_threads(1)
    return agent_builder(AgentSpec(kind="llm", model="tiny-llama", device="cpu"))[1]


def first_prompts(test: SuiteTest, build) -> list[str]:
    """The prompt the agent reads at the first step of each seed of SEEDS."""
    envs = test.make_envs(1)
    agent = build(envs, test)
    prompts = []
    for seed in SEEDS:
        obs, _ = envs.reset(seed=seed)
        prompts.append(agent.prompts(obs, [0])[0])
    envs.close()
    return prompts


def test_substitution_replaces_whole_words_only():
    sub = WordSubstitution({"grey": "sil", "box": "afze", "key": "dax"})
    assert sub("a grey box, a greyish boxes, a keystone key") == "a sil afze, a greyish boxes, a keystone dax"
    assert WordSubstitution({})("unchanged") == "unchanged"
    french = WordSubstitution({"fermée à clef": "fermée à clef", "clef": "chaise"})
    assert french("une porte fermée à clef, une clef") == "une porte fermée à clef, une chaise"


@pytest.mark.parametrize("name", [n for n in SUITES["all"] if TESTS[n].words])
def test_each_substitution_reaches_the_prompt(name, llm_builder):
    test = TESTS[name]
    baseline = TESTS["french" if test.language == "fr" else
                     "synonym_actions" if test.actions == SYNONYM_ACTION_NAMES else "no_change"]
    substitute = WordSubstitution(test.words)
    protected = WordSubstitution({old: "" for old, new in test.words.items() if old == new})  # "fermée à clef"
    seen = set()
    for before, after in zip(first_prompts(baseline, llm_builder), first_prompts(test, llm_builder)):
        assert after == substitute(before)  # mission, descriptions and action names, nothing else
        before, after = protected(before), protected(after)
        for old, new in test.words.items():
            if old != new and re.search(rf"\b{re.escape(old)}\b", before):
                seen.add(old)
                assert re.search(rf"\b{re.escape(new)}\b", after)
                assert not re.search(rf"\b{re.escape(old)}\b", after)
    assert len(seen) >= 3, f"{name}: the seeds exercise too few substitutions ({seen})"


@pytest.mark.parametrize(("name", "header", "replaced"), [
    ("intro_first_person", " \n I would like the agent to: go to", "Goal of the agent"),
    ("intro_second_person", " \n You have to: go to", "Goal of the agent"),
    ("synonym_actions_intro_second_person", " \n You have to: go to", "Goal of the agent"),
    ("french_intro_first_person", " \n Je veux que l'agent fasse: aller à", "But de l'agent"),
    ("french_intro_second_person", " \n Tu dois faire: aller à", "But de l'agent"),
])
def test_intro_tests_change_the_goal_header_and_keep_its_colon(name, header, replaced, llm_builder):
    # GLAM's tests replace "Goal of the agent" and keep the colon: " \n You have to: go to the green ball"
    prompts = first_prompts(TESTS[name], llm_builder)
    assert any(header in p for p in prompts)
    assert not any(replaced in p for p in prompts)


def test_french_prompt_has_no_english_word(llm_builder):
    for prompt in first_prompts(TESTS["french"], llm_builder):
        assert prompt.startswith("Actions possibles pour l'agent: tourner à gauche")
        english = set(re.findall(r"\w+", prompt.lower())) & ENGLISH_VOCABULARY
        assert not english, f"English words {english} in {prompt!r}"


def test_synonym_actions_map_back_to_the_env_actions(llm_builder):
    test = TESTS["synonym_actions"]
    envs = test.make_envs(1)
    agent = llm_builder(envs, test)
    assert agent.action_names == SYNONYM_ACTION_NAMES == envs.envs[0].action_names
    assert "rotate left" in agent.prompts(envs.reset(seed=3)[0], [0])[0]
    level = envs.envs[0].unwrapped
    for name, turn in [("rotate left", -1), ("rotate right", 1)]:
        before = level.agent_dir
        envs.step(np.array([agent.action_names.index(name)]))
        assert level.agent_dir == (before + turn) % 4
    envs.close()
    assert TESTS["french"].action_names(ACTION_NAMES) == FRENCH_ACTION_NAMES
    assert TESTS["invented_words"].action_names(ACTION_NAMES) == ACTION_NAMES


def test_bot_solves_every_test():
    bot = agent_builder(AgentSpec(kind="bot"))[1]
    results = run_suite([TESTS[n] for n in SUITES["all"]], bot, episodes=8, seed=1_000_001, num_envs=2)
    assert set(results) == set(SUITES["all"])
    for name, r in results.items():
        assert r["success_rate"] >= 0.98, name
        assert r["success_ci"][0] <= r["success_rate"] <= r["success_ci"][1]


def test_random_stays_in_its_band_and_ignores_the_text():
    random = agent_builder(AgentSpec(kind="random"))[1]
    results = run_suite([TESTS["no_change"], TESTS["invented_words"]], random, episodes=40, seed=1_000_001)
    assert 0.03 <= results["no_change"]["success_rate"] <= 0.3
    # same seeds, same action draws, text changes only: an agent that does not read must not notice
    assert results["no_change"]["success_rate"] == results["invented_words"]["success_rate"]
    assert results["no_change"]["per_task"] == results["invented_words"]["per_task"]


def test_a_user_test_is_a_few_lines():
    register_test(SuiteTest("swap_red_blue", "red and blue swapped", words={"red": "blue", "blue": "red"}))
    try:
        (test,) = select_tests(None, "swap_red_blue")
        assert WordSubstitution(test.words)("a red ball and a blue box") == "a blue ball and a red box"
    finally:
        del TESTS["swap_red_blue"]


def test_confidence_intervals():
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert mean_interval([1.0, 2.0, 3.0]) == pytest.approx((2 - 1.1316, 2 + 1.1316), abs=1e-4)


def glamrl(*args):
    return subprocess.run([sys.executable, "-m", "glamrl.cli", *args], capture_output=True, text=True, timeout=300)


def test_suite_cli_writes_one_json(tmp_path):
    out = tmp_path / "suite.json"
    done = glamrl("eval", "--agent", "bot", "--tests", "french,invented_words", "--episodes", "4", "--out", str(out))
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    assert list(data["tests"]) == ["french", "invented_words"] and data["agent"] == "bot"
    assert data["eval_seed"] == 2**32 + 2**31 and data["tests"]["french"]["episodes"] == 4


def test_a_stopped_suite_resumes_its_played_tests_on_the_same_episodes_only(tmp_path):
    out = tmp_path / "suite.json"
    args = ("eval", "--agent", "random", "--tests", "french,invented_words", "--episodes", "3", "--out", str(out))
    assert glamrl(*args).returncode == 0
    whole = json.loads(out.read_text())
    stopped = {**whole, "complete": False, "tests": {"french": {**whole["tests"]["french"], "success_rate": 0.123}}}
    out.write_text(json.dumps(stopped))  # stopped after its first test, marked so that a replay would show
    done = glamrl(*args)
    assert done.returncode == 0, done.stderr
    assert "1 of its tests played these episodes" in done.stdout
    resumed = json.loads(out.read_text())
    assert resumed["complete"] is True and resumed["tests"]["french"]["success_rate"] == 0.123  # kept, not replayed
    assert resumed["tests"]["invented_words"] == {**whole["tests"]["invented_words"],
                                                  "wall_time_s": resumed["tests"]["invented_words"]["wall_time_s"]}
    out.write_text(json.dumps(stopped))
    other = glamrl(*args[:-4], "--episodes", "2", "--out", str(out))  # other episodes: everything plays again
    assert other.returncode == 0 and "played these episodes" not in other.stdout
    assert json.loads(out.read_text())["tests"]["french"]["success_rate"] != 0.123


@pytest.mark.parametrize(("args", "message"), [
    (["--agent", "bot", "--tests", "french,klingon"], "klingon"),
    (["--agent", "bot", "--suite", "nope"], "unknown suite 'nope'"),
    (["--agent", "llm", "--model", "/no/such/model", "--suite", "paper"], "/no/such/model"),
    (["--agent", "bot", "--suite", "paper", "--out", "{file}/sub/out.json"], "cannot write"),
])
def test_suite_errors_are_one_line_before_any_episode(tmp_path, capsys, args, message):
    from glamrl.cli import main

    (tmp_path / "file").write_text("not a folder")
    code = main(["eval", *[a.replace("{file}", str(tmp_path / "file")) for a in args], "--episodes", "2"])
    out, err = capsys.readouterr()
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1
    assert "no_change" not in out  # no test ran


def listed_actions(prompt: str) -> list[str]:
    """The action names a prompt lists after its first header ("Possible action of the agent: a, b ...")."""
    head = prompt.split(" \n ", 1)[0]
    return [name.strip() for name in head.split(":", 1)[1].split(",")]


@pytest.mark.parametrize("name", ["no_change", "synonym_actions", "french", "synonym_actions_invented_words",
                                  "french_intro_second_person"])
def test_llm_agent_scores_the_names_its_prompts_list(name, llm_builder):
    test = TESTS[name]
    envs = test.make_envs(2)
    agent = llm_builder(envs, test)
    obs, _ = envs.reset(seed=7)
    decision = agent.act(obs)
    listed = listed_actions(decision.inputs[0])
    assert listed == list(test.action_names(ACTION_NAMES)) == list(agent.action_names)
    with torch.inference_mode():
        direct = agent.policy(decision.inputs, listed).log_probs.exp()              # (2, 6)
        training_names = agent.policy(decision.inputs, ACTION_NAMES).log_probs.exp()
    torch.testing.assert_close(torch.as_tensor(decision.probs), direct, rtol=0, atol=1e-6)
    torch.testing.assert_close(decision.log_probs, direct.log().gather(1, torch.as_tensor(decision.actions)[:, None])
                               .squeeze(1), rtol=0, atol=1e-5)
    if listed != list(ACTION_NAMES):  # the test's names are what is scored, not the training names
        assert (direct - training_names).abs().max() > 1e-3
    envs.close()


@pytest.fixture(scope="module")
def drrn_builder(tmp_path_factory):
    from glamrl.config import load_train_config
    from glamrl.trainers.drrn import train_drrn

    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("drrn") / "run"
    cfg = load_train_config(None, ["agent.kind=drrn", "env.id=BabyAI-MixedTrainLocal-v0", "env.num_envs=2",
                                   "drrn.total_frames=32", "drrn.log_every=32", "drrn.learning_starts=16",
                                   "drrn.batch_size=8", "drrn.embedding_dim=16", "drrn.hidden_size=16",
                                   "run.eval_episodes=0", "run.tensorboard=false"])
    train_drrn(cfg, run, progress=False, say=lambda _: None)
    return agent_builder(AgentSpec(run=run))[1]


@pytest.mark.parametrize("name", ["synonym_actions", "french", "intro_second_person"])
def test_drrn_reads_the_modified_prompt_and_encodes_the_new_action_names(name, drrn_builder):
    from glamrl.envs.vocabulary import PAD
    from glamrl.prompts import build_prompt

    test = TESTS[name]
    envs = test.make_envs(2)
    agent = drrn_builder(envs, test)
    encode = agent.network.encode_texts  # the run's tokenizer (drrn.tokenizer)
    names = test.action_names(ACTION_NAMES)
    assert agent.action_names == names
    assert torch.equal(agent.action_ids, encode(names, agent.action_ids.shape[1], None))
    obs, _ = envs.reset(seed=3)
    decision = agent.act(obs)
    for ids, mission in zip(decision.inputs, obs["mission"]):
        head = encode([build_prompt(names, mission, [], [], test.language, test.goal_header)], 2048, None)[0]
        head = [i for i in head.tolist() if i != PAD]
        assert [i for i in ids.tolist() if i != PAD][: len(head)] == head  # the test's action list and header
    with torch.no_grad():
        q = agent.network(torch.stack(decision.inputs), encode(names, agent.action_ids.shape[1], None))
    torch.testing.assert_close(torch.as_tensor(decision.probs), torch.softmax(q, dim=1))
    envs.close()


def test_suite_on_another_level_moves_the_text_tests_and_says_which_cannot_apply(tmp_path, capsys):
    from glamrl.cli import main

    out = tmp_path / "suite.json"
    assert main(["eval", "--agent", "bot", "--env", "BabyAI-GoToObjS4-v0", "--tests", "no_change,french,test_level",
                 "--episodes", "4", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "test_level: skipped, does not apply: it evaluates its own level BabyAI-MixedTestLocal-v0" in printed
    data = json.loads(out.read_text())
    assert list(data["tests"]) == ["no_change", "french"] and list(data["skipped"]) == ["test_level"]
    assert {t["env"] for t in data["tests"].values()} == {"BabyAI-GoToObjS4-v0"}
    assert data["tests"]["french"]["language"] == "fr" and data["tests"]["french"]["success_rate"] == 1.0
