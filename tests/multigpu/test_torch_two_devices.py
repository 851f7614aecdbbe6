"""Two GPUs in one process through PyTorch: fusednorm.rmsnorm / layernorm
(residual fused, prenorm) forward and backward with autograd on cuda:0 and
cuda:1, each call made while the OTHER device is current, must give bitwise
the numbers of the same call on cuda:0 alone (identical devices choose
identical plans and reduce dweight in a fixed order), agree with an fp64
reference within the dtype's rounding, and leave the current device as it was.
A call on a non-default stream of cuda:1 must be ordered on that stream, and
two host threads driving one device each at the same time must give the same
bits as well.

Every buffer the library writes starts as NaN (0xFF bytes for workspaces).
Skips with the reason when fewer than two CUDA devices are usable.
"""
import os
import sys
import threading

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import fusednorm  # noqa: E402
from fusednorm import _ops  # noqa: E402


def _skip_reason():
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        return f"needs 2 CUDA devices, torch sees {torch.cuda.device_count() if torch.cuda.is_available() else 0}"
    if not fusednorm.cuda_available():
        return f"{fusednorm.library_path} has no usable CUDA backend"
    return None


SKIP = _skip_reason()
pytestmark = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")


def _devices_alike():
    if SKIP:
        return True
    a, b = torch.cuda.get_device_properties(0), torch.cuda.get_device_properties(1)
    return (a.multi_processor_count, a.major, a.minor) == (b.multi_processor_count, b.major, b.minor)


ALIKE = _devices_alike()
SHAPES = [(4096, 1024), (512, 8192), (64, 65536), (37, 4097)]


@pytest.fixture(autouse=True)
def poisoned_outputs(monkeypatch):
    real_empty, real_empty_like = torch.empty, torch.empty_like

    def poison(t):
        return t.fill_(float("nan")) if t.is_floating_point() else t.fill_(255)

    monkeypatch.setattr(_ops, "_empty", lambda *a, **k: poison(real_empty(*a, **k)))
    monkeypatch.setattr(_ops, "_empty_like", lambda *a, **k: poison(real_empty_like(*a, **k)))


def make_inputs(norm, rows, cols, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    t = {
        "x": (torch.randn(rows, cols, generator=g) * 2 + 0.1).to(dtype),
        "residual": torch.randn(rows, cols, generator=g).to(dtype),
        "weight": (1 + 0.3 * torch.randn(cols, generator=g)).to(dtype),
        "dy": torch.randn(rows, cols, generator=g).to(dtype),
        "dresidual_out": (0.5 * torch.randn(rows, cols, generator=g)).to(dtype),
    }
    if norm == "ln":
        t["bias"] = (0.2 * torch.randn(cols, generator=g)).to(dtype)
    return t


def run(norm, inputs, device):
    """fwd + bwd through autograd on `device`; returns the outputs and gradients (on the CPU)."""
    dev = torch.device(device)
    leaves = {k: inputs[k].to(dev, copy=True).requires_grad_() for k in ("x", "residual", "weight", "bias") if k in inputs}
    dy, dres = inputs["dy"].to(dev), inputs["dresidual_out"].to(dev)
    fn = fusednorm.rmsnorm if norm == "rms" else fusednorm.layernorm
    y, h = fn(leaves["x"], leaves["weight"], leaves.get("bias"), residual=leaves["residual"], prenorm=True)
    torch.autograd.backward([y, h], [dy, dres])
    out = {"y": y, "residual_out": h}
    out.update({"grad_" + k: v.grad for k, v in leaves.items()})
    assert all(v.device == dev for v in out.values()), {k: v.device for k, v in out.items()}
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return {k: v.detach().cpu() for k, v in out.items()}


def reference(norm, inputs):
    """fp64: y from x + residual; the gradients of the backward, which normalizes
    residual_out as stored (rounded to its dtype), as the library does."""
    d = {k: v.detach().double() for k, v in inputs.items()}
    eps = 1e-6 if norm == "rms" else 1e-5

    def normed(h, w, b):
        if norm == "ln":
            h = h - h.mean(-1, keepdim=True)
        y = h * torch.rsqrt((h * h).mean(-1, keepdim=True) + eps) * w
        return y + b if b is not None else y

    h = d["x"] + d["residual"]
    y = normed(h, d["weight"], d.get("bias"))
    hr = h.to(inputs["x"].dtype).double().requires_grad_()
    w = d["weight"].clone().requires_grad_()
    b = d["bias"].clone().requires_grad_() if "bias" in d else None
    torch.autograd.backward([normed(hr, w, b)], [d["dy"]])
    dh = hr.grad + d["dresidual_out"]
    ref = {"y": y, "residual_out": h, "grad_x": dh, "grad_residual": dh, "grad_weight": w.grad}
    if b is not None:
        ref["grad_bias"] = b.grad
    return ref


def assert_matches_reference(got, ref, dtype, what):
    # Two roundings to dtype (the library's output and, for the backward, the
    # stored residual_out it re-reads) plus fp32 row sums: 2 ulp of dtype,
    # relative and, for the terms that cancel in dx/dweight, of the tensor's
    # largest element.
    tol = 2 * torch.finfo(dtype).eps + 64 * torch.finfo(torch.float32).eps
    for k, e in ref.items():
        a = got[k].double()
        assert not torch.isnan(a).any(), f"{what}: NaN in {k} (an element left unwritten?)"
        torch.testing.assert_close(a, e, rtol=tol, atol=tol * e.abs().max().item(),
                                   msg=lambda m, k=k: f"{what}: {k}: {m}")


def assert_same(got, want, dtype, what):
    for k in want:
        if ALIKE:
            assert got[k].dtype == want[k].dtype, f"{what}: {k} is {got[k].dtype}, expected {want[k].dtype}"
            assert torch.equal(got[k].view(torch.uint8), want[k].view(torch.uint8)), (
                f"{what}: {k} differs from cuda:0 alone in "
                f"{(got[k] != want[k]).sum().item()} of {want[k].numel()} elements")
        else:  # different devices may choose different plans: rounding-level agreement only
            tol = 2 * torch.finfo(dtype).eps
            torch.testing.assert_close(got[k].double(), want[k].double(), rtol=tol,
                                       atol=tol * want[k].double().abs().max().item())


@pytest.mark.parametrize("rows,cols", SHAPES, ids=[f"{r}x{c}" for r, c in SHAPES])
@pytest.mark.parametrize("norm", ["rms", "ln"])
def test_each_device_matches_device0_alone(norm, rows, cols):
    dtype = torch.bfloat16
    inputs = make_inputs(norm, rows, cols, dtype, seed=rows * 7 + cols)
    # The cross-device calls first, so per-device caches are filled from
    # device 1 while device 0 is current.
    got = {}
    for dev, other in ((1, 0), (0, 1)):
        with torch.cuda.device(other):
            got[dev] = run(norm, inputs, f"cuda:{dev}")
            assert torch.cuda.current_device() == other
    with torch.cuda.device(0):
        alone = run(norm, inputs, "cuda:0")
    assert_matches_reference(alone, reference(norm, inputs), dtype, "cuda:0 alone vs fp64")
    for dev in (0, 1):
        assert_same(got[dev], alone, dtype, f"cuda:{dev} (current device {1 - dev})")


@pytest.mark.parametrize("norm", ["rms", "ln"])
def test_f32_on_both_devices(norm):
    inputs = make_inputs(norm, 300, 2048, torch.float32, seed=5)
    with torch.cuda.device(0):
        on1 = run(norm, inputs, "cuda:1")
    with torch.cuda.device(1):
        on0 = run(norm, inputs, "cuda:0")
    assert_matches_reference(on0, reference(norm, inputs), torch.float32, "cuda:0 vs fp64")
    assert_same(on1, on0, torch.float32, "cuda:1 vs cuda:0")


@pytest.mark.parametrize("norm", ["rms", "ln"])
def test_side_stream_on_device1(norm):
    """The call is queued on cuda:1's current stream (a side stream, set while
    cuda:0 is the current device), after a long copy into its input on that
    stream: run on any other stream it would read the input half-written."""
    dtype = torch.bfloat16
    rows, cols = 8192, 4096
    inputs = make_inputs(norm, rows, cols, dtype, seed=11)
    with torch.cuda.device(0):
        expected = run(norm, inputs, "cuda:1")
    dev = torch.device("cuda:1")
    src = inputs["x"].to(dev)
    w = inputs["weight"].to(dev).requires_grad_()
    b = inputs["bias"].to(dev).requires_grad_() if norm == "ln" else None
    r = inputs["residual"].to(dev).requires_grad_()
    dy, dres = inputs["dy"].to(dev), inputs["dresidual_out"].to(dev)
    x = torch.full_like(src, float("nan"))
    torch.cuda.synchronize(dev)
    s = torch.cuda.Stream(device=dev)
    fn = fusednorm.rmsnorm if norm == "rms" else fusednorm.layernorm
    with torch.cuda.stream(s):
        with torch.cuda.device(0):
            assert torch.cuda.current_stream(dev) == s
            for _ in range(20):  # keep s busy: a call on another stream would race with these
                x.copy_(src)
            x.requires_grad_()
            y, h = fn(x, w, b, residual=r, prenorm=True)
            torch.autograd.backward([y, h], [dy, dres])
            assert torch.cuda.current_device() == 0
    s.synchronize()
    got = {"y": y, "residual_out": h, "grad_x": x.grad, "grad_residual": r.grad, "grad_weight": w.grad}
    if b is not None:
        got["grad_bias"] = b.grad
    got = {k: v.detach().cpu() for k, v in got.items()}
    assert_same(got, {k: expected[k] for k in got}, dtype, "on a side stream of cuda:1")


def test_two_threads_one_device_each():
    """One host thread per GPU, concurrently (as a data-parallel runner without
    processes would do); each thread's results equal its device's alone."""
    dtype = torch.bfloat16
    inputs = {n: make_inputs(n, 2048, 4096, dtype, seed=3) for n in ("rms", "ln")}
    alone = {(n, d): run(n, inputs[n], f"cuda:{d}") for n in ("rms", "ln") for d in (0, 1)}
    results, errors = {}, []

    def worker(d):
        try:
            torch.cuda.set_device(d)
            for _ in range(3):
                for n in ("rms", "ln"):
                    results[(n, d)] = run(n, inputs[n], f"cuda:{d}")
        except Exception as e:  # reported in the main thread
            errors.append(f"thread for cuda:{d}: {e!r}")

    threads = [threading.Thread(target=worker, args=(d,)) for d in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for key, want in alone.items():
        assert_same(results[key], want, dtype, f"{key[0]} from a thread on cuda:{key[1]}")
