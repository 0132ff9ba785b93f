"""GLAM's generalisation suite: one registry of tests, each a change of what the agent reads.

A test substitutes whole words in the mission, the descriptions and the action names
(`glamrl.eval.substitutions`), replaces the action names or the prompt's goal header, or
changes the level or the language. The level's logic is never touched, so the bot still
solves every test, and every test of one level replays the same evaluation episodes, each from
the same RNG state (`glamrl.rollout.run_episodes`).

A test plays under the suite's env settings (`EnvConfig`: a run's own, or the defaults; `--env` moves the
level): its level, task, step limit and wording, in the test's language. A test with a level of its own
(`test_level`) plays that level with all its tasks and its own step limit; what a test sets apart from the
suite's settings is its `overrides`, written with its results.

Adding a test takes a few lines:

    register_test(SuiteTest("colour_swap", "red and blue swapped", words={"red": "blue", "blue": "red"}))
    glamrl eval --agent bot --tests colour_swap
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gymnasium.vector import SyncVectorEnv

from glamrl.agents.base import Agent
from glamrl.config import EnvConfig
from glamrl.envs.actions import FRENCH_ACTION_NAMES, SYNONYM_ACTION_NAMES
from glamrl.envs.text_env import BabyAITextEnv
from glamrl.errors import GlamrlError
from glamrl.eval.substitutions import SubstituteWords, WordSubstitution
from glamrl.rollout import evaluate

TRAIN_LEVEL = EnvConfig.id  # GLAM's training level, the default level: the level the text tests change
TEST_LEVEL = "BabyAI-MixedTestLocal-v0"


class UnknownTestError(GlamrlError, KeyError):
    """A suite or test name that is not registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass(frozen=True)
class SuiteTest:
    """One generalisation test."""

    name: str
    """registry key, used by `--tests`."""
    description: str
    """one line for tables and the JSON."""
    words: Mapping[str, str] = field(default_factory=dict)
    """whole-word substitutions applied to the mission, every description sentence and the action names."""
    actions: tuple[str, ...] | None = None
    """action names replacing the agent's own (before `words` applies); None keeps them."""
    goal_header: str | None = None
    """replaces the prompt's "Goal of the agent" (its colon stays); None keeps it."""
    language: str = "en"
    """language of the env's descriptions and missions (and of the prompt's headers)."""
    env_id: str | None = None
    """a level of the test's own; None: the suite's level (the run's, `--env`, or TRAIN_LEVEL)."""

    def action_names(self, own: Sequence[str]) -> tuple[str, ...]:
        """The names an agent whose own action names are `own` reads under this test."""
        substitute = WordSubstitution(self.words)
        return tuple(substitute(a) for a in (own if self.actions is None else self.actions))

    def wrap(self, env: BabyAITextEnv) -> SubstituteWords:
        """`env` (one copy of the test's level) with the test's text substitutions."""
        return SubstituteWords(env, self.words, self.actions)

    def env_config(self, env: EnvConfig | None = None) -> EnvConfig:
        """The env settings the test plays under, from the suite's `env` (default `EnvConfig()`): on the test's own
        level, if it has one, with that level's tasks and step limit; in the test's language."""
        env = env or EnvConfig()
        if self.env_id is None:
            return dataclasses.replace(env, language=self.language)
        return dataclasses.replace(env, id=self.env_id, task=None, max_steps=None, language=self.language)

    def overrides(self, env: EnvConfig | None = None) -> dict[str, str]:
        """What the test sets apart from the suite's `env` settings: {"env": its level} and {"language": ...}."""
        base, own = env or EnvConfig(), self.env_config(env)
        return {key: getattr(own, name) for key, name in (("env", "id"), ("language", "language"))
                if getattr(own, name) != getattr(base, name)}

    def make_envs(self, num_envs: int, env: EnvConfig | None = None) -> SyncVectorEnv:
        """`num_envs` copies of the test's level under `env_config(env)`, with the test's text substitutions."""
        return dataclasses.replace(self.env_config(env), num_envs=num_envs).make_vector_env(wrapper=self.wrap)


TESTS: dict[str, SuiteTest] = {}
"""Every registered test, by name."""
SUITES: dict[str, list[str]] = {}
"""Named lists of tests (`--suite`)."""


def register_test(test: SuiteTest, suites: Sequence[str] = ()) -> SuiteTest:
    """Add `test` to the registry (and to the named suites, created if new)."""
    TESTS[test.name] = test
    for suite in suites:
        SUITES.setdefault(suite, []).append(test.name)
    return test


def select_tests(suite: str | None, names: str | None) -> list[SuiteTest]:
    """The tests of `suite`, or those named in the comma-separated `names` (any registered test)."""
    if suite is not None and suite not in SUITES:
        raise UnknownTestError(f"unknown suite {suite!r}; known suites: {', '.join(SUITES)}")
    if names is None:
        return [TESTS[name] for name in SUITES[suite or "paper"]]
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in TESTS]
    if unknown or not wanted:
        raise UnknownTestError(f"unknown test name(s) {unknown or [names]}; known tests: {', '.join(TESTS)}")
    return [TESTS[n] for n in wanted]


# ------------------------------------------------------------------ the paper's tests
OTHER_NAMES = {"key": "chair", "ball": "table", "box": "car"}
ADJECTIVE_SYNONYMS = {"red": "vermilion", "green": "jade", "blue": "cyan", "purple": "violet",
                      "yellow": "golden", "grey": "silver"}
INVENTED_NOUNS = {"key": "dax", "ball": "xolo", "box": "afze"}
INVENTED_ADJECTIVES = {"red": "faze", "green": "jatu", "blue": "croh", "purple": "vurst",
                       "yellow": "gakul", "grey": "sil"}

# French: every gender form of a colour maps to one word (every noun of BabyAI-Text's French is
# feminine: clef, balle, boîte, porte); the locked-door phrase is protected so that renaming
# "clef" leaves "fermée à clef" alone.
#
# Where this differs from GLAM's released tests (experiments/post-training_tests.py), we keep the
# correct French word:
# - GLAM replaced substrings, so its "gris" -> "argent" also turned "grise" into "argente", and its
#   "clef" -> "chaise" turned a locked door "fermée à clef" into "fermée à chaise". Here whole words
#   are replaced: "gris" and "grise" both read "argent", and a locked door stays "fermée à clef".
# - GLAM's colour synonyms: vermilion, jade, cyan, mauve, dorée, argent. "vermilion" is the English
#   spelling: we write "vermillon"; the others are GLAM's.
# - GLAM's French noun and colour maps named only some gender forms ("verte", "bleue", "violette",
#   "gris" in one map, "grise" in another); here every form of a colour maps to the same word.
_FR_LOCKED = {"fermée à clef": "fermée à clef", "fermé à clef": "fermé à clef"}
_FR_COLOURS = {"red": ("rouge",), "green": ("vert", "verte"), "blue": ("bleu", "bleue"),
               "purple": ("violet", "violette"), "yellow": ("jaune",), "grey": ("gris", "grise")}
_FR_NOUNS = {"key": "clef", "ball": "balle", "box": "boîte"}


def _french_nouns(new: Mapping[str, str]) -> dict[str, str]:
    return {**_FR_LOCKED, **{_FR_NOUNS[en]: word for en, word in new.items()}}


def _french_colours(new: Mapping[str, str]) -> dict[str, str]:
    return {form: new[en] for en, forms in _FR_COLOURS.items() for form in forms}


FR_OTHER_NAMES = _french_nouns({"key": "chaise", "ball": "table", "box": "voiture"})
FR_ADJECTIVE_SYNONYMS = _french_colours({"red": "vermillon", "green": "jade", "blue": "cyan",
                                         "purple": "mauve", "yellow": "dorée", "grey": "argent"})
FR_INVENTED_NOUNS = _french_nouns(INVENTED_NOUNS)
FR_INVENTED_ADJECTIVES = _french_colours(INVENTED_ADJECTIVES)

for _test in [
    SuiteTest("no_change", "the training level as trained"),
    SuiteTest("other_names", "other real nouns for the objects", words=OTHER_NAMES),
    SuiteTest("adjective_synonyms", "synonyms of the colours", words=ADJECTIVE_SYNONYMS),
    SuiteTest("invented_nouns", "invented nouns for the objects", words=INVENTED_NOUNS),
    SuiteTest("invented_adjectives", "invented colour words", words=INVENTED_ADJECTIVES),
    SuiteTest("invented_words", "invented nouns and colours", words={**INVENTED_NOUNS, **INVENTED_ADJECTIVES}),
    SuiteTest("intro_first_person", 'goal header "I would like the agent to"', goal_header="I would like the agent to"),
    SuiteTest("intro_second_person", 'goal header "You have to"', goal_header="You have to"),
    SuiteTest("synonym_actions", "synonyms of the action names", actions=SYNONYM_ACTION_NAMES),
    SuiteTest("french", "prompt, descriptions, mission and actions in French", actions=FRENCH_ACTION_NAMES,
              language="fr"),
    SuiteTest("test_level", "new object-colour pairs and pick up A then pick up B", env_id=TEST_LEVEL),
]:
    register_test(_test, suites=("paper", "all"))

SUITES["french"] = ["french"]
for _name, _description, _words in [
    ("french_other_names", "French, other real nouns", FR_OTHER_NAMES),
    ("french_adjective_synonyms", "French, synonyms of the colours", FR_ADJECTIVE_SYNONYMS),
    ("french_invented_nouns", "French, invented nouns", FR_INVENTED_NOUNS),
    ("french_invented_adjectives", "French, invented colour words", FR_INVENTED_ADJECTIVES),
    ("french_invented_words", "French, invented nouns and colours", {**FR_INVENTED_NOUNS, **FR_INVENTED_ADJECTIVES}),
]:
    register_test(SuiteTest(_name, _description, _words, FRENCH_ACTION_NAMES, language="fr"), suites=("french", "all"))
for _name, _header in [("french_intro_first_person", "Je veux que l'agent fasse"),
                       ("french_intro_second_person", "Tu dois faire")]:
    register_test(SuiteTest(_name, f'French, goal header "{_header}"', actions=FRENCH_ACTION_NAMES,
                            goal_header=_header, language="fr"), suites=("french", "all"))

# GLAM's tests with a new action space: the synonym action names under each change of the text
for _name in ["other_names", "adjective_synonyms", "invented_nouns", "invented_adjectives", "invented_words",
              "intro_first_person", "intro_second_person"]:
    _base = TESTS[_name]
    register_test(dataclasses.replace(_base, name=f"synonym_actions_{_name}", actions=SYNONYM_ACTION_NAMES,
                                      description=f"synonyms of the action names; {_base.description}"),
                  suites=("all",))


# ------------------------------------------------------------------------- running
def applicable(tests: Sequence[SuiteTest], env: EnvConfig) -> tuple[list[SuiteTest], dict[str, str]]:
    """The tests that apply on the suite's level `env.id`, and {name: why} of those that do not: a test that is
    itself a change of level from TRAIN_LEVEL (`test_level`) has no meaning on another level."""
    kept, skipped = [], {}
    for test in tests:
        if test.env_id is not None and env.id not in (TRAIN_LEVEL, test.env_id):
            skipped[test.name] = f"it evaluates its own level {test.env_id}, not {env.id}"
        else:
            kept.append(test)
    return kept, skipped


AgentBuilder = Callable[[SyncVectorEnv, SuiteTest], Agent]
"""Builds the agent evaluated under one test, for that test's envs (see `glamrl.eval.agents`)."""


def run_suite(tests: Sequence[SuiteTest], build_agent: AgentBuilder, episodes: int, seed: int,
              num_envs: int = 4, progress: bool = False, say: Callable[[str], None] = lambda _: None,
              after_test: Callable[[dict[str, dict[str, Any]]], None] = lambda _: None,
              env: EnvConfig | None = None,
              played: Mapping[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """`evaluate` under every test, each on the same episodes (episode k from `seed + k`) from the same RNG state,
    under the suite's `env` settings (default `EnvConfig()`): {test name: summary with the test's settings}.

    `after_test` receives the results so far after each test (to save them as they come). `played`: results of
    tests already played (`resumable_tests`), kept as they are and not played again.
    """
    results = dict(played or {})
    for test in tests:
        if test.name in results:
            continue
        settings = test.env_config(env)
        envs = test.make_envs(num_envs, env)
        start = time.time()
        try:
            summary = evaluate(envs, build_agent(envs, test), episodes, seed=seed, progress=progress)
        finally:
            envs.close()
        results[test.name] = {"description": test.description, "env": settings.id, "task": settings.task,
                              "max_steps": settings.max_steps, "faithful": settings.faithful,
                              "language": settings.language, "overrides": test.overrides(env),
                              "wall_time_s": round(time.time() - start, 2), **summary}
        say(format_row(test.name, results[test.name]))
        after_test(results)
    return results


SUITE_IDENTITY = ("suite", "agent", "seed", "seeding", "eval_seed", "episodes_per_test", "num_envs", "skipped")
"""The keys of a suite JSON that say which episodes of which agent its tests played."""
PROVENANCE_IDENTITY = ("run_dir", "model", "checkpoint", "greedy", "temperature", "num_envs", "episode_seeds",
                       "level", "agent")
"""The keys of its `provenance` that do: not the commit, the version or the machine, which do not change them."""


def resumable_tests(path: Path, record: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The tests' results in the suite JSON at `path` (`glamrl eval --suite --out`) where it stopped before its
    last test and played the episodes that `record` (the JSON this suite writes, without its tests) would: the
    same agent and checkpoint, level, seeds, episodes and num_envs. {} where there is no such file."""
    try:
        old = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(old, dict) or old.get("complete") is not False or not isinstance(old.get("tests"), dict):
        return {}
    same = all(old.get(k) == record.get(k) for k in SUITE_IDENTITY) and all(
        (old.get("provenance") or {}).get(k) == record["provenance"].get(k) for k in PROVENANCE_IDENTITY)
    return old["tests"] if same else {}


def format_header() -> str:
    return f"{'test':<28}{'success':>8}  {'95% CI':<13}{'return':>8}  {'95% CI':<13}{'time':>7}  overrides"


def format_row(name: str, r: dict[str, Any]) -> str:
    lo, hi = r["success_ci"]
    rlo, rhi = r["return_ci"]
    overrides = " ".join(f"{key}={value}" for key, value in r["overrides"].items())
    return (f"{name:<28}{r['success_rate']:>8.3f}  [{lo:.2f}, {hi:.2f}]  {r['mean_return']:>8.3f}  "
            f"[{rlo:.2f}, {rhi:.2f}]  {r['wall_time_s']:>6.1f}s  {overrides}").rstrip()
