"""Shared fixtures for the fusednorm PyTorch tests: the devices to run on (CPU
always; CUDA when torch and the C library both see a GPU, skipped with the
reason otherwise), poisoned output buffers, seeded inputs, the fp64 reference
and the dtype-derived tolerances.
"""
import os
import sys

# Inductor compiles in this process: by default a fresh machine first starts a
# pool of compile workers (one per core, each importing torch), which on a
# 16-core GPU host costs more than the few tiny kernels these tests compile.
# Set before torch is imported, which reads it.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))

import fusednorm  # noqa: E402
from fusednorm import _ops  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _cuda_skip_reason():
    if not torch.cuda.is_available():
        return "CUDA tests need a GPU: torch.cuda.is_available() is False on this machine"
    if not fusednorm.cuda_available():
        return (f"CUDA tests need a libfusednorm built with CUDA ({fusednorm.library_path} reports "
                "fusednorm_cuda_available() == 0)")
    return None


CUDA_SKIP = _cuda_skip_reason()
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(CUDA_SKIP is not None, reason=CUDA_SKIP or ""))]


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    """Every buffer the library is to write starts as NaN (0xFF bytes for the
    workspace, fresh or reused), so an element it fails to write shows up in the
    comparison."""
    real_empty, real_empty_like = torch.empty, torch.empty_like

    def empty(*args, **kwargs):
        t = real_empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(255)

    def empty_like(*args, **kwargs):
        t = real_empty_like(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(255)

    monkeypatch.setattr(_ops, "_empty", empty)
    monkeypatch.setattr(_ops, "_empty_like", empty_like)
    # The backward reuses a cached workspace: garbage it before each reuse, so a
    # partial sum the library reads without writing it this call shows up too.
    monkeypatch.setattr(_ops, "_ws_reuse_hook", lambda ws: ws.fill_(255))


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(1234)


def tol(dtype):
    """Error bound, relative to the scale of the result, for an output stored in
    dtype: one unit in the last place of dtype (rounding is half of it; the rest
    covers 16-bit intermediates such as residual_out) plus the fp32 arithmetic's
    share for row sums of a few thousand terms."""
    return torch.finfo(dtype).eps + 64 * torch.finfo(torch.float32).eps


def assert_close(actual, expected, dtype=None, name="", scale=0.0):
    """|actual - expected| <= tol * (|expected| + max(|expected|, scale)): scale
    is the size of the terms that cancel to give the result (for dx: rstd*|dy*w|),
    needed where the exact result is far smaller than what was summed."""
    dtype = dtype or actual.dtype
    assert actual.dtype == dtype, f"{name}: dtype {actual.dtype}, expected {dtype}"
    assert actual.shape == expected.shape, f"{name}: shape {tuple(actual.shape)}, expected {tuple(expected.shape)}"
    a = actual.detach().double().cpu()
    e = expected.detach().double().cpu()
    assert not torch.isnan(a).any(), f"{name}: NaN in the output (an element left unwritten?)"
    t = tol(dtype)
    scale = max(e.abs().max().item(), float(scale), 1e-30)
    torch.testing.assert_close(a, e, rtol=t, atol=t * scale, msg=lambda m: f"{name} ({dtype}): {m}")


def reference(norm, x, weight=None, bias=None, residual=None, eps=1e-6, weight_offset=0.0, residual_dtype=None):
    """fp64 reference of the forward, differentiable (autograd in fp64 gives the
    reference gradients). Returns (y, h) with h = x + residual in fp64 and the
    tensor that the backward normalizes: h rounded to residual_dtype when a
    residual is fused (the library stores and re-reads it there)."""
    h = x.double()
    if residual is not None:
        h = h + residual.double()
    if norm == "rms":
        var = (h * h).mean(-1, keepdim=True)
        xhat = h * torch.rsqrt(var + eps)
    else:
        mu = h.mean(-1, keepdim=True)
        var = ((h - mu) ** 2).mean(-1, keepdim=True)
        xhat = (h - mu) * torch.rsqrt(var + eps)
    y = xhat
    if weight is not None:
        y = y * (weight.double() + weight_offset)
    if bias is not None:
        y = y + bias.double()
    return y, h


def dx_scale(norm, x, dy, weight=None, residual=None, eps=1e-6, weight_offset=0.0, dresidual_out=None):
    """The size of the terms in dx = rstd*(g - ...): max rstd * max |dy * w| (+ the
    gradient arriving on residual_out)."""
    h = x.double() + (residual.double() if residual is not None else 0)
    if norm == "ln":
        h = h - h.mean(-1, keepdim=True)
    rstd = torch.rsqrt((h * h).mean(-1) + eps).max().item()
    g = dy.double() * ((weight.double() + weight_offset) if weight is not None else 1.0)
    s = rstd * g.abs().max().item()
    if dresidual_out is not None:
        s += dresidual_out.double().abs().max().item()
    return s
