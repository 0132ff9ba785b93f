"""Peak memory per rank of FSDP2 sharding (run.sharding=fsdp) against DD-PPO replicas, on the CPU with gloo.

    python benchmarks/fsdp_memory.py [--layers 24] [--hidden 1024] [--ranks 2] [--updates 2]

Saves a random Llama (about 300M parameters with the defaults, BabyAI-Text word vocabulary) in a
temporary directory, trains it for `--updates` small PPO updates under torchrun with each sharding
mode, and prints every rank's peak resident memory (ru_maxrss): the most each rank held at once,
model loading, acting and update together. With fsdp, rank 0's peak includes the whole checkpoint
(weights and Adam moments) it gathers in host memory to save; the other ranks show the sharding.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path


def save_random_llama(path: Path, layers: int, hidden: int) -> int:
    """A random Llama with the tiny tokenizer, saved to `path`; returns its parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from glamrl.llm.tiny_models import VOCABULARY, build_tiny_tokenizer

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=hidden, intermediate_size=hidden * 11 // 4, num_hidden_layers=layers,
                         num_attention_heads=hidden // 64, num_key_value_heads=hidden // 64,
                         vocab_size=len(VOCABULARY), pad_token_id=0, bos_token_id=2, eos_token_id=3,
                         tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    model.save_pretrained(path)
    build_tiny_tokenizer().save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def peak_rss(model: Path, sharding: str, ranks: int, updates: int, root: Path) -> list[float]:
    """Each rank's peak RSS (GiB) over one `glamrl train` with `run.sharding=sharding`."""
    overrides = [f"model.name={model}", "model.device=cpu", "model.batching=padded", f"run.sharding={sharding}",
                 "env.id=BabyAI-GoToRedBall-v0", "env.num_envs=1", "ppo.num_steps=2", "ppo.minibatch_size=2",
                 "ppo.epochs=1", f"ppo.total_frames={2 * ranks * updates}", "run.tensorboard=false"]
    config = root / "empty.yaml"
    config.write_text("run:\n  eval_episodes: 0\n")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}",
               __file__, "--rank", "train", "--config", str(config), "--run-dir", str(root / sharding),
               "--no-progress", *overrides]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode:
        raise SystemExit(done.stdout + done.stderr)
    found = dict(re.findall(r"rank (\d+) peak RSS ([\d.]+) GiB", done.stdout))
    return [float(found[str(r)]) for r in range(ranks)]


def main() -> None:
    if sys.argv[1:2] == ["--rank"]:  # one torchrun rank: glamrl train, then this process's peak RSS
        from glamrl.cli import main as glamrl

        code = glamrl(sys.argv[2:])
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
        print(f"rank {os.environ['RANK']} peak RSS {peak:.2f} GiB", flush=True)
        raise SystemExit(code)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--updates", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        n = save_random_llama(root / "model", args.layers, args.hidden)
        print(f"random Llama, {n / 1e6:.0f}M parameters ({n * 4 / 2**30:.2f} GiB of fp32 weights), "
              f"{args.ranks} ranks, {args.updates} updates")
        for sharding in ("none", "fsdp"):
            peaks = peak_rss(root / "model", sharding, args.ranks, args.updates, root)
            print(f"run.sharding={sharding:4s}  peak RSS per rank: " + ", ".join(f"{p:.2f} GiB" for p in peaks))


if __name__ == "__main__":
    main()
