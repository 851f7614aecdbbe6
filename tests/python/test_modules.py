"""fusednorm.RMSNorm / LayerNorm as drop-ins for torch.nn.RMSNorm / LayerNorm:
same constructor arguments, parameters and state_dict keys; after
load_state_dict, the same outputs and gradients. And the residual-fused modules."""
import pytest
import torch

import fusednorm
from conftest import DTYPES, assert_close, reference


def parity(ours, theirs, x, dtype):
    """Load theirs' (randomized) state into ours, compare forward and grads."""
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn_like(p) * 0.3 + 1.0)
    assert list(ours.state_dict().keys()) == list(theirs.state_dict().keys())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    ours.load_state_dict(theirs.state_dict())
    x1 = x.clone().requires_grad_(True)
    x2 = x.clone().requires_grad_(True)
    y1, y2 = ours(x1), theirs(x2)
    assert y1.dtype == y2.dtype and y1.shape == y2.shape
    dy = torch.randn_like(y1)
    y1.backward(dy)
    y2.backward(dy)
    # torch rounds its own results to dtype too: both roundings are allowed.
    t = 2 * (torch.finfo(dtype).eps + 64 * torch.finfo(torch.float32).eps)
    pairs = [("y", y1, y2), ("dx", x1.grad, x2.grad)]
    pairs += [(f"d{n}", p1.grad, p2.grad) for (n, p1), p2 in zip(ours.named_parameters(), theirs.parameters())]
    for name, a, b in pairs:
        scale = b.float().abs().max().item()
        torch.testing.assert_close(a.float(), b.float(), rtol=t, atol=t * scale, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kwargs", [{}, {"eps": 1e-6}, {"elementwise_affine": False}], ids=["default", "eps", "noaff"])
def test_rmsnorm_module_parity(device, dtype, kwargs):
    ours = fusednorm.RMSNorm(80, device=device, dtype=dtype, **kwargs)
    theirs = torch.nn.RMSNorm(80, device=device, dtype=dtype, **kwargs)
    x = torch.randn(3, 7, 80, device=device).mul(2).to(dtype)
    parity(ours, theirs, x, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kwargs", [{}, {"eps": 1e-6}, {"bias": False}, {"elementwise_affine": False}],
                         ids=["default", "eps", "nobias", "noaff"])
def test_layernorm_module_parity(device, dtype, kwargs):
    ours = fusednorm.LayerNorm((72,), device=device, dtype=dtype, **kwargs)
    theirs = torch.nn.LayerNorm((72,), device=device, dtype=dtype, **kwargs)
    x = torch.randn(5, 72, device=device).mul(2).add(1).to(dtype)
    parity(ours, theirs, x, dtype)


def test_eps_none_means_dtype_eps():
    """torch.nn.RMSNorm's eps=None is torch.finfo(x.dtype).eps; tiny inputs make
    the difference to 1e-6 visible."""
    x = torch.randn(4, 16) * 1e-3
    y = fusednorm.RMSNorm(16)(x)
    y_ref, _ = reference("rms", x, torch.ones(16), eps=torch.finfo(torch.float32).eps)
    assert_close(y, y_ref, torch.float32, "y")
    y_t = torch.nn.RMSNorm(16)(x)
    torch.testing.assert_close(y, y_t, rtol=1e-5, atol=1e-5)


def test_constructor_and_repr():
    m = fusednorm.LayerNorm(8, 1e-3, True, False)
    assert m.bias is None and m.eps == 1e-3 and m.normalized_shape == (8,)
    assert torch.equal(m.weight, torch.ones(8))
    assert "8" in repr(m)
    r = fusednorm.RMSNorm([8], elementwise_affine=False)
    assert r.weight is None and r.state_dict() == {}
    with pytest.raises(ValueError, match="normalized_shape"):
        fusednorm.RMSNorm((4, 8))


def test_torch_checkpoint_loads_into_ours_and_back():
    t = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.RMSNorm(8))
    o = torch.nn.Sequential(torch.nn.Linear(8, 8), fusednorm.LayerNorm(8), fusednorm.RMSNorm(8))
    o.load_state_dict(t.state_dict())
    t.load_state_dict(o.state_dict())


@pytest.mark.parametrize("norm", ["rms", "ln"])
def test_residual_module(device, norm):
    cls = fusednorm.ResidualRMSNorm if norm == "rms" else fusednorm.ResidualLayerNorm
    m = cls(64, eps=1e-5, residual_dtype=torch.float32, device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        m.weight.copy_(torch.randn(64) * 0.3 + 1)
    x = torch.randn(6, 64, device=device).to(torch.bfloat16).requires_grad_(True)
    res = torch.randn(6, 64, device=device).requires_grad_(True)
    y, h = m(x, res)
    assert y.dtype == torch.bfloat16 and h.dtype == torch.float32
    b = m.bias if norm == "ln" else None
    y_ref, h_ref = reference(norm, x, m.weight, b, res, eps=1e-5)
    assert_close(y, y_ref, torch.bfloat16, "y")
    assert_close(h, h_ref, torch.float32, "residual_out")
    # First block of a pre-norm stack: no residual yet.
    y0, h0 = m(x)
    assert h0.dtype == torch.float32 and torch.equal(h0, x.float())
    (y.float().sum() + h.sum()).backward()
    assert x.grad is not None and res.grad is not None and m.weight.grad is not None
