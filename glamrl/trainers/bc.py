"""Behavioural cloning: fine-tune the LLM policy on demonstrations with the language-model loss.

The loss of a record is -log p(action text | prompt), the summed log-probabilities of
the action's tokens after the prompt (the scorer's `action_log_likelihoods`, as GLAM's
clm_behavioral-cloning); with NPAE action heads, which score no text, it is
-log pi(action | prompt). LoRA and the frozen trunk work as in training (model.lora=true,
model.train_layers=K; the trunk's output of a prompt is cached within model.trunk_cache_mb).

The run directory follows training's conventions: config.yaml (agent.kind llm), log.csv
(one row per `bc.log_every` optimizer steps, numbered in its `update` column as every loop's rows are; `steps`
counts the optimizer steps; `frames` counts demonstration records consumed: the budget, bc.epochs x the records,
and where a resumed run continues), checkpoints with the policy's trainable weights (at every row, the steps in
their extra state), resume by running again.
Each checkpoint records the demonstrations (path, SHA-256, record count): a run resumes only
on the same data (`bc.epochs=N` extends it); other data is refused in one line, and is cloned
on top of the run with a new run started from it (`agent.init_from=RUN_DIR`, another --run-dir).
`glamrl eval --run` evaluates it; `glamrl train agent.init_from=RUN_DIR` continues with PPO.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from glamrl.agents.factory import make_model
from glamrl.config import TrainConfig
from glamrl.demos import DemoFileError, read_demos
from glamrl.run.checkpoint import Progress
from glamrl.trainers.common import TrainResult, open_session


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


def train_bc(cfg: TrainConfig, data: Path, run_dir: Path, resume: bool = False, progress: bool = True,
             say: Callable[[str], None] = print) -> TrainResult:
    """Clone the demonstrations of `data` into the LLM policy `cfg` describes (or resume RUN_DIR): bc.epochs
    passes, or up to the first log row past run.max_minutes."""
    records = read_demos(data, cfg.prompt.actions, cfg.prompt.nbr_obs)
    prompts = [r["prompt"] for r in records]
    actions = torch.tensor([r["action_index"] for r in records])                    # (R,)
    demos = data_identity(data, len(records))
    session = open_session(cfg, run_dir, resume, "bc", progress, say)
    if session.resumed is not None:
        check_same_data(session.run.path, session.resumed.extra.get("data"), demos)
    b, R = cfg.bc, len(records)
    total_frames = b.epochs * R

    # ---- model, optimizer
    policy = make_model(cfg, load_init=session.resumed is None)
    params = [w for w in policy.parameters() if w.requires_grad]
    optimizer = torch.optim.Adam(params, lr=b.lr)

    # ---- resume (weights, optimizer, RNGs); then record the config, evaluate a new run, open the log
    log_rows, frames, _, duration = session.restore(policy, optimizer)
    # a checkpoint from before `steps` was saved counted its rows in steps (its log's `update` column held them)
    steps = 0 if session.resumed is None else session.resumed.extra.get("steps", log_rows)

    success_before = session.begin(policy, "before cloning")
    bar = tqdm(total=total_frames, initial=frames, unit="record", disable=not session.progress)
    start_time, row_start, row_frames, losses, grad_norms = time.time() - duration, time.time(), 0, [], []
    stop = session.out_of_time(duration)  # run.max_minutes counts the run's training time over every invocation
    while frames < total_frames and not stop:
        # ---- 1. the next minibatch: epoch e visits the records in a permutation fixed by (seed, e), from the
        # record the run reached (whatever the batch size of the steps before); an epoch's last one may be shorter
        epoch, offset = divmod(frames, R)
        order = torch.randperm(R, generator=torch.Generator().manual_seed(cfg.env.seed * 10_007 + epoch))
        mb_idx = order[offset: offset + b.batch_size]                               # (M,)

        # ---- 2. one optimizer step on the LM loss of the action tokens
        optimizer.zero_grad(set_to_none=True)
        with policy.collecting():  # model.train_layers: a prompt seen before skips the frozen trunk
            loss = bc_loss(policy, [prompts[i] for i in mb_idx.tolist()], actions[mb_idx], cfg.prompt.actions)
        loss.backward()
        grad_norms.append(torch.nn.utils.clip_grad_norm_(params, b.max_grad_norm).item())
        optimizer.step()
        losses.append(loss.item())
        steps, frames, row_frames = steps + 1, frames + len(mb_idx), row_frames + len(mb_idx)
        bar.update(len(mb_idx))

        # ---- 3. log and checkpoint every log_every steps
        if steps % b.log_every == 0 or frames >= total_frames:
            log_rows += 1
            metrics = {"update": log_rows, "steps": steps, "frames": frames,
                       "FPS": row_frames / (time.time() - row_start),
                       "duration": time.time() - start_time,
                       "loss": float(np.mean(losses)), "grad_norm": float(np.mean(grad_norms))}
            stop = session.out_of_time(metrics["duration"])
            session.log(metrics)
            session.save(policy, optimizer, Progress(log_rows, frames, 0, metrics["duration"]),
                         extra={"data": demos, "steps": steps})
            bar.set_postfix(loss=f"{metrics['loss']:.3f}")
            row_start, row_frames, losses, grad_norms = time.time(), 0, [], []
    bar.close()

    return session.finish(policy, log_rows, frames, success_before, "after cloning", curves=("loss",))
