"""The process's memory: its resident set as the log reports it, and glibc's heap kept for reuse.

    rss_gb(), peak_rss_gb()        # now, and the most since the process started (VmRSS, VmHWM)
    why = reuse_freed_memory()     # run.reuse_memory: large freed blocks stay in the heap for the next minibatch
    caps = bound_kernel_caches(64) # run.kernel_cache: at most 64 bf16 matmul kernels per cache

A PPO minibatch allocates and frees blocks of tens to hundreds of MB: the tied embedding's gradients
(49152 x 576 floats for SmolLM2), the MLP's intermediates, the bf16 copies of the weights under autocast.
glibc maps every block above its mmap threshold (at most 32 MiB by default) afresh and unmaps it on free, so
every minibatch page-faults its large blocks in again and the kernel zeroes each page: about a fifth of a
bf16 minibatch's wall time in GLAM's configuration (docs/results.md, "glibc's page faults"). With
`reuse_freed_memory` blocks up to `MMAP_THRESHOLD` come from the heap, and freed memory stays there up to
`TRIM_THRESHOLD` for the next allocation to reuse.

bf16 matmuls on a CPU with AVX-512 BF16 or AMX run through oneDNN, which builds a kernel (a "primitive") for
each input shape and keeps it in two caches: oneDNN's own and PyTorch's ideep cache, both of 1,024 entries
unless `KERNEL_CACHE_VARIABLES` say otherwise, and a kernel stays while either cache holds it. A minibatch's
row count changes with its prompts' lengths, so every update brings new shapes. Each new shape's kernels
kept 0.7-2 MB each on a Zen 4 (docs/results.md, "Why bf16 memory grows"), so uncapped caches grew a bf16
run's memory by hundreds of MB. `bound_kernel_caches` caps both; the cap must hold one minibatch's kernels
(a dozen or so per row count), or every layer of a pass builds its kernels again. Both libraries read the
variables when their cache is first used, so the cap applies only where this process has run no bf16
matmul yet.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import sys
from pathlib import Path

MMAP_THRESHOLD = 512 * 2**20
"""Blocks smaller than this come from glibc's heap, not from a mapping of their own."""
TRIM_THRESHOLD = 2 * 2**30
"""Free memory at the heap's top that glibc keeps instead of returning it to the system."""
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
KERNEL_CACHE_VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
"""The environment variables that set the capacity of oneDNN's primitive cache and of PyTorch's ideep cache."""


def reuse_freed_memory() -> str:
    """Set glibc's mmap and trim thresholds to `MMAP_THRESHOLD` and `TRIM_THRESHOLD` for this process; what was
    done, in words (where the C library is not glibc, nothing)."""
    libc = _glibc()
    if libc is None:
        return "not glibc: the C library's allocator as it is"
    ok = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    if not ok:
        return "glibc refused mallopt: its allocator as it is"
    return (f"glibc mallopt: blocks under {MMAP_THRESHOLD >> 20} MiB from the heap, up to {TRIM_THRESHOLD >> 30} GiB "
            f"of freed memory kept for reuse")


def bound_kernel_caches(entries: int) -> dict[str, str]:
    """Cap oneDNN's and ideep's caches of matmul kernels at `entries` each, unless the environment already sets
    their variable; the caps in force, by variable (`KERNEL_CACHE_VARIABLES`). Only a process that has run no
    bf16 matmul yet takes them (the libraries read them once)."""
    return {name: os.environ.setdefault(name, str(entries)) for name in KERNEL_CACHE_VARIABLES}


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # only glibc has it (musl does not)
    except (OSError, AttributeError):
        return None
    return libc


def rss_gb() -> float:
    """The process's resident set now, in GB (1e9 bytes); nan where /proc/self/status is missing."""
    return _status_gb("VmRSS")


def peak_rss_gb() -> float:
    """The most the process's resident set has been since it started, in GB (VmHWM; getrusage off Linux)."""
    peak = _status_gb("VmHWM")
    if peak == peak:  # not nan
        return peak
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB elsewhere
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 1e9


def _status_gb(key: str) -> float:
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return float("nan")
    for line in lines:
        name, _, value = line.partition(":")
        if name == key:
            return int(value.split()[0]) * 1024 / 1e9  # kB
    return float("nan")
