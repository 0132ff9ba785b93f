"""bf16 matmul kernels kept per shape (run.kernel_cache): time and memory of SmolLM2's forward and backward over
prompts of many lengths, for several capacities of oneDNN's and ideep's caches.

    python -m benchmarks.kernel_cache                        # capacities 1024 (the libraries' own), 256, 64, 16
    python -m benchmarks.kernel_cache --caps 1024 64 --passes 2

Each capacity runs in a fresh process (the libraries read it at the first bf16 matmul; glamrl.memory), with
glibc's thresholds as `run.reuse_memory` sets them. The process runs SmolLM2-135M's decoder stack forward and
backward under bf16 autocast on batches of 4 x L random token ids, L over `--lengths` values (180 to 276
tokens, GLAM's 3-observation prompts), `--passes` times over the same lengths: a cache that holds every
length's kernels serves the later passes; a smaller one builds them again. It prints each pass's seconds and
the resident set's growth from the first pass's start, which also holds the activations' share of glibc's
heap, so compare the capacities with each other. On a CPU whose bf16 matmuls do not go through oneDNN
(no AVX-512 BF16 or AMX) the capacities make no difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from glamrl.memory import KERNEL_CACHE_VARIABLES

ROOT = Path(__file__).resolve().parents[1]


def child(cap: int, lengths: list[int], passes: int) -> dict:
    """In this fresh process: the caches capped at `cap`, then the passes; their times (s) and RSS growth (GB)."""
    from glamrl.memory import bound_kernel_caches, reuse_freed_memory, rss_gb
    bound_kernel_caches(cap)  # before torch's first bf16 matmul
    reuse_freed_memory()
    import torch

    from glamrl.config import ModelConfig
    from glamrl.llm.loading import load_model
    torch.manual_seed(0)
    decoder = load_model(ModelConfig(name="smollm2-135m")).model.model

    def step(length: int) -> None:
        ids = torch.randint(0, 40000, (4, length))                       # (4, L)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            hidden = decoder(input_ids=ids).last_hidden_state            # (4, L, 576)
        hidden.float().pow(2).mean().backward()

    step(100)  # one warm-up shape outside the measured lengths
    start, times = rss_gb(), []
    for _ in range(passes):
        begun = time.perf_counter()
        for length in lengths:
            step(length)
        times.append(time.perf_counter() - begun)
    return {"cap": cap, "times": times, "growth_gb": rss_gb() - start, "threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--caps", type=int, nargs="+", default=[1024, 256, 64, 16])
    parser.add_argument("--lengths", type=int, nargs=3, default=[180, 276, 4], metavar=("FIRST", "STOP", "STEP"),
                        help="prompt lengths: range(FIRST, STOP, STEP) (default: 24 lengths, 180 to 272)")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    lengths = list(range(*args.lengths))
    if args.child is not None:
        print(json.dumps(child(args.child, lengths, args.passes)))
        return
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_CACHE_VARIABLES}  # each child sets its own
    print(f"{len(lengths)} lengths ({lengths[0]}-{lengths[-1]} tokens), batch 4, {args.passes} passes")
    print("| kernels per cache | seconds per pass | RSS growth |")
    print("| --- | --- | --- |")
    for cap in args.caps:
        done = subprocess.run([sys.executable, "-m", "benchmarks.kernel_cache", "--child", str(cap),
                               "--lengths", *map(str, args.lengths), "--passes", str(args.passes)],
                              capture_output=True, text=True, cwd=ROOT, env=env, check=True)
        got = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"| {cap} | {' '.join(f'{t:.1f}' for t in got['times'])} | {got['growth_gb']:+.3f} GB |", flush=True)


if __name__ == "__main__":
    main()
