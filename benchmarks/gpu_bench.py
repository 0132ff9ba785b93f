"""The whole GPU measurement of glamrl's PPO in one run; `benchmarks/gpu.sh` sets up and calls it.

    bash benchmarks/gpu.sh [--out FILE]     # one CUDA GPU, under 10 minutes (--budget-s)
    bash benchmarks/gpu.sh --cpu-smoke      # the same steps on CPU with shrunken models, under a minute

Steps:
1. peak: the FLOP/s of a large bf16 matmul on this device, measured now (float32 on CPU).
2. models: random-weight Flan-T5-large (seq2seq) and SmolLM2-135M (causal) built from
   benchmarks/models/*/config.json with the SmolLM2 tokenizer (benchmarks/models/tokenizer),
   saved in a work directory and loaded by glamrl as local model directories. --cpu-smoke
   shrinks the same configs to 2 blocks of width 64.
3. per model, with full fine-tuning and with model.train_layers: FLOPs and tokens per frame on
   real prompts, and the SDPA kernel the scorer's attention runs (collection, update), then
   `python -m glamrl train` on GLAM's configuration (32 envs x 40 frames, 4 epochs, minibatch 64,
   3 observations, BabyAI-MixedTrainLocal-v0, fp32 weights, bf16 compute on CUDA) with
   `glamrl.trainers.ppo.train_ppo`, stopped after a time limit; the last update of RUN_DIR/log.csv gives
   collection, update and overall frames/s.
   After a model's `train_layers` row: where one collection pass (32 prompts new to the trunk cache) and
   one update minibatch spend their wall time, warmed up (compiled, cached): the device's kernels
   (torch.profiler's CUDA activity), the host's operators (their self CPU time: launches, copies), the
   rest (Python, tokenization, the trunk cache), and the Python functions that take the most (cProfile).
4. DD-PPO: the same training under `torchrun --nproc_per_node=2` (NCCL with a GPU per rank, gloo
   where the ranks share one device), or the reason it could not run.
It prints one Markdown table and writes everything as JSON (--out).

Tokens/s counts real tokens (prompt + the 6 candidates' packed action tokens) per frame,
once per collection and once per PPO epoch. MFU = FLOPs per frame x frames/s / peak, with the
FLOPs of one collection pass and of one update pass (forward + backward) counted by
torch.utils.flop_counter on real batches as glamrl runs them (padding included).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import shutil
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM
from transformers.utils import logging as transformers_logging

from benchmarks.train_speed import real_prompts
from glamrl.agents.factory import make_model
from glamrl.config import load_train_config
from glamrl.llm.diagnostics import attention_kernels
from glamrl.parallel import distributed
from glamrl.run.dir import RunDir
from glamrl.trainers.ppo import train_ppo

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"
DDPPO_MODEL = "smollm2-135m"  # the model DD-PPO trains, right after its own rows
SMOKE_SIZES = {  # --cpu-smoke: the same configs, 2 blocks of width 64
    "flan-t5-large": dict(d_model=64, d_kv=16, d_ff=128, num_heads=4, num_layers=2, num_decoder_layers=2),
    "smollm2-135m": dict(hidden_size=64, head_dim=16, intermediate_size=128, num_attention_heads=4,
                         num_key_value_heads=2, num_hidden_layers=2),
}


@dataclass
class Plan:
    """What one run measures: GLAM's configuration on CUDA, a scaled-down one for --cpu-smoke."""

    device: str
    envs: int = 32
    steps: int = 40
    epochs: int = 4
    minibatch: int = 64
    updates: int = 2                      # the last one is reported (the first one warms up)
    train_layers: int = 4
    row_timeout_s: dict[str, float] = field(default_factory=lambda: {"flan-t5-large": 150, "smollm2-135m": 100})
    dist_envs: int = 16                   # DD-PPO: envs per rank, one update of dist_envs x 8 frames per rank
    dist_timeout_s: float = 120
    peak_size: int = 8192
    prompts: int = 64                     # real prompts for the FLOP and token counts
    shrink: bool = False

    @property
    def overrides(self) -> list[str]:
        return [f"env.num_envs={self.envs}", f"ppo.num_steps={self.steps}", f"ppo.epochs={self.epochs}",
                f"ppo.minibatch_size={self.minibatch}", f"ppo.total_frames={self.envs * self.steps * self.updates}",
                "prompt.nbr_obs=3", "env.id=BabyAI-MixedTrainLocal-v0", f"model.device={self.device}",
                "model.dtype=float32", "run.eval_episodes=0", "run.tensorboard=false", "run.checkpoint_every=1000"]


GPU_PLAN = Plan(device="cuda")
SMOKE_PLAN = Plan(device="cpu", envs=2, steps=3, epochs=1, minibatch=4, updates=1, train_layers=1,
                  row_timeout_s={"flan-t5-large": 60, "smollm2-135m": 60}, dist_envs=2, dist_timeout_s=90,
                  peak_size=256, prompts=4, shrink=True)


# ------------------------------------------------------------------------ measures
def matmul_peak(device: torch.device, dtype: torch.dtype, n: int) -> float:
    """FLOP/s of an n x n matmul in `dtype` on `device` (best of 5 timings of 10 back-to-back products)."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))

    def timed() -> float:
        _sync(device)
        start = time.perf_counter()
        for _ in range(10):
            a @ b
        _sync(device)
        return (time.perf_counter() - start) / 10

    timed()  # warm-up
    return 2 * n ** 3 / min(timed() for _ in range(5))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_model_dir(name: str, device: torch.device, shrink: bool, out: Path) -> int:
    """benchmarks/models/NAME/config.json with random weights and the SmolLM2 tokenizer, saved to `out`
    as a Hugging Face model directory; returns the parameter count."""
    config = AutoConfig.from_pretrained(MODELS / name)
    for key, value in (SMOKE_SIZES[name] if shrink else {}).items():
        setattr(config, key, value)
    auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    torch.manual_seed(0)
    with torch.device(device):
        model = auto.from_config(config, dtype=torch.float32)
    count = sum(p.numel() for p in model.parameters())
    model.to(torch.bfloat16).save_pretrained(out)  # half the bytes to write; glamrl loads it back as float32
    for file in (MODELS / "tokenizer").iterdir():
        shutil.copy(file, out / file.name)
    del model
    return count


def per_frame_costs(overrides: list[str], prompts: list[str], minibatch: int) -> dict:
    """FLOPs and tokens per frame of one collection pass and of one update pass (forward + backward),
    and the SDPA kernels each runs, measured on the policy `glamrl train` builds from `overrides`. Useful
    FLOPs: the count runs without activation checkpointing (its recomputed forward is not useful work, and
    FlopCounterMode cannot follow torch.utils.checkpoint's backward)."""
    cfg = load_train_config(None, [*overrides, "model.gradient_checkpointing=false"])
    torch.manual_seed(0)
    policy = make_model(cfg)
    scorer = policy.scorer
    prompt_tokens = sum(len(scorer.tokenizer(scorer.prompt_text(p)).input_ids) for p in prompts) / len(prompts)
    action_tokens = scorer.pack_actions(cfg.prompt.actions).targets.numel()
    with FlopCounterMode(display=False) as collect, attention_kernels() as collect_kernels, \
            torch.inference_mode(), policy.collecting():
        policy(prompts, cfg.prompt.actions)
    batch = prompts[:minibatch]
    with FlopCounterMode(display=False) as update, attention_kernels() as update_kernels:
        out = policy(batch, cfg.prompt.actions)
        (out.log_probs.sum() + out.values.sum()).backward()
    result = {
        "collect_flops_per_frame": collect.get_total_flops() / len(prompts),
        "update_flops_per_frame": update.get_total_flops() / len(batch),  # one epoch
        "tokens_per_frame": prompt_tokens + action_tokens,
        "collect_kernels": _counts(collect_kernels), "update_kernels": _counts(update_kernels),
    }
    del policy, out
    _free()
    return result


def where_time_goes(overrides: list[str], prompts: list[str], fresh: list[list[str]], minibatch: int) -> dict:
    """Wall time of one collection pass over prompts the trunk cache has not seen (`fresh`: three disjoint
    batches, to warm up, to profile the operators and to profile the Python functions) and of one update
    minibatch of cached `prompts`, split into the device's kernels, the host's operators and the rest, with the
    host operators and Python functions that take the most. Warmed up first: every kernel compiled and cached."""
    cfg = load_train_config(None, overrides)
    torch.manual_seed(0)
    policy = make_model(cfg)
    device, actions = policy.device, cfg.prompt.actions

    def collect(batch: list[str]) -> None:
        with torch.inference_mode(), policy.collecting():
            policy(batch, actions)

    def update() -> None:
        out = policy(prompts[:minibatch], actions)
        (out.log_probs.sum() + out.values.sum()).backward()
        policy.zero_grad(set_to_none=True)

    collect(prompts)  # the update's prompts are cached, as after a rollout
    collect(fresh[0])
    update()
    update()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    result = {}
    for name, operators, functions in (("collect", lambda: collect(fresh[1]), lambda: collect(fresh[2])),
                                       ("update", update, update)):
        _sync(device)
        with profile(activities=activities) as prof:
            start = time.perf_counter()
            operators()
            _sync(device)
            wall = time.perf_counter() - start
        events = prof.key_averages()
        host_ops = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)
        python = cProfile.Profile()
        python.enable()
        functions()
        _sync(device)
        python.disable()
        slowest = sorted(pstats.Stats(python).stats.items(), key=lambda item: item[1][2], reverse=True)
        result[name] = {
            "wall_ms": wall * 1e3,
            "device_ms": sum(e.self_device_time_total for e in events) / 1e3,
            "host_ops_ms": sum(e.self_cpu_time_total for e in events) / 1e3,
            "top_host_ops": [[e.key, round(e.self_cpu_time_total / 1e3, 1), e.count] for e in host_ops[:5]],
            "top_python": [[func if file == "~" else f"{Path(file).name}:{line} {func}", round(stats[2] * 1e3, 1),
                            stats[1]] for (file, line, func), stats in slowest[:6]],  # "~": built in (C)
        }
    del policy
    _free()
    return result


def _counts(names: list[str]) -> str:
    """['MATH', 'MATH', 'FLASH'] -> 'MATH x2, FLASH x1' (kernels in order of first use); 'none' without SDPA."""
    return ", ".join(f"{n} x{names.count(n)}" for n in dict.fromkeys(names)) or "none (not SDPA)"


def _free() -> None:
    """Give the device memory of the last model back before the next one is built."""
    if torch.cuda.is_available():
        gc.collect()
        torch.cuda.empty_cache()


class _Timeout(Exception):
    """A training row ran past its time."""


def train_row(overrides: list[str], run_dir: Path, timeout_s: float) -> tuple[dict | None, str, list[str]]:
    """`glamrl.trainers.ppo.train_ppo` with `overrides`, in this process, stopped after `timeout_s`;
    (the last row of its log or None, status, what it said about model.compile: the choice and its time)."""
    def stop(signum: int, frame: object) -> None:
        raise _Timeout

    said: list[str] = []
    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, max(timeout_s, 1))
    try:
        train_ppo(load_train_config(None, overrides), run_dir, progress=False, say=said.append)
        status = "ok"
    except _Timeout:
        status = f"stopped after {timeout_s:.0f} s"
    except Exception as error:  # noqa: BLE001  a failed row is reported (traceback on stderr), the others run
        traceback.print_exc()
        status = f"failed: {type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    _free()
    return *_last_update(run_dir, status), [line for line in said if line.startswith("model.compile")]


def _last_update(run_dir: Path, status: str) -> tuple[dict | None, str]:
    """The last row of RUN_DIR's log (None if it logged nothing) and `status`; drops the checkpoints
    (gigabytes for a full fine-tuning of T5-large)."""
    rows = RunDir(run_dir).read_log() if (run_dir / "log.csv").exists() else []
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    if rows and status.startswith("stopped"):
        status += f" (after update {len(rows)})"
    return (rows[-1] if rows else None), status


def torchrun_row(overrides: list[str], run_dir: Path, timeout_s: float) -> tuple[dict | None, str]:
    """`torchrun --nproc_per_node=2 -m glamrl train` with `overrides`; (the last log row or None, status)."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    config = run_dir.parent / f"{run_dir.name}.yaml"
    config.write_text("run:\n  eval_episodes: 0\n")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "glamrl",
               "train", "--config", str(config), "--run-dir", str(run_dir), "--no-progress", *overrides]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=max(timeout_s, 1))
        status = "ok" if done.returncode == 0 else f"failed: {_reason(done.stderr + done.stdout)}"
    except subprocess.TimeoutExpired:
        status = f"stopped after {timeout_s:.0f} s"
    return _last_update(run_dir, status)


def _reason(output: str) -> str:
    """The most telling lines of a failed run's output: its last two distinct error lines (not the
    launcher's own ChildFailedError), else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if ("error" in line.lower() or "refus" in line.lower())
              and "ChildFailedError" not in line and "elastic" not in line]
    telling = list(dict.fromkeys(errors))[-2:] or lines[-1:] or ["no output"]
    return " | ".join(line[:200] for line in telling)


# ----------------------------------------------------------------------- the run
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-smoke", action="store_true", help="CPU, shrunken models, tiny batches, gloo")
    parser.add_argument("--out", type=Path, default=Path("runs/gpu_bench.json"), help="JSON results")
    parser.add_argument("--workdir", type=Path, default=None, help="models and runs (default: a temporary dir)")
    parser.add_argument("--budget-s", type=float, default=480,
                        help="training runs end by then; later ones are skipped (the whole script: ~1 min more)")
    parser.add_argument("--models", nargs="*", default=["smollm2-135m", "flan-t5-large"], choices=sorted(SMOKE_SIZES))
    parser.add_argument("--modes", nargs="*", default=["full", "train_layers"], choices=["full", "train_layers"],
                        help="full fine-tuning, and/or the top model.train_layers blocks trained")
    args = parser.parse_args()
    transformers_logging.disable_progress_bar()
    plan = SMOKE_PLAN if args.cpu_smoke else GPU_PLAN
    if plan.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_bench: no CUDA device here; run it on a GPU machine, or use --cpu-smoke")
    if args.cpu_smoke:  # tiny models: one thread is fastest, and OpenMP threads crawl on a busy machine
        torch.set_num_threads(1)
    start = time.time()
    device = torch.device(plan.device)
    work = args.workdir or Path(os.environ.get("TMPDIR", "/tmp")) / f"glamrl-gpu-bench-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    say = lambda text: print(f"[{time.time() - start:6.1f}s] {text}", flush=True)  # noqa: E731

    peak_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    peak = matmul_peak(device, peak_dtype, plan.peak_size)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({torch.get_num_threads()} threads)"
    report = {"device": name, "torch": torch.__version__, "peak_tflops": peak / 1e12,
              "peak": f"{str(peak_dtype).removeprefix('torch.')} {plan.peak_size}^2 matmul", "plan": asdict(plan),
              "models": {}, "rows": [], "ddppo": None}
    say(f"{name}: {report['peak']}: {peak / 1e12:.3g} TFLOP/s")
    prompts = real_prompts(plan.prompts, nbr_obs=3)
    new = real_prompts(3 * plan.envs, nbr_obs=3, seed=1)  # collection batches the trunk cache has not seen
    fresh = [new[i * plan.envs:(i + 1) * plan.envs] for i in range(3)]

    for model in args.models:
        model_dir = work / "models" / model
        built = _attempt(lambda: build_model_dir(model, device, plan.shrink, model_dir))
        report["models"][model] = built if isinstance(built, int) else None
        _free()
        say(f"{model}: {built / 1e6:.1f}M parameters (random), in {model_dir}" if isinstance(built, int) else
            f"{model}: {built}")
        modes = {"full": ("full", []),
                 "train_layers": (f"train_layers={plan.train_layers}", [f"model.train_layers={plan.train_layers}"])}
        for mode, extra in (modes[m] for m in args.modes):
            row = {"model": model, "mode": mode, "params": report["models"][model]}
            left = args.budget_s - (time.time() - start)
            if left < 20 or not isinstance(built, int):
                report["rows"].append({**row, "status": "skipped: time budget spent" if left < 20 else built})
                say(f"{model} {mode}: skipped")
                continue
            overrides = [*plan.overrides, f"model.name={model_dir}", *extra]
            costs = _attempt(lambda: per_frame_costs(overrides, prompts, plan.minibatch))
            row.update(costs if isinstance(costs, dict) else {"costs": costs})
            last, row["status"], row["compile"] = train_row(overrides, work / "runs" / f"{model}-{mode}",
                                                            min(plan.row_timeout_s[model], left))
            if last is not None:
                row.update(_speeds(last, row, plan.epochs, peak))
            report["rows"].append(row)
            speed = f"{row['FPS']:.1f} frames/s" if last is not None else "no update logged"
            say(f"{model} {mode}: {row['status']}; {speed}; " + " | ".join(row["compile"]))
            if extra and last is not None and args.budget_s - (time.time() - start) >= 30:
                row["time"] = _attempt(lambda: where_time_goes(overrides, prompts, fresh, plan.minibatch))
                say(f"{model} {mode}, where the time goes: " + _split(row["time"]))
        if model == DDPPO_MODEL:  # DD-PPO trains this model: right after its rows, before a larger model's
            report["ddppo"] = ddppo(plan, work, args, start, say)

    if report["ddppo"] is None:
        report["ddppo"] = ddppo(plan, work, args, start, say)
    table = markdown(report)
    print(table)
    report["table"] = table
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    say(f"wrote {args.out}")
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    failed = [r for r in report["rows"] if r.get("FPS") is None] + ([] if "FPS" in report["ddppo"] else ["ddppo"])
    sys.exit(1 if failed and args.cpu_smoke else 0)  # smoke: every run must have logged an update


def _attempt(step):
    """`step()`, or, if it raises, a 'failed: ...' line (traceback on stderr): one failed step of the GPU run
    must not lose the others."""
    try:
        return step()
    except Exception as error:  # noqa: BLE001
        traceback.print_exc()
        _free()
        return f"failed: {type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"


def _speeds(last: dict, row: dict, epochs: int, peak: float) -> dict:
    """Frames/s, tokens/s and MFU of one logged update (tokens/s and MFU need the row's per-frame costs)."""
    speeds = {"update": int(last["update"]), "collect_FPS": last["collect_FPS"], "update_FPS": last["update_FPS"],
              "FPS": last["FPS"]}
    if "tokens_per_frame" not in row:
        return speeds
    collect_flops, update_flops = row["collect_flops_per_frame"], epochs * row["update_flops_per_frame"]
    tokens = row["tokens_per_frame"]
    return {
        **speeds, "collect_tokens_per_s": last["collect_FPS"] * tokens,
        "update_tokens_per_s": last["update_FPS"] * epochs * tokens,
        "mfu_collect": last["collect_FPS"] * collect_flops / peak,
        "mfu_update": last["update_FPS"] * update_flops / peak,
        "mfu": last["FPS"] * (collect_flops + update_flops) / peak,
    }


def ddppo(plan: Plan, work: Path, args: argparse.Namespace, start: float, say) -> dict:
    """One DD-PPO update with 2 ranks, SmolLM2 with its top blocks trained, or why not: NCCL where each rank has a
    GPU of its own, else gloo (glamrl's `distributed.backend`: on one GPU the ranks share it, and NCCL refuses
    that)."""
    backend = distributed.backend(plan.device == "cuda", ranks_here=2)
    model_dir = work / "models" / DDPPO_MODEL
    left = args.budget_s - (time.time() - start)
    result = {"ranks": 2, "backend": backend}
    if not model_dir.is_dir() or left < 20:
        say(f"DD-PPO: skipped ({'no smollm2-135m model' if not model_dir.is_dir() else 'time budget'})")
        return {**result, "status": "skipped"}
    overrides = [o for o in plan.overrides if not o.startswith(("env.num_envs", "ppo.num_steps", "ppo.total_frames",
                                                                 "ppo.minibatch_size"))]
    frames = plan.dist_envs * 8
    overrides += [f"env.num_envs={plan.dist_envs}", "ppo.num_steps=8", f"ppo.total_frames={2 * frames}",
                  f"ppo.minibatch_size={frames // 2}", f"model.name={model_dir}", "run.check_replicas=true",
                  f"model.train_layers={plan.train_layers}"]  # one update: two processes compiling full fine-tuning
    # outlasted 120 s on the H200 (2026-12-04); the replicas' lockstep and the all-reduce are what this row checks
    os.environ.setdefault("GLAMRL_DIST_TIMEOUT", "60")
    last, status = torchrun_row(overrides, work / "runs" / "ddppo", min(plan.dist_timeout_s, left - 10))
    say(f"DD-PPO 2 ranks ({backend}): {status}")
    return {**result, "status": status, **({"FPS": last["FPS"], "frames_per_update": 2 * frames} if last else {})}


def _cell(row: dict, key: str, spec: str) -> str:
    return format(row[key], spec) if row.get(key) is not None else "-"


def _compiled(lines: list[str]) -> str:
    """What a run said about model.compile (its `lines` that start so), in a cell: 'no', 'yes', or 'yes, 41 s'
    (the first update's compile time)."""
    if not any(line.startswith("model.compile: true") for line in lines):
        return "no" if lines else "-"
    seconds = [line.split()[1] for line in lines if " s compiling " in line]
    return f"yes, {float(seconds[0]):.0f} s" if seconds else "yes"


def _split(time_split: dict | str) -> str:
    """One line from `where_time_goes`: each pass's wall time, its device and host-operator shares."""
    if isinstance(time_split, str):
        return time_split
    return "; ".join(f"{name} {t['wall_ms']:.0f} ms: device kernels {t['device_ms'] / t['wall_ms']:.0%}, host "
                     f"operators {t['host_ops_ms'] / t['wall_ms']:.0%}, the rest (Python) "
                     f"{max(1 - t['host_ops_ms'] / t['wall_ms'], 0):.0%}" for name, t in time_split.items())


def markdown(report: dict) -> str:
    """The results as one Markdown table (a row per model and mode, then the DD-PPO row)."""
    head = ("| model | params | mode | collect f/s | update f/s | overall f/s | collect tok/s | update tok/s "
            "| MFU collect | MFU update | MFU overall | compiled | SDPA collect / update | status |")
    lines = [f"{report['device']}, torch {report['torch']}, peak {report['peak']}: {report['peak_tflops']:.3g} TFLOP/s",
             "", head, "|" + "---|" * (head.count("|") - 1)]
    for r in report["rows"]:
        cells = [r["model"], f"{r['params'] / 1e6:.0f}M" if r["params"] else "-", r["mode"]]
        cells += [_cell(r, key, spec) for key, spec in (
            ("collect_FPS", ".1f"), ("update_FPS", ".1f"), ("FPS", ".1f"), ("collect_tokens_per_s", ".0f"),
            ("update_tokens_per_s", ".0f"), ("mfu_collect", ".1%"), ("mfu_update", ".1%"), ("mfu", ".1%"))]
        status = r["status"] + (f"; FLOP count {r['costs']}" if "costs" in r else "")
        cells += [_compiled(r.get("compile", [])), f"{r.get('collect_kernels', '-')} / {r.get('update_kernels', '-')}",
                  status]
        lines.append("| " + " | ".join(cells) + " |")
    for r in report["rows"]:
        if isinstance(r.get("time"), dict):
            lines += ["", f"{r['model']} {r['mode']}, where the time goes: {_split(r['time'])}"]
            for name, t in r["time"].items():
                lines.append(f"- {name}, host operators: " + ", ".join(f"{k} {ms} ms x{n}" for k, ms, n in t["top_host_ops"]))
                lines.append(f"- {name}, Python functions (own time): "
                             + ", ".join(f"{k} {ms} ms x{n}" for k, ms, n in t["top_python"]))
    d = report["ddppo"]
    lines += ["", f"DD-PPO, 2 ranks ({d['backend']}): {d['status']}"
              + (f", {d['FPS']:.1f} frames/s ({d['frames_per_update']} frames per update)" if "FPS" in d else "")]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
