"""GLAM's own configuration, a few PPO updates: frames/s, peak RSS and achieved FLOP/s.

    python -m benchmarks.glam_config            # 3 updates per variant (steady state: updates 2..3)
    python -m benchmarks.glam_config --quick    # 2 updates per variant (the second one is reported)

GLAM's configuration: SmolLM2-135M (`smollm2-135m`), BabyAI-MixedTrainLocal-v0, 2 envs x 8
frames per update, 4 epochs, minibatch 4, 3 observations (configs/glam_paper_smollm2.yaml with
overrides). Variants: auto, fp32 and bf16 compute (`model.compute_dtype`, fp32 weights), each with
full fine-tuning and with `model.train_layers=4`. Every variant runs `glamrl.trainers.ppo.train_ppo` in
its own subprocess, so that its peak RSS is its own; the last column is that peak after update 2 and after
the last update (log.csv's `peak_rss_gb`), which a run whose memory grows shows. GLAM's original code
(lamorel), same model and config, was measured once beside glamrl (GLAM_MEASURED below); this script does
not run it. `auto` rows resolve model.compute_dtype on the machine
at hand (bf16 with AMX or AVX-512 BF16, else fp32: the dtype column says which); full fine-tuning
checkpoints activations by default (model.gradient_checkpointing=auto, the ckpt column). `compiled` variants
set model.compile=true (each block through torch.compile): their first update compiles, so the `update 1 s`
column (the first update's wall time, not in the steady-state figures) says what compilation costs. Under each
variant's row, its run's `model.compile` line: what the setting became and why (with `auto`, the timings of one
block compiled and eager that decided it).

FLOP count per frame (one decision). Notation: P prompt tokens, T action tokens packed after it
(all candidates together, T ~ 10 for the 6 actions with SmolLM2's tokenizer), d hidden size,
L blocks, N non-embedding parameters of the blocks (N_K those of the top K), V vocabulary,
E epochs; the value head's 2 (1024 d + 1024^2) is negligible and left out.

  Causal (decoder-only) forward, F(P, T; L, N) = 2 N (P + T)           linear layers
                                               + 4 L d (P + T)^2       attention scores and values
                                                                        (dense 4D mask: every pair)
                                               + 2 d V T               LM head at action tokens only
  collection     = F(P, T; L, N)                           (+ the bootstrap value pass, once per env;
                                                             F_tail(P, T; L, N) with train_layers)
  update (full)  = 3 E F(P, T; L, N)                       (backward ~ 2x forward)
  update (top K) = 3 E F_tail(P, T; K, N_K)                (the lower blocks are read from the cache)

  F_tail: F with the top block as the frozen trunk runs it (glamrl.llm.trunk.top_block_tail, since
  2026-12-04): the scorer reads its output at the last prompt token and the action tokens only, so only its
  keys and values (N_kv parameters) run at every position:
      F_tail(P, T; K, N_K) = F(P, T; K - 1) + 2 N_kv (P + T) + 2 (N_1 - N_kv) (1 + T) + 4 d (1 + T)(P + T)
  (N_1 one block's parameters). Full fine-tuning runs the model's own forward: its top block still runs
  at every position, and F counts that.

  Seq2seq forward, encoder (L_e blocks, N_e params), decoder (L_d, N_d), prompt P in the encoder,
  T packed action tokens in the decoder, C = the decoder's cross-attention K/V parameters:
      F = 2 N_e P + 4 L_e d P^2                               encoder
        + 2 (N_d - C) T + 2 C P + 4 L_d d (T^2 + T P)         decoder, self- and cross-attention
        + 2 d V T                                              LM head
  update (full) = 3 E F; with train_layers the encoder is cached: 3 E (F - 2 N_e P - 4 L_e d P^2).

Achieved FLOP/s = FLOPs per frame x frames/s (useful FLOPs: real tokens only, padding not counted),
shown as a fraction of a 2048^2 matmul's FLOP/s measured in the same process in the same dtype (the best of
10 before training and 10 after: on a VM one measurement varies by 15% from process to process).
With activation checkpointing the update also recomputes the trained blocks' forward, E F more per
frame: `fraction` counts useful FLOPs only, `executed` counts the recomputation too.

What bounds the fraction: `attn` is the attention products' share of those FLOPs, `SDPA` the GFLOP/s of
scaled_dot_product_attention's forward and backward at the mean prompt's length under a causal mask (counted
dense, as above), measured in the same process; `ceiling` is the fraction the variant would reach if every
other FLOP ran at the matmul rate and attention at SDPA's, with nothing else taking time.
The machine may be shared: figures taken while other processes ran are lower bounds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from glamrl.memory import bound_kernel_caches, peak_rss_gb

ROOT = Path(__file__).resolve().parents[1]
GLAM_FPS, GLAM_RSS_GB = 0.0711, 9.75
GLAM_MEASURED = "on 2026-12-01 on a 2-core AMD EPYC (Zen 5, AVX-512 BF16), GLAM's update 2"
GLAM = ["env.num_envs=2", "ppo.num_steps=8", "ppo.epochs=4", "ppo.minibatch_size=4", "prompt.nbr_obs=3",
        "run.eval_episodes=0", "run.tensorboard=false", "model.device=cpu"]
VARIANTS = {  # model.gradient_checkpointing=auto: on for full fine-tuning, off with train_layers
    "defaults": [],  # model.compute_dtype=auto, model.compile=auto, run.reuse_memory=true, run.kernel_cache=64
    "defaults, glibc's thresholds": ["run.reuse_memory=false"],
    "defaults, 1,024 kernels": ["run.kernel_cache=1024"],  # oneDNN's and ideep's own capacity
    "auto full": ["model.compute_dtype=auto", "model.compile=false"],
    "auto train_layers=4": ["model.compute_dtype=auto", "model.train_layers=4", "model.compile=false"],
    "fp32 full": ["model.compute_dtype=float32", "model.compile=false"],
    "fp32 full no checkpointing": ["model.compute_dtype=float32", "model.gradient_checkpointing=false",
                                   "model.compile=false"],
    "fp32 full grad_accum=4": ["model.compute_dtype=float32", "ppo.grad_accum=4", "model.compile=false"],
    "bf16 full": ["model.compute_dtype=bfloat16", "model.compile=false"],
    "fp32 train_layers=4": ["model.compute_dtype=float32", "model.train_layers=4", "model.compile=false"],
    "bf16 train_layers=4": ["model.compute_dtype=bfloat16", "model.train_layers=4", "model.compile=false"],
    "auto full compiled": ["model.compute_dtype=auto", "model.compile=true"],
    "fp32 full compiled": ["model.compute_dtype=float32", "model.compile=true"],
    "auto train_layers=4 compiled": ["model.compute_dtype=auto", "model.train_layers=4", "model.compile=true"],
    "fp32 train_layers=4 compiled": ["model.compute_dtype=float32", "model.train_layers=4", "model.compile=true"],
}


def matmul_flops(dtype: torch.dtype, n: int = 2048, repeats: int = 10) -> float:
    """FLOP/s of an n x n matmul in `dtype` (best of `repeats`)."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    best = min(timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n ** 3 / best


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def sdpa_flops(dtype: torch.dtype, S: int, heads: int, head_dim: int, batch: int = 4, repeats: int = 5,
               backward: bool = True) -> float:
    """FLOP/s of scaled_dot_product_attention at S tokens under a causal bool mask (the scorer's kind of mask),
    counted dense as `causal_flops` counts it: 4 S^2 d per sequence forward, 3 x that with the backward."""
    q, k, v = (torch.randn(batch, heads, S, head_dim, dtype=dtype, requires_grad=backward) for _ in range(3))
    mask = torch.ones(S, S, dtype=torch.bool).tril().expand(batch, 1, S, S)

    def step() -> None:
        if backward:
            torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
        else:
            with torch.inference_mode():
                torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    step()
    best = min(timed(step) for _ in range(repeats))
    return (3 if backward else 1) * 4 * batch * heads * S * S * head_dim / best


def attention_flops(config, P: float, T: int, layers: int, tail: bool = False) -> float:
    """The attention products' share of `causal_flops` (scores and values, every pair counted)."""
    S = P + T
    return 4 * config.hidden_size * ((layers - 1) * S ** 2 + (1 + T) * S if tail else layers * S ** 2)


def causal_flops(config, P: float, T: int, layers: int, tail: bool = False) -> float:
    """F(P, T; layers, N_layers) of the docstring for a Llama-like config; `tail`: the top block as the frozen
    trunk runs it (F_tail), its keys and values at every position and the rest at the 1 + T read positions."""
    d, ff, V = config.hidden_size, config.intermediate_size, config.vocab_size
    kv = 2 * d * config.num_key_value_heads * (d // config.num_attention_heads)  # k, v
    rest = 2 * d * d + 3 * d * ff                                               # q, o + gate, up, down
    S, full = P + T, layers - 1 if tail else layers
    top = 2 * kv * S + 2 * rest * (1 + T) + 4 * d * (1 + T) * S if tail else 0.0
    return 2 * (kv + rest) * full * S + 4 * full * d * S ** 2 + top + 2 * d * V * T


def run_variant(name: str, updates: int, model: str) -> dict:
    """Child process: train `updates` updates of the variant, report its figures as a dict."""
    from glamrl.config import load_train_config
    from glamrl.llm.loading import load_model
    from glamrl.run.dir import RunDir
    from glamrl.trainers.ppo import train_ppo
    from benchmarks.train_speed import real_prompts
    from glamrl.envs.actions import ACTION_NAMES
    from glamrl.llm.precision import choose_compute_dtype
    from glamrl.llm.recompute import choose_checkpointing
    from glamrl.llm.scorer import ActionScorer

    overrides = [f"model.name={model}", *GLAM, *VARIANTS[name], f"ppo.total_frames={16 * updates}"]
    cfg = load_train_config(ROOT / "configs" / "glam_paper_smollm2.yaml", overrides)
    dtype, _ = choose_compute_dtype(cfg.model, torch.device("cpu"))
    checkpointing, _ = choose_checkpointing(cfg.model)
    bound_kernel_caches(cfg.run.kernel_cache)  # as the training session would: before this process's first bf16 matmul
    peak = matmul_flops(dtype)
    said: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        train_ppo(cfg, Path(tmp) / "run", progress=False, say=said.append)
        peak = max(peak, matmul_flops(dtype))  # the VM's clock varies: the best of before and after training
        rows = RunDir(Path(tmp) / "run").read_log()
        first_update_s = float(rows[0]["duration"])  # with model.compile, mostly compilation
        peaks = [float(r["peak_rss_gb"]) for r in rows]  # the process's peak RSS so far, after each update
        rows = rows[1:] or rows  # update 1 warms up (kept when it is the only one)
    rss = peak_rss_gb()  # this process's, the variant's own
    loaded = load_model(cfg.model)
    scorer = ActionScorer(loaded.model, loaded.tokenizer, loaded.is_seq2seq)
    P = float(np.mean([len(scorer.tokenizer(scorer.prompt_text(p)).input_ids) for p in real_prompts(64)]))
    T = sum(len(scorer.action_token_ids(a)) for a in ACTION_NAMES)
    L, K = loaded.model.config.num_hidden_layers, cfg.model.train_layers or loaded.model.config.num_hidden_layers
    tail = K < L  # the frozen trunk runs the top block at the read positions only
    collect_flops = causal_flops(loaded.model.config, P, T, L, tail)
    update_flops = 3 * cfg.ppo.epochs * causal_flops(loaded.model.config, P, T, K, tail)
    recompute_flops = update_flops / 3 if checkpointing else 0.0  # one more forward of the trained blocks
    attention = attention_flops(loaded.model.config, P, T, L, tail) + 3 * cfg.ppo.epochs * attention_flops(
        loaded.model.config, P, T, K, tail)
    heads = loaded.model.config.num_attention_heads
    attention_rate = sdpa_flops(dtype, int(P + T), heads, loaded.model.config.hidden_size // heads)
    # the fraction reachable if every FLOP but attention's ran at the matmul rate and attention at SDPA's
    seconds = (collect_flops + update_flops - attention) / peak + attention / attention_rate  # per frame, at best
    ceiling = (collect_flops + update_flops) / seconds / peak
    mean = {k: float(np.mean([float(r[k]) for r in rows])) for k in ("collect_FPS", "update_FPS", "FPS")}
    achieved = (collect_flops + update_flops) * mean["FPS"]
    executed = (collect_flops + update_flops + recompute_flops) * mean["FPS"]
    compile_line = next((line for line in said if line.startswith("model.compile:")), "model.compile: -")
    return {"variant": name, "dtype": str(dtype).removeprefix("torch."), "checkpointing": checkpointing, **mean,
            "compile": compile_line,
            "first_update_s": first_update_s,
            "rss_gb": rss, "rss_after_gb": peaks, "prompt_tokens": P, "action_tokens": T,
            "gflop_per_frame": (collect_flops + update_flops) / 1e9, "achieved_gflops": achieved / 1e9,
            "matmul_gflops": peak / 1e9, "fraction": achieved / peak, "executed_fraction": executed / peak,
            "attention_share": attention / (collect_flops + update_flops), "sdpa_gflops": attention_rate / 1e9,
            "ceiling": ceiling}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2 updates per variant instead of 3")
    parser.add_argument("--updates", type=int, default=None, help="updates per variant (1: the first one is reported)")
    parser.add_argument("--model", default="smollm2-135m", help="tiny-llama for a smoke test")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    updates = args.updates or (2 if args.quick else 3)
    if args.child:
        print(json.dumps(run_variant(args.child, updates, args.model)))
        return
    print(f"GLAM config, {args.model}, {updates} updates of 16 frames per variant, {torch.get_num_threads()} threads; "
          f"steady state = updates 2..{updates}")
    print(f"{'variant':<28}{'dtype':>9}{'ckpt':>6}{'collect f/s':>12}{'update f/s':>11}{'overall f/s':>12}"
          f"{'peak RSS':>10}{'GFLOP/frame':>12}{'GFLOP/s':>9}{'matmul':>8}{'fraction':>9}{'executed':>9}"
          f"{'update 1 s':>11}{'peak after update 2, ' + str(updates):>26}{'attn':>6}{'SDPA':>6}{'ceiling':>8}")
    for name in args.variants:
        done = subprocess.run([sys.executable, "-m", "benchmarks.glam_config", "--child", name, "--updates", str(updates),
                               "--model", args.model], capture_output=True, text=True, cwd=ROOT)
        if done.returncode != 0:
            print(f"{name}: failed\n{done.stderr[-2000:]}")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"{name:<28}{r['dtype']:>9}{'yes' if r['checkpointing'] else 'no':>6}{r['collect_FPS']:>12.3f}"
              f"{r['update_FPS']:>11.3f}{r['FPS']:>12.3f}{r['rss_gb']:>8.2f}GB{r['gflop_per_frame']:>12.0f}"
              f"{r['achieved_gflops']:>9.1f}{r['matmul_gflops']:>8.0f}{r['fraction']:>9.2f}"
              f"{r['executed_fraction']:>9.2f}{r['first_update_s']:>11.0f}{_after(r['rss_after_gb']):>26}"
              f"{r['attention_share']:>6.0%}{r['sdpa_gflops']:>6.0f}{r['ceiling']:>8.2f}", flush=True)
        print(f"  {r['compile']}", flush=True)  # what model.compile became, and why (auto's block timings)
    print(f"GLAM's original code (lamorel), the same model and config: {GLAM_FPS} frames/s, {GLAM_RSS_GB} GB peak RSS, "
          f"measured {GLAM_MEASURED}; a ratio against it holds on that CPU only")


def _after(peaks: list[float]) -> str:
    """The peak RSS after update 2 and after the last, and the change between them."""
    if len(peaks) < 3:
        return "-"
    return f"{peaks[1]:.2f} -> {peaks[-1]:.2f} GB ({peaks[-1] / peaks[1] - 1:+.1%})"


if __name__ == "__main__":
    main()
