"""`glamrl train` as one torchrun rank, recording what this rank saw (run by tests/test_distributed.py).

    dist_probe.py train ARGS [--then train ARGS ...]   # several commands in turn, in the same process group

Writes PROBE_DIR/rank{RANK}.jsonl: this process's PID, each command as it starts and as it returns, the
observations it acted on, a digest of the optimiser's weights after every optimiser step (whole weights: the
shards of a sharded run are gathered, so every rank records the same digest), and whether they were sharded,
then the interpreter's exit, with the gloo threads still running then. A fatal signal prints the
Python and C++ stacks of the rank it kills.
"""

import atexit
import faulthandler
import hashlib
import json
import os
import sys
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor
from torch.optim.optimizer import register_optimizer_step_post_hook

from glamrl.cli import main
from glamrl.parallel import distributed

LOG = Path(os.environ["PROBE_DIR"]) / f"rank{os.environ['RANK']}.jsonl"


def record(**row) -> None:
    with open(LOG, "a") as f:
        f.write(json.dumps(row) + "\n")


def after_step(optimizer, args, kwargs) -> None:
    digest = hashlib.sha256()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for p in params:
        whole = p.detach().full_tensor() if isinstance(p, DTensor) else p.detach()
        digest.update(whole.contiguous().view(-1).numpy().tobytes())
    record(kind="weights", digest=digest.hexdigest(), sharded=all(isinstance(p, DTensor) for p in params))


def recording_step(envs, agent, obs):
    record(kind="obs", missions=list(obs["mission"]), descriptions=[list(d) for d in obs["descriptions"]])
    return real_step(envs, agent, obs)


def gloo_threads() -> list[str]:
    """The names of this process's threads that belong to gloo (its process group's workers and TCP loop)."""
    names = [(task / "comm").read_text().strip() for task in Path("/proc/self/task").iterdir()]
    return sorted(name for name in names if "gloo" in name)


faulthandler.enable()
torch._C._set_print_stack_traces_on_fatal_signal(True)
record(kind="pid", pid=os.getpid())
atexit.register(lambda: record(kind="exit", gloo_threads=gloo_threads()))  # before glamrl's: runs after it left
distributed.init()  # as `glamrl train` joins: before transformers and the trainers are imported
import glamrl.trainers.ppo  # noqa: E402

register_optimizer_step_post_hook(after_step)
real_step, glamrl.trainers.ppo.step = glamrl.trainers.ppo.step, recording_step
commands = [[]]
for arg in sys.argv[1:]:
    if arg == "--then":
        commands.append([])
    else:
        commands[-1].append(arg)
for command in commands:
    record(kind="command", args=command)
    code = main(command)
    record(kind="returned", code=code)
    if code:
        sys.exit(code)
