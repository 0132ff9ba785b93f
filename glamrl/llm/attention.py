"""Attention for the trunk's Llama-like blocks: SDPA, with its backward in fp32 where bf16's is the slow one.

On an x86 CPU with AMX, the backward of SDPA's CPU flash kernel in bf16 costs a roughly fixed time per (prompt, head)
on top of its arithmetic below 192 tokens, so there the same kernel's backward in fp32, on fp32 copies of the bf16
forward's inputs and output, takes about half as long on short prompts; at 192 tokens bf16's time drops by a step,
and from there on it is the faster (docs/results.md, "The attention's backward", measured on a 2-core Xeon with
`python -m benchmarks.attention_backward`). So `attention` runs SDPA's bf16 forward and, for keys up to
`FP32_BACKWARD_MAX_KEYS` on such a CPU, that fp32 backward. Elsewhere (a GPU, a CPU without AMX, where it was not
measured, no bf16 autocast, no gradient, longer prompts) it is `F.scaled_dot_product_attention` itself.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor
from torch.nn import functional as F

from glamrl.llm.precision import cpu_flags

FP32_BACKWARD_MAX_KEYS = 191
"""The most keys at which the attention runs its backward in fp32 on an AMX CPU (benchmarks/attention_backward.py)."""


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float, dropout_p: float = 0.0,
              fp32_backward: bool | None = None) -> Tensor:
    """SDPA of queries `q` (B, Hq, R, D) over keys and values `k`, `v` (B, Hkv, S, D) (Hq a multiple of Hkv), under
    `mask` (B, 1, R, S), bool (True: may attend) or additive -> (B, Hq, R, D). `fp32_backward`: None decides by
    `fp32_backward_pays`."""
    if fp32_backward is None:
        fp32_backward = fp32_backward_pays(q, k, v, dropout_p, _has_amx())
    if not fp32_backward:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, dropout_p=dropout_p,
                                              enable_gqa=q.shape[1] != k.shape[1])
    dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else q.dtype
    repeat = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(repeat, 1) for t in (k, v))                   # (B, Hq, S, D): key head h // repeat
    if mask.dtype == torch.bool:  # as SDPA turns a bool mask into an additive one
        mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))
    with torch.autocast("cpu", enabled=False):
        return _Fp32Backward.apply(q.to(dtype), k.to(dtype), v.to(dtype), mask.to(dtype), scale)


def fp32_backward_pays(q: Tensor, k: Tensor, v: Tensor, dropout_p: float, amx: bool) -> bool:
    """Whether `attention` runs its backward in fp32: on a CPU with AMX (`amx`), under bf16 autocast, with a
    gradient to compute, no dropout and at most `FP32_BACKWARD_MAX_KEYS` keys."""
    return (amx and q.device.type == "cpu" and torch.is_grad_enabled()
            and any(t.requires_grad for t in (q, k, v))
            and torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
            and dropout_p == 0.0 and k.shape[-2] <= FP32_BACKWARD_MAX_KEYS)


@functools.cache
def _has_amx() -> bool:
    return "amx_bf16" in cpu_flags()


class _Fp32Backward(torch.autograd.Function):
    """SDPA's CPU flash kernel: forward in the inputs' dtype, backward on fp32 copies of its inputs and output."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: float) -> Tensor:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, attn_mask=mask,
                                                                               scale=scale)
        ctx.save_for_backward(q, k, v, mask, out, lse)                           # lse (B, H, R) in fp32
        ctx.scale = scale
        return out                                                                # (B, H, R, D)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, Tensor, None, None]:
        q, k, v, mask, out, lse = ctx.saved_tensors
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            grad.float(), q.float(), k.float(), v.float(), out.float(), lse, 0.0, False, attn_mask=mask.float(),
            scale=ctx.scale)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None
