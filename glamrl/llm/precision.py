"""The compute dtype: bfloat16 where the hardware has fast bf16 kernels, float32 elsewhere.

    dtype, why = choose_compute_dtype(config, device)   # what `model.compute_dtype` gives on this machine

`auto_compute_dtype` is the rule, a pure function of the facts in `Hardware`; `hardware_facts`
reads them from the machine at run time. The rule: CUDA with native bf16 (Ampere and later);
an x86 CPU with AVX-512 BF16 or AMX whose torch build has oneDNN's bf16 kernels. Anywhere else
bf16 is emulated: on an AVX2-only CPU a bf16 matmul runs tens of times slower than float32.
"""

from __future__ import annotations

import warnings
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import torch

from glamrl.config import ModelConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
FAST_BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
"""/proc/cpuinfo flags of x86 CPUs whose bf16 matmuls beat float32 (AMX, AVX-512 BF16); either one suffices."""


@dataclass(frozen=True)
class Hardware:
    """The facts `auto_compute_dtype` decides from."""

    device_type: str                # cpu or cuda
    cuda_bf16: bool = False         # the CUDA device computes bf16 natively, not by emulation
    cpu_flags: Collection[str] = ()  # the CPU's feature flags as /proc/cpuinfo spells them (empty: unknown)
    mkldnn_bf16: bool = False       # this torch build has oneDNN bf16 kernels for this CPU


def auto_compute_dtype(hw: Hardware) -> tuple[torch.dtype, str]:
    """bfloat16 where `hw` has fast bf16 kernels, else float32; and why, in words."""
    if hw.device_type == "cuda":
        return (torch.bfloat16, "CUDA device with native bf16") if hw.cuda_bf16 else \
            (torch.float32, "CUDA device without native bf16 (before Ampere)")
    fast = sorted(set(FAST_BF16_CPU_FLAGS) & set(hw.cpu_flags))
    if fast and hw.mkldnn_bf16:
        return torch.bfloat16, f"CPU with {' and '.join(fast)}"
    if fast:
        return torch.float32, f"CPU with {' and '.join(fast)}, but this torch build has no oneDNN bf16 kernels"
    return torch.float32, f"CPU without {' or '.join(FAST_BF16_CPU_FLAGS)}"


def hardware_facts(device: torch.device) -> Hardware:
    """The facts of this machine for `device`."""
    if device.type == "cuda":
        return Hardware("cuda", cuda_bf16=torch.cuda.is_bf16_supported(including_emulation=False))
    return Hardware("cpu", cpu_flags=cpu_flags(), mkldnn_bf16=torch.ops.mkldnn._is_mkldnn_bf16_supported())


def cpu_fields(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first CPU's fields in /proc/cpuinfo ("model name", "cpu family", "flags", ...; empty where there is
    none: not Linux)."""
    try:
        lines = cpuinfo.read_text().splitlines()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in lines:
        if not line.strip():
            if fields:  # the first CPU's block ends
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first CPU's `flags` line of /proc/cpuinfo (empty where there is none: not Linux, not x86)."""
    return frozenset(cpu_fields(cpuinfo).get("flags", "").split())


def choose_compute_dtype(config: ModelConfig, device: torch.device) -> tuple[torch.dtype, str]:
    """The dtype the language model computes in for `config` on `device`, and why, in words.

    bf16 asked for (or implied by bf16 weights) where the hardware has no fast bf16 kernels is honoured, with
    a warning."""
    auto, why = auto_compute_dtype(hardware_facts(device))
    if config.dtype == "bfloat16":
        dtype, reason = torch.bfloat16, "model.dtype=bfloat16 (bf16 weights compute in bf16)"
    elif config.compute_dtype == "auto":
        return auto, f"auto: {why}"
    else:
        dtype, reason = DTYPES[config.compute_dtype], f"model.compute_dtype={config.compute_dtype}"
    if dtype == torch.bfloat16 and auto != torch.bfloat16:
        warnings.warn(f"{reason} on a {why}: bf16 is emulated here and runs tens to hundreds of times slower "
                      f"than float32; use model.compute_dtype=auto model.dtype=float32", stacklevel=2)
    return dtype, reason
