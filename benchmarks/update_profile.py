"""Where full fine-tuning's update time goes: one profiled PPO minibatch per step, by kind of work.

    python -m benchmarks.update_profile                                   # GLAM's config, SmolLM2, fp32
    python -m benchmarks.update_profile model.gradient_checkpointing=false
    python -m benchmarks.update_profile --compile                         # also torch.compile (inductor)

The update as `glamrl.train` runs it (`benchmarks.update_memory.glam_update`: GLAM's configuration,
minibatches of 4 real prompts, `accumulate_gradients`, clipping, the fused Adam step), after
`--warmup` minibatches, under `torch.profiler` for `--minibatches` more. The self CPU time of every
operator is summed by kind:

  matmul        aten::mm, addmm, bmm, matmul's kernels (linear layers, LM head, attention products)
  attention     scaled_dot_product_attention's own kernels and softmax
  norms         RMSNorm's pow / mean / rsqrt / mul
  activations   SiLU and its backward
  copies        copy_, to, cat, index, contiguous, expand, where: layout and dtype moves
  elementwise   add, mul, sub, div ... not counted above
  optimizer     the fused Adam step and the gradient-norm clip
  other         the rest (allocation, autograd bookkeeping ops)

Python and dispatch overhead = wall time - the sum of self times of every operator. The profiler's own
cost (it records every operator's shapes to count FLOPs) slows the profiled minibatches, so the
unprofiled time of as many minibatches is printed first; the shares are of the profiled wall. The matmul rate
of the same process (a 2048^2 fp32 matmul, as glam_config.py) puts the matmul share in context:
its achieved GFLOP/s is the FLOPs the aten::mm family executed over their time.

--compile: the blocks compiled as `model.compile=true` compiles them (`glamrl.llm.compiled.compile_blocks`:
each block through torch.compile, inductor, dynamic shapes); prints the compile time (the first minibatch) and
the steady minibatch time against eager.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.glam_config import matmul_flops
from glamrl.llm.compiled import compile_blocks
from benchmarks.update_memory import glam_update
from glamrl.rl.ppo import accumulate_gradients

KINDS = (
    ("fused (compiled)", ("compiledfxgraph",)),  # inductor's kernels under model.compile: norms, activations, copies
    ("optimizer", ("adam", "clip_grad", "linalg_vector_norm", "foreach")),
    ("matmul", ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")),
    ("attention", ("attention", "softmax", "_flash", "_efficient")),
    ("norms", ("aten::pow", "aten::mean", "aten::rsqrt", "rms_norm")),
    ("activations", ("silu",)),
    ("copies", ("copy_", "aten::to", "_to_copy", "aten::cat", "index", "contiguous", "expand", "where",
                "clone", "masked_fill", "slice", "select", "view", "reshape", "transpose", "permute")),
    ("elementwise", ("aten::add", "aten::mul", "aten::sub", "aten::div", "aten::neg", "aten::exp", "aten::log",
                     "aten::sum", "aten::max", "aten::min", "aten::clamp", "aten::gather", "aten::fill", "aten::zero")),
)


def kind_of(name: str) -> str:
    """The row of the table an operator's self time is counted in (first match in KINDS order)."""
    low = name.lower()
    for kind, keys in KINDS:
        if any(key in low for key in keys):
            return kind
    return "other"


def minibatch(cfg, policy, params, optimizer, batch) -> None:
    n = cfg.batch_size
    optimizer.zero_grad(set_to_none=True)
    accumulate_gradients(policy, batch, torch.randperm(n)[None, :cfg.ppo.minibatch_size], cfg.prompt.actions, cfg.ppo)
    torch.nn.utils.clip_grad_norm_(params, cfg.ppo.max_grad_norm)
    optimizer.step()


def timed_minibatches(count: int, *setup) -> float:
    """Mean wall seconds of `count` minibatches."""
    start = time.perf_counter()
    for _ in range(count):
        minibatch(*setup)
    return (time.perf_counter() - start) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="dotted config overrides")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--minibatches", type=int, default=4)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--compile", action="store_true", help="also measure model.compile (torch.compile of each block)")
    args = parser.parse_args()
    setup = glam_update(args.model, args.overrides)
    cfg, policy = setup[0], setup[1]
    print(f"{torch.get_num_threads()} threads, matmul {matmul_flops(torch.float32) / 1e9:.0f} GFLOP/s (2048^2 fp32)")
    timed_minibatches(args.warmup, *setup)
    plain = timed_minibatches(args.minibatches, *setup)  # the profiler's own overhead inflates the profiled wall
    print(f"unprofiled: {plain:.2f} s per minibatch")

    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        start = time.perf_counter()
        for _ in range(args.minibatches):
            minibatch(*setup)
        wall = time.perf_counter() - start
    by_kind: dict[str, float] = defaultdict(float)
    mm_time, mm_flops = 0.0, 0.0
    for event in prof.key_averages():
        kind = kind_of(event.key)
        by_kind[kind] += event.self_cpu_time_total / 1e6
        if kind == "matmul":
            mm_time += event.self_cpu_time_total / 1e6
            mm_flops += event.flops or 0
    ops = sum(by_kind.values())
    print(f"{args.minibatches} minibatches of {cfg.ppo.minibatch_size} prompts: {wall / args.minibatches:.2f} s each")
    print(f"{'kind':<14}{'seconds':>9}{'share of wall':>15}")
    for kind in [k for k, _ in KINDS] + ["other"]:
        print(f"{kind:<14}{by_kind[kind]:>9.2f}{by_kind[kind] / wall:>15.1%}")
    print(f"{'python/dispatch':<14}{wall - ops:>9.2f}{(wall - ops) / wall:>15.1%}")
    if mm_time:
        print(f"matmul kernels: {mm_flops / mm_time / 1e9:.0f} GFLOP/s while they run")
    print("top operators by self time:")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=40))

    if args.compile:
        eager = timed_minibatches(args.minibatches, *setup)
        compile_blocks(policy.llm)
        start = time.perf_counter()
        minibatch(*setup)
        first = time.perf_counter() - start
        compiled = timed_minibatches(args.minibatches, *setup)
        print(f"torch.compile (inductor, dynamic): first minibatch {first:.1f} s (compiling), then {compiled:.2f} s "
              f"per minibatch vs eager {eager:.2f} s: {eager / compiled:.2f}x")


if __name__ == "__main__":
    main()
