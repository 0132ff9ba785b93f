"""Score candidate actions as text: log p(action | prompt) for B prompts x A actions in one forward pass.

`score="log_softmax"` (default) sums the action tokens' log-probabilities; `score="sum_logits"` sums
their raw logits instead (GLAM's released score, not a log-likelihood). Either sum is divided by the
action's token count with `normalize_by_length`.

Each prompt is encoded once and shared by its A candidates. The A actions' tokens are
packed after the prompt (causal LM) or into one decoder sequence (seq2seq LM), and a 4D
attention mask lets every action token see the prompt and its own earlier tokens only;
positions restart after the prompt for every action. Vocabulary logits are computed
only where an action token is predicted.

Tokenisation boundary: prompts end in `Action i: `. A BPE tokenizer merges that space
into the next word (`Ġturn`), so for causal LMs one trailing space is removed from the
prompt and the action is tokenized as the continuation ` turn left` of a short context.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.modeling_outputs import BaseModelOutput

from glamrl.config import SCORES
from glamrl.errors import GlamrlError
from glamrl.parallel.transfer import to_device

if TYPE_CHECKING:
    from glamrl.llm.trunk import FrozenTrunk

_CONTEXT = "Action:"  # actions are tokenized as the continuation of this text


class ScoringError(GlamrlError, ValueError):
    """Actions or prompts the scorer cannot score (empty after tokenization, unsupported attention)."""


@dataclass
class Scores:
    log_likelihoods: Tensor | None  # (B, A) sum (or mean) of the action tokens' log-probs (raw logits with
                                    # score="sum_logits"); None without actions
    hidden: Tensor                  # (B, H) last hidden state at the last prompt token / first decoder position


@dataclass
class _PackedActions:
    """A actions' tokens packed one after the other (T tokens in all), shared by every prompt."""

    targets: Tensor     # (T,) token ids to score
    inputs: Tensor      # (T,) decoder inputs (seq2seq): start token then targets shifted right within each action
    owner: Tensor       # (T,) index of the action each token belongs to
    offset: Tensor      # (T,) position of the token inside its action
    lengths: Tensor     # (A,) tokens per action
    visible: Tensor     # (T, T) bool, token i may attend to token j (same action, j <= i)


class _TargetLogProbs(torch.autograd.Function):
    """Each row's logit at its target id, minus the row's logsumexp where `normalize` (log-softmax at the
    target): (N, V) logits, (N,) ids, bool -> (N,) fp32.

    The same numbers as `logits.float().gather(...) - logits.float().logsumexp(-1)` under autograd, which keeps
    an fp32 copy of the logits and makes several (N, V) temporaries in its backward: with a 49k vocabulary
    those passes over memory cost the LM head several times its matmul. Here the rows go through fp32
    `_ROWS` at a time, and the backward writes the logits' gradient, exp(logit - logsumexp) * -g plus g at the
    target, in one pass.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, normalize: bool) -> Tensor:
        picked = logits.gather(-1, targets[:, None]).squeeze(-1).float()         # (N,)
        lse = torch.cat([rows.float().logsumexp(-1) for rows in logits.split(_ROWS)]) if normalize else None
        ctx.save_for_backward(logits, targets, lse)
        return picked - lse if normalize else picked                              # (N,)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        logits, targets, lse = ctx.saved_tensors
        out = torch.empty_like(logits)                                            # (N, V) in the logits' dtype
        for start in range(0, logits.shape[0], _ROWS):
            rows = slice(start, start + _ROWS)
            g = grad[rows, None].float()                                          # (n, 1)
            if lse is None:
                d = torch.zeros(g.shape[0], logits.shape[1], device=g.device)     # (n, V)
            else:
                d = (logits[rows].float() - lse[rows, None]).exp_().mul_(-g)     # (n, V) -g softmax
            out[rows] = d.scatter_add_(1, targets[rows, None], g)
        return out, None, None


_ROWS = 64
"""Rows of logits that `_TargetLogProbs` holds in fp32 at a time."""


def choose_inference_batching(setting: str | None, batching: str, observations: int) -> tuple[str, str]:
    """The batching of the passes without gradients for `model.inference_batching` = `setting`, given
    `model.batching` and the observations per prompt (prompt.nbr_obs), and why, in words."""
    if setting == "auto":
        if observations == 1:
            return "padded", ("auto: one observation per prompt, so the prompts differ little in length and one "
                              "padded batch runs faster than several small ones")
        return batching, f"auto: {observations} observations per prompt, so model.batching ({batching})"
    if setting is None:
        return batching, f"null: model.batching ({batching})"
    return setting, f"model.inference_batching={setting}"


class ActionScorer:
    """log p(action text | prompt) for a batch of prompts and a list of candidate actions.

    `batching="bucketed"` sorts the prompts by length and splits them into batches that waste
    at most `max_padding` of their tokens on padding; `"padded"` runs one batch padded to the
    longest prompt. Both give the same scores. `inference_batching` (optional) replaces `batching` in
    passes without gradients. `trunk` (optional) runs the frozen lower blocks once per prompt and keeps
    their output (see `glamrl.llm.trunk`).
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, is_seq2seq: bool,
                 normalize_by_length: bool = False, batching: str = "padded", max_padding: float = 0.1,
                 trunk: FrozenTrunk | None = None, score: str = "log_softmax",
                 inference_batching: str | None = None) -> None:
        if score not in SCORES:
            raise ScoringError(f"score must be one of {', '.join(SCORES)}, got {score!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.is_seq2seq = is_seq2seq
        self.normalize_by_length = normalize_by_length
        self.score = score
        self.batching = batching
        self.inference_batching = inference_batching
        self.max_padding = max_padding
        self.trunk = trunk
        self._packed: dict[tuple[tuple[str, ...], torch.device], _PackedActions] = {}

    @property
    def device(self) -> torch.device:
        return self.model.get_input_embeddings().weight.device

    def __call__(self, prompts: Sequence[str], actions: Sequence[str] | None) -> Scores:
        """Scores of `actions` after each of `prompts`; `actions=None` only encodes the prompts.
        A prompt given several times runs once (its rows are copies: gradients add up)."""
        unique = {p: j for j, p in enumerate(dict.fromkeys(prompts))}            # prompt -> its row once
        if len(unique) < len(prompts):
            scores = self(list(unique), actions)
            rows = to_device(torch.tensor([unique[p] for p in prompts]), self.device)  # (B,) row of each prompt
            ll = scores.log_likelihoods
            return Scores(log_likelihoods=None if ll is None else ll[rows], hidden=scores.hidden[rows])
        packed = self.pack_actions(actions) if actions is not None else None
        token_ids = self.tokenizer([self.prompt_text(p) for p in prompts]).input_ids  # B lists of ids
        extra = 0 if packed is None or self.is_seq2seq else packed.targets.numel()  # action tokens per row
        groups = self.batches([len(ids) + extra for ids in token_ids])
        cache_actions = None if actions is None or self.is_seq2seq else tuple(actions)
        outputs, hiddens = [], []
        for rows in groups:
            ids, mask, lengths = self._pad([token_ids[i] for i in rows])          # (b, P), (b, P), (b,) on the host
            keys = [(prompts[i], cache_actions) for i in rows]
            forward = self._seq2seq_forward if self.is_seq2seq else self._causal_forward
            output, hidden = forward(ids, mask, lengths, packed, keys)
            outputs.append(output)
            hiddens.append(hidden)
        inverse = to_device(torch.tensor([i for rows in groups for i in rows]).argsort(), self.device)  # (B,)
        if packed is None:
            return Scores(log_likelihoods=None, hidden=torch.cat(hiddens)[inverse])
        # causal: one LM head over every group's states (one cast of its weight, one matmul shape per batch)
        output = torch.cat(outputs)                                               # (B, T, H) or (B, T, V)
        logits = output if self.is_seq2seq else self.model.get_output_embeddings()(output)  # (B, T, V)
        ll = self._log_likelihoods(logits, packed)[inverse]                       # (B, A)
        return Scores(log_likelihoods=ll, hidden=torch.cat(hiddens)[inverse])

    def batches(self, lengths: Sequence[int]) -> list[list[int]]:
        """Indices of the prompts run together, given each row's token count (prompt + packed actions)."""
        batching = self.inference_batching if self.inference_batching and not torch.is_grad_enabled() \
            else self.batching
        if batching == "padded" or len(lengths) <= 1:
            return [list(range(len(lengths)))]
        groups: list[list[int]] = []
        real = 0
        for i in sorted(range(len(lengths)), key=lambda j: lengths[j]):
            if groups and lengths[i] * (len(groups[-1]) + 1) <= (real + lengths[i]) / (1 - self.max_padding):
                groups[-1].append(i)
                real += lengths[i]
            else:
                groups.append([i])
                real = lengths[i]
        return groups

    def _log_likelihoods(self, logits: Tensor, packed: _PackedActions) -> Tensor:
        """(b, T, V) logits at the action tokens -> (b, A) summed (or mean) log-probs (or raw logits) of each
        action."""
        b, T, V = logits.shape
        targets = packed.targets.expand(b, T).reshape(-1)                          # (b T,)
        token_ll = _TargetLogProbs.apply(logits.reshape(b * T, V), targets,
                                         self.score == "log_softmax").view(b, T)  # (b, T) fp32
        n_actions = packed.lengths.numel()
        ll = token_ll.new_zeros(token_ll.shape[0], n_actions).index_add(1, packed.owner, token_ll)  # (b, A)
        return ll / packed.lengths if self.normalize_by_length else ll

    # ------------------------------------------------------------------ tokenisation
    def action_token_ids(self, action: str) -> list[int]:
        """Token ids of one action as the model reads it right after a prompt."""
        if self.is_seq2seq:
            ids = self.tokenizer(action, add_special_tokens=False).input_ids
        else:
            context = self.tokenizer(_CONTEXT, add_special_tokens=False).input_ids
            full = self.tokenizer(f"{_CONTEXT} {action}", add_special_tokens=False).input_ids
            ids = full[len(context):] if full[:len(context)] == context else \
                self.tokenizer(f" {action}", add_special_tokens=False).input_ids
        if not ids:
            raise ScoringError(f"action {action!r} has no tokens")
        return ids

    def prompt_text(self, prompt: str) -> str:
        """The prompt as fed to the model (causal: one trailing space moves onto the action)."""
        return prompt[:-1] if not self.is_seq2seq and prompt.endswith(" ") else prompt

    def pack_actions(self, actions: Sequence[str]) -> _PackedActions:
        key = (tuple(actions), self.device)
        if key not in self._packed:
            with torch.inference_mode(False):  # cached tensors must also serve passes with gradients
                self._packed[key] = self._pack(actions)
        return self._packed[key]

    def _pack(self, actions: Sequence[str]) -> _PackedActions:
        ids = [self.action_token_ids(a) for a in actions]
        start = self.model.config.decoder_start_token_id if self.is_seq2seq else 0
        lengths = torch.tensor([len(t) for t in ids])
        owner = torch.repeat_interleave(torch.arange(len(ids)), lengths)
        offset = torch.cat([torch.arange(n) for n in lengths.tolist()])
        visible = (owner[:, None] == owner[None, :]) & (offset[:, None] >= offset[None, :])
        packed = _PackedActions(
            targets=torch.tensor([t for seq in ids for t in seq]),
            inputs=torch.tensor([t for seq in ids for t in [start, *seq[:-1]]]),
            owner=owner, offset=offset, lengths=lengths, visible=visible,
        )
        return _PackedActions(**{k: v.to(self.device) for k, v in vars(packed).items()})

    def _pad(self, token_ids: list[list[int]]) -> tuple[Tensor, Tensor, Tensor]:
        """(b, P) ids and bool mask on the model's device (causal prompts are left-padded so that every one
        ends at the same column), and each prompt's length (b,) on the host."""
        P, pad = max(len(t) for t in token_ids), self.tokenizer.pad_token_id
        if self.is_seq2seq:
            rows = [(t + [pad] * (P - len(t)), [1] * len(t) + [0] * (P - len(t))) for t in token_ids]
        else:
            rows = [([pad] * (P - len(t)) + t, [0] * (P - len(t)) + [1] * len(t)) for t in token_ids]
        ids = to_device(torch.tensor([r[0] for r in rows]), self.device)
        mask = to_device(torch.tensor([r[1] for r in rows], dtype=torch.bool), self.device)
        return ids, mask, torch.tensor([len(t) for t in token_ids])

    # ----------------------------------------------------------------------- forward
    def _causal_forward(self, prompt_ids: Tensor, prompt_mask: Tensor, prompt_lengths: Tensor,
                        packed: _PackedActions | None, keys: list[Hashable]) -> tuple[Tensor | None, Tensor]:
        """The last hidden states that predict each action token, (B, T, H) (None without actions; the caller
        runs the LM head), and the one at the last prompt token, (B, H)."""
        B, P = prompt_ids.shape
        prompt_pos = (prompt_mask.long().cumsum(-1) - 1).clamp(min=0)             # (B, P)
        causal = torch.ones(P, P, dtype=torch.bool, device=self.device).tril()
        prompt_rows = causal & prompt_mask[:, None, :] | torch.eye(P, dtype=torch.bool, device=self.device)  # (B, P, P)
        if packed is None:
            ids, pos, visible = prompt_ids, prompt_pos, prompt_rows
        else:
            T = packed.targets.numel()
            ids = torch.cat([prompt_ids, packed.targets.expand(B, T)], 1)         # (B, P+T)
            pos = torch.cat([prompt_pos, prompt_mask.sum(-1, keepdim=True) + packed.offset], 1)  # (B, P+T)
            top = torch.cat([prompt_rows, prompt_rows.new_zeros(B, P, T)], 2)      # (B, P, P+T)
            bottom = torch.cat([prompt_mask[:, None, :].expand(B, T, P), packed.visible.expand(B, T, T)], 2)
            visible = torch.cat([top, bottom], 1)                                 # (B, P+T, P+T)
        mask = self._attention_mask(visible)
        # only positions P-1.. are read: the last prompt token (the value's input) and the action tokens
        if self.trunk is None:
            hidden = self.model.base_model(input_ids=ids, attention_mask=mask, position_ids=pos,
                                           use_cache=False).last_hidden_state[:, P - 1:]  # (B, 1+T, H)
        else:
            hidden = self.trunk.causal(ids, mask, pos, prompt_lengths + ids.shape[1] - P, keys,
                                       start=P - 1, prompt_width=P)              # (B, 1+T, H)
        if packed is None:
            return None, hidden[:, 0]
        # the token before each target predicts it: the last prompt token for an action's first token
        source = torch.where(packed.offset == 0, 0, torch.arange(T, device=self.device))  # (T,) into hidden
        return hidden[:, source], hidden[:, 0]                                    # (B, T, H), (B, H)

    def _seq2seq_forward(self, prompt_ids: Tensor, prompt_mask: Tensor, prompt_lengths: Tensor,
                         packed: _PackedActions | None, keys: list[Hashable]) -> tuple[Tensor | None, Tensor]:
        """The logits at the action tokens, (B, T, V) (None without actions), and the decoder's first hidden
        state, (B, H)."""
        B = prompt_ids.shape[0]
        if self.trunk is None:
            encoded = self.model.get_encoder()(input_ids=prompt_ids, attention_mask=prompt_mask.long())
        else:
            encoded = BaseModelOutput(last_hidden_state=self.trunk.encoder(prompt_ids, prompt_mask,
                                                                                  prompt_lengths, keys))
        if packed is None:
            start = self.model.config.decoder_start_token_id
            inputs = torch.full((B, 1), start, device=self.device)               # (B, 1)
            visible = torch.ones(B, 1, 1, dtype=torch.bool, device=self.device)
        else:
            T = packed.inputs.numel()
            inputs, visible = packed.inputs.expand(B, T), packed.visible.expand(B, T, T)  # (B, T), (B, T, T)
        out = self.model(encoder_outputs=encoded, attention_mask=prompt_mask.long(), decoder_input_ids=inputs,
                         decoder_attention_mask=self._attention_mask(visible), output_hidden_states=True,
                         use_cache=False)
        hidden = out.decoder_hidden_states[-1][:, 0]                              # (B, H)
        return (out.logits if packed is not None else None), hidden              # (B, T, V)

    def _attention_mask(self, visible: Tensor) -> Tensor:
        """(B, Q, K) bool -> the (B, 1, Q, K) mask the model's attention implementation expects."""
        implementation = self.model.config._attn_implementation
        if implementation == "sdpa":
            return visible[:, None]
        if implementation == "eager":
            dtype = self.model.get_input_embeddings().weight.dtype
            return torch.zeros((), dtype=dtype, device=visible.device).masked_fill(
                ~visible[:, None], torch.finfo(dtype).min)
        raise ScoringError(f"attention implementation {implementation!r} cannot take the scorer's 4D masks; "
                           f"load the model with attn_implementation='sdpa' or 'eager'")
