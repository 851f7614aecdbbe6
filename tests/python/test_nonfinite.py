"""NaN and Inf inputs behave as in PyTorch: the rows that contain them, and only
those, become non-finite (forward y and backward dx); every other row matches
torch's own F.rms_norm / F.layer_norm; no hang, no crash. dweight/dbias sum over
all rows, so a non-finite row makes them non-finite exactly where torch's do.
"""
import pytest
import torch
import torch.nn.functional as F

import fusednorm
from conftest import DTYPES

N = 96


def _inputs(dtype, device):
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(8, N, generator=g) * 2).to(dtype).to(device)
    x[1, 5] = float("nan")
    x[3, 0] = float("inf")
    x[6, 17] = float("-inf")
    w = (1 + 0.2 * torch.randn(N, generator=g)).to(dtype).to(device)
    b = (0.2 * torch.randn(N, generator=g)).to(dtype).to(device)
    dy = torch.randn(8, N, generator=g).to(dtype).to(device)
    return x, w, b, dy


@pytest.mark.parametrize("norm", ["rms", "ln"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nonfinite_rows_match_torch(device, norm, dtype):
    x, w, b, dy = _inputs(dtype, device)
    ours_in = [t.clone().requires_grad_(True) for t in (x, w, b)]
    ref_in = [t.clone().requires_grad_(True) for t in (x, w, b)]
    if norm == "rms":
        y = fusednorm.rmsnorm(ours_in[0], ours_in[1], eps=1e-6)
        y_t = F.rms_norm(ref_in[0], (N,), ref_in[1], eps=1e-6)
        n_args = 2
    else:
        y = fusednorm.layernorm(ours_in[0], ours_in[1], ours_in[2], eps=1e-5)
        y_t = F.layer_norm(ref_in[0], (N,), ref_in[1], ref_in[2], eps=1e-5)
        n_args = 3
    grads = torch.autograd.grad(y, ours_in[:n_args], dy)
    grads_t = torch.autograd.grad(y_t, ref_in[:n_args], dy)

    bad_rows = torch.zeros(8, dtype=torch.bool, device=device)
    bad_rows[[1, 3, 6]] = True
    for name, ours, ref in [("y", y, y_t), ("dx", grads[0], grads_t[0])]:
        row_finite = torch.isfinite(ours.float()).all(dim=1)
        assert torch.equal(row_finite, ~bad_rows), f"{name}: finite rows {row_finite.tolist()}"
        assert torch.equal(torch.isfinite(ref.float()).all(dim=1), ~bad_rows), f"torch {name} differs in its rows"
        t = 2 * (torch.finfo(dtype).eps + 64 * torch.finfo(torch.float32).eps)
        good = ~bad_rows
        scale = ref.float()[good].abs().max().item()
        torch.testing.assert_close(ours.float()[good], ref.float()[good], rtol=t, atol=t * scale,
                                   msg=lambda m: f"{name} finite rows: {m}")
    for name, ours, ref in zip(["dweight", "dbias"], grads[1:], grads_t[1:]):
        assert torch.equal(torch.isfinite(ours.float()), torch.isfinite(ref.float())), f"{name}: finiteness differs"
