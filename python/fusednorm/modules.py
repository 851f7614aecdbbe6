"""nn.Module drop-ins: RMSNorm and LayerNorm take torch.nn.RMSNorm's and
torch.nn.LayerNorm's constructor arguments and hold the same parameters under
the same state_dict keys, so a checkpoint loads either way; ResidualRMSNorm and
ResidualLayerNorm fuse the residual add of a pre-norm transformer block.

Shapes: fusednorm normalizes over the last dimension, so normalized_shape must
be one dimension long (an int or a 1-tuple); torch's multi-dimension
normalized_shape is refused with a ValueError.
"""
import numbers

import torch
from torch import nn

from .functional import layernorm, rmsnorm

__all__ = ["RMSNorm", "LayerNorm", "ResidualRMSNorm", "ResidualLayerNorm"]

# eps=None resolves to the input dtype's machine epsilon on every call; reading
# it from torch.finfo costs about 0.3 us, a dict lookup a tenth of that.
_DTYPE_EPS = {d: torch.finfo(d).eps for d in (torch.float32, torch.float16, torch.bfloat16)}


def _one_dim(normalized_shape, cls):
    if isinstance(normalized_shape, numbers.Integral):
        shape = (int(normalized_shape),)
    else:
        shape = tuple(int(s) for s in normalized_shape)
    if len(shape) != 1:
        raise ValueError(f"{cls}: normalized_shape {shape} has {len(shape)} dimensions; fusednorm normalizes over "
                         "the last dimension only, so it must be an int or a 1-tuple")
    if shape[0] <= 0:
        raise ValueError(f"{cls}: normalized_shape ({shape[0]}) must be positive")
    return shape


class RMSNorm(nn.Module):
    """torch.nn.RMSNorm(normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None).

    eps=None means torch.finfo(x.dtype).eps of the input, as torch does.
    weight_offset (keyword-only, fusednorm's own) scales by weight + weight_offset:
    1.0 gives Gemma's (1 + w) weights.
    """

    __constants__ = ["normalized_shape", "eps", "elementwise_affine"]

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None, *,
                 weight_offset=0.0):
        super().__init__()
        self.normalized_shape = _one_dim(normalized_shape, "RMSNorm")
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.weight_offset = float(weight_offset)
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.weight is not None:
            nn.init.ones_(self.weight)

    def _eps(self, x):
        if self.eps is not None:
            return self.eps
        eps = _DTYPE_EPS.get(x.dtype)
        return eps if eps is not None else torch.finfo(x.dtype).eps

    def forward(self, x):
        return rmsnorm(x, self.weight, eps=self._eps(x), weight_offset=self.weight_offset)

    def extra_repr(self):
        return "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(**self.__dict__)


class LayerNorm(nn.Module):
    """torch.nn.LayerNorm(normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None)."""

    __constants__ = ["normalized_shape", "eps", "elementwise_affine"]

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None, *,
                 weight_offset=0.0):
        super().__init__()
        self.normalized_shape = _one_dim(normalized_shape, "LayerNorm")
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.weight_offset = float(weight_offset)
        if elementwise_affine:
            self.weight = nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
            if bias:
                self.bias = nn.Parameter(torch.empty(self.normalized_shape, device=device, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x):
        return layernorm(x, self.weight, self.bias, eps=self.eps, weight_offset=self.weight_offset)

    def extra_repr(self):
        return "{normalized_shape}, eps={eps}, elementwise_affine={elementwise_affine}".format(**self.__dict__)


class ResidualRMSNorm(RMSNorm):
    """RMSNorm of x + residual for pre-norm blocks: forward(x, residual=None)
    returns (normalized, residual_out) with residual_out = x + residual (x when
    residual is None) kept in residual_dtype (residual.dtype when None; fp32
    keeps the residual stream exact while activations are 16-bit).

        h = x
        for block in blocks:
            y, h = block.norm1(block_output, h)   # instead of h = h + out; y = norm(h)
    """

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None, *,
                 weight_offset=0.0, residual_dtype=None):
        super().__init__(normalized_shape, eps, elementwise_affine, device, dtype, weight_offset=weight_offset)
        self.residual_dtype = residual_dtype

    def forward(self, x, residual=None):
        return rmsnorm(x, self.weight, residual=residual, residual_dtype=self.residual_dtype, eps=self._eps(x),
                       prenorm=True, weight_offset=self.weight_offset)


class ResidualLayerNorm(LayerNorm):
    """LayerNorm of x + residual; forward(x, residual=None) -> (normalized,
    residual_out), as ResidualRMSNorm."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None, *,
                 weight_offset=0.0, residual_dtype=None):
        super().__init__(normalized_shape, eps, elementwise_affine, bias, device, dtype, weight_offset=weight_offset)
        self.residual_dtype = residual_dtype

    def forward(self, x, residual=None):
        return layernorm(x, self.weight, self.bias, residual=residual, residual_dtype=self.residual_dtype,
                         eps=self.eps, prenorm=True, weight_offset=self.weight_offset)
