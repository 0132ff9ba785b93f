"""Host <-> device copies that do not stall the GPU: pinned, non-blocking, one synchronisation per batch.

On CPU both helpers return their tensors unchanged.
"""

from __future__ import annotations

import torch
from torch import Tensor


def to_device(tensor: Tensor, device: torch.device) -> Tensor:
    """`tensor` (on the host) on `device`: through pinned memory and without waiting when `device` is CUDA.

    The copy is queued on the current stream, so kernels queued after it see the data; the
    pinned block is not reused before the copy ends (torch's caching host allocator tracks it).
    """
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def to_host(*tensors: Tensor) -> list[Tensor]:
    """`tensors` on the CPU, copied together: every copy is queued, then one wait for the stream."""
    out = [t.to("cpu", non_blocking=True) for t in tensors]  # pinned destinations for CUDA sources
    for device in {t.device for t in tensors if t.device.type == "cuda"}:
        torch.cuda.current_stream(device).synchronize()
    return out
