from glamrl.envs.actions import ACTION_NAMES, SYNONYM_ACTION_NAMES
from glamrl.prompts import PromptHistory, build_prompt


def test_exact_prompt_layout():
    prompt = build_prompt(
        ACTION_NAMES,
        "go to the green ball",
        [["You see a wall 2 steps left", "You see a green ball 3 steps forward"], ["You see a wall 1 step left"]],
        ["go forward"],
    )
    assert prompt == (
        "Possible action of the agent: turn left, turn right, go forward, pick up, drop, toggle \n"
        " Goal of the agent: go to the green ball \n"
        " Observation 0: You see a wall 2 steps left, You see a green ball 3 steps forward, \n"
        " Action 0: go forward \n"
        " Observation 1: You see a wall 1 step left, \n"
        " Action 1: "
    )


def test_french_headers_and_synonyms():
    prompt = build_prompt(SYNONYM_ACTION_NAMES, "aller à la balle verte", [["Tu vois un mur à 2 pas devant"]], [], "fr")
    assert prompt == (
        "Actions possibles pour l'agent: rotate left, rotate right, move ahead, take, release, switch \n"
        " But de l'agent: aller à la balle verte \n"
        " Observation 0: Tu vois un mur à 2 pas devant, \n Action 0: "
    )


def test_history_keeps_nbr_obs_observations_and_the_actions_between():
    history = PromptHistory(nbr_obs=3)
    for i in range(5):
        history.record([f"obs {i}"], f"act {i}")
    prompt = history.prompt(["a", "b"], "m", ["obs 5"])
    assert prompt == (
        "Possible action of the agent: a, b \n Goal of the agent: m"
        " \n Observation 0: obs 3, \n Action 0: act 3"
        " \n Observation 1: obs 4, \n Action 1: act 4"
        " \n Observation 2: obs 5, \n Action 2: "
    )
    history.clear()
    assert history.prompt(["a"], "m", ["x"]).endswith("Observation 0: x, \n Action 0: ")


def test_single_observation_history_has_no_past():
    history = PromptHistory(nbr_obs=1)
    history.record(["old"], "a")
    assert "old" not in history.prompt(["a"], "m", ["new"])
