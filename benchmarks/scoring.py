"""Fast action scoring vs the naive reference on the same model and the same BabyAI-Text prompts.

    python benchmarks/scoring.py                      # embedded SmolLM2-135M, 8 prompts, 6 actions
    python benchmarks/scoring.py --model tiny-llama --batch 64

Fast: each prompt encoded once, its 6 actions packed after it, vocabulary logits at action
tokens only. Naive: every prompt+action sequence in full, vocabulary logits everywhere.
FLOP/s is estimated as 2 * non-embedding params * tokens run through the model.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from glamrl.config import ModelConfig
from glamrl.envs.actions import ACTION_NAMES
from glamrl.llm import ActionScorer, load_model, reference_log_likelihoods

COLORS = ("red", "green", "blue", "purple", "yellow", "grey")
OBJECTS = ("ball", "box", "key")


def babyai_prompt(i: int) -> str:
    """A GLAM-layout prompt with 3 observations (2 past actions), varied by `i`."""
    color, obj = COLORS[i % 6], OBJECTS[i % 3]

    def see(j: int) -> str:
        return (f"You see a wall {1 + (i + j) % 4} steps forward, You see a {COLORS[(i + j) % 6]} "
                f"{OBJECTS[j % 3]} {1 + j % 3} steps left and {2 + (i * j) % 3} steps forward, "
                f"You see a {COLORS[(i + 2 * j) % 6]} {OBJECTS[(i + j) % 3]} {1 + i % 2} step right, ")

    head = f"Possible action of the agent: {', '.join(ACTION_NAMES)} \n Goal of the agent: go to the {color} {obj}"
    steps = [f" \n Observation {k}: {see(k) + see(k + i + 1)}\n Action {k}: " for k in range(3)]
    return head + ACTION_NAMES[i % 6].join(steps[:2]) + ACTION_NAMES[(i + 1) % 6] + steps[2]


def best_time(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=8, help="prompts (frames) per call")
    parser.add_argument("--repeats", type=int, default=1, help="timed calls after one warm-up (best kept)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (use 1 when another process shares 2 cores)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    loaded = load_model(ModelConfig(name=args.model, device="cpu", dtype=args.dtype))
    scorer = ActionScorer(loaded.model, loaded.tokenizer, loaded.is_seq2seq)
    prompts = [babyai_prompt(i) for i in range(args.batch)]
    actions = list(ACTION_NAMES)
    prompt_tokens = sum(len(scorer.tokenizer(scorer.prompt_text(p)).input_ids) for p in prompts)
    action_tokens = sum(len(scorer.action_token_ids(a)) for a in actions)
    embedding = loaded.model.get_input_embeddings().weight.numel()
    params = sum(p.numel() for p in loaded.model.parameters()) - embedding
    print(f"model {args.model}: {params / 1e6:.1f}M non-embedding params, {args.dtype}, {args.threads} threads; "
          f"{args.batch} prompts x {len(actions)} actions, {prompt_tokens / args.batch:.0f} prompt tokens on average")

    with torch.inference_mode():
        fast = scorer(prompts, actions).log_likelihoods
        naive = reference_log_likelihoods(scorer, prompts, actions)
        print(f"max |fast - naive| log-likelihood: {(fast - naive).abs().max().item():.2e}")
        runs = {
            "fast": (best_time(lambda: scorer(prompts, actions), args.repeats),
                     prompt_tokens + args.batch * action_tokens),
            "naive": (best_time(lambda: reference_log_likelihoods(scorer, prompts, actions), args.repeats),
                      len(actions) * prompt_tokens + args.batch * action_tokens),
        }
    for name, (seconds, tokens) in runs.items():
        print(f"{name:>5}: {seconds:7.3f} s/call  {args.batch / seconds:8.1f} frames/s  "
              f"{prompt_tokens / seconds:9.0f} prompt tokens/s  {tokens / seconds:9.0f} model tokens/s  "
              f"~{2 * params * tokens / seconds / 1e9:6.1f} GFLOP/s")
    print(f"speed-up fast / naive: {runs['naive'][0] / runs['fast'][0]:.2f}x")


if __name__ == "__main__":
    main()
