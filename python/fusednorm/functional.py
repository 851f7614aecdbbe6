"""The functional API (quack's names): rmsnorm / layernorm, differentiable in
x, weight, bias and residual, and the *_fwd / *_bwd pairs for callers that
manage their own autograd.

Every argument is checked here, before anything runs: TypeError for a wrong
type or dtype, ValueError for a wrong shape, device or value, each naming the
argument. What the C library still refuses surfaces as RuntimeError with its
message.

Eager calls go through an autograd.Function straight to the C library; under
torch.compile the same calls trace to the fusednorm::fwd / fusednorm::bwd
custom ops (no graph break), whose fake implementations give the shapes.
"""
import math

import torch

from . import _lib
from ._ops import DTYPE_CODE, _bwd_impl, _fwd_impl, _FusedNormFn, _PlainNormFn, bwd_op, fwd_op

__all__ = ["rmsnorm", "layernorm", "rmsnorm_fwd", "rmsnorm_bwd", "layernorm_fwd", "layernorm_bwd"]

_Tensor = torch.Tensor
_is_compiling = torch.compiler.is_compiling
_apply = _FusedNormFn.apply
_apply_plain = _PlainNormFn.apply
_grad_enabled = torch.is_grad_enabled
_SUPPORTED = "torch.float32, torch.float16 or torch.bfloat16"
_INF = float("inf")
_F32 = torch.float32
_CODE_OF = DTYPE_CODE.get


def _check_tensor(name, t, fn):
    if not isinstance(t, _Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in DTYPE_CODE:
        raise TypeError(f"{fn}: {name}.dtype is {t.dtype}; fusednorm supports {_SUPPORTED}")


def _check_dtype_arg(name, d, fn):
    if d is not None and d not in DTYPE_CODE:
        raise TypeError(f"{fn}: {name} is {d!r}; expected None or {_SUPPORTED}")


def _check_device(name, t, x, fn):
    if t.device != x.device:
        raise ValueError(f"{fn}: {name} is on {t.device} but x is on {x.device}; "
                         "all tensors must be on x's device")


def _check_inputs(fn, x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset):
    """All the checks of the forward. The common, valid call is recognized by a
    few cheap tests (each tensor property read once); anything else goes
    through the full checks, which raise with the argument named."""
    if (isinstance(x, _Tensor) and x.dtype in DTYPE_CODE and type(eps) is float and 0.0 <= eps < _INF
            and type(weight_offset) is float and -_INF < weight_offset < _INF
            and (out_dtype is None or out_dtype in DTYPE_CODE)
            and (residual_dtype is None or residual_dtype in DTYPE_CODE)):
        shape = x.shape
        if shape and shape[-1] and (x.is_cuda or x.is_cpu):
            cols = shape[-1]
            dev = None
            if weight is not None:
                if not (isinstance(weight, _Tensor) and weight.dtype in DTYPE_CODE and weight.shape == (cols,)
                        and weight.device == (dev := x.device)):
                    dev = False
            if bias is not None and dev is not False:
                if not (isinstance(bias, _Tensor) and bias.dtype in DTYPE_CODE and bias.shape == (cols,)
                        and bias.device == (dev or x.device)):
                    dev = False
            if residual is not None and dev is not False:
                if not (isinstance(residual, _Tensor) and residual.dtype in DTYPE_CODE and residual.shape == shape
                        and residual.device == (dev or x.device)):
                    dev = False
            if dev is not False:
                return
    _check_inputs_fully(fn, x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset)


def _check_inputs_fully(fn, x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset):
    _check_tensor("x", x, fn)
    if x.dim() == 0:
        raise ValueError(f"{fn}: x must have at least one dimension (the normalized one), got a 0-d tensor")
    cols = x.shape[-1]
    if cols == 0:
        raise ValueError(f"{fn}: x's last dimension is 0; nothing to normalize (x.shape = {tuple(x.shape)})")
    dev_type = x.device.type
    if dev_type != "cpu" and dev_type != "cuda" and dev_type != "meta":
        raise ValueError(f"{fn}: x is on {x.device}; fusednorm runs on cpu and cuda tensors")
    for name, v in (("weight", weight), ("bias", bias)):
        if v is None:
            continue
        _check_tensor(name, v, fn)
        if v.dim() != 1 or v.shape[0] != cols:
            raise ValueError(f"{fn}: {name}.shape is {tuple(v.shape)}; expected ({cols},), the length of x's "
                             f"last dimension (x.shape = {tuple(x.shape)})")
        _check_device(name, v, x, fn)
    if residual is not None:
        _check_tensor("residual", residual, fn)
        if residual.shape != x.shape:
            raise ValueError(f"{fn}: residual.shape {tuple(residual.shape)} differs from x.shape {tuple(x.shape)}")
        _check_device("residual", residual, x, fn)
    _check_dtype_arg("out_dtype", out_dtype, fn)
    _check_dtype_arg("residual_dtype", residual_dtype, fn)
    if not isinstance(eps, (float, int)) or isinstance(eps, bool):
        raise TypeError(f"{fn}: eps must be a float, got {type(eps).__name__}")
    if not (math.isfinite(eps) and eps >= 0.0):
        raise ValueError(f"{fn}: eps ({eps}) must be finite and >= 0")
    if not isinstance(weight_offset, (float, int)) or isinstance(weight_offset, bool):
        raise TypeError(f"{fn}: weight_offset must be a float, got {type(weight_offset).__name__}")
    if not math.isfinite(weight_offset):
        raise ValueError(f"{fn}: weight_offset ({weight_offset}) must be finite")


def _norm(fn, norm, x, weight, bias, residual, out_dtype, residual_dtype, eps, prenorm, weight_offset):
    # The common eager call (x and an optional weight, float eps and offset) is
    # recognized and run here with each property read once: the same checks as
    # _check_inputs' fast test, without its frame or the general path's branches;
    # what they read (dtype codes, cols, the device kind) goes on to
    # _PlainNormFn in its cfg, so that its forward need not read it again.
    # Anything else, invalid calls included, takes the general path below, whose
    # checks raise naming the argument.
    # _is_compiling() comes first: Dynamo must not trace this fast path (torch 2.11
    # breaks the graph on its bound dict.get), it takes fwd_op below.
    if (not _is_compiling() and bias is None and residual is None and residual_dtype is None and not prenorm
            and type(eps) is float
            and type(weight_offset) is float and 0.0 <= eps < _INF and -_INF < weight_offset < _INF
            and isinstance(x, _Tensor) and (x_code := _CODE_OF(x.dtype)) is not None
            and (out_dtype is None or out_dtype in DTYPE_CODE)):
        shape = x.shape
        on_cuda = x.is_cuda
        if shape and shape[-1] and (on_cuda or x.is_cpu):
            cols = shape[-1]
            if weight is None:
                w_code = 0
                weight_grad = False
            elif (isinstance(weight, _Tensor) and (w_code := _CODE_OF(weight.dtype)) is not None
                  and weight.shape == (cols,) and weight.device == x.device):
                weight_grad = weight.requires_grad
            else:
                w_code = None
            if w_code is not None:
                if (x.requires_grad or weight_grad) and _grad_enabled():
                    return _apply_plain(x, weight, (norm, eps, weight_offset, out_dtype, x_code, w_code, cols, on_cuda))
                return _fwd_impl(x, weight, None, None, norm, eps, weight_offset, out_dtype, None, False, False)[0]
    _check_inputs(fn, x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset)
    if type(eps) is not float:
        eps = float(eps)
    if type(weight_offset) is not float:
        weight_offset = float(weight_offset)
    needs_grad = _grad_enabled() and (
        x.requires_grad
        or (weight is not None and weight.requires_grad)
        or (bias is not None and bias.requires_grad)
        or (residual is not None and residual.requires_grad))
    # The backward normalizes residual_out, so it is written whenever a gradient
    # may be needed, even when the caller does not ask for it (prenorm=False).
    store_residual_out = residual is not None and (prenorm or needs_grad)
    if _is_compiling():
        y, residual_out, _, _ = fwd_op(x, weight, bias, residual, norm, eps, weight_offset, out_dtype,
                                       residual_dtype, store_residual_out, needs_grad)
    elif needs_grad:
        if residual is None and bias is None:  # the common call: the cheaper autograd node
            y = _apply_plain(x, weight, (norm, eps, weight_offset, out_dtype, DTYPE_CODE[x.dtype],
                                         DTYPE_CODE[weight.dtype] if weight is not None else 0, x.shape[-1],
                                         x.is_cuda))
            residual_out = None
        else:
            y, residual_out = _apply(x, weight, bias, residual,
                                     (norm, eps, weight_offset, out_dtype, residual_dtype, store_residual_out))
    else:  # inference: no autograd node, no stats stored
        y, residual_out, _, _ = _fwd_impl(x, weight, bias, residual, norm, eps, weight_offset, out_dtype,
                                          residual_dtype, store_residual_out, False)
    if not prenorm:
        return y
    if residual is None:
        # Nothing was added: the residual stream is x itself (cast when asked).
        residual_out = x if residual_dtype is None or residual_dtype == x.dtype else x.to(residual_dtype)
    return y, residual_out


def rmsnorm(x, weight=None, bias=None, residual=None, out_dtype=None, residual_dtype=None, eps=1e-6,
            prenorm=False, weight_offset=0.0):
    """RMSNorm over x's last dimension: y = (x + residual) * rstd * (weight + weight_offset) + bias.

    Returns y (in out_dtype, x.dtype when None), or (y, residual_out) when prenorm is
    True, residual_out = x + residual in residual_dtype (residual.dtype when None; x
    itself when no residual is given). Differentiable in x, weight, bias, residual.
    """
    return _norm("rmsnorm", _lib.RMSNORM, x, weight, bias, residual, out_dtype, residual_dtype, eps, prenorm,
                 weight_offset)


def layernorm(x, weight=None, bias=None, residual=None, out_dtype=None, residual_dtype=None, eps=1e-5,
              prenorm=False, weight_offset=0.0):
    """LayerNorm over x's last dimension (biased variance); arguments and
    results as rmsnorm."""
    return _norm("layernorm", _lib.LAYERNORM, x, weight, bias, residual, out_dtype, residual_dtype, eps, prenorm,
                 weight_offset)


# ---- explicit forward / backward (no autograd) ---------------------------------------


def _fwd_explicit(fn, norm, x, weight, bias, residual, out_dtype, residual_dtype, eps, store_rstd, weight_offset):
    _check_inputs(fn, x, weight, bias, residual, out_dtype, residual_dtype, eps, weight_offset)
    if type(eps) is not float:
        eps = float(eps)
    if type(weight_offset) is not float:
        weight_offset = float(weight_offset)
    store_rstd = bool(store_rstd)
    if _is_compiling():
        with torch.no_grad():  # explicit pair: no autograd through the op
            y, residual_out, rstd, mean = fwd_op(x, weight, bias, residual, norm, eps, weight_offset, out_dtype,
                                                 residual_dtype, residual is not None, store_rstd)
        if residual is None:
            residual_out = None
        if not store_rstd:
            rstd = mean = None
        return y, residual_out, rstd, mean
    # _fwd_impl gives None for what it was not asked to write.
    return _fwd_impl(x, weight, bias, residual, norm, eps, weight_offset, out_dtype, residual_dtype,
                     residual is not None, store_rstd)


def rmsnorm_fwd(x, weight=None, bias=None, residual=None, out_dtype=None, residual_dtype=None, eps=1e-6,
                store_rstd=False, weight_offset=0.0):
    """Forward only: (out, residual_out, rstd). residual_out is None without a
    residual; rstd (fp32, one per row) is None unless store_rstd."""
    y, residual_out, rstd, _ = _fwd_explicit("rmsnorm_fwd", _lib.RMSNORM, x, weight, bias, residual, out_dtype,
                                             residual_dtype, eps, store_rstd, weight_offset)
    return y, residual_out, rstd


def layernorm_fwd(x, weight=None, bias=None, residual=None, out_dtype=None, residual_dtype=None, eps=1e-5,
                  store_rstd=False, weight_offset=0.0):
    """Forward only: (out, residual_out, rstd, mean); rstd and mean (fp32, one per
    row) are None unless store_rstd."""
    return _fwd_explicit("layernorm_fwd", _lib.LAYERNORM, x, weight, bias, residual, out_dtype, residual_dtype, eps,
                         store_rstd, weight_offset)


def _bwd_args_ok(norm, x, weight, dout, rstd, mean, dresidual_out, eps, weight_offset, residual_dtype, dx_dtype):
    """The common, valid backward call, recognized by cheap tests (each tensor
    property read once). False sends the call through the full checks."""
    if not (isinstance(x, _Tensor) and x.dtype in DTYPE_CODE and isinstance(dout, _Tensor)
            and dout.dtype in DTYPE_CODE and type(eps) is float and 0.0 <= eps < _INF
            and type(weight_offset) is float and -_INF < weight_offset < _INF
            and (dx_dtype is None or dx_dtype in DTYPE_CODE)
            and (residual_dtype is None or residual_dtype in DTYPE_CODE)):
        return False
    shape = x.shape
    if not (shape and shape[-1] and (x.is_cuda or x.is_cpu) and dout.shape == shape):
        return False
    dev = x.device
    if dout.device != dev:
        return False
    if weight is not None and not (isinstance(weight, _Tensor) and weight.dtype in DTYPE_CODE
                                   and weight.shape == (shape[-1],) and weight.device == dev):
        return False
    if rstd is not None:
        rows = x.numel() // shape[-1]
        if not (isinstance(rstd, _Tensor) and rstd.dtype is _F32 and rstd.numel() == rows and rstd.device == dev):
            return False
        if mean is not None:
            if not (isinstance(mean, _Tensor) and mean.dtype is _F32 and mean.numel() == rows and mean.device == dev):
                return False
        elif norm == _lib.LAYERNORM:
            return False
    elif mean is not None:
        return False
    return dresidual_out is None or (isinstance(dresidual_out, _Tensor) and dresidual_out.dtype in DTYPE_CODE
                                     and dresidual_out.shape == shape and dresidual_out.device == dev)


def _check_bwd_fully(fn, norm, x, weight, dout, rstd, mean, dresidual_out, eps, weight_offset, residual_dtype,
                     dx_dtype):
    _check_inputs(fn, x, weight, None, None, None, residual_dtype, eps, weight_offset)
    _check_tensor("dout", dout, fn)
    if dout.shape != x.shape:
        raise ValueError(f"{fn}: dout.shape {tuple(dout.shape)} differs from x.shape {tuple(x.shape)}")
    _check_device("dout", dout, x, fn)
    rows = x.numel() // x.shape[-1]
    for name, s in (("rstd", rstd), ("mean", mean)):
        if s is None:
            continue
        if not isinstance(s, _Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor or None, got {type(s).__name__}")
        if s.dtype != torch.float32:
            raise TypeError(f"{fn}: {name}.dtype is {s.dtype}; expected torch.float32 (as the forward stores it)")
        if s.numel() != rows:
            raise ValueError(f"{fn}: {name} has {s.numel()} elements; expected one per row of x ({rows})")
        _check_device(name, s, x, fn)
    if norm == _lib.LAYERNORM and rstd is not None and mean is None:
        raise ValueError(f"{fn}: rstd is given without mean; LayerNorm needs both (or neither, to recompute)")
    if dresidual_out is not None:
        _check_tensor("dresidual_out", dresidual_out, fn)
        if dresidual_out.shape != x.shape:
            raise ValueError(f"{fn}: dresidual_out.shape {tuple(dresidual_out.shape)} differs from x.shape "
                             f"{tuple(x.shape)}")
        _check_device("dresidual_out", dresidual_out, x, fn)
    _check_dtype_arg("dx_dtype", dx_dtype, fn)


def _bwd_explicit(fn, norm, x, weight, dout, rstd, mean, dresidual_out, has_bias, has_residual, eps,
                  weight_offset, residual_dtype, dx_dtype):
    if not _bwd_args_ok(norm, x, weight, dout, rstd, mean, dresidual_out, eps, weight_offset, residual_dtype,
                        dx_dtype):
        _check_bwd_fully(fn, norm, x, weight, dout, rstd, mean, dresidual_out, eps, weight_offset, residual_dtype,
                         dx_dtype)
        eps = float(eps)
        weight_offset = float(weight_offset)
    if dx_dtype is None:
        dx_dtype = x.dtype
    if rstd is not None:
        if not rstd.is_contiguous():
            rstd = rstd.contiguous()
        if mean is not None and not mean.is_contiguous():
            mean = mean.contiguous()
    if not (has_bias or has_residual or _is_compiling()):
        # The common call: raw pointers in, fresh tensors out, nothing for autograd to record.
        dx, dw, _, _ = _bwd_impl(dout, x, weight, rstd, mean, dresidual_out, norm, eps, weight_offset, dx_dtype,
                                 None, weight is not None, None)
        return dx, dw, None, None
    separate = False
    if has_residual:
        dres_dtype = residual_dtype if residual_dtype is not None else x.dtype
        separate = dres_dtype is not dx_dtype
    args = (dout, x, weight, rstd, mean, dresidual_out, norm, eps, weight_offset, dx_dtype,
            dres_dtype if separate else None, weight is not None,
            (weight.dtype if weight is not None else x.dtype) if has_bias else None)
    if _is_compiling():
        with torch.no_grad():  # explicit pair: no autograd through the op
            dx, dw, db, dres = bwd_op(*args)
    else:
        dx, dw, db, dres = _bwd_impl(*args)
    return (dx, dw if weight is not None else None, db if has_bias else None,
            (dres if separate else dx) if has_residual else None)


def rmsnorm_bwd(x, weight, dout, rstd=None, dresidual_out=None, has_bias=False, has_residual=False, eps=1e-6,
                weight_offset=0.0, residual_dtype=None, dx_dtype=None):
    """Backward only: (dx, dweight, dbias, dresidual). x is what the forward
    normalized (residual_out when a residual was fused); rstd from the forward, or
    None to recompute it from x and eps. dweight is None without weight, dbias
    unless has_bias, dresidual unless has_residual."""
    return _bwd_explicit("rmsnorm_bwd", _lib.RMSNORM, x, weight, dout, rstd, None, dresidual_out, has_bias,
                         has_residual, eps, weight_offset, residual_dtype, dx_dtype)


def layernorm_bwd(x, weight, dout, rstd=None, mean=None, dresidual_out=None, has_bias=False, has_residual=False,
                  eps=1e-5, weight_offset=0.0, residual_dtype=None, dx_dtype=None):
    """Backward only, as rmsnorm_bwd; LayerNorm needs mean with rstd (or neither)."""
    return _bwd_explicit("layernorm_bwd", _lib.LAYERNORM, x, weight, dout, rstd, mean, dresidual_out, has_bias,
                         has_residual, eps, weight_offset, residual_dtype, dx_dtype)
