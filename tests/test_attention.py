"""The trunk's attention: SDPA's forward, and where chosen its backward in fp32, against SDPA itself."""

import pytest
import torch
from torch.nn import functional as F

from glamrl.llm.attention import FP32_BACKWARD_MAX_KEYS, attention, fp32_backward_pays

pytestmark = pytest.mark.usefixtures("one_thread")


def _case(additive: bool, S: int = 23, R: int = 23) -> tuple[torch.Tensor, ...]:
    """Queries of 4 heads over keys and values of 2 (grouped), left-padded causal rows: (B, H, R|S, D), mask."""
    generator = torch.Generator().manual_seed(0)
    B, D = 3, 16
    q = torch.randn(B, 4, R, D, generator=generator)
    k, v = (torch.randn(B, 2, S, D, generator=generator) for _ in range(2))
    lengths = torch.tensor([S, S - 5, S - 11])
    real = torch.arange(S)[None, :] >= (S - lengths)[:, None]                    # (B, S)
    visible = torch.ones(S, S, dtype=torch.bool).tril()[S - R:] & real[:, None, :] | \
        torch.eye(S, dtype=torch.bool)[S - R:]                                   # (B, R, S): each row sees itself
    mask = visible[:, None]
    if additive:
        mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    return q, k, v, mask


def _run(q, k, v, mask, fp32_backward: bool | None, autocast: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Output and the gradients of q, k, v, through a transpose and reshape as in the block (non-contiguous)."""
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    weights = torch.linspace(-1, 1, q.shape[2] * q.shape[1] * q.shape[3]).view(1, q.shape[2], -1)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        if fp32_backward is None:  # SDPA itself
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.25, enable_gqa=True)
        else:
            out = attention(q, k, v, mask, 0.25, fp32_backward=fp32_backward)
    rows = out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)            # (B, R, H D)
    (rows.float() * weights).sum().backward()
    return out.detach().float(), [t.grad for t in (q, k, v)]


@pytest.mark.parametrize("additive", [False, True])
@pytest.mark.parametrize("R", [23, 9])                                            # every position, or a tail
def test_the_fp32_backward_gives_sdpas_output_and_its_gradients_closer_to_fp32(additive, R):
    case = _case(additive, R=R)
    fused, fused_grads = _run(*case, fp32_backward=True, autocast=True)
    sdpa, sdpa_grads = _run(*case, fp32_backward=None, autocast=True)
    _, exact_grads = _run(*case, fp32_backward=None, autocast=False)             # fp32 throughout
    torch.testing.assert_close(fused, sdpa, atol=0, rtol=0)                       # the same bf16 forward
    for mine, bf16, exact in zip(fused_grads, sdpa_grads, exact_grads):
        assert mine.dtype == exact.dtype and mine.shape == exact.shape
        torch.testing.assert_close(mine, exact, atol=3e-2, rtol=3e-2)
        assert (mine - exact).abs().max() <= (bf16 - exact).abs().max() * 1.5 + 1e-3


@pytest.mark.parametrize("fp32_backward", [False, True])
def test_the_kernel_recorder_sees_both_paths(fp32_backward):
    """`attention_kernels` records the flash kernel whether SDPA picks it or the fp32-backward path calls it."""
    from glamrl.llm.diagnostics import attention_kernels

    with attention_kernels() as kernels:
        _run(*_case(additive=False), fp32_backward=fp32_backward, autocast=True)
    assert kernels == ["FLASH_ATTENTION"]


def test_without_the_fp32_backward_it_is_sdpa():
    case = _case(additive=False)
    plain, plain_grads = _run(*case, fp32_backward=False, autocast=True)
    sdpa, sdpa_grads = _run(*case, fp32_backward=None, autocast=True)
    torch.testing.assert_close(plain, sdpa, atol=0, rtol=0)
    for a, b in zip(plain_grads, sdpa_grads):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_the_fp32_backward_is_chosen_on_amx_under_bf16_for_short_keys_with_a_gradient_only():
    q, k, v, _ = _case(additive=False)
    long_k = torch.zeros(1, 2, FP32_BACKWARD_MAX_KEYS + 1, 16)
    q.requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert fp32_backward_pays(q, k, v, 0.0, amx=True)
        assert not fp32_backward_pays(q, k, v, 0.0, amx=False)                   # not measured without AMX
        assert not fp32_backward_pays(q, long_k, long_k, 0.0, amx=True)          # bf16's backward is faster there
        assert not fp32_backward_pays(q, k, v, 0.1, amx=True)                    # dropout
        with torch.no_grad():
            assert not fp32_backward_pays(q, k, v, 0.0, amx=True)
    assert not fp32_backward_pays(q, k, v, 0.0, amx=True)                         # fp32: no autocast
    with torch.autocast("cpu", dtype=torch.float16):
        assert not fp32_backward_pays(q, k, v, 0.0, amx=True)


def test_the_benchmark_times_both_backwards_and_names_the_choice(monkeypatch, capsys):
    from benchmarks import attention_backward
    monkeypatch.setattr("sys.argv", ["attention_backward", "--lengths", "8", "12", "--prompts", "2", "--repeats", "1"])
    attention_backward.main()
    rows = capsys.readouterr().out.splitlines()[2:]
    assert [row.split()[0] for row in rows] == ["8", "12"]
    assert all(row.split()[-1] in ("fp32", "bf16") and row.count(" ms") == 2 for row in rows)
