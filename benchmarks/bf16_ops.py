"""Which ops are slow in bf16 on this CPU: the scorer's forward and forward+backward per numerics and attention.

    python -m benchmarks.bf16_ops [--model smollm2-135m] [--batch 4] [--top 6]

Numerics: fp32 (weights and compute), autocast (fp32 weights, bf16 compute: `model.compute_dtype`),
bf16 (bf16 weights). Attention: sdpa and eager, both with the scorer's 4D masks. For each run the
profiler's top ops by self CPU time are printed, so a slow kernel shows by name.

Found (2026-11-30): bf16 is fast only where oneDNN has bf16 kernels (AVX-512 BF16 / AMX). On an
AVX2-only CPU (`CPU capability AVX2`, oneDNN bf16 kernels: False) every bf16 matmul falls back to a
scalar kernel: a 512^2 matmul ran at 0.1 GFLOP/s in bf16 vs 9.4 in fp32 (loaded machine), so any
bf16 model (weights or autocast) is hundreds of times slower there, whatever the attention path.
"""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.glam_config import matmul_flops
from benchmarks.train_speed import real_prompts
from glamrl.config import ModelConfig
from glamrl.envs.actions import ACTION_NAMES
from glamrl.llm import ActionScorer, load_model

NUMERICS = {"fp32": (torch.float32, False), "autocast": (torch.float32, True), "bf16": (torch.bfloat16, False)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--top", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()}, oneDNN bf16 kernels: "
          f"{torch.ops.mkldnn._is_mkldnn_bf16_supported()}")
    for dtype in (torch.float32, torch.bfloat16):
        print(f"512^2 matmul {str(dtype):15} {matmul_flops(dtype, 512, repeats=1) / 1e9:8.2f} GFLOP/s")
    loaded = load_model(ModelConfig(name=args.model, device="cpu"))
    prompts = real_prompts(args.batch)
    print(f"{args.model}, {args.batch} prompts, {args.threads} threads")
    for attn in ("sdpa", "eager"):
        loaded.model.config._attn_implementation = attn
        for name, (dtype, autocast) in NUMERICS.items():
            model = loaded.model.to(dtype)
            scorer = ActionScorer(model, loaded.tokenizer, loaded.is_seq2seq)
            amp = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else nullcontext()

            def forward_backward() -> None:
                with amp:
                    scores = scorer(prompts, ACTION_NAMES)
                (scores.log_likelihoods.float().sum() + scores.hidden.float().sum()).backward()

            with torch.inference_mode(), amp:
                scorer(prompts, ACTION_NAMES)  # warm-up
                start = time.perf_counter()
                scorer(prompts, ACTION_NAMES)
                forward = time.perf_counter() - start
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                start = time.perf_counter()
                forward_backward()
                both = time.perf_counter() - start
            model.zero_grad(set_to_none=True)
            ops = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[:args.top]
            top = ", ".join(f"{e.key} {e.self_cpu_time_total / 1e6:.2f}s" for e in ops)
            print(f"{attn:5} {name:8} forward {forward:6.2f} s  forward+backward {both:6.2f} s (profiled)  top: {top}")
    loaded.model.to(torch.float32)


if __name__ == "__main__":
    main()
