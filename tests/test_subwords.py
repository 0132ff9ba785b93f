"""DRRN's subword model: the shipped file is what a rebuild writes, BabyAI-Text reads one piece per word,
every word of the generalisation suite reads pieces of its own, and cuts keep whole words."""

import pytest

from glamrl.envs.actions import FRENCH_ACTION_NAMES, SYNONYM_ACTION_NAMES
from glamrl.envs.subwords import (ALPHABET, SUBWORDS_FILE, WORD_START, build_subwords, encode_subwords, main,
                                  random_play_prompts, subword_ids, subword_tokenizer)
from glamrl.envs.vocabulary import PAD, UNK, word_ids
from glamrl.eval.suite import TESTS


def suite_words() -> dict[str, set[str]]:
    """Every word the suite's tests write in place of BabyAI-Text's (its maps' values, goal headers, action
    names), and the words they replace, by where they come from."""
    phrases = {"substituted": set(), "replaced": set()}
    for test in TESTS.values():
        phrases["substituted"] |= {*test.words.values(), *(test.actions or ()), *filter(None, [test.goal_header])}
        phrases["replaced"] |= set(test.words)
    phrases["substituted"] |= {*SYNONYM_ACTION_NAMES, *FRENCH_ACTION_NAMES}
    return {kind: {word for phrase in found for word in phrase.split()} for kind, found in phrases.items()}


def random_prompts(level: str, language: str, episodes: int, seed: int) -> list[str]:
    """GLAM's prompts along random play, on other episodes than the model's corpus."""
    return list(random_play_prompts(level, language, episodes, 20, seed))


def test_the_shipped_model_is_what_a_rebuild_writes(capsys):
    assert SUBWORDS_FILE.read_text(encoding="utf-8") == build_subwords().to_str(pretty=True)
    assert main([]) == 0 and "what a rebuild writes" in capsys.readouterr().out


def test_every_character_of_the_alphabet_is_a_piece_and_text_is_lower_cased():
    tokenizer = subword_tokenizer()
    vocab = tokenizer.get_vocab()
    assert (vocab["<pad>"], vocab["<unk>"]) == (PAD, UNK)
    assert all(c in vocab for c in WORD_START + ALPHABET)
    assert set("àâæçéèêëîïôœùûüÿ") <= set(ALPHABET)  # every French accented letter
    for c in ALPHABET:
        assert UNK not in subword_ids(f"x{c}y {c}"), c
    assert subword_ids("CHAISE Dorée ŒUF") == subword_ids("chaise dorée œuf")
    assert subword_ids("chaise 你好")[-1] == UNK  # outside the alphabet


@pytest.mark.parametrize("language", ["en", "fr"])
def test_babyai_text_reads_one_piece_per_word_as_the_word_vocabulary_does(language):
    tokenizer = subword_tokenizer()
    for level in ("BabyAI-MixedTrainLocal-v0", "BabyAI-MixedTestLocal-v0"):
        for prompt in random_prompts(level, language, episodes=10, seed=10_000):
            ids = subword_ids(prompt)
            assert ids == tokenizer.encode(prompt).ids  # the fast path reads as the model does
            assert UNK not in ids and len(ids) == len(word_ids(prompt)), prompt
            # a piece starts a word (written with "▁") exactly where a whitespace-separated word starts
            starts = [tokenizer.id_to_token(i).startswith(WORD_START) for i in ids]
            assert sum(starts) == len(prompt.split()) and starts[0]


def test_every_word_of_the_suite_reads_pieces_of_its_own():
    words = suite_words()
    substituted, replaced = words["substituted"], words["replaced"]
    assert {"chair", "vermilion", "dax", "gakul", "chaise", "voiture", "dorée", "mauve", "rotate", "attraper",
            "would", "dois"} <= substituted  # gathered from the registry, not listed here
    encoded = {word: tuple(subword_ids(word)) for word in substituted | replaced}
    assert all(UNK not in ids for ids in encoded.values())
    assert len(set(encoded.values())) == len(encoded)  # distinct words, distinct pieces (the replaced ones too)
    assert all(subword_ids(phrase) == [i for w in phrase.split() for i in encoded[w]]
               for phrase in SYNONYM_ACTION_NAMES + FRENCH_ACTION_NAMES)
    unknown = sorted(w for w in substituted if UNK in word_ids(w))
    assert {"chair", "dax", "chaise"} <= set(unknown)  # what the word vocabulary reads as one <unk>


def test_a_cut_keeps_the_head_and_the_newest_whole_words():
    ids = {w: subword_ids(w) for w in ("go", "to", "red", "dax", "ball")}
    assert len(ids["dax"]) > 1 and all(len(ids[w]) == 1 for w in ("go", "to", "red", "ball"))
    head = ids["go"] + ids["to"]
    rows = encode_subwords(["red dax ball", "red dax ball", "red"], max_tokens=5,
                           heads=["go to", "go to", "go to red dax ball"]).tolist()
    assert rows[0] == head + ids["ball"] + [PAD, PAD]  # "dax" would lose its first pieces: it goes whole
    assert rows[2] == head + ids["red"] + ids["dax"][:5 - 3]  # the head is kept up to max_tokens, cut or not
    whole = encode_subwords(["red dax ball"], max_tokens=3 + len(ids["dax"]), heads=["go to"]).tolist()[0]
    assert whole == head + ids["dax"] + ids["ball"]
    assert encode_subwords([""], max_tokens=4).tolist() == [[UNK, PAD, PAD, PAD]]
