"""The eager fast path of rmsnorm / layernorm without bias or residual
(_norm's inlined checks and the _PlainNormFn autograd node): it is the one the
call takes, its gradients match the fp64 reference whether the stats are
stored or recomputed and whatever the layout, only the gradients asked for are
computed, and invalid calls shaped like it still raise naming the argument."""
import pytest
import torch

import fusednorm
from conftest import DTYPES, assert_close, reference
from fusednorm import _lib, _ops
from test_functional import EPS, FN, check_fwd_bwd, rand, sliced_rows, strided_last


@pytest.mark.parametrize("norm", ["rms", "ln"])
def test_takes_the_plain_node(device, norm):
    x = rand((4, 64), torch.float32, device).requires_grad_(True)
    w = rand((64,), torch.float32, device).requires_grad_(True)
    assert type(FN[norm](x, w).grad_fn).__name__ == "_PlainNormFnBackward"
    # With a bias the general node runs.
    b = rand((64,), torch.float32, device)
    assert type(FN[norm](x, w, b).grad_fn).__name__ == "_FusedNormFnBackward"


@pytest.mark.parametrize("norm", ["rms", "ln"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("stats", ["stored", "recomputed"])
@pytest.mark.parametrize("maker", [None, sliced_rows, strided_last], ids=["contiguous", "row_stride", "last_dim"])
def test_plain_gradients(device, norm, dtype, stats, maker, monkeypatch):
    monkeypatch.setattr(_ops, "_RECOMPUTE_STATS_MAX_ELEMENTS", -1 if stats == "stored" else 1 << 40)
    check_fwd_bwd(norm, device, dtype, (13, 96), x_maker=maker)
    check_fwd_bwd(norm, device, dtype, (13, 96), weight=False, x_maker=maker)
    check_fwd_bwd(norm, device, dtype, (13, 96), out_dtype=torch.float32, weight_offset=1.0, x_maker=maker)


@pytest.mark.parametrize("norm", ["rms", "ln"])
def test_plain_noncontiguous_weight(device, norm):
    x = rand((7, 48), torch.float32, device, 2.0).requires_grad_(True)
    w = rand((48, 2), torch.float32, device, 0.5, 1.0)[:, 0].requires_grad_(True)
    assert not w.is_contiguous()
    y = FN[norm](x, w, eps=EPS[norm])
    y_ref, _ = reference(norm, x, w, None, None, EPS[norm], 0.0)
    assert_close(y, y_ref, torch.float32, "y")
    dy = rand(y.shape, y.dtype, device)
    dx, dw = torch.autograd.grad(y, (x, w), dy)
    lx, lw = x.detach().double().requires_grad_(True), w.detach().double().requires_grad_(True)
    rx, rw = torch.autograd.grad(reference(norm, lx, lw, None, None, EPS[norm], 0.0)[0], (lx, lw), dy.double())
    assert_close(dw, rw, torch.float32, "dweight")
    torch.testing.assert_close(dx.double(), rx, rtol=1e-4, atol=1e-4 * rx.abs().max().item())


@pytest.mark.parametrize("norm", ["rms", "ln"])
@pytest.mark.parametrize("which", ["x", "weight"])
def test_plain_partial_requires_grad(device, norm, which, monkeypatch):
    """Only the asked-for gradient is computed (dweight only when weight needs it)."""
    x = rand((6, 40), torch.float32, device, 2.0).requires_grad_(which == "x")
    w = rand((40,), torch.float32, device, 0.5, 1.0).requires_grad_(which == "weight")
    # Every backward launch goes through _c_bwd with the packed arguments;
    # field 26 is dweight's data pointer (0: not asked for).
    seen = []
    real = _ops._c_bwd
    unpack = _lib.BWD_FORMAT.unpack
    monkeypatch.setattr(_ops, "_c_bwd", lambda p: seen.append(unpack(p)[26] != 0) or real(p))
    y = FN[norm](x, w, eps=EPS[norm])
    (g,) = torch.autograd.grad(y, (x if which == "x" else w), rand(y.shape, y.dtype, device))
    assert seen and all(s == (which == "weight") for s in seen)
    assert torch.isfinite(g).all() and g.shape == (x if which == "x" else w).shape


@pytest.mark.parametrize("norm", ["rms", "ln"])
def test_plain_shaped_invalid_calls_name_the_argument(device, norm):
    fn = FN[norm]
    name = {"rms": "rmsnorm", "ln": "layernorm"}[norm]
    x = rand((4, 32), torch.float32, device).requires_grad_(True)
    w = rand((32,), torch.float32, device).requires_grad_(True)
    cases = [
        (lambda: fn(x, w[:16]), ValueError, "weight.shape"),
        (lambda: fn(x, w.to(torch.float64)), TypeError, "weight.dtype"),
        (lambda: fn(x, torch.empty(32, device="meta")), ValueError, "weight is on meta"),
        (lambda: fn(x, w, eps=float("nan")), ValueError, "eps"),
        (lambda: fn(x, w, eps=-1.0), ValueError, "eps"),
        (lambda: fn(x, w, weight_offset=float("inf")), ValueError, "weight_offset"),
        (lambda: fn(x, w, out_dtype=torch.int32), TypeError, "out_dtype"),
        (lambda: fn(x.detach().to(torch.int32), None), TypeError, "x.dtype"),
        (lambda: fn(x[:, :0], None), ValueError, "last dimension is 0"),
        (lambda: fn(x, [1.0] * 32), TypeError, "weight must be a torch.Tensor"),
    ]
    for call, exc, words in cases:
        with pytest.raises(exc, match=f"{name}: .*{words}" if words != "eps" else f"{name}: eps"):
            call()
