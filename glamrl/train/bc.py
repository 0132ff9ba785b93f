"""Behavioural cloning: fine-tune the LLM policy on demonstrations with the language-model loss.

The loss of a record is -log p(action text | prompt), the summed log-probabilities of
the action's tokens after the prompt (the scorer's `action_log_likelihoods`, as GLAM's
clm_behavioral-cloning); with NPAE action heads, which score no text, it is
-log pi(action | prompt). LoRA and the frozen trunk work as in training (model.lora=true,
model.train_layers=K; the trunk's output of a prompt is cached within model.trunk_cache_mb).

The run directory follows training's conventions: config.yaml (agent.kind llm), log.csv
(one row per `bc.log_every` optimizer steps; `frames` counts demonstration records
consumed), checkpoints with the policy's trainable weights, resume by running again.
Each checkpoint records the demonstrations (path, SHA-256, record count): a run resumes only
on the same data (`bc.epochs=N` extends it); other data is refused in one line, and is cloned
on top of the run with a new run started from it (`agent.init_from=RUN_DIR`, another --run-dir).
`glamrl eval --run` evaluates it; `glamrl train agent.init_from=RUN_DIR` continues with PPO.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from glamrl.agents.factory import AgentKindError, make_model
from glamrl.config import TrainConfig
from glamrl.eval.demos import DemoFileError, read_demos
from glamrl.run.checkpoint import Progress
from glamrl.run.dir import holds_run_lock
from glamrl.train.common import TrainResult, open_session


def data_identity(data: Path, records: int) -> dict[str, Any]:
    """What a BC checkpoint records of its demonstrations: where they were, their SHA-256 and record count."""
    digest = hashlib.sha256()
    with open(data, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"path": str(data.resolve()), "sha256": digest.hexdigest(), "records": records}


def check_same_data(run_dir: Path, saved: dict[str, Any] | None, current: dict[str, Any]) -> None:
    """Refuse to resume `run_dir` on other demonstrations than those its checkpoint was cloned from."""
    if saved is None or saved["sha256"] == current["sha256"]:
        return
    raise DemoFileError(
        f"{run_dir} was cloned from {saved['path']} ({saved['records']} records, sha256 {saved['sha256'][:12]}), "
        f"not from {current['path']} ({current['records']} records, sha256 {current['sha256'][:12]}): resume it "
        f"with --data {saved['path']}, or clone the new data on top of it in a new run: "
        f"--run-dir NEW agent.init_from={run_dir}")


def bc_loss(policy: torch.nn.Module, prompts: list[str], actions: torch.Tensor,
            action_names: Sequence[str]) -> torch.Tensor:
    """Mean over the batch of -log p(action text | prompt) over the candidates `action_names`
    (NPAE heads: -log pi(action | prompt))."""
    out = policy(prompts, action_names)
    scores = out.log_probs if out.action_log_likelihoods is None else out.action_log_likelihoods  # (B, A)
    return -scores.float().gather(1, actions[:, None].to(scores.device)).mean()


@holds_run_lock
def train_bc(cfg: TrainConfig, data: Path, run_dir: Path, resume: bool = False, progress: bool = True,
             say: Callable[[str], None] = print) -> TrainResult:
    """Clone the demonstrations of `data` into the LLM policy `cfg` describes (or resume RUN_DIR)."""
    if cfg.agent.kind != "llm":
        raise AgentKindError(f"behavioural cloning trains agent kind 'llm', not {cfg.agent.kind!r}")
    records = read_demos(data, cfg.prompt.actions)
    prompts = [r["prompt"] for r in records]
    actions = torch.tensor([r["action_index"] for r in records])                    # (R,)
    demos = data_identity(data, len(records))
    session = open_session(cfg, run_dir, resume, "bc", progress, say)
    if session.resumed is not None:
        check_same_data(session.run.path, session.resumed.extra.get("data"), demos)
    b = cfg.bc
    steps_per_epoch = math.ceil(len(records) / b.batch_size)
    total_steps = b.epochs * steps_per_epoch

    # ---- model, optimizer
    policy = make_model(cfg, load_init=session.resumed is None)
    params = [w for w in policy.parameters() if w.requires_grad]
    optimizer = torch.optim.Adam(params, lr=b.lr)

    # ---- resume (weights, optimizer, RNGs); then record the config, evaluate a new run, open the log
    update, frames, _, duration = session.restore(policy, optimizer)

    success_before = session.begin(policy, "before cloning")
    bar = tqdm(total=total_steps, initial=update, unit="step", disable=not session.progress)
    start_time, row_start, losses, grad_norms = time.time() - duration, time.time(), [], []
    while update < total_steps:
        # ---- 1. the next minibatch: epoch e visits the records in a permutation fixed by (seed, e)
        epoch, k = divmod(update, steps_per_epoch)
        order = torch.randperm(len(records), generator=torch.Generator().manual_seed(cfg.env.seed * 10_007 + epoch))
        mb_idx = order[k * b.batch_size: (k + 1) * b.batch_size]                    # (M,)

        # ---- 2. one optimizer step on the LM loss of the action tokens
        optimizer.zero_grad(set_to_none=True)
        with policy.collecting():  # model.train_layers: a prompt seen before skips the frozen trunk
            loss = bc_loss(policy, [prompts[i] for i in mb_idx.tolist()], actions[mb_idx], cfg.prompt.actions)
        loss.backward()
        grad_norms.append(torch.nn.utils.clip_grad_norm_(params, b.max_grad_norm).item())
        optimizer.step()
        losses.append(loss.item())
        update += 1
        bar.update(1)

        # ---- 3. log and checkpoint every log_every steps
        if update % b.log_every == 0 or update == total_steps:
            frames = epoch * len(records) + min((k + 1) * b.batch_size, len(records))
            metrics = {"update": update, "frames": frames,
                       "FPS": len(losses) * b.batch_size / (time.time() - row_start),
                       "duration": time.time() - start_time,
                       "loss": float(np.mean(losses)), "grad_norm": float(np.mean(grad_norms))}
            session.log(metrics)
            session.save(policy, optimizer, Progress(update, frames, 0, metrics["duration"]), extra={"data": demos})
            bar.set_postfix(loss=f"{metrics['loss']:.3f}")
            row_start, losses, grad_norms = time.time(), [], []
    bar.close()

    return session.finish(policy, update, frames, success_before, "after cloning")
