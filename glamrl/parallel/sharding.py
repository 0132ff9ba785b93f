"""FSDP2 sharding of the LLM policy under torchrun (`run.sharding=fsdp`): for models whose training state
does not fit on one device.

    torchrun --nproc_per_node=K -m glamrl train --config ... run.sharding=fsdp model.batching=padded

DD-PPO (`run.sharding=none`) keeps a whole replica per rank: weights, gradients and Adam's two moments,
four times the fp32 weights, plus activations. Here every transformer block, then the root (the policy:
embeddings, tied or untied LM head, final norm, value and action heads), is one `fully_shard` unit,
so each rank stores 1/K of the weights, gradients and Adam state. The PPO update runs sharded: a block
is all-gathered just before it runs, forward and backward, and its gradients are reduce-scattered
(averaged over the ranks) right after. Acting (collection, the bootstrap value, evaluation, probes)
runs inside `gathered`, on the whole weights all-gathered once: ranks act on different prompts and
episodes, so they cannot stay in lockstep there (in the update they can: same minibatch sizes, and
`model.batching=padded` makes one forward pass of each). Hence this mode is for models whose weights fit on
one device, but not their training state; the root's own weights (embeddings, LM head) stay gathered
from the forward to the backward of each update minibatch.

Checkpoints keep the single-process format (`policy.trainable_state_dict()`, `optimizer.state_dict()`,
whole tensors on the CPU): rank 0 writes them, and a run resumes with or without sharding, with any
number of ranks, or is evaluated by one process.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard, register_fsdp_forward_method
from torch.distributed.tensor import DTensor

from glamrl.parallel import distributed
from glamrl.errors import GlamrlError

_FULL = StateDictOptions(full_state_dict=True, cpu_offload=True, flatten_optimizer_state_dict=False)


class ShardingError(GlamrlError, ValueError):
    """Sharding asked for where it cannot run (no torchrun, a model without declared blocks)."""


def check_launch(mode: str) -> None:
    """Refuse `run.sharding=fsdp` in a single process."""
    if mode == "fsdp" and not distributed.current().active:
        raise ShardingError("run.sharding=fsdp shards the model over torchrun's ranks: launch with "
                            "'torchrun --nproc_per_node=K -m glamrl train ...' (K >= 2), or set run.sharding=none")


def blocks(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a Hugging Face model (the classes it lists in `_no_split_modules`):
    decoder layers, or a seq2seq model's encoder and decoder blocks."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    found = [m for m in model.modules() if type(m).__name__ in names]
    if not found:
        raise ShardingError(f"{type(model).__name__} declares no transformer blocks (_no_split_modules): "
                            f"run.sharding=fsdp cannot split it; use run.sharding=none")
    return found


def shard(policy: nn.Module, mode: str = "fsdp") -> None:
    """With `mode` (run.sharding) fsdp, shard `policy` (an LLMPolicy, on its device) in place over all ranks: one
    unit per block, then the root; with none, leave it whole. Call it before making the optimizer, whose
    parameters then are the ranks' shards.

    The root is the policy itself, so that its `forward` and `values` (the two entry points of every
    scoring call) gather the root's own weights; tied input and output embeddings stay in that one unit.
    Every rank must hold the same weights before (build them from the same seed).
    """
    if mode != "fsdp":
        return
    mesh = init_device_mesh(policy.device.type, (distributed.current().world_size,))
    for block in blocks(policy.llm):
        fully_shard(block, mesh=mesh)
    fully_shard(policy, mesh=mesh)
    register_fsdp_forward_method(policy, "values")
    # the value head's (B,) output is a view; PolicyOutput's tensors are never modified in place
    warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module \(FSDPLLMPolicy\) returned a view tensor")


def is_sharded(module: nn.Module | None) -> bool:
    return isinstance(module, FSDPModule)


def full_tensor(tensor: Tensor) -> Tensor:
    """The whole value of a DTensor (e.g. the gradient norm over the shards; a collective), else `tensor`."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def replicate(model: nn.Module) -> None:
    """Start every rank from rank 0's weights: DD-PPO's replicas get rank 0's copy; a sharded model's shards
    were cut from the same seeded (or restored) weights already."""
    if not is_sharded(model):
        distributed.broadcast_parameters(model)


def average_and_clip_gradients(model: nn.Module, params: list[nn.Parameter], max_norm: float) -> float:
    """Average the gradients of `params` over the ranks, clip them to `max_norm` together, and return their
    norm before clipping. DD-PPO averages here; FSDP reduce-scattered (averaged) the shards' gradients in the
    backward already, and their norm is taken over all shards."""
    if not is_sharded(model):
        distributed.average_gradients(params)
    return float(full_tensor(torch.nn.utils.clip_grad_norm_(params, max_norm)))


@contextmanager
def gathered(module: nn.Module | None) -> Iterator[None]:
    """Run the block on whole weights: a sharded module's units are all-gathered on entry (every rank must
    enter) and freed on exit; forwards inside need no collective. No-op for a module that is not sharded."""
    if not is_sharded(module):
        yield
        return
    units = [m for m in module.modules() if isinstance(m, FSDPModule)]
    module.set_reshard_after_forward(False)
    for unit in units:
        unit.unshard()
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
            unit.set_reshard_after_forward(unit is not module, recurse=False)  # FSDP2's default: the root keeps


def full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
    """`model.trainable_state_dict()` and `optimizer.state_dict()`, whole and on the CPU for a sharded model.

    Sharded: a collective (every rank calls it); rank 0 gets the states, the other ranks empty dicts.
    """
    if not is_sharded(model):
        return model.trainable_state_dict(), optimizer.state_dict()
    model_state, optim_state = get_state_dict(model, optimizer, options=_FULL)
    if not distributed.current().is_main:
        return {}, {}
    names = _trainable_names(model)
    index = {name: i for i, name in enumerate(names)}
    optim_state = {  # parameter names -> the optimizer's own numbering (its parameters are `names`, in order)
        "state": {index[name]: value for name, value in optim_state["state"].items()},
        "param_groups": [{**group, "params": [index[name] for name in group["params"]]}
                         for group in optim_state["param_groups"]],
    }
    return {name: model_state[name] for name in names}, optim_state


def load_state(model: nn.Module, optimizer: torch.optim.Optimizer, model_state: dict[str, Any],
               optim_state: dict[str, Any]) -> None:
    """Load a checkpoint's trainable weights and optimizer state (as `full_state` returns them) into
    `model` and `optimizer`, sharded or not. Sharded: every rank calls it with the whole states."""
    if not is_sharded(model):
        model.load_trainable_state_dict(model_state)
        optimizer.load_state_dict(optim_state)
        return
    model.check_trainable_state_dict(model_state)
    names = _trainable_names(model)
    optim_state = {
        "state": {names[i]: value for i, value in optim_state["state"].items()},
        "param_groups": [{**group, "params": [names[i] for i in group["params"]]}
                         for group in optim_state["param_groups"]],
    }
    # strict=False: a tied LM head is in the model's state dict twice, once in `model_state`
    set_state_dict(model, optimizer, model_state_dict=dict(model_state), optim_state_dict=optim_state,
                   options=StateDictOptions(full_state_dict=True, strict=False))


def _trainable_names(model: nn.Module) -> list[str]:
    """Names of the trainable parameters in `model.parameters()` order, the optimizer's order in training."""
    return [name for name, p in model.named_parameters() if p.requires_grad]
