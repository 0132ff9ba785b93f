"""Frozen-trunk training: only the top K blocks train, the frozen lower blocks run once per frame.

With `model.train_layers=K` the embeddings and the lower blocks of a causal LM (the encoder
of a seq2seq LM) are frozen. Their output for a prompt (and, causal, the packed action
tokens after it) does not change during training, so it is computed once, when the frame
is collected, kept in `FrozenTrunk`'s cache, and every PPO epoch runs only the top blocks
on it. The cache is keyed by the prompt text (and the candidate actions), so a miss (a
resumed run, an evaluation) just recomputes the entry: nothing is ever stale. Entries are
kept across rollouts, least recently used first out, within a byte budget: small levels
repeat their prompts (16 envs on BabyAI-GoToObjS4-v0 with one observation per prompt show
139 distinct prompts in 8,192 random-action frames), so most frames then skip the trunk.

Collection and update both read the lower blocks' output back from the cache dtype, so
they see the same numbers and PPO's ratio is 1 before the first optimiser step.

Causal models' top block runs at the positions the scorer reads only (`top_block_tail`), where the
block is Llama's (`top_block_tail_matches`, checked once per trunk); any other runs whole. The trained blocks
below it then run as `llama_block`, the same arithmetic with an attention whose backward runs in fp32 where that
is faster (`glamrl.llm.attention`), unless `model.compile` or gradient checkpointing wraps their modules.

A new prompt often begins as an earlier one did (the action list and the mission; the first observations of an
episode, while its window of `nbr_obs` observations fills). In a causal model those leading tokens' keys, values
and hidden states are the earlier prompt's, so with `prefix_budget_bytes` (`model.prefix_cache_mb`) the trunk
keeps the frozen blocks' keys and values of the prompts it runs (`PrefixStore`) and runs those blocks on a new
prompt's tokens after the longest prefix it shares with a kept one only (`FrozenTrunk._lower_after_prefixes`).

Causal models must be Llama-like (`model.layers`, `model.norm`, `model.rotary_emb`:
Llama, Mistral, Qwen2/3, SmolLM); seq2seq models T5-like (`encoder`, `decoder.block`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from transformers import PreTrainedModel

from glamrl.errors import GlamrlError
from glamrl.llm.attention import attention


class TrunkError(GlamrlError, ValueError):
    """`model.train_layers` cannot be applied to this model."""


def decoder_blocks(model: PreTrainedModel, is_seq2seq: bool) -> nn.ModuleList:
    """The blocks whose top K train: the causal LM's layers, or the seq2seq decoder's blocks."""
    blocks = model.get_decoder().block if is_seq2seq else getattr(model.base_model, "layers", None)
    if not isinstance(blocks, nn.ModuleList) or (not is_seq2seq and not hasattr(model.base_model, "rotary_emb")):
        raise TrunkError(f"model.train_layers supports Llama-like causal LMs and T5-like seq2seq LMs, "
                         f"not model type {model.config.model_type!r}; set model.train_layers=null")
    return blocks


def freeze_trunk(model: PreTrainedModel, is_seq2seq: bool, train_layers: int) -> list[int]:
    """Freeze every weight of `model` except the top `train_layers` blocks, the final norm and an untied
    LM head; returns the indices of the trained blocks."""
    blocks = decoder_blocks(model, is_seq2seq)
    if not 1 <= train_layers <= len(blocks):
        raise TrunkError(f"model.train_layers={train_layers} but the model has {len(blocks)} "
                         f"{'decoder ' if is_seq2seq else ''}blocks; use 1..{len(blocks)} or null")
    trained = list(range(len(blocks) - train_layers, len(blocks)))
    model.requires_grad_(False)
    for i in trained:
        blocks[i].requires_grad_(True)
    final_norm = model.get_decoder().final_layer_norm if is_seq2seq else model.base_model.norm
    final_norm.requires_grad_(True)
    head = model.get_output_embeddings()
    if head.weight is not model.get_input_embeddings().weight:  # a tied head would move the frozen embeddings
        head.requires_grad_(True)
    return trained


class FrozenTrunk:
    """Runs a model whose lower part is frozen, caching that part's output per prompt.

    Causal: the hidden states entering block `split` for every prompt and action token.
    Seq2seq: the encoder's output for every prompt token (`split` is unused: the decoder runs whole).
    """

    def __init__(self, model: PreTrainedModel, is_seq2seq: bool, split: int, cache_dtype: torch.dtype,
                 budget_bytes: int = 0, prefix_budget_bytes: int = 0, module_blocks: bool = False) -> None:
        self.model = model
        self.is_seq2seq = is_seq2seq
        self.split = split
        self.cache_dtype = cache_dtype
        self.budget_bytes = budget_bytes
        self.recording = False
        self._cache: OrderedDict[Hashable, Tensor] = OrderedDict()  # key -> (L, H): one prompt's rows, unpadded
        self.hits = self.misses = 0
        self.tail_exact = not is_seq2seq and top_block_tail_matches(model)
        """The top block runs at the positions read only: `top_block_tail` gave the block's own output here."""
        self.prefixes = PrefixStore(prefix_budget_bytes) if prefix_budget_bytes and self.tail_exact and split else None
        """The frozen blocks' keys and values of the prompts run lately (causal Llama-like models with a frozen
        block; None: off)."""
        self.module_blocks = module_blocks
        """The trained blocks below the top one run as their modules (which `model.compile` compiles and gradient
        checkpointing wraps); otherwise, where `tail_exact`, as `llama_block`."""

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self._cache.values())

    @contextmanager
    def record(self) -> Iterator[None]:
        """Keep the lower blocks' output of every prompt run inside this block (collection)."""
        self.recording = True
        try:
            yield
        finally:
            self.recording = False

    def shrink(self) -> None:
        """Drop the least recently used entries until the cache holds at most `budget_bytes`."""
        size = self.nbytes
        while self._cache and size > self.budget_bytes:
            size -= self._cache.popitem(last=False)[1].nbytes

    # ----------------------------------------------------------------------- causal
    def causal(self, ids: Tensor, mask: Tensor, pos: Tensor, lengths: Tensor, keys: list[Hashable],
               start: int = 0, prompt_width: int | None = None) -> Tensor:
        """Last hidden state (after the final norm) of left-padded rows `ids` (B, S) at positions `start`..S-1,
        (B, S - start, H): the lower blocks' output comes from the cache where present; `lengths` (B,), on the
        host, counts each row's real tokens. The top block runs at those positions only (`top_block_tail`).
        Each row is a prompt in its first `prompt_width` columns (default S), then the packed action tokens: with
        the prefix store, a missing row's frozen blocks run after the longest prefix of its prompt kept there."""
        backbone = self.model.base_model
        layers = backbone.layers

        def lower(rows: list[int]) -> Tensor:
            if self.prefixes is not None:
                return self._lower_after_prefixes(ids[rows], mask[rows], pos[rows], lengths[rows],
                                                  ids.shape[1] if prompt_width is None else prompt_width)
            hidden = backbone.embed_tokens(ids[rows])                             # (b, S, H)
            rope = backbone.rotary_emb(hidden, position_ids=pos[rows])
            for layer in layers[:self.split]:
                hidden = layer(hidden, attention_mask=mask[rows], position_embeddings=rope, position_ids=pos[rows])
            return hidden

        hidden = self._cached(lower, ids.shape[1], lengths, keys, left_padded=True)  # (B, S, H)
        rope = backbone.rotary_emb(hidden, position_ids=pos)
        top = len(layers) - 1 if self.tail_exact else len(layers)
        for layer in layers[self.split:top]:
            if self.tail_exact and not self.module_blocks:
                hidden = llama_block(layer, hidden, mask, rope)                   # (B, S, H)
            else:
                hidden = layer(hidden, attention_mask=mask, position_embeddings=rope, position_ids=pos)
        if self.tail_exact:
            hidden = top_block_tail(layers[-1], hidden, mask, rope, start)       # (B, S - start, H)
        else:
            hidden = hidden[:, start:]
        return backbone.norm(hidden)

    def _lower_after_prefixes(self, ids: Tensor, mask: Tensor, pos: Tensor, lengths: Tensor, width: int) -> Tensor:
        """The hidden states entering block `split`, (b, S, H), of left-padded rows `ids` (b, S) whose prompts fill
        the first `width` columns (`lengths` (b,), on the host, counts each row's real tokens): each row's prompt
        prefix kept in the prefix store is read from it, and the frozen blocks run on the columns after it only.

        The batch runs its last W columns, W the most new tokens of any row; a row with fewer runs some of its kept
        columns too, whose keys and values are then taken from the store (their outputs are dropped). Each kept
        prefix is read once per batch, into every frozen block's keys and values. Every row's prompt is kept, in a
        collection or not (an evaluation's prompts share prefixes too; the store keeps its budget). Keys and values
        stay in the blocks' compute dtype, hidden states in the cache's."""
        backbone, store = self.model.base_model, self.prefixes
        layers = backbone.layers[:self.split]
        attn = layers[0].self_attn
        b, S = ids.shape
        n = (lengths - (S - width)).tolist()                                      # prompt tokens per row
        host = ids[:, :width].cpu().numpy()                                      # one copy from the device
        prompts = [host[r, width - n[r]:] for r in range(b)]                     # (n_r,) each
        found = [store.longest(t, len(t) - 1) for t in prompts]                   # (entry, kept tokens c_r)
        start = S - max(int(lengths[r]) - c for r, (_, c) in enumerate(found))   # the first column run
        columns = torch.arange(start, S, device=ids.device)                      # (W,)
        runs = columns >= torch.tensor([S - int(lengths[r]) + c for r, (_, c) in enumerate(found)],
                                       device=ids.device)[:, None]               # (b, W) a new token's column
        store.reused += sum(c for _, c in found)
        store.computed += sum(n) - sum(c for _, c in found)

        hidden = backbone.embed_tokens(ids[:, start:])                           # (b, W, H)
        cos, sin = backbone.rotary_emb(hidden, position_ids=pos)                 # (b, S, D) each
        cos, sin = cos[:, start:], sin[:, start:]                                # (b, W, D) each
        kv = hidden.new_zeros(len(layers), 2, b, attn.k_proj.out_features // attn.head_dim, S, attn.head_dim)
        out = hidden.new_zeros(b, S, hidden.shape[-1])                           # (b, S, H) zero at padding
        for r, (entry, c) in enumerate(found):                                   # the kept prefixes, read once
            if c:
                kept = slice(width - n[r], width - n[r] + c)
                kv[:, :, r, :, kept] = entry.keys_values[..., :c, :]              # (split, 2, Hkv, c, D)
                out[r, kept] = entry.hidden[:c]
        new = runs[:, None, :, None]                                             # (b, 1, W, 1)
        for i, layer in enumerate(layers):
            x = layer.input_layernorm(hidden)                                    # (b, W, H)
            k, v = kv[i, 0], kv[i, 1]                                             # (b, Hkv, S, D) views
            k_new, v_new = _keys_values(layer.self_attn, x, cos, sin)             # (b, Hkv, W, D) each
            k[..., start:, :] = torch.where(new, k_new, k[..., start:, :])
            v[..., start:, :] = torch.where(new, v_new, v[..., start:, :])
            hidden = _block_at(layer, hidden, x, k, v, mask[:, :, start:], cos, sin)
        out[:, start:] = torch.where(runs[..., None], hidden, out[:, start:])
        for r in range(b):
            rows = slice(width - n[r], width)
            store.add(prompts[r], kv[:, :, r, :, rows], out[r, rows].to(self.cache_dtype))  # (split, 2, Hkv, n, D)
        return out

    # ---------------------------------------------------------------------- seq2seq
    def encoder(self, ids: Tensor, mask: Tensor, lengths: Tensor, keys: list[Hashable]) -> Tensor:
        """The frozen encoder's output (B, P, H) for right-padded prompts `ids`, from the cache where present;
        `lengths` (B,), on the host, counts each prompt's tokens."""
        def run(rows: list[int]) -> Tensor:
            return self.model.get_encoder()(input_ids=ids[rows], attention_mask=mask[rows].long()).last_hidden_state
        return self._cached(run, ids.shape[1], lengths, keys, left_padded=False)

    # ------------------------------------------------------------------------ cache
    def _cached(self, compute: Callable[[list[int]], Tensor], width: int, lengths: Tensor, keys: list[Hashable],
                left_padded: bool) -> Tensor:
        """(B, width, H) frozen output, padding rows zero, every real row read back through the cache dtype.
        `compute(rows)` runs the frozen part on the rows `rows` of the batch, those not in the cache."""
        rows: list[Tensor | None] = [self._cache.get(k) for k in keys]
        for key, row in zip(keys, rows):
            if row is not None:
                self._cache.move_to_end(key)
        missing = [b for b, r in enumerate(rows) if r is None]
        self.hits, self.misses = self.hits + len(rows) - len(missing), self.misses + len(missing)
        if missing:
            with torch.no_grad():
                computed = compute(missing).to(self.cache_dtype)                 # (b, S, H)
            for j, b in enumerate(missing):
                n = int(lengths[b])
                rows[b] = computed[j, width - n:] if left_padded else computed[j, :n]  # (n, H)
                if self.recording:
                    self._cache[keys[b]] = rows[b].clone()
        dtype = self.model.get_input_embeddings().weight.dtype
        out = torch.zeros(len(rows), width, rows[0].shape[-1], dtype=dtype, device=rows[0].device)
        for b, r in enumerate(rows):
            if left_padded:
                out[b, width - r.shape[0]:] = r
            else:
                out[b, :r.shape[0]] = r
        return out


# ------------------------------------------------------------------------- the prefix store
@dataclass
class _Prefix:
    """A prompt's frozen-block activations, valid for any prompt that begins with its first c tokens."""

    tokens: np.ndarray   # (n,) its token ids
    keys_values: Tensor  # (split, 2, Hkv, n, D) each frozen block's keys (rotated) and values at its tokens
    hidden: Tensor       # (n, H) the hidden state entering block `split` at its tokens, in the cache dtype

    @property
    def nbytes(self) -> int:
        return self.keys_values.nbytes + self.hidden.nbytes


class PrefixStore:
    """Prompts' frozen-block keys and values, within a byte budget, least recently used first out.

    `longest` finds the kept prompt that shares the longest token prefix with a new one (a linear scan: the store
    holds tens to hundreds of prompts); `reused` and `computed` count the new prompts' tokens read from it and run.
    """

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[bytes, _Prefix] = OrderedDict()   # tokens' bytes -> entry
        self.nbytes = 0
        self.reused = self.computed = 0

    def __len__(self) -> int:
        return len(self._entries)

    def longest(self, tokens: np.ndarray, limit: int) -> tuple[_Prefix | None, int]:
        """The kept prompt sharing the longest prefix with `tokens` (n,), and that prefix's length, at most
        `limit`; (None, 0) where none shares a token."""
        best, length = None, 0
        for entry in self._entries.values():
            m = min(len(entry.tokens), len(tokens), limit)
            differ = np.flatnonzero(entry.tokens[:m] != tokens[:m])
            shared = int(differ[0]) if len(differ) else m
            if shared > length:
                best, length = entry, shared
        if best is not None:
            self._entries.move_to_end(best.tokens.tobytes())
        return best, length

    def add(self, tokens: np.ndarray, keys_values: Tensor, hidden: Tensor) -> None:
        """Keep a prompt's activations (`_Prefix`' fields), then drop the least recently used beyond the budget."""
        key = tokens.tobytes()
        if key in self._entries:
            self._entries.move_to_end(key)
            return
        entry = _Prefix(tokens.copy(), keys_values.clone(), hidden.clone())
        self._entries[key] = entry
        self.nbytes += entry.nbytes
        while self._entries and self.nbytes > self.budget_bytes:
            self.nbytes -= self._entries.popitem(last=False)[1].nbytes


# ------------------------------------------------------------------------- the top block's tail
def top_block_tail(layer: nn.Module, hidden: Tensor, mask: Tensor, rope: tuple[Tensor, Tensor],
                   start: int) -> Tensor:
    """A Llama-like decoder block's output at positions `start`.. of `hidden` (B, S, H) only, (B, S - start, H).

    The scorer reads the top block's output at the last prompt token and the action tokens, never before
    them; earlier positions enter only through the block's keys and values. So those are computed for every
    position and the queries, attention rows, output projection and MLP for the tail alone, which skips most
    of the top block's work and memory on long prompts. `mask` is the (B, 1, S, S) mask the block would get
    (bool or additive), `rope` the model's (cos, sin), each (B, S, D).

    On a CPU under bf16 autocast with fp32 weights, the tail's rows run in fp32 (the keys and values stay bf16
    until then). Their matmuls are small (B * (S - start) rows) and take new shapes with every batch, and for each
    new shape oneDNN builds a bf16 kernel, which on an AMX CPU costs several times the matmul itself; fp32
    matmuls go to a BLAS that builds none (docs/results.md, "Kernels built for every new shape").
    """
    x = layer.input_layernorm(hidden)                                             # (B, S, H)
    cos, sin = rope
    k, v = _keys_values(layer.self_attn, x, cos, sin)                             # (B, Hkv, S, D) each
    rows = (hidden[:, start:], x[:, start:], k, v, mask[:, :, start:], cos[:, start:], sin[:, start:])
    if not (hidden.device.type == "cpu" and torch.is_autocast_enabled("cpu")
            and layer.self_attn.q_proj.weight.dtype == torch.float32):
        return _block_at(layer, *rows)                                            # (B, S - start, H)
    with torch.autocast("cpu", enabled=False):
        tail = _block_at(layer, *(t if t.dtype == torch.bool else t.float() for t in rows))
    return tail.to(hidden.dtype)                                                  # (B, S - start, H)


def llama_block(layer: nn.Module, hidden: Tensor, mask: Tensor, rope: tuple[Tensor, Tensor]) -> Tensor:
    """A Llama-like decoder block's output at every position of `hidden` (B, S, H), (B, S, H), computed as
    `top_block_tail` computes its rows (`_block_at`, whose attention may run its backward in fp32:
    `glamrl.llm.attention`); `mask` (B, 1, S, S), `rope` (cos, sin) as there."""
    x = layer.input_layernorm(hidden)                                             # (B, S, H)
    cos, sin = rope
    k, v = _keys_values(layer.self_attn, x, cos, sin)                             # (B, Hkv, S, D) each
    return _block_at(layer, hidden, x, k, v, mask, cos, sin)                      # (B, S, H)


def _keys_values(attn: nn.Module, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """A Llama-like attention's keys (rotated) and values, (B, Hkv, L, D) each, for its normed input `x` (B, L, H) at
    the positions of `cos`, `sin` (B, L, D)."""
    B, L, _ = x.shape
    k = attn.k_proj(x).view(B, L, -1, attn.head_dim)                              # (B, L, Hkv, D)
    if hasattr(attn, "k_norm"):  # Qwen3: RMSNorm over each head's key
        k = attn.k_norm(k)
    v = attn.v_proj(x).view(B, L, -1, attn.head_dim).transpose(1, 2)              # (B, Hkv, L, D)
    return _rotate(k.transpose(1, 2), cos, sin), v


def _block_at(layer: nn.Module, hidden: Tensor, x: Tensor, k: Tensor, v: Tensor, mask: Tensor, cos: Tensor,
              sin: Tensor) -> Tensor:
    """A Llama-like block's output at R positions, (B, R, H), from their input `hidden` (B, R, H), its norm `x`, the
    keys and values `k`, `v` (B, Hkv, S, D) of every position they may attend to, their rows of the mask
    (B, 1, R, S) and their rotary (cos, sin), (B, R, D) each."""
    attn = layer.self_attn
    B, R, _ = hidden.shape
    q = attn.q_proj(x).view(B, R, -1, attn.head_dim)                              # (B, R, Hq, D)
    if hasattr(attn, "q_norm"):  # Qwen3: RMSNorm over each head's query
        q = attn.q_norm(q)
    q = _rotate(q.transpose(1, 2), cos, sin)                                      # (B, Hq, R, D)
    out = attention(q, k, v, mask, attn.scaling, attn.attention_dropout if attn.training else 0.0)  # (B, Hq, R, D)
    hidden = hidden + attn.o_proj(out.transpose(1, 2).reshape(B, R, -1))          # (B, R, H)
    return hidden + layer.mlp(layer.post_attention_layernorm(hidden))


def _rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding of `x` (B, heads, L, D) at the positions of `cos`, `sin` (B, L, D)."""
    half = x.shape[-1] // 2
    return x * cos[:, None] + torch.cat([-x[..., half:], x[..., :half]], -1) * sin[:, None]


def top_block_tail_matches(model: PreTrainedModel, length: int = 12, start: int = 7) -> bool:
    """Whether `top_block_tail` gives `model`'s top block's own output, on random states of `length` tokens.

    It is written for Llama's block (also Mistral, Qwen2/3, SmolLM); a block that differs (fused projections,
    partial rotary, other norms) fails this check, and the trunk then runs its top block at every position.
    """
    backbone, layer = model.base_model, model.base_model.layers[-1]
    weight = model.get_input_embeddings().weight
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, length, weight.shape[1], generator=generator).to(weight)       # (2, L, H)
    pos = torch.arange(length, device=weight.device).expand(2, length)                     # (2, L)
    visible = torch.ones(length, length, dtype=torch.bool, device=weight.device).tril()
    mask = torch.zeros(2, 1, length, length, dtype=weight.dtype, device=weight.device).masked_fill(
        ~visible, torch.finfo(weight.dtype).min)                                         # (2, 1, L, L) additive
    with torch.inference_mode():
        rope = backbone.rotary_emb(hidden, position_ids=pos)
        full = layer(hidden, attention_mask=mask, position_embeddings=rope, position_ids=pos)[:, start:]
        try:
            tail = top_block_tail(layer, hidden, mask, rope, start)
        except (AttributeError, RuntimeError, TypeError):
            return False
    return tail.shape == full.shape and torch.allclose(tail, full, rtol=1e-3, atol=1e-4)
