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

    python -m benchmarks.trunk_probe --reader attention --layers 10 20 26

reads every token instead, with one attention head per layer: the last token's query against every token's key,
the pooled state and the last token's own read linearly (`AttentionProbe`), fitted by Adam with early stopping on
the same split. Where it reads the goal's side and the linear probe does not, one attention step over the frozen
states suffices, which a trained block has; where it does not either, the side is not at hand in any token's state.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

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
ATTENTION_RANK = 64
"""Width of the attention probe's queries and keys (SmolLM2's heads are 64 wide)."""
ATTENTION_LAYERS = (10, 20, 26)
"""The layers `--reader attention` probes by default: SmolLM2's middle, its best linear layer, and what the top 4
blocks of model.train_layers=4 read."""
ATTENTION_STEPS = 300
"""Full-batch Adam steps of the attention probe (the step of lowest validation NLL is kept)."""


def _read(loaded: LoadedModel, prompts: Sequence[str], compute_dtype: torch.dtype,
          keep: Callable[[tuple[Tensor, ...], Tensor], list[Tensor]]) -> list[Tensor]:
    """What `keep(hidden_states, lengths)` keeps of each prompt, in the prompts' order: the model reads them
    `READ_BATCH` at a time, sorted by length and padded on the right; `hidden_states` is the model's (layers + 1 of
    (B, T, H), index 0 the embeddings') and `lengths` (B,) counts each row's tokens."""
    tokenizer = loaded.tokenizer
    tokenizer.padding_side = "right"
    ids = tokenizer(list(prompts))["input_ids"]
    order = np.argsort([len(i) for i in ids], kind="stable")
    autocast = torch.autocast(loaded.device.type, dtype=compute_dtype) if compute_dtype != torch.float32 \
        else contextlib.nullcontext()
    kept: list[Tensor] = []
    with torch.no_grad(), autocast:
        for start in range(0, len(prompts), READ_BATCH):
            picked = order[start:start + READ_BATCH]
            enc = tokenizer.pad({"input_ids": [ids[i] for i in picked]}, return_tensors="pt").to(loaded.device)
            hidden = loaded.model(**enc, output_hidden_states=True).hidden_states
            kept += keep(hidden, enc["attention_mask"].sum(1))
    back = np.argsort(order)  # the prompts' order
    return [kept[i] for i in back]


def last_token_states(loaded: LoadedModel, prompts: Sequence[str], compute_dtype: torch.dtype) -> Tensor:
    """The residual stream at each prompt's last token after every layer, (len(prompts), layers + 1, hidden) in
    float32; index 0 is the embeddings' output. A causal model's."""
    def keep(hidden: tuple[Tensor, ...], lengths: Tensor) -> list[Tensor]:
        rows = torch.arange(len(lengths))
        return list(torch.stack([h[rows, lengths - 1] for h in hidden], 1).float().cpu())  # B of (layers + 1, H)
    return torch.stack(_read(loaded, prompts, compute_dtype, keep))


def token_states(loaded: LoadedModel, prompts: Sequence[str], compute_dtype: torch.dtype,
                 layers: Sequence[int]) -> tuple[list[Tensor], Tensor]:
    """The residual stream at every token of each prompt after each of `layers`, right-padded with zeros: one
    (len(prompts), T, hidden) bfloat16 tensor per layer, and each prompt's token count (len(prompts),)."""
    def keep(hidden: tuple[Tensor, ...], lengths: Tensor) -> list[Tensor]:
        rows = torch.stack([hidden[layer] for layer in layers], 1).to(torch.bfloat16).cpu()  # (B, layers, T, H)
        return [row[:, :n] for row, n in zip(rows, lengths.tolist())]
    rows = _read(loaded, prompts, compute_dtype, keep)
    padded = torch.nn.utils.rnn.pad_sequence([r.transpose(0, 1) for r in rows], batch_first=True)  # (n, T, l, H)
    return list(padded.unbind(2)), torch.tensor([r.shape[1] for r in rows])


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


class AttentionProbe(nn.Module):
    """One attention head that reads a prompt's tokens from its last one, as a trained block's head could: the last
    token's query against every token's key, the tokens' states pooled by those weights, then a linear read-out of
    the pooled state beside the last token's own (so it can do what the linear probe does, and more)."""

    def __init__(self, width: int, classes: int, rank: int = ATTENTION_RANK) -> None:
        super().__init__()
        self.query = nn.Linear(width, rank, bias=False)
        self.key = nn.Linear(width, rank, bias=False)
        self.out = nn.Linear(2 * width, classes)

    def forward(self, x: Tensor, lengths: Tensor) -> Tensor:
        """Logits (n, classes) of states `x` (n, T, H), right-padded, `lengths` (n,) tokens each."""
        n, T, _ = x.shape
        last = x[torch.arange(n), lengths - 1]                                         # (n, H)
        q, k = self.query(last), self.key(x)                                            # (n, r), (n, T, r)
        scores = torch.einsum("nr,ntr->nt", q, k) / q.shape[1] ** 0.5                   # (n, T)
        scores = scores.masked_fill(torch.arange(T) >= lengths[:, None], float("-inf"))
        pooled = torch.einsum("nt,nth->nh", scores.softmax(-1), x)                       # (n, H)
        return self.out(torch.cat([pooled, last], -1))


def probe_tokens(x: Tensor, lengths: Tensor, y: Tensor, train: Tensor, classes: int,
                 steps: int = ATTENTION_STEPS) -> dict[str, object]:
    """Fit an `AttentionProbe` of `y` (n,) on the token states `x` (n, T, H) by full-batch Adam on the first three
    quarters of the frames `train` (n,) bool, keeping the step of lowest NLL on the last quarter (early stopping:
    its regulariser), and score it on the other frames; the same fields as `probe_layer`'s."""
    train_idx = torch.nonzero(train).squeeze(1)
    fit_idx, val_idx = train_idx[: len(train_idx) * 3 // 4], train_idx[len(train_idx) * 3 // 4:]
    real = torch.arange(x.shape[1]) < lengths[:, None]                                 # (n, T)
    tokens = x[train][real[train]].float()                                              # (tokens, H)
    mean, std = tokens.mean(0), tokens.std(0) + 1e-5
    x = ((x.float() - mean) / std) * real[..., None]

    def nll(probe: AttentionProbe, idx: Tensor) -> Tensor:
        return F.cross_entropy(probe(x[idx], lengths[idx]), y[idx])

    torch.manual_seed(0)
    probe = AttentionProbe(x.shape[2], classes)
    optimizer = torch.optim.AdamW(probe.parameters(), lr=1e-3, weight_decay=1e-2)
    best, best_state = float("inf"), None
    for step in range(steps):
        optimizer.zero_grad()
        nll(probe, fit_idx).backward()
        optimizer.step()
        if step % 10 == 9:
            with torch.no_grad():
                val = float(nll(probe, val_idx))
            if val < best:
                best, best_state = val, {k: v.clone() for k, v in probe.state_dict().items()}
    probe.load_state_dict(best_state)
    test = ~train
    with torch.no_grad():
        predicted = probe(x, lengths).argmax(-1)
        test_nll = float(nll(probe, torch.nonzero(test).squeeze(1)))
    return {"weight_decay": 1e-2, "train_acc": float((predicted[train] == y[train]).float().mean()),
            "test_acc": float((predicted[test] == y[test]).float().mean()), "test_nll": test_nll,
            "predicted": predicted[test]}


def episode_split(episodes: Sequence[int], share: float = 0.8) -> Tensor:
    """Frames of the first `share` of the episodes (by index) for training, (n,) bool; the rest are the test."""
    episodes = np.asarray(episodes)
    cut = np.unique(episodes)[int(len(np.unique(episodes)) * share)]
    return torch.from_numpy(episodes < cut)


def report(cfg: TrainConfig, episodes: int, num_envs: int | None, reader: str = "last",
           layers: Sequence[int] | None = None) -> None:
    """Record the bot's frames of `cfg`'s level, read them with `cfg`'s untrained model and print the table: the
    linear probe of the last prompt token at every layer (`reader` "last") or the attention probe of every token at
    `layers` ("attention")."""
    loaded = load_model(cfg.model)
    if loaded.is_seq2seq:
        raise GlamrlError(f"trunk_probe reads a causal model's last prompt token; {cfg.model.name} is a seq2seq model")
    depth = loaded.model.config.num_hidden_layers
    if layers is not None and (bad := [i for i in layers if not 0 <= i <= depth]):
        raise GlamrlError(f"--layers {' '.join(map(str, bad))}: {cfg.model.name} has layers 0 to {depth}")
    records = bot_frames(cfg, episodes, num_envs or cfg.env.num_envs)
    y = torch.tensor([r["action_index"] for r in records])
    train = episode_split([r["episode"] for r in records])
    if train.all() or not train.any():
        raise GlamrlError(f"{episodes} episodes cannot be split into training and test episodes; give more")
    compute_dtype, _ = choose_compute_dtype(cfg.model, loaded.device)
    prompts = [r["prompt"] for r in records]
    classes = len(cfg.prompt.actions)
    if reader == "last":
        layers = range(depth + 1)
        states = last_token_states(loaded, prompts, compute_dtype)
        probes = (probe_layer(states[:, layer], y, train, classes) for layer in layers)
    else:
        layers = list(layers or ATTENTION_LAYERS)
        token_rows, lengths = token_states(loaded, prompts, compute_dtype, layers)
        probes = (probe_tokens(x, lengths, y, train, classes) for x in token_rows)
    test = ~train
    commonest = int(torch.bincount(y[train], minlength=classes).argmax())
    situations = np.asarray([r["situation"] for r in records])[test.numpy()]
    seen = [s for s in SITUATIONS if s in situations]
    print(f"{cfg.model.name} on {cfg.env.id}: {len(records)} decisions of the bot in {episodes} episodes "
          f"({int(train.sum())} train, {int(test.sum())} test frames); {compute_dtype}; "
          f"{'linear probe of the last prompt token' if reader == 'last' else 'attention probe of every token'}")
    print(f"always the commonest action ({cfg.prompt.actions[commonest]}): test accuracy "
          f"{float((y[test] == commonest).float().mean()):.3f}")
    print(f"{'layer':>5s} {'L2':>6s} {'train acc':>9s} {'test acc':>8s} {'test nll':>8s}")
    rows = {}
    for layer, row in zip(layers, probes):
        rows[layer] = row
        print(f"{layer:5d} {row['weight_decay']:6g} {row['train_acc']:9.3f} {row['test_acc']:8.3f} "
              f"{row['test_nll']:8.3f}", flush=True)
    best = min(rows, key=lambda i: rows[i]["test_nll"])
    correct = (rows[best]["predicted"] == y[test]).numpy()
    print(f"layer {best} (the lowest test nll), test accuracy by where the goal is: " + "; ".join(
        f"{s} {correct[situations == s].mean():.2f} ({int((situations == s).sum())})" for s in seen))


def main(argv: list[str] | None = None) -> int:
    """Print the table; bad input (a GlamrlError) prints one line and exits 2."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="a train config: the level, the model")
    add_frame_arguments(parser, episodes=500)  # the last 20% of the episodes are the test
    parser.add_argument("--reader", choices=("last", "attention"), default="last",
                        help="last: a linear probe of the last prompt token at every layer; attention: one "
                             "attention head over every token, at --layers")
    parser.add_argument("--layers", type=int, nargs="+", default=None,
                        help=f"with --reader attention, the layers probed (default: {ATTENTION_LAYERS})")
    parser.add_argument("overrides", nargs="*", help="dotted overrides of the config, as glamrl train takes")
    args = parser.parse_args(argv)
    try:
        check_frame_arguments(args)
        if args.layers is not None and args.reader == "last":
            raise GlamrlError("--layers chooses the layers of --reader attention; --reader last probes every layer")
        report(load_train_config(args.config, args.overrides), args.episodes, args.num_envs, args.reader,
               args.layers)
    except GlamrlError as err:
        print(f"trunk_probe: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
