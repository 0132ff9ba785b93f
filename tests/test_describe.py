"""Description rules on hand-built views (agent at (3, 6) facing up) and on a real minigrid grid."""

import numpy as np
import pytest
from minigrid.core.world_object import Ball, Box, Door, Key, Wall
from minigrid.envs import EmptyEnv

from glamrl.envs.describe import UnknownLanguageError, describe

EMPTY, WALL, DOOR, KEY, BALL, BOX = (1, 0, 0), (2, 5, 0), 4, 5, 6, 7
RED, GREEN, BLUE, PURPLE, YELLOW, GREY = range(6)
OPEN, CLOSED, LOCKED = range(3)


def view(cells: dict[tuple[int, int], tuple[int, int, int]], fill=EMPTY) -> np.ndarray:
    """A 7x7x3 view, every cell `fill` except `cells` {(x, y): (type, colour, state)}."""
    image = np.zeros((7, 7, 3), dtype=np.uint8)
    image[:, :] = fill
    for (x, y), cell in cells.items():
        image[x, y] = cell
    return image


def test_walls_forward_left_right_in_that_order():
    image = view({(3, 3): WALL, (6, 6): WALL, (1, 6): WALL})
    assert describe(image) == [
        "You see a wall 3 steps forward", "You see a wall 2 steps left", "You see a wall 3 steps right",
    ]


def test_wall_at_one_step_is_singular():
    assert describe(view({(3, 5): WALL, (2, 6): WALL})) == ["You see a wall 1 step forward", "You see a wall 1 step left"]


def test_object_hides_the_wall_behind_it_but_unseen_cells_do_not():
    image = view({(3, 4): (BALL, GREEN, 0), (3, 2): WALL, (0, 6): WALL, (1, 6): (0, 0, 0), (2, 6): (0, 0, 0)})
    assert describe(image) == ["You see a wall 3 steps left", "You see a green ball 2 steps forward"]


def test_only_the_first_wall_of_a_ray_counts():
    assert describe(view({(3, 4): WALL, (3, 1): WALL})) == ["You see a wall 2 steps forward"]


def test_object_distances_and_column_by_column_order():
    image = view({
        (4, 2): (KEY, PURPLE, 0),   # right and forward
        (1, 6): (BOX, RED, 0),      # in the agent's row: hides the left wall ray
        (3, 5): (BALL, BLUE, 0),    # straight ahead: hides the forward wall ray
        (1, 1): (KEY, YELLOW, 0),   # same column as the box, further up: listed first
        (5, 5): (BALL, GREY, 0),
    })
    assert describe(image) == [
        "You see a yellow key 2 steps left and 5 steps forward",
        "You see a red box 2 steps left",
        "You see a blue ball 1 step forward",
        "You see a purple key 1 step right and 4 steps forward",
        "You see a grey ball 2 steps right and 1 step forward",
    ]


def test_singular_step_in_object_distances():
    assert describe(view({(2, 5): (BOX, GREEN, 0)})) == ["You see a green box 1 step left and 1 step forward"]


@pytest.mark.parametrize("state, english, faithful", [
    (OPEN, "You see an open red door 2 steps forward", "You see a open red door 2 steps forward"),
    (CLOSED, "You see a closed red door 2 steps forward", "You see a closed red door 2 steps forward"),
    (LOCKED, "You see a locked red door 2 steps forward", "You see a locked red door 2 steps forward"),
])
def test_doors_in_each_state(state, english, faithful):
    image = view({(3, 4): (DOOR, RED, state)})
    assert describe(image) == [english]
    assert describe(image, faithful=True) == [faithful]


def test_carried_object_comes_first_and_is_not_seen():
    image = view({(3, 6): (KEY, RED, 0), (3, 4): WALL})
    assert describe(image) == ["You carry a red key", "You see a wall 2 steps forward"]
    assert describe(image, language="fr") == ["Tu portes une clef rouge", "Tu vois un mur à 2 pas devant"]


def test_french_wording_and_agreement():
    image = view({(3, 6): (BOX, GREY, 0), (0, 6): WALL, (5, 6): (DOOR, GREY, LOCKED),
                  (2, 3): (BALL, GREEN, 0), (4, 5): (DOOR, PURPLE, OPEN)})
    assert describe(image, language="fr") == [
        "Tu portes une boîte grise",
        "Tu vois un mur à 3 pas à gauche",
        "Tu vois une balle verte à 1 pas à gauche et 3 pas devant",
        "Tu vois une porte violette ouverte à 1 pas à droite et 1 pas devant",
        "Tu vois une porte grise fermée à clef à 2 pas à droite",
    ]
    assert describe(image, language="fr", faithful=True)[2] == "Tu vois une balle verte 1 pas à gauche et 3 pas devant"


def test_empty_view_says_nothing_and_unknown_language_is_refused():
    assert describe(view({}, fill=(0, 0, 0))) == []
    with pytest.raises(UnknownLanguageError):
        describe(view({}), language="de")


def test_real_minigrid_view_agent_facing_east():
    """Objects on a real grid; the agent at (3, 3) faces east (+x), so its left is north (-y)."""
    env = EmptyEnv(size=8)
    env.reset(seed=0)
    env.grid.set(6, 6, None)                          # remove the goal square
    env.agent_pos, env.agent_dir = (3, 3), 0
    env.grid.set(5, 3, Ball("green"))                 # 2 ahead
    env.grid.set(3, 1, Key("red"))                    # 2 left, in front of the north wall
    env.grid.set(4, 5, Door("yellow", is_open=True))  # 1 ahead, 2 right
    env.grid.set(6, 4, Box("blue"))                   # 3 ahead, 1 right
    env.carrying = Key("purple")
    assert describe(env.gen_obs()["image"]) == [
        "You carry a purple key",
        "You see a red key 2 steps left",
        "You see a green ball 2 steps forward",
        "You see a blue box 1 step right and 3 steps forward",
        "You see an open yellow door 2 steps right and 1 step forward",
    ]
    env.grid.set(3, 1, None)
    env.grid.set(5, 3, None)
    env.carrying = None
    assert describe(env.gen_obs()["image"])[:2] == ["You see a wall 4 steps forward", "You see a wall 3 steps left"]


def test_env_faithful_reaches_the_descriptions_of_a_configured_run():
    # random play of a level with unlocked doors (random toggles open them); `env.faithful` writes GLAM's "a open"
    from glamrl.config import load_train_config

    texts = {}
    for faithful in (False, True):
        envs = load_train_config(None, ["env.id=BabyAI-OpenTwoDoors-v0", "env.num_envs=2",
                                        f"env.faithful={str(faithful).lower()}"]).env.make_vector_env()
        obs, _ = envs.reset(seed=4)
        rng = np.random.default_rng(0)
        seen = []
        for _ in range(400):
            seen += obs["descriptions"][0]
            obs = envs.step(rng.integers(0, 6, 2))[0]
        texts[faithful] = " ".join(seen)
        envs.close()
    assert " an open " in texts[False] and " a open " not in texts[False]
    assert " a open " in texts[True] and " an open " not in texts[True]
