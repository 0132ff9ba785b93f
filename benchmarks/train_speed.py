"""Frames/s and tokens/s of PPO's two phases on real BabyAI-Text prompts (3 observations).

    python benchmarks/train_speed.py [--model smollm2-135m] [--envs 8] [--lora] [--dtype bfloat16]

Collection = scoring the 6 actions and the value under inference mode, one batch of
`--envs` prompts per step. Update = forward + backward of the same prompts, in
minibatches, as one PPO epoch does (a real update runs `ppo.epochs` of them).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from glamrl.config import ModelConfig, PPOConfig
from glamrl.envs import make_vector_env
from glamrl.envs.actions import ACTION_NAMES
from glamrl.llm.policy import LLMPolicy
from glamrl.prompts import PromptHistory
from glamrl.rl.ppo import ppo_loss


def real_prompts(count: int, nbr_obs: int = 3, seed: int = 0, level: str = "BabyAI-MixedTrainLocal-v0") -> list[str]:
    """Prompts of random-action episodes on `level`, taken once the history is full."""
    envs = make_vector_env(level, 4)
    rng = np.random.default_rng(seed)
    histories = [PromptHistory(nbr_obs) for _ in range(4)]
    obs, _ = envs.reset(seed=seed)
    prompts, steps = [], 0
    while len(prompts) < count:
        actions = rng.integers(0, 6, size=4)
        for i, h in enumerate(histories):
            if steps >= nbr_obs - 1:
                prompts.append(h.prompt(ACTION_NAMES, obs["mission"][i], obs["descriptions"][i]))
            h.record(obs["descriptions"][i], ACTION_NAMES[actions[i]])
        obs, _, term, trunc, _ = envs.step(actions)
        for i in np.flatnonzero(term | trunc):
            histories[i].clear()
        steps += 1
    envs.close()
    return prompts[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--envs", type=int, default=8, help="prompts per collection step")
    parser.add_argument("--steps", type=int, default=4, help="collection steps measured")
    parser.add_argument("--minibatch", type=int, default=8)
    parser.add_argument("--lora", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)

    policy = LLMPolicy(ModelConfig(name=args.model, dtype=args.dtype, device="cpu", lora=args.lora))
    n = args.envs * args.steps
    prompts = real_prompts(n + args.envs)
    tokens = [len(policy.scorer.tokenizer(p).input_ids) for p in prompts[:n]]
    print(f"model {args.model} ({args.dtype}{', LoRA' if args.lora else ''}), torch threads {torch.get_num_threads()}, "
          f"prompt tokens mean {np.mean(tokens):.0f} (min {min(tokens)}, max {max(tokens)})")

    with torch.inference_mode():  # warm-up
        policy(prompts[n:], ACTION_NAMES)
    start = time.perf_counter()
    with torch.inference_mode():
        for s in range(args.steps):
            out = policy(prompts[s * args.envs:(s + 1) * args.envs], ACTION_NAMES)
    collect = time.perf_counter() - start

    actions = torch.randint(0, 6, (n,))
    cfg = PPOConfig()
    params = [w for w in policy.parameters() if w.requires_grad]
    optimizer = torch.optim.Adam(params, lr=1e-6)
    start = time.perf_counter()
    for i in range(0, n, args.minibatch):
        optimizer.zero_grad()
        out = policy(prompts[i:i + args.minibatch], ACTION_NAMES)
        mb = slice(i, i + args.minibatch)
        zeros = torch.zeros(len(out.values))
        loss = ppo_loss(out.log_probs.float(), out.values.float(), actions[mb], zeros - 1.8, zeros, zeros + 1,
                        zeros, cfg)
        loss.loss.backward()
        optimizer.step()
    update = time.perf_counter() - start

    total_tokens = sum(tokens)
    print(f"collection: {n / collect:7.2f} frames/s  {total_tokens / collect:9.0f} prompt tokens/s")
    print(f"update    : {n / update:7.2f} frames/s  {total_tokens / update:9.0f} prompt tokens/s  (one epoch)")
    print(f"per frame: collect {collect / n * 1e3:.0f} ms, update with 4 epochs {4 * update / n * 1e3:.0f} ms "
          f"(update/collect ratio {4 * update / collect:.1f})")


if __name__ == "__main__":
    main()
