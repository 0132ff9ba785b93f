"""Long prompts: PPO's collection and update where the words decide, with GLAM's 3 observations and the top 4
blocks trained, before and after the top block ran at the read positions only and new prompts read their kept
prefixes; then where the time goes, by kind of work.

    python -m benchmarks.long_prompts                                  # GoToLocal and MixedTrainLocal
    python -m benchmarks.long_prompts --levels BabyAI-GoToLocal-v0 --updates 2 --no-profile
    python -m benchmarks.long_prompts --model tiny-llama --updates 2 model.train_layers=1   # a smoke test
    python -m benchmarks.long_prompts --levels BabyAI-GoToLocal-v0 --variants after prompt.nbr_obs=1 model.compile=true
    python -m benchmarks.long_prompts --levels BabyAI-GoToLocal-v0 --variants tail after --no-profile prompt.nbr_obs=1

The run: configs/goto_local_cpu.yaml (SmolLM2, `model.train_layers=4`, 16 envs x 16 steps = 256 frames per
update, 4 epochs, minibatch 64) with `prompt.nbr_obs=3` (an override replaces it) and `env.id` set to the
level, for `--updates` updates, each variant in its own subprocess through `glamrl.trainers.ppo.train_ppo`, as
`glamrl train` runs it.
Steady state: the updates after the first. Variants: `before` (the frozen trunk runs its top block at every
position and every new prompt's frozen blocks whole, eager, as until 2026-12-04: `top_block_tail_matches` answers
no, `model.prefix_cache_mb=0 model.compile=false`), `tail` (the top block at the last prompt token and the
action tokens only, `glamrl.llm.trunk.top_block_tail`, eager, as until 2026-12-06) and `after` (today's
defaults: with one observation the prefix store, `glamrl.llm.trunk.PrefixStore`, and one padded batch per
collection step, `model.inference_batching=auto`; with several, compiled blocks, `model.compile=auto`). The
overrides given come after a variant's own settings, so they win. The results page keeps the 2026-12-02 run,
whose `before` was `run.reuse_memory=false`.

FLOPs per frame, as benchmarks/glam_config.py counts them (dense attention, padding not counted), with P the
mean prompt tokens of random play on the level and T the packed action tokens, the top block counted at the
positions the result needs (F_tail) in both variants:
  collection  = F_tail(P, T; L) for a prompt whose lower blocks run (a trunk cache miss), F_tail(P, T; K) for a hit;
                with the prefix store a miss's lower blocks count 1 - s of their FLOPs, s the prefix share (log.csv's
                `trunk_prefix_share`: the share of the misses' tokens read from the store; attention's quadratic
                term counted as if it scaled with the tokens too)
  update      = 3 E F_tail(P, T; K)        the top K blocks, forward and backward, E epochs
Each is shown as a fraction of a 2048^2 matmul's FLOP/s in the compute dtype, measured in the same process,
next to the trunk cache's hit rate and size (log.csv's `trunk_hit_rate`, `trunk_cache_mb`), the prefix share and
peak RSS.

The profile (skipped with --no-profile): on 64 prompts of random play on the level, one collection of 16
prompts (every one a trunk miss, as new prompts are) and one update minibatch of 64 cached prompts under
torch.profiler, self time summed by kind as benchmarks/update_profile.py sums it, with the SDPA kernels'
rate at the level's mean prompt length in the same process. Then scoring 16 new prompts (every one a trunk
miss), scoring the 16 collected ones (now in the cache: the top 4 blocks only) and the update minibatch again,
each the best of 3, with the top block at every position and at the read positions only.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from benchmarks.glam_config import causal_flops, matmul_flops, sdpa_flops, timed

ROOT = Path(__file__).resolve().parents[1]
LEVELS = ("BabyAI-GoToLocal-v0", "BabyAI-MixedTrainLocal-v0")
RUN = ["prompt.nbr_obs=3", "run.eval_episodes=0", "run.tensorboard=false", "run.max_minutes=null",
       "model.device=cpu"]
VARIANTS = ("before", "tail", "after")


def level_config(level: str, model: str, overrides: list[str]):
    from glamrl.config import load_train_config

    given = {o.split("=", 1)[0] for o in overrides}  # the command line's overrides replace the benchmark's own
    return load_train_config(ROOT / "configs" / "goto_local_cpu.yaml",
                             [f"env.id={level}", f"model.name={model}",
                              *(o for o in RUN if o.split("=", 1)[0] not in given), *overrides])


def prompt_shape(policy, level: str, cfg) -> tuple[list[str], float, int]:
    """64 prompts of random play on `level`, their mean token count P and the packed action tokens T."""
    from benchmarks.train_speed import real_prompts

    prompts = real_prompts(64, cfg.prompt.nbr_obs, level=level)
    scorer = policy.scorer
    P = float(np.mean([len(scorer.tokenizer(scorer.prompt_text(p)).input_ids) for p in prompts]))
    T = sum(len(scorer.action_token_ids(a)) for a in cfg.prompt.actions)
    return prompts, P, T


def run_variant(level: str, variant: str, updates: int, model: str, overrides: list[str]) -> dict:
    """Child process: `updates` PPO updates of the variant on `level`; its figures as a dict."""
    from glamrl.llm import trunk
    from glamrl.llm.policy import LLMPolicy
    from glamrl.run.dir import RunDir
    from glamrl.trainers.ppo import train_ppo

    if variant == "before":  # this child process's trunks run the top block at every position
        trunk.top_block_tail_matches = lambda model: False
    then = [] if variant == "after" else ["model.prefix_cache_mb=0", "model.compile=false"]  # as they ran
    cfg = level_config(level, model, [*then, *overrides, f"ppo.total_frames={256 * updates}"])
    with tempfile.TemporaryDirectory() as tmp:
        train_ppo(cfg, Path(tmp) / "run", progress=False, say=lambda _: None)
        rows = RunDir(Path(tmp) / "run").read_log()
    steady = rows[1:] or rows
    policy = LLMPolicy(cfg.model)  # after training: its shapes and compute dtype, not its weights
    _, P, T = prompt_shape(policy, level, cfg)
    config, K = policy.llm.config, cfg.model.train_layers
    peak = matmul_flops(policy.compute_dtype)
    mean = {k: float(np.mean([float(r.get(k) or 0) for r in steady]))
            for k in ("collect_FPS", "update_FPS", "FPS", "trunk_hit_rate", "trunk_cache_mb", "trunk_prefix_share")}
    hit, top = mean["trunk_hit_rate"], causal_flops(config, P, T, K, tail=True)
    miss = top + (1 - mean["trunk_prefix_share"]) * (causal_flops(config, P, T, config.num_hidden_layers, tail=True)
                                                      - top)
    collect_flops = (1 - hit) * miss + hit * top
    update_flops = 3 * cfg.ppo.epochs * causal_flops(config, P, T, K, tail=True)
    return {"level": level, "variant": variant, **mean, "prompt_tokens": P,
            "collect_fraction": collect_flops * mean["collect_FPS"] / peak,
            "update_fraction": update_flops * mean["update_FPS"] / peak,
            "matmul_gflops": peak / 1e9, "peak_rss_gb": float(rows[-1]["peak_rss_gb"])}


def profile_level(level: str, model: str, overrides: list[str]) -> None:
    """Where a collection step's and an update minibatch's time goes on `level`, by kind of work."""
    from torch.profiler import ProfilerActivity, profile

    from benchmarks.train_speed import real_prompts
    from benchmarks.update_profile import KINDS, kind_of
    from glamrl.llm.policy import LLMPolicy
    from glamrl.memory import reuse_freed_memory
    from glamrl.rl.buffer import Batch
    from glamrl.rl.ppo import accumulate_gradients

    reuse_freed_memory()
    cfg = level_config(level, model, overrides)
    torch.manual_seed(0)
    policy = LLMPolicy(cfg.model, len(cfg.prompt.actions), cfg.prompt.nbr_obs)  # compiled where training compiles
    prompts, P, T = prompt_shape(policy, level, cfg)
    actions = cfg.prompt.actions
    params = [w for w in policy.parameters() if w.requires_grad]
    optimizer = torch.optim.Adam(params, lr=1e-6, fused=True)

    def collect(batch: list[str]):
        with torch.inference_mode(), policy.collecting():
            return policy(batch, actions)

    out = [collect(prompts[i:i + 16]) for i in range(0, 64, 16)]  # every prompt cached, the first batch warmed up
    log_probs, values = torch.cat([o.log_probs for o in out]), torch.cat([o.values for o in out])
    chosen = torch.randint(0, log_probs.shape[1], (64,))
    batch = Batch(prompts, chosen, log_probs.gather(1, chosen[:, None]).squeeze(1), values, torch.randn(64),
                  values + torch.randn(64), torch.zeros(64, dtype=torch.bool))

    def update() -> None:
        optimizer.zero_grad(set_to_none=True)
        accumulate_gradients(policy, batch, torch.randperm(64)[None], actions, cfg.ppo)
        optimizer.step()

    update()  # warm-up
    fresh = real_prompts(16, cfg.prompt.nbr_obs, seed=1, level=level)  # not in the cache, as a rollout's new ones
    print(f"\n{level}: P = {P:.0f} prompt tokens (random play, 3 observations), T = {T} action tokens")
    for name, work in (("collection of 16 new prompts", lambda: collect(fresh)), ("update minibatch of 64", update)):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            work()
            wall = time.perf_counter() - start
        by_kind: dict[str, float] = defaultdict(float)
        for event in prof.key_averages():
            by_kind[kind_of(event.key)] += event.self_cpu_time_total / 1e6
        shares = "  ".join(f"{kind} {by_kind[kind] / wall:.0%}" for kind in [k for k, _ in KINDS] + ["other"]
                           if by_kind[kind] / wall >= 0.005)
        print(f"  {name}: {wall:.2f} s   {shares}  python/dispatch {(wall - sum(by_kind.values())) / wall:.0%}")

    def best_of_3(work, tail: bool) -> float:
        policy.trunk.tail_exact = tail
        return min(timed(work) for _ in range(3))

    unseen = real_prompts(16, cfg.prompt.nbr_obs, seed=2, level=level)

    def score(batch: list[str]) -> None:  # outside a collection: nothing is added to the cache
        with torch.inference_mode():
            policy(batch, actions)

    exact = policy.trunk.tail_exact
    for name, work in (("scoring 16 new prompts (trunk misses)", lambda: score(unseen)),
                       (f"scoring 16 cached prompts (the top {cfg.model.train_layers} blocks)", lambda: score(fresh)),
                       ("update minibatch of 64", update)):
        full, tail = best_of_3(work, False), best_of_3(work, exact)
        print(f"  {name}, best of 3: the top block at every position {full:.2f} s, at the read positions only "
              f"{tail:.2f} s ({'the tail' if exact else 'no tail: this model falls back'}): {full / tail:.2f}x")
    policy.trunk.tail_exact = exact

    heads = policy.llm.config.num_attention_heads
    S = int(P + T)
    sdpa = sdpa_flops(policy.compute_dtype, S, heads, policy.llm.config.hidden_size // heads, backward=False)
    mm = matmul_flops(policy.compute_dtype)
    print(f"  SDPA forward at {S} tokens: {sdpa / 1e9:.0f} GFLOP/s, {sdpa / mm:.2f} of the {mm / 1e9:.0f} GFLOP/s "
          f"2048^2 matmul ({str(policy.compute_dtype).removeprefix('torch.')})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="dotted config overrides for every variant")
    parser.add_argument("--levels", nargs="*", default=list(LEVELS))
    parser.add_argument("--updates", type=int, default=3, help="updates per variant (the first is not reported)")
    parser.add_argument("--model", default="smollm2-135m", help="tiny-llama for a smoke test")
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--no-profile", action="store_true", help="skip the per-kind profile")
    parser.add_argument("--child", nargs=2, metavar=("LEVEL", "VARIANT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    # `--levels X model.k=v` hands the override to --levels (nargs="*"): a dotted key=value is never a level
    args.overrides += [a for a in args.levels if "=" in a]
    args.levels = [a for a in args.levels if "=" not in a]
    if args.child:
        print(json.dumps(run_variant(*args.child, args.updates, args.model, args.overrides)))
        return
    print(f"{args.model}, configs/goto_local_cpu.yaml with {' '.join([*RUN, *args.overrides])} (later ones win), "
          f"{args.updates} updates of 256 frames per "
          f"variant, {torch.get_num_threads()} threads; steady state = updates 2..{args.updates}")
    print(f"{'level':<28}{'variant':>8}{'P':>5}{'collect f/s':>12}{'update f/s':>11}{'overall f/s':>12}"
          f"{'collect frac':>13}{'update frac':>12}{'trunk hits':>11}{'prefix':>8}{'cache MiB':>10}{'peak RSS':>10}")
    results: dict[tuple[str, str], dict] = {}
    for level in args.levels:
        for variant in args.variants:
            done = subprocess.run([sys.executable, "-m", "benchmarks.long_prompts", "--child", level, variant,
                                   "--updates", str(args.updates), "--model", args.model, *args.overrides],
                                  capture_output=True, text=True, cwd=ROOT)
            if done.returncode != 0:
                print(f"{level} {variant}: failed\n{done.stderr[-2000:]}")
                continue
            r = results[level, variant] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"{level:<28}{variant:>8}{r['prompt_tokens']:>5.0f}{r['collect_FPS']:>12.2f}{r['update_FPS']:>11.2f}"
                  f"{r['FPS']:>12.2f}{r['collect_fraction']:>13.2f}{r['update_fraction']:>12.2f}"
                  f"{r['trunk_hit_rate']:>11.2f}{r['trunk_prefix_share']:>8.2f}{r['trunk_cache_mb']:>10.0f}"
                  f"{r['peak_rss_gb']:>8.2f}GB", flush=True)
        for base in ("before", "tail"):
            if (level, base) in results and (level, "after") in results:
                gain = results[level, "after"]["FPS"] / results[level, base]["FPS"]
                print(f"{level:<28}{f'after / {base}: {gain:.2f}x overall':>40}")
    if not args.no_profile:
        for level in args.levels:
            profile_level(level, args.model, args.overrides)


if __name__ == "__main__":
    main()
