"""SDPA's forward and backward under bf16 autocast on this CPU: its own bf16 backward against `attention`'s fp32 one.

    python -m benchmarks.attention_backward                       # SmolLM2's heads, 64 prompts, several lengths
    python -m benchmarks.attention_backward --lengths 104 255 --prompts 16

The trunk's trained blocks run `glamrl.llm.attention.attention`: SDPA's bf16 forward, and on a CPU with AMX for
keys up to `FP32_BACKWARD_MAX_KEYS` the same flash kernel's backward on fp32 copies of its inputs. This times
both backwards at each prompt length, on left-padded causal prompts (SmolLM2-135M's 9 query heads over 3 key
heads of 64, a bool mask as the scorer builds it), best of `--repeats`, and prints which one
`attention` picks here, so the threshold can be checked on another CPU.
"""

from __future__ import annotations

import argparse
import time

import torch

from glamrl.llm.attention import FP32_BACKWARD_MAX_KEYS, _has_amx, attention, fp32_backward_pays


def case(prompts: int, length: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Queries (B, 9, S, 64), keys and values (B, 3, S, 64), a (B, 1, S, S) bool mask of left-padded prompts."""
    q = torch.randn(prompts, 9, length, 64, generator=generator)
    k, v = (torch.randn(prompts, 3, length, 64, generator=generator) for _ in range(2))
    real = torch.arange(length)[None, :] >= torch.randint(0, length // 2, (prompts, 1), generator=generator)
    causal, itself = torch.ones(length, length, dtype=torch.bool).tril(), torch.eye(length, dtype=torch.bool)
    visible = causal & real[:, None, :] | itself                                  # (B, S, S)
    return q, k, v, visible[:, None]


def seconds(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, fp32_backward: bool,
            repeats: int) -> float:
    """Best wall time of one forward and backward."""
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    grad = torch.ones(q.shape)
    best = float("inf")
    for _ in range(repeats + 1):  # the first builds the kernels
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = attention(q, k, v, mask, 0.125, fp32_backward=fp32_backward)
        out.backward(grad)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[40, 104, 128, 160, 176, 191, 192, 224, 255, 300])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    print(f"{torch.get_num_threads()} threads, AMX: {_has_amx()}, fp32 backward up to {FP32_BACKWARD_MAX_KEYS} keys "
          f"on AMX; {args.prompts} prompts, 9 heads over 3, bf16 autocast; forward + backward, best of {args.repeats}")
    print(f"{'tokens':>6} {'bf16 backward':>14} {'fp32 backward':>14} {'bf16 / fp32':>12} {'attention picks':>16}")
    for length in args.lengths:
        q, k, v, mask = case(args.prompts, length, generator)
        bf16, fp32 = (seconds(q, k, v, mask, fp32_backward, args.repeats) for fp32_backward in (False, True))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            picks = "fp32" if fp32_backward_pays(q.requires_grad_(True), k, v, 0.0, _has_amx()) else "bf16"
        print(f"{length:>6} {bf16 * 1000:>11.0f} ms {fp32 * 1000:>11.0f} ms {bf16 / fp32:>11.2f}x {picks:>16}")


if __name__ == "__main__":
    main()
