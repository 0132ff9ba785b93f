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
block is Llama's (`top_block_tail_matches`, checked once per trunk); any other runs whole.

Causal models must be Llama-like (`model.layers`, `model.norm`, `model.rotary_emb`:
Llama, Mistral, Qwen2/3, SmolLM); seq2seq models T5-like (`encoder`, `decoder.block`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from transformers import PreTrainedModel

from glamrl.errors import GlamrlError


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
                 budget_bytes: int = 0) -> None:
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
               start: int = 0) -> Tensor:
        """Last hidden state (after the final norm) of left-padded rows `ids` (B, S) at positions `start`..S-1,
        (B, S - start, H): the lower blocks' output comes from the cache where present; `lengths` (B,), on the
        host, counts each row's real tokens. The top block runs at those positions only (`top_block_tail`)."""
        backbone = self.model.base_model
        layers = backbone.layers

        def lower(rows: list[int]) -> Tensor:
            hidden = backbone.embed_tokens(ids[rows])                             # (b, S, H)
            rope = backbone.rotary_emb(hidden, position_ids=pos[rows])
            for layer in layers[:self.split]:
                hidden = layer(hidden, attention_mask=mask[rows], position_embeddings=rope, position_ids=pos[rows])
            return hidden

        hidden = self._cached(lower, ids.shape[1], lengths, keys, left_padded=True)  # (B, S, H)
        rope = backbone.rotary_emb(hidden, position_ids=pos)
        top = len(layers) - 1 if self.tail_exact else len(layers)
        for layer in layers[self.split:top]:
            hidden = layer(hidden, attention_mask=mask, position_embeddings=rope, position_ids=pos)
        if self.tail_exact:
            hidden = top_block_tail(layers[-1], hidden, mask, rope, start)       # (B, S - start, H)
        else:
            hidden = hidden[:, start:]
        return backbone.norm(hidden)

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


# ------------------------------------------------------------------------- the top block's tail
def top_block_tail(layer: nn.Module, hidden: Tensor, mask: Tensor, rope: tuple[Tensor, Tensor],
                   start: int) -> Tensor:
    """A Llama-like decoder block's output at positions `start`.. of `hidden` (B, S, H) only, (B, S - start, H).

    The scorer reads the top block's output at the last prompt token and the action tokens, never before
    them; earlier positions enter only through the block's keys and values. So those are computed for every
    position and the queries, attention rows, output projection and MLP for the tail alone, which skips most
    of the top block's work and memory on long prompts. `mask` is the (B, 1, S, S) mask the block would get
    (bool or additive), `rope` the model's (cos, sin), each (B, S, D).
    """
    attn = layer.self_attn
    B, S, _ = hidden.shape
    R, D = S - start, attn.head_dim
    x = layer.input_layernorm(hidden)                                             # (B, S, H)
    q = attn.q_proj(x[:, start:]).view(B, R, -1, D)                               # (B, R, Hq, D)
    k = attn.k_proj(x).view(B, S, -1, D)                                          # (B, S, Hkv, D)
    v = attn.v_proj(x).view(B, S, -1, D).transpose(1, 2)                          # (B, Hkv, S, D)
    if hasattr(attn, "q_norm"):  # Qwen3: RMSNorm over each head's query and key
        q, k = attn.q_norm(q), attn.k_norm(k)
    cos, sin = rope
    q = _rotate(q.transpose(1, 2), cos[:, start:], sin[:, start:])              # (B, Hq, R, D)
    k = _rotate(k.transpose(1, 2), cos, sin)                                      # (B, Hkv, S, D)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, :, start:], scale=attn.scaling,
                                         dropout_p=attn.attention_dropout if attn.training else 0.0,
                                         enable_gqa=q.shape[1] != k.shape[1])     # (B, Hq, R, D)
    hidden = hidden[:, start:] + attn.o_proj(out.transpose(1, 2).reshape(B, R, -1))  # (B, R, H)
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
