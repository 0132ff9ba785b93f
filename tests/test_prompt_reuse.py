"""benchmarks/prompt_reuse.py: the prefix trie against a brute-force longest shared prefix, and a tiny run."""

import random

from transformers import AutoTokenizer

from benchmarks.prompt_reuse import TOKENIZER, PrefixTrie, prompt_reuse


def test_the_trie_gives_the_longest_prefix_shared_with_any_earlier_sequence():
    rng = random.Random(0)
    trie, earlier = PrefixTrie(), []
    for _ in range(300):
        base = rng.choice(earlier) if earlier and rng.random() < 0.7 else []
        tokens = base[:rng.randint(0, len(base))] + [rng.randint(0, 3) for _ in range(rng.randint(0, 6))]
        expected = max((next((i for i, (a, b) in enumerate(zip(tokens, seen)) if a != b), min(len(tokens), len(seen)))
                        for seen in earlier), default=0)
        assert trie.add(tokens) == expected
        earlier.append(tokens)


def test_every_new_prompt_after_the_first_shares_at_least_the_header():
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    header = len(tokenizer("Possible action of the agent: turn left, turn right, go forward, pick up, drop, "
                           "toggle \n Goal of the agent:").input_ids)
    (last,) = prompt_reuse("BabyAI-GoToObjS4-v0", 1, envs=2, steps=4, tokenizer=tokenizer)[-1:]
    assert last["frames"] == 8 and 1 <= last["distinct"] <= 8
    first_free = 1 / last["distinct"]  # the first prompt shares nothing
    assert (1 - first_free) * header / last["tokens"] <= last["prefix_share"] < 1



def test_the_bot_does_not_stand_still_as_random_play_does():
    """Random play's pick up, drop and toggle with nothing there repeat the prompt (one observation); the bot's
    shortest paths change the view at every step, so on these seeds none of its 16 prompts repeats."""
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    (bot,) = prompt_reuse("BabyAI-GoToObjS4-v0", 1, envs=2, steps=8, tokenizer=tokenizer, agent="bot")[-1:]
    (rand,) = prompt_reuse("BabyAI-GoToObjS4-v0", 1, envs=2, steps=8, tokenizer=tokenizer)[-1:]
    assert bot["distinct"] == bot["frames"] == 16 and rand["distinct"] <= 8
