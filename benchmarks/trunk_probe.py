"""Where in the frozen language model is the bot's next action readable? Linear probes of the residual stream at the
last prompt token, one per layer, on the BabyAI bot's frames of a level.

    python -m benchmarks.trunk_probe                                 # goto_local_cpu.yaml's level and model
    python -m benchmarks.trunk_probe --config configs/goto_cpu.yaml --episodes 1000 env.id=BabyAI-GoToLocalS6N3-v0

The bot plays `--episodes` episodes of the config's level (its evaluation seeds); each decision becomes the prompt
the config's policy reads there (`benchmarks.bot_agreement.bot_frames`). The untrained model reads every prompt once;
the hidden state of its last prompt token after each layer (0: the embeddings) is the probe's input, and the bot's
action its label. Per layer, a multinomial logistic regression on standardised features is fitted on the first 80%
of the episodes (its L2 weight chosen on the last quarter of those) and scored on the other 20%: accuracy, and the
mean negative log-likelihood of the bot's action (nats). "always the commonest action" is the floor.

With `model.train_layers=K` the policy's value head and the action scores start from what the top K blocks make of
the frozen blocks' states. A layer where a linear read-out already gives the bot's action says the information is at
hand at that token; a low score at every layer says the trained blocks must gather it from the prompt's other tokens
(their attention), which is what a policy that learns a walk instead of the mission has failed to do
(`benchmarks.bot_agreement`). The last line splits the best layer's test accuracy by where the goal is.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from benchmarks.bot_agreement import SITUATIONS, add_frame_arguments, bot_frames, check_frame_arguments
from glamrl.config import TrainConfig, load_train_config
from glamrl.errors import GlamrlError
from glamrl.llm.loading import LoadedModel, load_model
from glamrl.llm.precision import choose_compute_dtype

DEFAULT_CONFIG = Path("configs/goto_local_cpu.yaml")
READ_BATCH = 32
"""Prompts the model reads at once (sorted by length, so that a batch pads little)."""
WEIGHT_DECAYS = (1e-4, 1e-3, 1e-2)
"""The probe's L2 weights tried (times the sum of squared weights, on standardised features)."""


def last_token_states(loaded: LoadedModel, prompts: Sequence[str], compute_dtype: torch.dtype) -> Tensor:
    """The residual stream at each prompt's last token after every layer, (len(prompts), layers + 1, hidden) in
    float32; index 0 is the embeddings' output. A causal model's."""
    tokenizer = loaded.tokenizer
    tokenizer.padding_side = "right"
    ids = tokenizer(list(prompts))["input_ids"]
    order = np.argsort([len(i) for i in ids], kind="stable")
    autocast = torch.autocast(loaded.device.type, dtype=compute_dtype) if compute_dtype != torch.float32 \
        else contextlib.nullcontext()
    batches = []
    with torch.no_grad(), autocast:
        for start in range(0, len(prompts), READ_BATCH):
            picked = order[start:start + READ_BATCH]
            enc = tokenizer.pad({"input_ids": [ids[i] for i in picked]}, return_tensors="pt").to(loaded.device)
            hidden = loaded.model(**enc, output_hidden_states=True).hidden_states  # layers + 1 of (B, T, H)
            last = enc["attention_mask"].sum(1) - 1  # (B,)
            rows = torch.arange(len(picked))
            batches.append(torch.stack([h[rows, last] for h in hidden], 1).float().cpu())  # (B, layers + 1, H)
    return torch.cat(batches)[torch.from_numpy(np.argsort(order))]  # back to the prompts' order


def fit_probe(x: Tensor, y: Tensor, weight_decay: float, classes: int) -> tuple[Tensor, Tensor]:
    """A multinomial logistic regression of labels `y` (n,) on features `x` (n, d), fitted by L-BFGS with an L2
    penalty `weight_decay` * |W|^2: its weights (d, classes) and biases (classes,)."""
    w = torch.zeros(x.shape[1], classes, requires_grad=True)
    b = torch.zeros(classes, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=500, line_search_fn="strong_wolfe")

    def closure() -> Tensor:
        opt.zero_grad()
        loss = F.cross_entropy(x @ w + b, y) + weight_decay * (w ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach(), b.detach()


def probe_layer(x: Tensor, y: Tensor, train: Tensor, classes: int) -> dict[str, object]:
    """Fit a probe of `y` (n,) on `x` (n, d) with the frames `train` (n,) bool, its L2 weight chosen on the last
    quarter of those frames, and score it on the other frames: train and test accuracy, test NLL, and the test
    frames' predictions."""
    train_idx = torch.nonzero(train).squeeze(1)
    fit_idx, val_idx = train_idx[: len(train_idx) * 3 // 4], train_idx[len(train_idx) * 3 // 4:]
    mean, std = x[train].mean(0), x[train].std(0) + 1e-5
    x = (x - mean) / std

    def nll(w: Tensor, b: Tensor, idx: Tensor) -> float:
        return float(-(x[idx] @ w + b).log_softmax(-1)[torch.arange(len(idx)), y[idx]].mean())

    weight_decay = min(WEIGHT_DECAYS, key=lambda wd: nll(*fit_probe(x[fit_idx], y[fit_idx], wd, classes), val_idx))
    w, b = fit_probe(x[train], y[train], weight_decay, classes)
    test = ~train
    predicted = (x @ w + b).argmax(-1)
    return {"weight_decay": weight_decay, "train_acc": float((predicted[train] == y[train]).float().mean()),
            "test_acc": float((predicted[test] == y[test]).float().mean()),
            "test_nll": nll(w, b, torch.nonzero(test).squeeze(1)), "predicted": predicted[test]}


def episode_split(episodes: Sequence[int], share: float = 0.8) -> Tensor:
    """Frames of the first `share` of the episodes (by index) for training, (n,) bool; the rest are the test."""
    episodes = np.asarray(episodes)
    cut = np.unique(episodes)[int(len(np.unique(episodes)) * share)]
    return torch.from_numpy(episodes < cut)


def report(cfg: TrainConfig, episodes: int, num_envs: int | None) -> None:
    """Record the bot's frames of `cfg`'s level, read them with `cfg`'s untrained model and print the table."""
    loaded = load_model(cfg.model)
    if loaded.is_seq2seq:
        raise GlamrlError(f"trunk_probe reads a causal model's last prompt token; {cfg.model.name} is a seq2seq model")
    records = bot_frames(cfg, episodes, num_envs or cfg.env.num_envs)
    y = torch.tensor([r["action_index"] for r in records])
    train = episode_split([r["episode"] for r in records])
    if train.all() or not train.any():
        raise GlamrlError(f"{episodes} episodes cannot be split into training and test episodes; give more")
    compute_dtype, _ = choose_compute_dtype(cfg.model, loaded.device)
    states = last_token_states(loaded, [r["prompt"] for r in records], compute_dtype)
    classes = len(cfg.prompt.actions)
    test = ~train
    commonest = int(torch.bincount(y[train], minlength=classes).argmax())
    situations = np.asarray([r["situation"] for r in records])[test.numpy()]
    seen = [s for s in SITUATIONS if s in situations]
    print(f"{cfg.model.name} on {cfg.env.id}: {len(records)} decisions of the bot in {episodes} episodes "
          f"({int(train.sum())} train, {int(test.sum())} test frames); {compute_dtype}")
    print(f"always the commonest action ({cfg.prompt.actions[commonest]}): test accuracy "
          f"{float((y[test] == commonest).float().mean()):.3f}")
    print(f"{'layer':>5s} {'L2':>6s} {'train acc':>9s} {'test acc':>8s} {'test nll':>8s}")
    rows = []
    for layer in range(states.shape[1]):
        row = probe_layer(states[:, layer], y, train, classes)
        rows.append(row)
        print(f"{layer:5d} {row['weight_decay']:6g} {row['train_acc']:9.3f} {row['test_acc']:8.3f} "
              f"{row['test_nll']:8.3f}", flush=True)
    best = min(range(len(rows)), key=lambda i: rows[i]["test_nll"])
    correct = (rows[best]["predicted"] == y[test]).numpy()
    print(f"layer {best} (the lowest test nll), test accuracy by where the goal is: " + "; ".join(
        f"{s} {correct[situations == s].mean():.2f} ({int((situations == s).sum())})" for s in seen))


def main(argv: list[str] | None = None) -> int:
    """Print the table; bad input (a GlamrlError) prints one line and exits 2."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="a train config: the level, the model")
    add_frame_arguments(parser, episodes=500)  # the last 20% of the episodes are the test
    parser.add_argument("overrides", nargs="*", help="dotted overrides of the config, as glamrl train takes")
    args = parser.parse_args(argv)
    try:
        check_frame_arguments(args)
        report(load_train_config(args.config, args.overrides), args.episodes, args.num_envs)
    except GlamrlError as err:
        print(f"trunk_probe: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
