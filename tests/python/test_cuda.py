"""CUDA-only behaviour: the op runs on the tensor's own device and on torch's
current stream, is captured by CUDA graphs, and gives the CPU backend's
numbers. Skipped, with the reason, where there is no usable GPU."""
import pytest
import torch

import fusednorm
from conftest import CUDA_SKIP, assert_close, reference

pytestmark = pytest.mark.skipif(CUDA_SKIP is not None, reason=CUDA_SKIP or "")


@pytest.mark.parametrize("norm", ["rms", "ln"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_cuda_matches_cpu_backend(norm, dtype):
    fn = fusednorm.rmsnorm if norm == "rms" else fusednorm.layernorm
    x = torch.randn(33, 1000).mul(2).to(dtype)
    w = (torch.randn(1000) * 0.3 + 1).to(dtype)
    r = torch.randn(33, 1000).to(dtype)
    y_cpu, h_cpu = fn(x, w, residual=r, prenorm=True)
    y_gpu, h_gpu = fn(x.cuda(), w.cuda(), residual=r.cuda(), prenorm=True)
    y_ref, _ = reference(norm, x, w, None, r, 1e-6 if norm == "rms" else 1e-5)
    assert_close(y_gpu, y_ref, dtype, "y (cuda)")
    assert_close(y_cpu, y_ref, dtype, "y (cpu)")
    torch.testing.assert_close(h_gpu.cpu(), h_cpu, rtol=0, atol=0)


def test_runs_on_the_tensors_device_not_the_current_one():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    dev = torch.device("cuda:1")
    x = torch.randn(64, 512, device=dev, requires_grad=True)
    w = torch.randn(512, device=dev, requires_grad=True)
    with torch.cuda.device(0):
        y = fusednorm.rmsnorm(x, w)
        y.sum().backward()
    assert y.device == dev and x.grad.device == dev and w.grad.device == dev
    y_ref, _ = reference("rms", x, w, eps=1e-6)
    assert_close(y, y_ref, torch.float32, "y")
    assert torch.cuda.current_device() == 0


def test_runs_on_the_current_stream():
    """Work queued on a side stream is ordered after that stream's earlier work
    (a slow fill) and before its later work, with no host synchronization."""
    s = torch.cuda.Stream()
    x = torch.empty(4096, 4096, device="cuda")
    w = torch.ones(4096, device="cuda")
    src = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        for _ in range(5):  # keep the stream busy so a wrong stream would race
            x.copy_(src)
        y = fusednorm.rmsnorm(x, w)
    s.synchronize()
    y_ref, _ = reference("rms", src, w, eps=1e-6)
    assert_close(y, y_ref, torch.float32, "y")


def test_backward_on_a_side_stream_allocates_its_own_workspace():
    """The cached workspace serves the default stream only; a side stream's
    backward takes one from torch's allocator (stream-aware), so two streams
    never share partial sums."""
    from fusednorm import _ops
    x = torch.randn(512, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    ref = fusednorm.rmsnorm_bwd(x, w, dy)  # default stream: fills the cache
    def cached_pointers():
        return {k: v[1] for k, v in (_ops._ws_local.__dict__.get("by_device") or {}).items()}

    cached = cached_pointers()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = fusednorm.rmsnorm_bwd(x, w, dy)
    s.synchronize()
    assert cached and cached_pointers() == cached
    torch.testing.assert_close(got[0], ref[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], ref[1], rtol=0, atol=0)


@pytest.mark.parametrize("norm", ["rms", "ln"])
def test_cuda_graph_capture_fwd_bwd(norm):
    fn = fusednorm.rmsnorm if norm == "rms" else fusednorm.layernorm
    x = torch.randn(128, 768, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(768, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    r = torch.randn(128, 768, device="cuda", requires_grad=True)
    dy = torch.randn(128, 768, device="cuda", dtype=torch.bfloat16)

    def step():
        y, h = fn(x, w, residual=r, prenorm=True)
        return torch.autograd.grad((y, h), (x, w, r), (dy, torch.zeros_like(h)))

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # warm up allocator and autograd outside the capture
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        grads = step()
    with torch.no_grad():  # new inputs in place, then replay
        x.copy_(torch.randn_like(x))
        r.copy_(torch.randn_like(r))
    g.replay()
    torch.cuda.synchronize()
    eager = step()
    for a, b in zip(grads, eager):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # deterministic dweight: bitwise equal


def test_compile_reduce_overhead_uses_cuda_graphs():
    torch._dynamo.reset()
    m = torch.nn.Sequential(torch.nn.Linear(256, 256), fusednorm.RMSNorm(256)).cuda()
    cm = torch.compile(m, mode="reduce-overhead", fullgraph=True)
    x = torch.randn(64, 256, device="cuda")
    for _ in range(3):
        y = cm(x)
    torch.testing.assert_close(y, m(x), rtol=1e-5, atol=1e-5)


def test_deterministic_dweight():
    x = torch.randn(4096, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    dy = torch.randn_like(x)
    _, _, rstd = fusednorm.rmsnorm_fwd(x, w, store_rstd=True)
    a = fusednorm.rmsnorm_bwd(x, w, dy, rstd)
    b = fusednorm.rmsnorm_bwd(x, w, dy, rstd)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
