"""Where full fine-tuning's memory goes: RSS after each phase of a few PPO minibatches, and what autograd keeps.

    python -m benchmarks.update_memory                                  # GLAM's config, SmolLM2, fp32, defaults
    python -m benchmarks.update_memory model.gradient_checkpointing=false --minibatches 3

GLAM's configuration as `glam_config.py` runs it (2 envs x 8 frames, minibatch 4, 3 observations),
with the training loop's own pieces: the policy, a collection of 16 real prompts under inference
mode, then minibatches of `accumulate_gradients`, gradient clipping and the fused Adam step that
`glamrl.train` uses. Printed at each point: the resident set and its peak (`glamrl.memory`, 1e9 bytes a GB), and for
each forward/backward the bytes autograd saved for the backward (weights excluded), the activations.
The weights, their gradients and Adam's two moments are 4 bytes per trainable parameter each.
"""

from __future__ import annotations

import argparse
import ctypes
import time
from pathlib import Path

import torch

from benchmarks.glam_config import GLAM
from benchmarks.train_speed import real_prompts
from glamrl.config import load_train_config
from glamrl.llm.policy import LLMPolicy
from glamrl.memory import bound_kernel_caches, peak_rss_gb, reuse_freed_memory, rss_gb
from glamrl.rl.buffer import Batch
from glamrl.rl.ppo import accumulate_gradients

ROOT = Path(__file__).resolve().parents[1]


def rss(tag: str) -> None:
    print(f"{tag:<56} RSS {rss_gb():.2f} GB   peak {peak_rss_gb():.2f} GB", flush=True)


def glam_update(model: str, overrides: list[str], say=lambda tag: None) -> tuple:
    """GLAM's configuration as the update sees it: (cfg, policy, trainable params, fused Adam, a Batch of 16 real
    prompts collected under inference mode, with random actions and targets). fp32 unless overridden; bf16 matmul
    kernels capped at run.kernel_cache, as in training."""
    given = {o.split("=", 1)[0] for o in overrides}
    defaults = [o for o in (f"model.name={model}", *GLAM, "model.compute_dtype=float32", "model.compile=false")
                if o.split("=", 1)[0] not in given]  # an override replaces the benchmark's own setting
    cfg = load_train_config(ROOT / "configs" / "glam_paper_smollm2.yaml", [*defaults, *overrides])
    bound_kernel_caches(cfg.run.kernel_cache)  # as the training session does, before the first bf16 matmul
    torch.manual_seed(cfg.env.seed)
    policy = LLMPolicy(cfg.model)
    print(", ".join(f"{key}={r.value}" for key, r in policy.resolved.items()))
    params = [w for w in policy.parameters() if w.requires_grad]
    per_copy = sum(w.numel() * w.element_size() for w in params) / 1e9
    print(f"trainable: {sum(w.numel() for w in params) / 1e6:.1f}M parameters, {per_copy:.3f} GB per copy "
          f"(weights, gradients, Adam's two moments: {4 * per_copy:.2f} GB)")
    say("policy built")
    optimizer = torch.optim.Adam(params, lr=cfg.ppo.lr, eps=cfg.ppo.adam_eps, fused=True)
    n = cfg.batch_size
    prompts = real_prompts(n)
    with torch.inference_mode():
        out = [policy(prompts[i:i + cfg.env.num_envs], cfg.prompt.actions) for i in range(0, n, cfg.env.num_envs)]
    say(f"collected {n} frames")
    log_probs, values = torch.cat([o.log_probs for o in out]), torch.cat([o.values for o in out])
    actions = torch.randint(0, log_probs.shape[1], (n,))
    batch = Batch(prompts, actions, log_probs.gather(1, actions[:, None]).squeeze(1), values, torch.randn(n),
                  values + torch.randn(n), torch.zeros(n, dtype=torch.bool))
    return cfg, policy, params, optimizer, batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="dotted config overrides, e.g. model.gradient_checkpointing=false")
    parser.add_argument("--minibatches", type=int, default=4)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--mmap-threshold-mb", type=float, default=None,
                        help="glibc mallopt(M_MMAP_THRESHOLD): blocks this large or larger are mmapped, so that freeing "
                             "them returns their pages at once (default: glibc's own, dynamic threshold)")
    parser.add_argument("--reuse-memory", action="store_true",
                        help="glibc's thresholds as run.reuse_memory=true sets them (glamrl.memory.reuse_freed_memory)")
    args = parser.parse_args()
    if args.reuse_memory:
        print(f"run.reuse_memory: {reuse_freed_memory()}")
    if args.mmap_threshold_mb is not None:
        M_MMAP_THRESHOLD = -3
        ok = ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, int(args.mmap_threshold_mb * 2**20))
        print(f"mallopt(M_MMAP_THRESHOLD, {args.mmap_threshold_mb} MiB): {'ok' if ok else 'refused'}")
    rss("imports")
    cfg, policy, params, optimizer, batch = glam_update(args.model, args.overrides, say=rss)
    n = cfg.batch_size
    weights = {w.untyped_storage().data_ptr() for w in policy.parameters()}
    for k in range(args.minibatches):
        saved: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            if t.untyped_storage().data_ptr() not in weights:
                saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        optimizer.zero_grad(set_to_none=True)
        start = time.perf_counter()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            accumulate_gradients(policy, batch, torch.randperm(n)[None, :cfg.ppo.minibatch_size], cfg.prompt.actions,
                                 cfg.ppo)
        rss(f"minibatch {k}: forward+backward {time.perf_counter() - start:.1f} s, "
            f"activations {sum(saved.values()) / 1e9:.2f} GB")
        torch.nn.utils.clip_grad_norm_(params, cfg.ppo.max_grad_norm)
        optimizer.step()
        rss(f"minibatch {k}: Adam step")


if __name__ == "__main__":
    main()
