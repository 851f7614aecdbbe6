"""fusednorm.rmsnorm / layernorm and the explicit *_fwd / *_bwd pairs: forward
and gradients against an fp64 reference for every feature and dtype, against
torch's own F.rms_norm / F.layer_norm, over awkward shapes, >2-D inputs and
strided layouts, on every device present."""
import pytest
import torch
import torch.nn.functional as F

import fusednorm
from conftest import DTYPES, assert_close, dx_scale, reference
from fusednorm import _ops

FN = {"rms": fusednorm.rmsnorm, "ln": fusednorm.layernorm}
EPS = {"rms": 1e-6, "ln": 1e-5}


def rand(shape, dtype, device, scale=1.0, shift=0.0):
    return (torch.randn(shape, dtype=torch.float32) * scale + shift).to(dtype).to(device)


def check_fwd_bwd(norm, device, dtype, shape, weight=True, bias=False, residual=False, prenorm=False,
                  out_dtype=None, residual_dtype=None, weight_offset=0.0, param_dtype=None, x_maker=None):
    """Runs fusednorm forward + backward (with gradients arriving on y and, when
    prenorm, on residual_out) and compares everything with the fp64 reference."""
    cols = shape[-1]
    param_dtype = param_dtype or dtype
    x = x_maker(shape, dtype, device) if x_maker else rand(shape, dtype, device, 2.0, 0.5)
    x.requires_grad_(True)
    w = rand((cols,), param_dtype, device, 0.5, 1.0).requires_grad_(True) if weight else None
    b = rand((cols,), param_dtype, device, 0.5).requires_grad_(True) if bias else None
    r = rand(shape, dtype if residual_dtype is None else residual_dtype, device, 1.5).requires_grad_(True) \
        if residual else None
    eps = EPS[norm]
    out = FN[norm](x, w, b, residual=r, out_dtype=out_dtype, residual_dtype=residual_dtype, eps=eps,
                   prenorm=prenorm, weight_offset=weight_offset)
    y, h = out if prenorm else (out, None)
    y_ref, h_ref = reference(norm, x, w, b, r, eps, weight_offset)
    assert_close(y, y_ref, out_dtype or dtype, "y")
    if prenorm:
        h_dtype = residual_dtype or (r.dtype if r is not None else dtype)
        assert_close(h, h_ref, h_dtype, "residual_out")

    dy = rand(y.shape, y.dtype, device)
    inputs = [t for t in (x, w, b, r) if t is not None]
    outs, grads = [y], [dy]
    if prenorm:
        dh = rand(h.shape, h.dtype, device)
        outs.append(h)
        grads.append(dh)
    got = torch.autograd.grad(outs, inputs, grads)
    # Reference gradients: fp64 autograd through the reference, starting from the
    # tensor the library normalizes in the backward (residual_out when fused).
    leaves = [t.detach().double().requires_grad_(True) for t in inputs]
    lx, rest = leaves[0], leaves[1:]
    lw = rest.pop(0) if w is not None else None
    lb = rest.pop(0) if b is not None else None
    lr = rest.pop(0) if r is not None else None
    y64, h64 = reference(norm, lx, lw, lb, lr, eps, weight_offset)
    ref_outs, ref_grads = [y64], [dy.double()]
    if prenorm:
        ref_outs.append(h64)
        ref_grads.append(dh.double())
    want = torch.autograd.grad(ref_outs, leaves, ref_grads)
    names = ["dx"] + (["dweight"] if w is not None else []) + (["dbias"] if b is not None else []) + \
        (["dresidual"] if r is not None else [])
    sx = dx_scale(norm, x, dy, w, r, eps, weight_offset, dh if prenorm else None)
    for n, g, e, t in zip(names, got, want, inputs):
        assert_close(g, e, t.dtype, n, scale=sx if n in ("dx", "dresidual") else 0.0)


@pytest.mark.parametrize("norm", ["rms", "ln"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 1), (37, 7), (5, 192), (3, 760), (2, 1128), (4, 4097), (1031, 520)], ids=str)
def test_weight(device, norm, dtype, shape):
    check_fwd_bwd(norm, device, dtype, shape, bias=(norm == "ln"))


@pytest.mark.parametrize("norm", ["rms", "ln"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("feature", ["no_weight", "bias", "residual", "prenorm", "out_f32", "residual_f32",
                                     "offset", "params_f32", "all"])
def test_features(device, norm, dtype, feature):
    kw = {}
    if feature == "no_weight":
        kw = dict(weight=False)
    elif feature == "bias":
        kw = dict(bias=True)
    elif feature == "residual":
        kw = dict(residual=True)
    elif feature == "prenorm":
        kw = dict(residual=True, prenorm=True)
    elif feature == "out_f32":
        kw = dict(out_dtype=torch.float32)
    elif feature == "residual_f32":
        kw = dict(residual=True, prenorm=True, residual_dtype=torch.float32)
    elif feature == "offset":
        kw = dict(weight_offset=1.0)
    elif feature == "params_f32":
        kw = dict(param_dtype=torch.float32, bias=True)
    elif feature == "all":
        kw = dict(bias=True, residual=True, prenorm=True, residual_dtype=torch.float32, weight_offset=1.0,
                  out_dtype=torch.float32, param_dtype=torch.float32)
    check_fwd_bwd(norm, device, dtype, (19, 320), **kw)


@pytest.mark.parametrize("norm", ["rms", "ln"])
def test_prenorm_without_residual_returns_x(device, norm):
    x = rand((3, 64), torch.bfloat16, device).requires_grad_(True)
    y, h = FN[norm](x, None, prenorm=True)
    assert h is x
    y32, h32 = FN[norm](x, None, prenorm=True, residual_dtype=torch.float32)
    assert h32.dtype == torch.float32 and torch.equal(h32, x.float())
    (y32.float().sum() + h32.sum()).backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("norm", ["rms", "ln"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_torch(device, norm, dtype):
    """Same numbers as PyTorch's own functional norms (which compute in fp32 too)."""
    x = rand((6, 5, 96), dtype, device, 3.0).requires_grad_(True)
    w = rand((96,), dtype, device, 0.2, 1.0).requires_grad_(True)
    b = rand((96,), dtype, device, 0.2).requires_grad_(True)
    if norm == "rms":
        y = fusednorm.rmsnorm(x, w, eps=1e-6)
        y_t = F.rms_norm(x, (96,), w, eps=1e-6)
        args = (x, w)
    else:
        y = fusednorm.layernorm(x, w, b, eps=1e-5)
        y_t = F.layer_norm(x, (96,), w, b, eps=1e-5)
        args = (x, w, b)
    assert_close(y, y_t.float(), dtype, "y vs torch")
    dy = rand(y.shape, dtype, device)
    for n, g, g_t in zip(["dx", "dweight", "dbias"], torch.autograd.grad(y, args, dy),
                         torch.autograd.grad(y_t, args, dy)):
        # torch rounds its own result to dtype as well: allow both roundings.
        t = 2 * (torch.finfo(dtype).eps + 64 * torch.finfo(torch.float32).eps)
        scale = g_t.float().abs().max().item()
        torch.testing.assert_close(g.float(), g_t.float(), rtol=t, atol=t * scale, msg=lambda m: f"{n}: {m}")


# ---- shapes and layouts -------------------------------------------------------------


def sliced_rows(shape, dtype, device):
    """Rows with a stride larger than cols: a column slice of a wider tensor."""
    wide = rand((shape[0], shape[1] + 13), dtype, device, 2.0)
    return wide[:, 5:5 + shape[1]].detach()


def permuted_leading(shape, dtype, device):
    """>2-D with leading dims permuted: no single row stride, so copied once."""
    t = rand((shape[1], shape[0], shape[2]), dtype, device, 2.0)
    return t.transpose(0, 1).detach()


def strided_last(shape, dtype, device):
    """Non-contiguous last dimension: copied once."""
    t = rand((shape[1], shape[0]), dtype, device, 2.0)
    return t.t().detach()


def broadcast_rows(shape, dtype, device):
    """Row stride 0 (expand): must be copied, never read as 'stride 0 = cols'."""
    return rand((1, shape[1]), dtype, device, 2.0).expand(shape).detach()


@pytest.mark.parametrize("norm", ["rms", "ln"])
@pytest.mark.parametrize("maker,shape", [
    (None, (2, 3, 4, 72)),
    (sliced_rows, (9, 100)),
    (permuted_leading, (3, 4, 40)),
    (strided_last, (6, 33)),
    (broadcast_rows, (5, 48)),
], ids=["4d", "row_stride", "permuted", "last_dim_strided", "broadcast"])
def test_layouts(device, norm, maker, shape):
    check_fwd_bwd(norm, device, torch.bfloat16, shape, bias=True, residual=True, prenorm=True, x_maker=maker)


def test_sliced_rows_are_not_copied(device):
    """A row-strided view goes to the library as is (no hidden copy of x)."""
    from fusednorm import _ops
    x = sliced_rows((4, 50), torch.float32, device)
    x2, stride = _ops._rows(x, 50)
    assert x2.data_ptr() == x.data_ptr() and stride == x.stride(0)


def test_noncontiguous_weight(device):
    w_full = rand((2 * 64,), torch.float32, device, 0.5, 1.0)
    w = w_full[::2]
    x = rand((3, 64), torch.float32, device)
    y_ref, _ = reference("rms", x, w, eps=1e-6)
    assert_close(fusednorm.rmsnorm(x, w), y_ref, torch.float32, "y")


def test_empty_rows(device):
    x = torch.empty((0, 16), device=device, requires_grad=True)
    w = torch.ones(16, device=device, requires_grad=True)
    y = fusednorm.rmsnorm(x, w)
    assert y.shape == (0, 16)
    y.sum().backward()
    assert torch.equal(w.grad, torch.zeros_like(w))


def test_no_grad_stores_no_stats(device, monkeypatch):
    """Inference calls ask the library for no rstd/mean and build no graph."""
    from fusednorm import _ops
    seen = []
    real = _ops._fwd_impl
    monkeypatch.setattr(_ops, "_fwd_impl", lambda *a: seen.append(a[-1]) or real(*a))
    import fusednorm.functional as fn
    monkeypatch.setattr(fn, "_fwd_impl", _ops._fwd_impl)
    x = rand((4, 32), torch.float32, device).requires_grad_(True)
    with torch.no_grad():
        y = fusednorm.rmsnorm(x)
    assert y.grad_fn is None and seen == [False]


# ---- explicit forward / backward ----------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("recompute", [False, True], ids=["stored_rstd", "recomputed_rstd"])
def test_rmsnorm_fwd_bwd(device, dtype, recompute):
    x = rand((11, 200), dtype, device, 2.0)
    r = rand((11, 200), dtype, device)
    w = rand((200,), dtype, device, 0.3, 1.0)
    out, h, rstd = fusednorm.rmsnorm_fwd(x, w, residual=r, residual_dtype=torch.float32, store_rstd=True)
    y_ref, h_ref = reference("rms", x, w, residual=r, eps=1e-6)
    assert_close(out, y_ref, dtype, "out")
    assert_close(h, h_ref, torch.float32, "residual_out")
    rstd_ref = torch.rsqrt((h_ref * h_ref).mean(-1) + 1e-6)
    assert_close(rstd, rstd_ref, torch.float32, "rstd")
    dy = rand((11, 200), dtype, device)
    dres_out = rand((11, 200), torch.float32, device)
    dx, dw, db, dres = fusednorm.rmsnorm_bwd(h, w, dy, None if recompute else rstd, dresidual_out=dres_out,
                                             has_residual=True, residual_dtype=dtype, dx_dtype=dtype)
    assert db is None
    hl = h.detach().double().requires_grad_(True)
    wl = w.detach().double().requires_grad_(True)
    yl, _ = reference("rms", hl, wl, eps=1e-6)
    gx, gw = torch.autograd.grad(yl, (hl, wl), dy.double())
    assert_close(dx, gx + dres_out.double(), dtype, "dx")
    assert_close(dres, gx + dres_out.double(), dtype, "dresidual")
    assert_close(dw, gw, dtype, "dweight")


@pytest.mark.parametrize("recompute", [False, True], ids=["stored", "recomputed"])
def test_layernorm_fwd_bwd(device, recompute):
    x = rand((7, 130), torch.float16, device, 2.0, 1.0)
    w = rand((130,), torch.float32, device, 0.3, 1.0)
    b = rand((130,), torch.float32, device, 0.3)
    out, h, rstd, mean = fusednorm.layernorm_fwd(x, w, b, store_rstd=True)
    assert h is None
    y_ref, h_ref = reference("ln", x, w, b, eps=1e-5)
    assert_close(out, y_ref, torch.float16, "out")
    assert_close(mean, h_ref.mean(-1), torch.float32, "mean")
    _, _, rstd_none, mean_none = fusednorm.layernorm_fwd(x, w, b)
    assert rstd_none is None and mean_none is None
    dy = rand((7, 130), torch.float16, device)
    dx, dw, db, dres = fusednorm.layernorm_bwd(x, w, dy, None if recompute else rstd, None if recompute else mean,
                                               has_bias=True)
    assert dres is None
    xl = x.detach().double().requires_grad_(True)
    wl = w.detach().double().requires_grad_(True)
    bl = b.detach().double().requires_grad_(True)
    yl, _ = reference("ln", xl, wl, bl, eps=1e-5)
    gx, gw, gb = torch.autograd.grad(yl, (xl, wl, bl), dy.double())
    assert_close(dx, gx, torch.float16, "dx")
    assert_close(dw, gw, torch.float32, "dweight")
    assert_close(db, gb, torch.float32, "dbias")


# ---- the cached backward workspace ---------------------------------------------------


def _ws_cached(device):
    cache = _ops._ws_local.__dict__.get("by_device") or {}
    if device.type != "cuda":
        return cache.get(-1)
    # The cache is keyed by the tensor's device index; torch.device("cuda") has none.
    return cache.get(device.index if device.index is not None else torch.cuda.current_device())


def _check_rms_bwd(device, shape, dtype=torch.float32):
    x = rand(shape, dtype, device, 2.0)
    w = rand(shape[-1:], dtype, device, 0.5, 1.0)
    dy = rand(shape, dtype, device)
    dx, dw, _, _ = fusednorm.rmsnorm_bwd(x, w, dy)
    xl = x.detach().double().requires_grad_(True)
    wl = w.detach().double().requires_grad_(True)
    yl, _ = reference("rms", xl, wl, eps=1e-6)
    gx, gw = torch.autograd.grad(yl, (xl, wl), dy.double())
    assert_close(dx, gx, dtype, "dx", scale=dx_scale("rms", x, dy, w))
    assert_close(dw, gw, dtype, "dweight")


def test_workspace_is_reused_and_grows(device):
    """Backward calls on the default stream share one workspace per thread and
    device: a call that needs more grows it (the library refuses the small one
    with FUSEDNORM_ERROR_WORKSPACE, writing nothing, and the call is repeated);
    one that needs less reuses it (poisoned before each reuse by the fixture)."""
    _ops._ws_local.__dict__.pop("by_device", None)
    _check_rms_bwd(device, (6, 40))
    small = _ws_cached(device)
    assert small is not None and small[2] > 0
    _check_rms_bwd(device, (6, 40))
    assert _ws_cached(device)[1] == small[1]  # the same buffer
    _check_rms_bwd(device, (300, 3000), torch.bfloat16)
    big = _ws_cached(device)
    assert big[2] > small[2]
    _check_rms_bwd(device, (6, 40))
    assert _ws_cached(device)[1] == big[1]


def test_workspace_too_large_to_cache_is_per_call(device, monkeypatch):
    _ops._ws_local.__dict__.pop("by_device", None)
    monkeypatch.setattr(_ops, "_WS_CACHE_MAX_BYTES", 0)
    _check_rms_bwd(device, (9, 72))
    _check_rms_bwd(device, (9, 72))
    assert _ws_cached(device) is None


def test_backward_from_many_threads(device):
    """Each thread has its own cached workspace (on the CPU the library runs
    with the GIL released, so threads really overlap)."""
    import threading
    errors = []

    def work(seed):
        try:
            for i in range(4):
                _check_rms_bwd(device, (64 + 16 * seed + i, 256))
        except Exception as e:  # reported below, with the thread's failure
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.parametrize("norm", ["rms", "ln"])
@pytest.mark.parametrize("stats", ["stored", "recomputed"])
def test_autograd_with_stored_and_recomputed_stats(device, norm, stats, monkeypatch):
    """The eager autograd path keeps rstd/mean only above a size threshold and
    recomputes them in the backward below it: both give the reference gradients."""
    monkeypatch.setattr(_ops, "_RECOMPUTE_STATS_MAX_ELEMENTS", -1 if stats == "stored" else 1 << 40)
    seen = []
    real = _ops._fwd_impl
    monkeypatch.setattr(_ops, "_fwd_impl", lambda *a: seen.append(a[-1]) or real(*a))
    check_fwd_bwd(norm, device, torch.bfloat16, (37, 96), bias=True, residual=True, prenorm=True,
                  residual_dtype=torch.float32)
    check_fwd_bwd(norm, device, torch.float16, (5, 2, 64), bias=True, residual=True)
    assert seen == [stats == "stored"] * 2
