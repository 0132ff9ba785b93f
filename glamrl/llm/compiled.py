"""`model.compile`: each transformer block runs through torch.compile (inductor), collection and update alike.

    compiling, why = choose_compile(config, model, device)   # what `model.compile` gives on this machine
    blocks = compile_blocks(model) if compiling else None    # blocks.report(...): their compile time, in words

Regional compilation: every block of the decoder (and the encoder) is compiled on its own, with dynamic
shapes, instead of the whole model. The blocks of a model share their code, so inductor compiles one block
once per kind of pass (inference; forward and backward for the update; its recomputation under
`model.gradient_checkpointing`) and reuses the result for every other block: with SmolLM2 on a CPU a first
update takes 10-16 s longer than eager, where compiling the whole model took minutes; later ones run the
fused kernels. Prompt lengths change from batch to batch, so shapes are dynamic from the start. What the
blocks compute is unchanged: tests check log-probabilities, values and gradients against eager mode.

The frozen trunk under `model.train_layers` calls the same block modules, so its passes are compiled too,
except the frozen blocks' passes on new prompts where the prefix store is on (`model.prefix_cache_mb`: they run
the blocks' parts on the tokens after a kept prefix, eager); the embeddings, the final norm and the LM head at
the action tokens stay eager (a small share of the FLOPs).

`auto` compiles models of at least `AUTO_MIN_PARAMETERS` where inductor works here: its toolchain is found
(a C++ compiler for the CPU backend, Triton for CUDA) and a one-block trial compiles and runs (once per
process and device). Then it times one of the model's own blocks, compiled and eager, on the inputs the model
gives it for a batch of `TRIAL_SHAPE` tokens (a pass without gradients, then a forward and backward pass that
recomputes where the update checkpoints, in the run's compute dtype), and runs eagerly where the compiled block
is more than `TRIAL_MARGIN` slower: on an Ice Lake Xeon in fp32 compiled blocks made full fine-tuning 1.58x
slower, where elsewhere they gained 1.15-1.50x (docs/results.md). The trial costs seconds once per process
(its compiled passes stay in inductor's cache for the model's blocks). With `model.train_layers` on a CPU it
compiles only prompts of several observations: with one, the prefix store (off where blocks compile) gained
more than compiling; with GLAM's 3, compiled blocks ran 1.21x faster than the store on GoToLocal
(docs/results.md, "Before against after, in one run").
Compiling costs seconds to minutes per kind of pass whatever the model's size, while what it saves grows with
the model's FLOPs: the tiny test models would spend more compiling than they save.
"""

from __future__ import annotations

import copy
import functools
import time
from dataclasses import dataclass

import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer

from glamrl.config import ModelConfig
from glamrl.errors import GlamrlError

RECOMPILE_LIMIT = 64
TOOLCHAINS = {"cpu": "install g++ or name a C++ compiler in $CXX", "cuda": "install triton"}
"""What inductor's backend for each device type needs, as a fix."""
AUTO_MIN_PARAMETERS = 50_000_000
"""model.compile=auto compiles models of at least this many parameters (SmolLM2-135M has 134.5M)."""
TRIAL_SHAPE = (4, 160)
"""(prompts, tokens) of the batch whose block inputs `auto` times: GLAM's minibatch of 4, prompts of 3
observations."""
TRIAL_REPEATS = 5
"""Timed passes per mode after the first (which compiles); the fastest of them counts."""
TRIAL_MARGIN = 1.1
"""auto runs eagerly only where the compiled block is slower by more than this factor: near-equal timings (a
Zen 4 in bf16 timed 108.8 ms compiled against 108.9 eager) do not tell which way a run goes (there, one 8-update
benchmark gained 1.16x compiled, another run's second update 1.40x eager; docs/results.md)."""


class CompileError(GlamrlError, RuntimeError):
    """model.compile=true where inductor cannot compile."""


@dataclass(frozen=True)
class CompiledBlocks:
    """What `compile_blocks` compiled, and the process's compile clock at that moment."""

    count: int              # transformer blocks compiled
    clock_start: float      # compile_seconds() when they were compiled: their compilation is counted from there

    def report(self, until: str) -> str:
        """One line: the seconds spent compiling these blocks' passes from their compilation to `until`."""
        return (f"model.compile: {compile_seconds() - self.clock_start:.1f} s compiling the {self.count} blocks' "
                f"passes, up to the end of {until} (later passes of the same kinds reuse them)")


def compile_blocks(model: nn.Module) -> CompiledBlocks:
    """Compile every transformer block of `model` in place (torch.compile, dynamic shapes; lazily, at their
    first passes)."""
    blocks = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    # one block code, several variants: inference and training passes, attention masks given or not, and in a
    # seq2seq model encoder blocks, decoder blocks (cross-attention) and the first of each (relative position
    # bias). Beyond dynamo's default of 8 variants per code, the rest would silently run eagerly.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    for block in blocks:
        block.compile(dynamic=True)
    return CompiledBlocks(len(blocks), compile_seconds())


def compile_seconds() -> float:
    """Seconds this process has spent in torch.compile so far (dynamo and inductor, forward and backward)."""
    return torch._dynamo.utils.calculate_time_spent()["total_wall_time"]


def choose_compile(config: ModelConfig, model: nn.Module, device: torch.device, observations: int = 1,
                   dtype: torch.dtype = torch.float32) -> tuple[bool, str]:
    """Whether the blocks of `model` on `device` compile for `config` (`model.compile`), and why, in words.
    `observations`: the observations per prompt (prompt.nbr_obs), which decide `auto` for the frozen trunk on a CPU;
    `dtype`: the compute dtype (model.compute_dtype) that `auto` times the blocks in.

    Raises CompileError for model.compile=true where inductor cannot compile."""
    if config.compile is False:
        return False, "model.compile=false"
    if config.compile is True:
        problem = inductor_problem(device)
        if problem is not None:
            raise CompileError(f"model.compile=true, but {problem}: {TOOLCHAINS[device.type]}, "
                               f"or set model.compile=auto or false to run eagerly")
        return True, "model.compile=true"
    size = sum(p.numel() for p in model.parameters())
    if size < AUTO_MIN_PARAMETERS:
        return False, (f"auto: {size / 1e6:.1f}M parameters, under {AUTO_MIN_PARAMETERS / 1e6:.0f}M: compiling "
                       f"would cost more than it saves")
    if device.type == "cpu" and config.train_layers and observations < 2:
        return False, (f"auto: model.train_layers={config.train_layers} on a CPU with one observation per prompt, "
                       f"where the prefix store gains more than compiled blocks (docs/results.md)")
    problem = inductor_problem(device)
    if problem is not None:
        return False, f"auto: {problem}, so the blocks run eagerly"
    compiled_s, eager_s = time_block(model, device, dtype)
    timing = (f"one block's passes {compiled_s * 1e3:.1f} ms compiled against {eager_s * 1e3:.1f} ms eager "
              f"on this {device.type.upper()}")
    if compiled_s > TRIAL_MARGIN * eager_s:
        return False, f"auto: {size / 1e6:.1f}M parameters, but {timing}, so the blocks run eagerly"
    return True, f"auto: {size / 1e6:.1f}M parameters, and {timing}"


_TIMED: dict[tuple, tuple[float, float]] = {}
"""time_block's results in this process, by kind of block (class, size, checkpointed or not), device and dtype."""


def time_block(model: nn.Module, device: torch.device, dtype: torch.dtype) -> tuple[float, float]:
    """Seconds that one block of `model` takes compiled and eager (the fastest of `TRIAL_REPEATS` each): a pass
    without gradients, then a forward and backward pass (recomputing where the block checkpoints), on the inputs
    the model gives its second block for a batch of `TRIAL_SHAPE` tokens, under autocast to `dtype`. Once per
    kind of block, device and dtype in a process; the model's own blocks are left as they were."""
    blocks = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
    block = blocks[min(1, len(blocks) - 1)]  # a T5 stack's first block alone computes the position bias
    key = (type(block).__qualname__, sum(p.numel() for p in block.parameters()), block.gradient_checkpointing,
           str(device), dtype)
    if key not in _TIMED:
        _TIMED[key] = _time_block(model, block, device, dtype)
    return _TIMED[key]


def _time_block(model: nn.Module, block: nn.Module, device: torch.device,
                dtype: torch.dtype) -> tuple[float, float]:
    captured = {}

    def capture(module: nn.Module, args: tuple, kwargs: dict) -> None:
        captured.update(args=args, kwargs=kwargs)
        raise _Captured

    batch, length = TRIAL_SHAPE
    ids = torch.randint(model.config.vocab_size, (batch, length), device=device)
    extra = {"decoder_input_ids": ids[:, :8]} if model.config.is_encoder_decoder else {}
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)
    hook = block.register_forward_pre_hook(capture, with_kwargs=True)
    try:
        with torch.no_grad(), autocast:
            model(input_ids=ids, attention_mask=torch.ones_like(ids), **extra)
    except _Captured:
        pass
    finally:
        hook.remove()
    # copies of one block (its weights, and its recomputation where model.gradient_checkpointing set it), compiled
    # as compile_blocks compiles the model's own, which stay untouched
    eager, compiled = (copy.deepcopy(block).requires_grad_(True) for _ in range(2))
    compiled.compile(dynamic=True)
    # the hidden states (the first argument, or a keyword) take a gradient, as every block's above the first does
    args, kwargs = list(captured["args"]), dict(captured["kwargs"])
    if args:
        args[0] = args[0].detach().requires_grad_(True)
    else:
        kwargs["hidden_states"] = kwargs["hidden_states"].detach().requires_grad_(True)

    def passes(run: nn.Module) -> float:
        _synchronize(device)
        start = time.perf_counter()
        with autocast:
            with torch.no_grad():
                run(*args, **kwargs)
            out = run(*args, **kwargs)
            (out[0] if isinstance(out, tuple) else out).float().sum().backward()
        _synchronize(device)
        return time.perf_counter() - start

    passes(compiled)  # compiles its passes (inductor's cache keeps them for the model's blocks)
    passes(eager)
    times = {"compiled": [], "eager": []}
    for _ in range(TRIAL_REPEATS):  # interleaved, so that a slower moment of the machine falls on both
        times["compiled"].append(passes(compiled))
        times["eager"].append(passes(eager))
    return min(times["compiled"]), min(times["eager"])


class _Captured(Exception):
    """Stops the trial's model pass once the timed block's inputs are captured."""


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def inductor_problem(device: torch.device) -> str | None:
    """Why inductor cannot compile for `device` on this machine, in words; None where it can."""
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton():
            return "no Triton found for inductor's CUDA backend"
    elif find_cxx() is None:
        return "no C++ compiler found for inductor"
    return _trial_compile(str(device))


def find_cxx() -> str | None:
    """The C++ compiler inductor's CPU backend calls (its own search: $CXX, then g++); None where there is none."""
    from torch._inductor import cpp_builder, exc

    try:
        return cpp_builder.get_cpp_compiler()
    except exc.InvalidCxxCompiler:
        return None


@functools.cache
def _trial_compile(device: str) -> str | None:
    """Why a one-block trial compile on `device` fails, in one line; None when it compiles and runs. Once per
    process and device: what inductor compiles stays in its on-disk cache, so a later process pays little."""
    block = nn.Sequential(nn.Linear(8, 8), nn.SiLU()).to(device)
    try:
        with torch.no_grad():
            torch.compile(block, dynamic=True, fullgraph=True)(torch.ones(2, 8, device=device))
    except Exception as err:  # whatever inductor's toolchain raises (compiler, headers, Triton), it fails here
        detail = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        return f"a one-block trial compile failed ({detail[:200]})"
    return None
