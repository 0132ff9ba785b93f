"""Instruments for tests and benchmarks of the scorer: the slow reference it is checked against, and
a recorder of the SDPA kernel that every attention call runs.

    naive = reference_log_likelihoods(scorer, prompts, actions)   # (B, A), one full sequence per pair
    with attention_kernels() as kernels:
        policy(prompts, actions)                                   # kernels: ["MATH", ...]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend
from torch.overrides import TorchFunctionMode

from glamrl.llm.scorer import ActionScorer


_CPU_FLASH = (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu,
              torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default)
"""The CPU flash kernel's forward, as `glamrl.llm.attention` calls it."""


class _KernelRecorder(TorchFunctionMode):
    """Notes the SDPA kernel torch's dispatcher picks for every scaled_dot_product_attention call, and the CPU flash
    kernel where `glamrl.llm.attention` calls it directly (its fp32 backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            self.kernels.append(_sdpa_choice(*args, **kwargs))
        elif func in _CPU_FLASH:
            self.kernels.append(SDPBackend.FLASH_ATTENTION.name)
        return func(*args, **kwargs)


def _sdpa_choice(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                 is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> str:
    """The SDPBackend name torch picks for these arguments, after autocast and the bool-mask conversion
    that the real call applies before choosing."""
    device = query.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else query.dtype
    query, key, value = (t.to(dtype) for t in (query, key, value))
    if attn_mask is not None:
        attn_mask = attn_mask.to(dtype) if attn_mask.dtype != torch.bool else \
            torch.zeros_like(attn_mask, dtype=dtype).masked_fill(~attn_mask, float("-inf"))
    choice = torch._fused_sdp_choice(query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
                                     enable_gqa=enable_gqa)
    return SDPBackend(choice).name


@contextmanager
def attention_kernels() -> Iterator[list[str]]:
    """Record, in call order, the SDPA kernel (FLASH_ATTENTION, EFFICIENT_ATTENTION, MATH, ...) that runs for
    every attention call inside this block; nothing is recorded for a model whose attention is not SDPA.

        with attention_kernels() as kernels:
            policy(prompts)
    """
    recorder = _KernelRecorder()
    with recorder:
        yield recorder.kernels


def reference_log_likelihoods(scorer: ActionScorer, prompts: Sequence[str], actions: Sequence[str]) -> Tensor:
    """The slow reference (tests, benchmark): every prompt+action sequence in full, vocabulary logits everywhere.

    Uses the same token ids as `ActionScorer` but plain right padding, 2D masks and default positions, and the
    scorer's options: log-softmax or raw logits (`score`), sum or mean (`normalize_by_length`).
    """
    model, device = scorer.model, scorer.device
    prompt_ids = [scorer.tokenizer(scorer.prompt_text(p)).input_ids for p in prompts]
    action_ids = [scorer.action_token_ids(a) for a in actions]
    pairs = [(p, a) for p in prompt_ids for a in action_ids]                     # B*A candidates
    if scorer.is_seq2seq:
        start = model.config.decoder_start_token_id
        enc = _pad([p for p, _ in pairs], scorer.tokenizer.pad_token_id, device)
        dec = _pad([[start, *a[:-1]] for _, a in pairs], scorer.tokenizer.pad_token_id, device)
        logits = model(input_ids=enc[0], attention_mask=enc[1], decoder_input_ids=dec[0],
                       decoder_attention_mask=dec[1]).logits                      # (B*A, L, V)
        first = [0] * len(pairs)
    else:
        seq = _pad([p + a for p, a in pairs], scorer.tokenizer.pad_token_id, device)
        logits = model(input_ids=seq[0], attention_mask=seq[1]).logits            # (B*A, S, V)
        first = [len(p) - 1 for p, _ in pairs]
    log_probs = F.log_softmax(logits.float(), -1) if scorer.score == "log_softmax" else logits.float()
    L = max(len(a) for a in action_ids)
    where = torch.tensor(first, device=device)[:, None] + torch.arange(L, device=device)  # (B*A, L)
    targets = _pad([a for _, a in pairs], 0, device)
    where = where.clamp(max=log_probs.shape[1] - 1)
    token_ll = log_probs[torch.arange(len(pairs), device=device)[:, None], where, targets[0]] * targets[1]
    ll = token_ll.sum(-1)                                                         # (B*A,)
    if scorer.normalize_by_length:
        ll = ll / targets[1].sum(-1)
    return ll.view(len(prompts), len(actions))                                    # (B, A)


def _pad(seqs: list[list[int]], pad_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """Right-pad token lists: (N, L) ids and (N, L) 0/1 mask."""
    L = max(len(s) for s in seqs)
    ids = torch.tensor([s + [pad_id] * (L - len(s)) for s in seqs], device=device)
    mask = torch.tensor([[1] * len(s) + [0] * (L - len(s)) for s in seqs], device=device)
    return ids, mask
