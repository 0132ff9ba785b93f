import re

import pytest
import torch

from benchmarks.trunk_probe import episode_split, last_token_states, main, probe_layer, probe_tokens, token_states
from glamrl.config import ModelConfig
from glamrl.llm.loading import load_model

TINY = ["model.name=tiny-llama", "model.device=cpu", "env.num_envs=4"]


@pytest.mark.parametrize("args, message", [
    (["--episodes", "0"], "--episodes 0"),
    (["--num-envs", "0"], "--num-envs 0"),
    (["--config", "{tmp}/no_such.yaml"], "no_such.yaml"),
    (["ppo.no_such_key=1"], "no_such_key"),
    (["--episodes", "1", *TINY], "cannot be split"),
    (["--episodes", "4", "model.name=tiny-t5", "model.device=cpu", "env.num_envs=4"], "seq2seq"),
    (["--reader", "attention", "--episodes", "4", *TINY, "--layers", "1", "9"], "--layers 9: tiny-llama has layers 0 to 2"),
    ([*TINY, "--layers", "1"], "--layers chooses the layers of --reader attention"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, one_thread, args, message):
    assert main([a.format(tmp=tmp_path) for a in args]) == 2
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("trunk_probe: error: ") and message in err


def test_the_batched_states_are_each_prompt_read_alone(one_thread):
    torch.manual_seed(0)
    loaded = load_model(ModelConfig(name="tiny-llama", device="cpu"))
    prompts = ["go to the red ball", "a", "Possible action of the agent: turn left, turn right \n Action 0: ",
               "go to the green key and then pick up the box"]
    states = last_token_states(loaded, prompts, torch.float32)  # sorted by length, padded on the right
    layers = loaded.model.config.num_hidden_layers
    assert states.shape == (len(prompts), layers + 1, loaded.model.config.hidden_size)
    for prompt, state in zip(prompts, states):
        with torch.no_grad():
            alone = loaded.model(**loaded.tokenizer(prompt, return_tensors="pt"), output_hidden_states=True)
        reference = torch.stack([h[0, -1] for h in alone.hidden_states])
        torch.testing.assert_close(state, reference, atol=1e-5, rtol=1e-4)


def test_every_tokens_states_are_each_prompt_read_alone(one_thread):
    torch.manual_seed(0)
    loaded = load_model(ModelConfig(name="tiny-llama", device="cpu"))
    prompts = ["go to the red ball", "a", "go to the green key and then pick up the box"]
    (first, last), lengths = token_states(loaded, prompts, torch.float32, [0, 2])
    for prompt, a, b, n in zip(prompts, first, last, lengths.tolist()):
        with torch.no_grad():
            alone = loaded.model(**loaded.tokenizer(prompt, return_tensors="pt"), output_hidden_states=True)
        assert n == alone.hidden_states[0].shape[1] and not a[n:].any()  # zeros after the prompt
        torch.testing.assert_close(a[:n].float(), alone.hidden_states[0][0], atol=2e-2, rtol=1e-2)  # bf16 storage
        torch.testing.assert_close(b[:n].float(), alone.hidden_states[2][0], atol=2e-2, rtol=1e-2)


def test_an_attention_probe_finds_the_label_of_the_token_the_last_one_names():
    """Each sequence holds 6 tokens (a key and a value of 3 classes each) and a last token that repeats one
    token's key; the label is that token's value. The last token alone says nothing of it; one attention head can
    find it."""
    g = torch.Generator().manual_seed(0)
    n, T, d = 1500, 7, 24
    keys, values = torch.randn(8, 12, generator=g), torch.randn(3, 12, generator=g)
    which_key = torch.stack([torch.randperm(8, generator=g)[:6] for _ in range(n)])   # (n, 6) distinct keys
    label = torch.randint(0, 3, (n, 6), generator=g)
    x = torch.zeros(n, T, d)
    x[:, :6, :12], x[:, :6, 12:] = keys[which_key], values[label]
    named = torch.randint(0, 6, (n,), generator=g)
    x[:, 6, :12] = keys[which_key[torch.arange(n), named]]
    x += 0.1 * torch.randn(n, T, d, generator=g)
    y = label[torch.arange(n), named]
    train = torch.arange(n) < 1200
    read = probe_tokens(x.to(torch.bfloat16), torch.full((n,), T), y, train, classes=3, steps=400)
    assert read["test_acc"] > 0.9
    assert probe_layer(x[:, -1], y, train, classes=3)["test_acc"] < 0.45  # the last token alone: chance


def test_episode_split_keeps_each_episode_on_one_side():
    episodes = [0, 0, 1, 1, 1, 2, 3, 3, 4]
    train = episode_split(episodes, share=0.6)
    assert train.tolist() == [True, True, True, True, True, True, False, False, False]


def test_a_probe_finds_a_linear_label_and_not_a_random_one():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(900, 20, generator=g)
    readable = (x @ torch.randn(20, 3, generator=g)).argmax(1)  # a linear function of the features
    noise = torch.randint(0, 3, (900,), generator=g)             # independent of them
    train = torch.arange(900) < 700
    found = probe_layer(x, readable, train, classes=3)
    assert found["test_acc"] > 0.9 and found["test_nll"] < 0.4
    missed = probe_layer(x, noise, train, classes=3)
    assert missed["test_acc"] < 0.45 and missed["test_nll"] > 1.0  # chance: 1/3, ln 3 = 1.10
    assert missed["train_acc"] > missed["test_acc"]
    assert found["predicted"].shape == (200,)


def test_the_report_probes_every_layer_of_a_tiny_model(capsys, one_thread):
    torch.manual_seed(0)
    assert main(["--episodes", "10", *TINY, "env.id=BabyAI-GoToLocalS6N3-v0"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"tiny-llama on BabyAI-GoToLocalS6N3-v0: \d+ decisions of the bot in 10 episodes", out)
    layers = [int(line.split()[0]) for line in out.splitlines() if re.match(r"\s+\d+ ", line)]
    assert layers == list(range(len(layers))) and len(layers) >= 2
    assert re.search(r"layer \d+ \(the lowest test nll\), test accuracy by where the goal is: goal", out)


def test_the_attention_report_probes_the_chosen_layers(capsys, one_thread):
    torch.manual_seed(0)
    assert main(["--reader", "attention", "--episodes", "10", *TINY, "env.id=BabyAI-GoToLocalS6N3-v0",
                 "--layers", "1", "2"]) == 0
    out = capsys.readouterr().out
    assert "attention probe of every token" in out
    assert [int(line.split()[0]) for line in out.splitlines() if re.match(r"\s+\d+ ", line)] == [1, 2]
    assert re.search(r"layer [12] \(the lowest test nll\), test accuracy by where the goal is: goal", out)
