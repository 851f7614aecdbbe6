"""The two torch.library custom ops, fusednorm::fwd and fusednorm::bwd, that
call the C library on a tensor's own device and current stream, with their
fake (meta) implementations for torch.compile and the autograd formula that
links them.

Contract of the ops (both norms; `norm` is _lib.RMSNORM or _lib.LAYERNORM):
  fwd(x, weight?, bias?, residual?, ...) -> (y, residual_out, rstd, mean)
     y has x's shape in out_dtype (x.dtype when None); residual_out = x + residual
     in residual_dtype (residual.dtype when None), written only when asked;
     rstd/mean are fp32 [rows], written only when asked (mean: LayerNorm only).
  bwd(dy, x, weight?, rstd?, mean?, dresidual_out?, ...) -> (dx, dweight, dbias, dresidual)
     x is the tensor that was normalized (residual_out when a residual was fused);
     dweight/dbias are written ('=') in the dtypes asked for.
Outputs that were not asked for are empty tensors of shape (0,): a custom op
returns a fixed number of tensors, and empty ones cost nothing.

The raw implementations (_fwd_impl/_bwd_impl) are what the ops run; eager code
calls them through _FusedNormFn (an autograd.Function) to skip the dispatcher's
per-call cost, and torch.compile traces the ops instead (see functional.py).
"""
from typing import Optional, Tuple

import torch

from . import _lib

Tensor = torch.Tensor

DTYPE_CODE = {torch.float32: _lib.F32, torch.float16: _lib.F16, torch.bfloat16: _lib.BF16}

_EMPTY_SHAPE = (0,)
# Every output buffer comes from these two names, so that tests can swap in
# allocators that poison memory (NaN) and show any element left unwritten.
_empty = torch.empty
_empty_like = torch.empty_like
_fwd_pack = _lib.FWD_FORMAT.pack
_bwd_pack = _lib.BWD_FORMAT.pack
_CPU, _CUDA, _LAYERNORM = _lib.CPU, _lib.CUDA, _lib.LAYERNORM
_c_fwd = _lib.fwd
_c_bwd = _lib.bwd
_c_ws = _lib.bwd_workspace_size

try:  # the raw cudaStream_t of a device's current stream, without building a Stream object
    _raw_stream = torch._C._cuda_getCurrentRawStream
except AttributeError:  # pragma: no cover - CPU-only builds of torch

    def _raw_stream(index):
        return torch.cuda.current_stream(index).cuda_stream


def _rows(t, cols):
    """(t or a copy, row_stride) such that t's rows, flattened over the leading
    dimensions, sit row_stride elements apart with a contiguous last dimension;
    copies (once) only when no such layout exists. row_stride 0 means cols."""
    if t.is_contiguous():  # the common case, decided without building a view
        return t, 0
    if t.stride(-1) != 1:
        t = t.contiguous()
        return t, 0
    t2 = t.reshape(-1, cols)  # a view whenever the leading dims flatten; a contiguous copy otherwise
    if t2.shape[0] <= 1:
        return t2, 0
    if t2.stride(0) < cols:  # broadcast (stride 0) or overlapping rows
        return t2.contiguous(), 0
    return t2, t2.stride(0)


def _new_rows(like, dtype):
    """A contiguous output of like's shape in dtype (cheapest allocator call)."""
    if like.is_contiguous():
        return _empty_like(like, dtype=dtype)
    return _empty_like(like, dtype=dtype, memory_format=torch.contiguous_format)


def _where(t):
    """(backend, device, stream) for a call on t's device: torch's current stream there."""
    if t.is_cuda:
        index = t.get_device()
        return _CUDA, index, _raw_stream(index)
    return _CPU, 0, 0


def _fwd_impl(x, weight, bias, residual, norm, eps, weight_offset, out_dtype, residual_dtype,
              store_residual_out, store_stats):
    """Returns (y, residual_out, rstd, mean); absent outputs are None."""
    cols = x.shape[-1]
    rows = x.numel() // cols
    x2, x_stride = _rows(x, cols)
    y = _new_rows(x, out_dtype if out_dtype is not None else x.dtype)
    residual_out = rstd = mean = None
    r_ptr = r_dt = r_stride = ro_ptr = ro_dt = 0
    w_ptr = w_dt = b_ptr = b_dt = rstd_ptr = mean_ptr = 0
    if residual is not None:
        r2, r_stride = _rows(residual, cols)
        r_ptr = r2.data_ptr()
        r_dt = DTYPE_CODE[residual.dtype]
        if store_residual_out:
            residual_out = _new_rows(x, residual_dtype if residual_dtype is not None else residual.dtype)
            ro_ptr = residual_out.data_ptr()
            ro_dt = DTYPE_CODE[residual_out.dtype]
    if weight is not None:
        if not weight.is_contiguous():
            weight = weight.contiguous()
        w_ptr = weight.data_ptr()
        w_dt = DTYPE_CODE[weight.dtype]
    if bias is not None:
        if not bias.is_contiguous():
            bias = bias.contiguous()
        b_ptr = bias.data_ptr()
        b_dt = DTYPE_CODE[bias.dtype]
    if store_stats:
        rstd = _empty((rows,), dtype=torch.float32, device=x.device)
        rstd_ptr = rstd.data_ptr()
        if norm == _LAYERNORM:
            mean = _empty((rows,), dtype=torch.float32, device=x.device)
            mean_ptr = mean.data_ptr()
    if rows:  # an empty tensor's data pointer may be NULL, which the C library rejects
        backend, device, stream = _where(x)
        _c_fwd(_fwd_pack(norm, rows, cols, eps, weight_offset,
                         x2.data_ptr(), DTYPE_CODE[x.dtype], x_stride,
                         r_ptr, r_dt, r_stride,
                         w_ptr, w_dt, 0,
                         b_ptr, b_dt, 0,
                         y.data_ptr(), DTYPE_CODE[y.dtype], 0,
                         ro_ptr, ro_dt, 0,
                         rstd_ptr, mean_ptr, backend, device, stream))
    return y, residual_out, rstd, mean


def _bwd_impl(dy, x, weight, rstd, mean, dresidual_out, norm, eps, weight_offset, dx_dtype, dresidual_dtype,
              need_dweight, dbias_dtype):
    """Returns (dx, dweight, dbias, dresidual); absent outputs are None."""
    cols = x.shape[-1]
    rows = x.numel() // cols
    x2, x_stride = _rows(x, cols)
    dy2, dy_stride = _rows(dy, cols)
    dx = _new_rows(x, dx_dtype)
    dweight = dbias = dresidual = None
    w_ptr = w_dt = dw_ptr = dw_dt = db_ptr = db_dt = 0
    dro_ptr = dro_dt = dro_stride = dr_ptr = dr_dt = rstd_ptr = mean_ptr = 0
    if weight is not None:
        if not weight.is_contiguous():
            weight = weight.contiguous()
        w_ptr = weight.data_ptr()
        w_dt = DTYPE_CODE[weight.dtype]
        if need_dweight:
            dweight = _empty_like(weight)
            dw_ptr = dweight.data_ptr()
            dw_dt = w_dt
    if dbias_dtype is not None:
        dbias = _empty((cols,), dtype=dbias_dtype, device=x.device)
        db_ptr = dbias.data_ptr()
        db_dt = DTYPE_CODE[dbias_dtype]
    if dresidual_out is not None:
        d2, dro_stride = _rows(dresidual_out, cols)
        dro_ptr = d2.data_ptr()
        dro_dt = DTYPE_CODE[dresidual_out.dtype]
    if dresidual_dtype is not None:
        dresidual = _new_rows(x, dresidual_dtype)
        dr_ptr = dresidual.data_ptr()
        dr_dt = DTYPE_CODE[dresidual_dtype]
    if rstd is not None:
        rstd_ptr = rstd.data_ptr()
        if mean is not None:
            mean_ptr = mean.data_ptr()
    if rows == 0:
        # Nothing to normalize: the weight/bias gradients of zero rows are zero.
        if dweight is not None:
            dweight.zero_()
        if dbias is not None:
            dbias.zero_()
        return dx, dweight, dbias, dresidual
    backend, device, stream = _where(x)
    head = (norm, rows, cols, eps, weight_offset, 0,
            dy2.data_ptr(), DTYPE_CODE[dy.dtype], dy_stride,
            x2.data_ptr(), DTYPE_CODE[x.dtype], x_stride,
            w_ptr, w_dt, 0,
            dro_ptr, dro_dt, dro_stride,
            rstd_ptr, mean_ptr,
            dx.data_ptr(), DTYPE_CODE[dx_dtype], 0,
            dr_ptr, dr_dt, 0,
            dw_ptr, dw_dt, 0,
            db_ptr, db_dt, 0)
    need = _c_ws(_bwd_pack(*head, 0, 0, backend, device, stream))
    ws_ptr = 0
    if need:
        ws = _empty((need,), dtype=torch.uint8, device=x.device)
        ws_ptr = ws.data_ptr()
    _c_bwd(_bwd_pack(*head, ws_ptr, need, backend, device, stream))
    return dx, dweight, dbias, dresidual


def _or_empty(ts, like):
    # A custom op returns a fixed number of fresh tensors: absent ones are (0,).
    return tuple(t if t is not None else like.new_empty(_EMPTY_SHAPE, dtype=torch.float32) for t in ts)


# ---- custom ops ------------------------------------------------------------------


@torch.library.custom_op("fusednorm::fwd", mutates_args=())
def fwd_op(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], residual: Optional[Tensor], norm: int,
           eps: float, weight_offset: float, out_dtype: Optional[torch.dtype], residual_dtype: Optional[torch.dtype],
           store_residual_out: bool, store_stats: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    return _or_empty(_fwd_impl(x, weight, bias, residual, norm, eps, weight_offset, out_dtype, residual_dtype,
                               store_residual_out, store_stats), x)


@fwd_op.register_fake
def _fwd_fake(x, weight, bias, residual, norm, eps, weight_offset, out_dtype, residual_dtype, store_residual_out,
              store_stats):
    rows = x.numel() // x.shape[-1]
    y = x.new_empty(x.shape, dtype=out_dtype if out_dtype is not None else x.dtype)
    if residual is not None and store_residual_out:
        residual_out = x.new_empty(x.shape, dtype=residual_dtype if residual_dtype is not None else residual.dtype)
    else:
        residual_out = x.new_empty(_EMPTY_SHAPE, dtype=torch.float32)
    if store_stats:
        rstd = x.new_empty((rows,), dtype=torch.float32)
        mean = x.new_empty((rows,) if norm == _lib.LAYERNORM else _EMPTY_SHAPE, dtype=torch.float32)
    else:
        rstd = x.new_empty(_EMPTY_SHAPE, dtype=torch.float32)
        mean = x.new_empty(_EMPTY_SHAPE, dtype=torch.float32)
    return y, residual_out, rstd, mean


@torch.library.custom_op("fusednorm::bwd", mutates_args=())
def bwd_op(dy: Tensor, x: Tensor, weight: Optional[Tensor], rstd: Optional[Tensor], mean: Optional[Tensor],
           dresidual_out: Optional[Tensor], norm: int, eps: float, weight_offset: float, dx_dtype: torch.dtype,
           dresidual_dtype: Optional[torch.dtype], need_dweight: bool,
           dbias_dtype: Optional[torch.dtype]) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    return _or_empty(_bwd_impl(dy, x, weight, rstd, mean, dresidual_out, norm, eps, weight_offset, dx_dtype,
                               dresidual_dtype, need_dweight, dbias_dtype), x)


@bwd_op.register_fake
def _bwd_fake(dy, x, weight, rstd, mean, dresidual_out, norm, eps, weight_offset, dx_dtype, dresidual_dtype,
              need_dweight, dbias_dtype):
    cols = x.shape[-1]
    dx = x.new_empty(x.shape, dtype=dx_dtype)
    if weight is not None and need_dweight:
        dweight = x.new_empty((cols,), dtype=weight.dtype)
    else:
        dweight = x.new_empty(_EMPTY_SHAPE, dtype=torch.float32)
    dbias = x.new_empty((cols,) if dbias_dtype is not None else _EMPTY_SHAPE,
                        dtype=dbias_dtype if dbias_dtype is not None else torch.float32)
    if dresidual_dtype is not None:
        dresidual = x.new_empty(x.shape, dtype=dresidual_dtype)
    else:
        dresidual = x.new_empty(_EMPTY_SHAPE, dtype=torch.float32)
    return dx, dweight, dbias, dresidual


# ---- autograd ----------------------------------------------------------------------
# One formula serves both paths: register_autograd (the ops, under torch.compile)
# and _FusedNormFn (eager). The forward saves what the backward reads: the
# normalized tensor (x, or residual_out when a residual was fused), weight, rstd
# and mean. A caller that asks for no gradient gets no stats stored (functional.py
# passes store_stats=False), and then no backward can run.


def _setup(ctx, x, weight, bias, residual, norm, eps, weight_offset, residual_out, rstd, mean):
    normalized = residual_out if residual is not None else x
    # The ops give empty (0,) tensors for absent stats; the eager path gives None.
    rstd = rstd if rstd is not None and rstd.numel() else None
    mean = mean if mean is not None and mean.numel() else None
    ctx.save_for_backward(normalized, weight, rstd, mean)
    ctx.norm = norm
    ctx.eps = eps
    ctx.weight_offset = weight_offset
    ctx.x_dtype = x.dtype
    ctx.has_residual = residual is not None
    ctx.residual_dtype = residual.dtype if residual is not None else None
    ctx.bias_dtype = bias.dtype if bias is not None else None


def _grads(ctx, dy, dresidual_out, bwd):
    normalized, weight, rstd, mean = ctx.saved_tensors
    need = ctx.needs_input_grad  # (x, weight, bias, residual, ...)
    if dy is None:  # only residual_out reached the loss: y's gradient is zero
        if dresidual_out is None:
            return None, None, None, None
        dy = torch.zeros(normalized.shape, dtype=normalized.dtype, device=normalized.device)
    want_dresidual = ctx.has_residual and need[3]
    # dx and dresidual are the same numbers; a second buffer only when dtypes differ.
    separate_dresidual = want_dresidual and ctx.residual_dtype != ctx.x_dtype
    if dresidual_out is not None and dresidual_out.numel() == 0:
        dresidual_out = None
    dx, dweight, dbias, dresidual = bwd(
        dy, normalized, weight, rstd, mean, dresidual_out, ctx.norm, ctx.eps, ctx.weight_offset, ctx.x_dtype,
        ctx.residual_dtype if separate_dresidual else None, weight is not None and need[1],
        ctx.bias_dtype if need[2] else None)
    grad_x = dx if need[0] else None
    grad_w = dweight if weight is not None and need[1] else None
    grad_b = dbias if ctx.bias_dtype is not None and need[2] else None
    grad_r = (dresidual if separate_dresidual else dx) if want_dresidual else None
    return grad_x, grad_w, grad_b, grad_r


def _op_setup_context(ctx, inputs, output):
    x, weight, bias, residual, norm, eps, weight_offset = inputs[:7]
    _, residual_out, rstd, mean = output
    ctx.set_materialize_grads(False)
    _setup(ctx, x, weight, bias, residual, norm, eps, weight_offset, residual_out, rstd, mean)


def _op_backward(ctx, dy, dresidual_out, _drstd, _dmean):
    gx, gw, gb, gr = _grads(ctx, dy, dresidual_out, bwd_op)
    return gx, gw, gb, gr, None, None, None, None, None, None, None


torch.library.register_autograd("fusednorm::fwd", _op_backward, setup_context=_op_setup_context)


class _FusedNormFn(torch.autograd.Function):
    """Eager path: the same implementation and formula as the ops, without the
    dispatcher round trip. Returns (y, residual_out); residual_out may be None."""

    @staticmethod
    def forward(ctx, x, weight, bias, residual, norm, eps, weight_offset, out_dtype, residual_dtype,
                store_residual_out):
        y, residual_out, rstd, mean = _fwd_impl(x, weight, bias, residual, norm, eps, weight_offset, out_dtype,
                                                residual_dtype, store_residual_out, True)
        ctx.set_materialize_grads(False)
        _setup(ctx, x, weight, bias, residual, norm, eps, weight_offset, residual_out, rstd, mean)
        return y, residual_out

    @staticmethod
    def backward(ctx, dy, dresidual_out):
        gx, gw, gb, gr = _grads(ctx, dy, dresidual_out, _bwd_impl)
        return gx, gw, gb, gr, None, None, None, None, None, None
