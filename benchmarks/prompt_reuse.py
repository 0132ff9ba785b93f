"""How often a level repeats its prompts, and how much of a new prompt an earlier one already begins with:
random-action play (or the BabyAI bot's), counted in SmolLM2's tokens.

    python benchmarks/prompt_reuse.py [--levels BabyAI-GoToObjS4-v0 ...] [--envs 16] [--steps 512] [--agent bot]

The frozen-trunk cache (`model.train_layers`) and the scorer's prompt dedupe save one trunk
pass (or one forward) per repeated prompt, so the distinct-prompt count bounds what they save. A trained
policy visits fewer states than random play, so it repeats more. `--agent bot` plays the BabyAI bot instead:
the shortest episodes, without random play's no-op actions, the play a trained policy tends to.

The trunk cache is keyed by the whole prompt: a new prompt runs the frozen blocks on all its tokens, even
where it begins with tokens an earlier prompt had (the mission, then the first observations of an episode
whose window of `nbr_obs` observations is not full yet). In a causal model those leading tokens' activations
are the earlier prompt's, so a cache of token prefixes could skip them. `prefix share` is the share of the
new prompts' tokens that lie in the longest token prefix shared with any earlier prompt of the run: what such
a cache would save of the frozen blocks' work on new prompts, at most (the tokens are the scorer's: the
prompt without its trailing space, SmolLM2's tokenizer).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from transformers import AutoTokenizer

from glamrl.agents.bot import BotAgent
from glamrl.envs import make_vector_env
from glamrl.envs.actions import ACTION_NAMES
from glamrl.prompts import PromptHistory

TOKENIZER = Path(__file__).resolve().parent / "models" / "tokenizer"


class PrefixTrie:
    """Token sequences seen so far; `add` returns how many leading tokens of a sequence were seen before."""

    def __init__(self) -> None:
        self.root: dict[int, dict] = {}

    def add(self, tokens: list[int]) -> int:
        node, shared = self.root, 0
        for token in tokens:  # past the first token not seen here, every node is new and empty
            shared += token in node
            node = node.setdefault(token, {})
        return shared


def prompt_reuse(level: str, nbr_obs: int, envs: int, steps: int, tokenizer, seed: int = 0, agent: str = "random"
                 ) -> list[dict]:
    """After every quarter of `steps` steps of `envs` envs played by `agent` ("random" actions or the "bot"):
    frames, distinct prompts so far, and the share of the distinct prompts' tokens in a prefix an earlier prompt
    had."""
    vec = make_vector_env(level, envs)
    rng = np.random.default_rng(seed)
    bot = BotAgent(vec) if agent == "bot" else None
    histories = [PromptHistory(nbr_obs) for _ in range(envs)]
    obs, _ = vec.reset(seed=seed)
    seen: set[str] = set()
    trie = PrefixTrie()
    new_tokens = shared_tokens = 0
    counts = []
    for step in range(1, steps + 1):
        actions = rng.integers(0, len(ACTION_NAMES), size=envs) if bot is None else bot.act(obs).actions
        for i, history in enumerate(histories):
            prompt = history.prompt(ACTION_NAMES, obs["mission"][i], obs["descriptions"][i])
            if prompt not in seen:
                seen.add(prompt)
                tokens = tokenizer(prompt.removesuffix(" ")).input_ids
                shared_tokens += trie.add(tokens)
                new_tokens += len(tokens)
            history.record(obs["descriptions"][i], ACTION_NAMES[actions[i]])
        obs, _, terminated, truncated, _ = vec.step(actions)
        for i in np.flatnonzero(terminated | truncated):
            histories[i].clear()
        if bot is not None:
            bot.end_episodes(terminated | truncated)
        if step % max(1, steps // 4) == 0:
            counts.append({"frames": step * envs, "distinct": len(seen), "prefix_share": shared_tokens / new_tokens,
                           "tokens": new_tokens / len(seen)})
    vec.close()
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--levels", nargs="+", default=["BabyAI-GoToObjS4-v0", "BabyAI-MixedTrainLocal-v0"])
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=512)
    parser.add_argument("--agent", choices=("random", "bot"), default="random", help="who plays the envs")
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    print(f"{'level':<28}{'obs':>4}  distinct prompts / frames (prefix share of the new prompts' tokens; their "
          f"mean tokens)")
    for level in args.levels:
        for nbr_obs in (1, 2, 3):
            counts = prompt_reuse(level, nbr_obs, args.envs, args.steps, tokenizer, agent=args.agent)
            print(f"{level:<28}{nbr_obs:>4}  " + "  ".join(
                f"{c['distinct']}/{c['frames']} ({c['prefix_share']:.0%}; {c['tokens']:.0f})" for c in counts))


if __name__ == "__main__":
    main()
