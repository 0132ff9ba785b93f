"""DD-PPO on torch.distributed: K ranks, each with its own envs and model replica.

    torchrun --nproc_per_node=K -m glamrl train --config ... --run-dir R

Each rank collects `env.num_envs x ppo.num_steps` frames with its own seeds, computes
the PPO gradients of its own minibatches, and the gradients are averaged over the ranks
before every optimiser step (gloo on CPU, NCCL on GPUs: `backend`), so every replica takes the same
step and stays bitwise identical. Rank 0 alone reads and writes the run directory; the
others receive the config and the resumed state from it, or its refusal (`from_main`): the rank
that found an error reports it, the others stop quietly. Without torchrun (WORLD_SIZE
unset or 1) nothing here sets anything up, and every helper is a no-op.
"""

from __future__ import annotations

import atexit
import gc
import hashlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from glamrl.errors import GlamrlError

DEFAULT_TIMEOUT_S = 1800.0
"""How long a collective waits for a silent rank (GLAMRL_DIST_TIMEOUT overrides it)."""
BUCKET_ELEMENTS = 2**24  # gradients are averaged in flat buckets of at most this many values

T = TypeVar("T")


class DistributedError(GlamrlError):
    """The ranks lost each other (a rank died, or the network failed) or drifted apart."""


class StoppedByMainRank(GlamrlError):
    """Rank 0 refused the job and reports why; another rank stops quietly (the CLI exits 0 there)."""


@dataclass(frozen=True)
class Ranks:
    """This process's place in the job: rank `rank` of `world_size` (0 of 1 without torchrun)."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1


def launched() -> bool:
    """Whether this process was started by torchrun (or another launcher) as one of several ranks."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def init() -> Ranks:
    """Join the process group torchrun describes (once); a single process gets `Ranks()`."""
    if not launched():
        return Ranks()
    if not dist.is_initialized():
        cuda = torch.cuda.is_available()
        if cuda:  # ranks beyond the node's GPUs share them, round robin
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        timeout = float(os.environ.get("GLAMRL_DIST_TIMEOUT", DEFAULT_TIMEOUT_S))
        # torch.distributed.nn's functions take `group=group.WORLD` as a default argument, bound when the module is
        # first imported (transformers and FSDP import it). Imported after the group exists, they hold the group,
        # so destroy_process_group cannot free it, and its gloo threads are still running while the interpreter
        # shuts down (a rank then aborts at exit now and then: "terminate called without an active exception").
        import torch.distributed.nn as _  # noqa: F401  (before the group: the defaults hold None)
        ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
        dist.init_process_group(backend(cuda, ranks_here), timeout=timedelta(seconds=timeout))
        atexit.register(close)  # leave the group before the interpreter goes, so no backend thread is cut off
    return current()


def backend(cuda: bool, ranks_here: int) -> str:
    """The process group's backend for `ranks_here` ranks on this node: NCCL where each has a GPU of its own, else
    gloo (CPU tensors, or CUDA tensors staged through host memory: NCCL refuses two ranks on one GPU)."""
    return "nccl" if cuda and ranks_here <= torch.cuda.device_count() else "gloo"


def close() -> None:
    """Leave the process group, if this process joined one. The garbage goes first: a finished run's model, in
    reference cycles, may hold the group, which destroy_process_group frees (and joins its threads) only once
    nothing does. DTensor's caches of a sharded run's specs keep holding it (torch 2.13), until the exit."""
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def current() -> Ranks:
    if dist.is_available() and dist.is_initialized():
        return Ranks(dist.get_rank(), dist.get_world_size())
    return Ranks()


@contextmanager
def _collective(what: str) -> Iterator[None]:
    """Turn a failed collective into one DistributedError line."""
    try:
        yield
    except RuntimeError as error:  # torch's DistError and the backends' errors derive from it
        raise DistributedError(f"rank {dist.get_rank()} lost the other ranks while {what} "
                               f"(a rank died or the network failed): {str(error).splitlines()[0]}") from None


def broadcast_object(value: T) -> T:
    """Rank 0's `value` on every rank (any picklable object)."""
    if not current().active:
        return value
    box = [value]
    with _collective("receiving rank 0's state"):
        dist.broadcast_object_list(box, src=0)
    return box[0]


def from_main(compute: Callable[[], T]) -> T:
    """`compute()` run by rank 0 alone, its value on every rank; a GlamrlError there stops every rank.

    Rank 0 raises the error itself (and so reports it); the other ranks raise `StoppedByMainRank`.
    """
    ranks = current()
    if not ranks.active:
        return compute()
    if ranks.is_main:
        try:
            value = compute()
        except GlamrlError as err:
            broadcast_object(("error", str(err)))
            raise
        return broadcast_object(("ok", value))[1]
    outcome, value = broadcast_object(None)
    if outcome == "error":
        raise StoppedByMainRank(f"rank 0 stopped the job: {value}")
    return value


def gather_objects(value: T) -> list[T]:
    """Every rank's `value`, in rank order, on every rank."""
    ranks = current()
    if not ranks.active:
        return [value]
    out: list[Any] = [None] * ranks.world_size
    with _collective("gathering episode statistics"):
        dist.all_gather_object(out, value)
    return out


def gather_lists(items: list[T]) -> list[T]:
    """Every rank's `items`, concatenated in rank order, on every rank (e.g. the episodes each rank finished)."""
    return [item for rank_items in gather_objects(items) for item in rank_items]


def average(values: torch.Tensor) -> torch.Tensor:
    """The mean over ranks of a float tensor (same shape on every rank)."""
    ranks = current()
    if not ranks.active:
        return values
    values = values.clone()
    with _collective("averaging statistics"):
        dist.all_reduce(values)
    return values / ranks.world_size


def broadcast_parameters(module: nn.Module) -> None:
    """Copy rank 0's parameters and buffers into every replica."""
    if not current().active:
        return
    with _collective("copying rank 0's weights"), torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor.data, src=0)


def average_gradients(params: list[nn.Parameter]) -> None:
    """Replace every gradient by its mean over the ranks, in flat buckets (a missing gradient counts as 0)."""
    ranks = current()
    if not ranks.active:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    bucket: list[torch.Tensor] = []
    size = 0
    with _collective("averaging gradients"):
        for grad in [p.grad for p in params] + [None]:
            if bucket and (grad is None or size + grad.numel() > BUCKET_ELEMENTS):
                flat = torch.cat([g.reshape(-1) for g in bucket])
                dist.all_reduce(flat)
                flat /= ranks.world_size
                for g, part in zip(bucket, flat.split([g.numel() for g in bucket])):
                    g.copy_(part.view_as(g))
                bucket, size = [], 0
            if grad is not None:
                bucket.append(grad)
                size += grad.numel()


def check_replicas_equal(params: list[nn.Parameter], where: str) -> None:
    """Raise DistributedError unless every rank holds bitwise the same `params`."""
    if not current().active:
        return
    digest = hashlib.sha256()
    for p in params:
        digest.update(p.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    digests = gather_objects(digest.hexdigest())
    if len(set(digests)) > 1:
        raise DistributedError(f"the replicas' weights differ {where}: {digests}")
