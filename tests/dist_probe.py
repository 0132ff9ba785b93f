"""`glamrl train` as one torchrun rank, recording what this rank saw (run by tests/test_distributed.py).

Writes PROBE_DIR/rank{RANK}.jsonl: this process's PID, the observations it acted on,
and a digest of the optimiser's weights after every optimiser step.
"""

import hashlib
import json
import os
import sys
from pathlib import Path

from torch.optim.optimizer import register_optimizer_step_post_hook

import glamrl.train
from glamrl.cli import main

LOG = Path(os.environ["PROBE_DIR"]) / f"rank{os.environ['RANK']}.jsonl"


def record(**row) -> None:
    with open(LOG, "a") as f:
        f.write(json.dumps(row) + "\n")


def after_step(optimizer, args, kwargs) -> None:
    digest = hashlib.sha256()
    for group in optimizer.param_groups:
        for p in group["params"]:
            digest.update(p.detach().contiguous().view(-1).numpy().tobytes())
    record(kind="weights", digest=digest.hexdigest())


def recording_step(envs, agent, obs):
    record(kind="obs", missions=list(obs["mission"]), descriptions=[list(d) for d in obs["descriptions"]])
    return real_step(envs, agent, obs)


record(kind="pid", pid=os.getpid())
register_optimizer_step_post_hook(after_step)
real_step, glamrl.train.step = glamrl.train.step, recording_step
sys.exit(main())
