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
import threading
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
_F32 = torch.float32
_U8 = torch.uint8
_fwd_pack = _lib.FWD_FORMAT.pack
_bwd_pack = _lib.BWD_FORMAT.pack
_CPU, _CUDA, _LAYERNORM = _lib.CPU, _lib.CUDA, _lib.LAYERNORM
_ERROR_WORKSPACE = _lib.ERROR_WORKSPACE
# The raw C entry points (they return the status; _lib.raise_status turns a
# failure into RuntimeError), called without a Python wrapper frame.
_c_fwd = _lib.c_fwd
_c_bwd = _lib.c_bwd
_c_ws = _lib.bwd_workspace_size
_raise = _lib.raise_status

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
        if dtype is like.dtype:
            return _empty_like(like)
        return _empty_like(like, dtype=dtype)
    return _empty_like(like, dtype=dtype, memory_format=torch.contiguous_format)


def _where(t):
    """(backend, device, stream) for a call on t's device: torch's current stream there."""
    if t.is_cuda:
        index = t.get_device()
        return _CUDA, index, _raw_stream(index)
    return _CPU, 0, 0


# ---- backward workspace ------------------------------------------------------------
# A backward that sums dweight/dbias partials needs a workspace; allocating it per
# call costs an allocator call and a second crossing into C (the size query),
# which for small problems is a large share of the call. So each thread keeps one
# workspace per device and grows it on demand: the backward is tried with the
# cached one, and only when the library answers FUSEDNORM_ERROR_WORKSPACE (its
# contract: nothing written) is the size asked for and the call repeated.
# Reuse is safe only where consecutive users are ordered: on the CPU a call is
# synchronous and the cache is per thread (ctypes releases the GIL, so threads
# may run the library at the same time); on CUDA only on the default stream
# (raw stream 0), where every launch is queued in order and which can never be
# under CUDA graph capture. Elsewhere (side streams, graph capture: a graph bakes
# the pointer in, so the buffer must come from the graph's pool and never be
# freed by a later growth) each call allocates its own workspace from torch.
_WS_CACHE_MAX_BYTES = 16 << 20  # larger workspaces belong to calls whose kernels dwarf an allocation
_ws_local = threading.local()
# Tests set this to a function that fills a reused workspace with garbage, so
# that a library reading partials it did not write this call shows up.
_ws_reuse_hook = None


def _ws_cache():
    cache = _ws_local.__dict__.get("by_device")
    if cache is None:
        cache = _ws_local.by_device = {}
    return cache


def _fwd_impl(x, weight, bias, residual, norm, eps, weight_offset, out_dtype, residual_dtype,
              store_residual_out, store_stats):
    """Returns (y, residual_out, rstd, mean); absent outputs are None."""
    cols = x.shape[-1]
    rows = x.numel() // cols
    x_dt = x.dtype
    if x.is_contiguous():  # inline the common case of _rows / _new_rows
        x_ptr = x.data_ptr()
        x_stride = 0
        y = _empty_like(x) if out_dtype is None or out_dtype is x_dt else _empty_like(x, dtype=out_dtype)
    else:
        x2, x_stride = _rows(x, cols)
        x_ptr = x2.data_ptr()
        y = _new_rows(x, out_dtype if out_dtype is not None else x_dt)
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
        dev = x.device
        rstd = _empty(rows, dtype=_F32, device=dev)
        rstd_ptr = rstd.data_ptr()
        if norm == _LAYERNORM:
            mean = _empty(rows, dtype=_F32, device=dev)
            mean_ptr = mean.data_ptr()
    if rows:  # an empty tensor's data pointer may be NULL, which the C library rejects
        if x.is_cuda:
            device = x.get_device()
            backend, stream = _CUDA, _raw_stream(device)
        else:
            backend = device = stream = 0
        s = _c_fwd(_fwd_pack(norm, rows, cols, eps, weight_offset,
                             x_ptr, DTYPE_CODE[x_dt], x_stride,
                             r_ptr, r_dt, r_stride,
                             w_ptr, w_dt, 0,
                             b_ptr, b_dt, 0,
                             y.data_ptr(), DTYPE_CODE[y.dtype], 0,
                             ro_ptr, ro_dt, 0,
                             rstd_ptr, mean_ptr, backend, device, stream))
        if s:
            _raise(s, "fusednorm_fwd")
    return y, residual_out, rstd, mean


def _bwd_impl(dy, x, weight, rstd, mean, dresidual_out, norm, eps, weight_offset, dx_dtype, dresidual_dtype,
              need_dweight, dbias_dtype):
    """Returns (dx, dweight, dbias, dresidual); absent outputs are None."""
    cols = x.shape[-1]
    rows = x.numel() // cols
    x_dt = x.dtype
    x_code = DTYPE_CODE[x_dt]
    if x.is_contiguous():
        x_ptr = x.data_ptr()
        x_stride = 0
        if dx_dtype is x_dt:
            dx = _empty_like(x)
            dx_code = x_code
        else:
            dx = _empty_like(x, dtype=dx_dtype)
            dx_code = DTYPE_CODE[dx_dtype]
    else:
        x2, x_stride = _rows(x, cols)
        x_ptr = x2.data_ptr()
        dx = _new_rows(x, dx_dtype)
        dx_code = DTYPE_CODE[dx_dtype]
    if dy.is_contiguous():
        dy_ptr = dy.data_ptr()
        dy_stride = 0
    else:
        dy2, dy_stride = _rows(dy, cols)
        dy_ptr = dy2.data_ptr()
    dweight = dbias = dresidual = None
    if weight is None:
        w_ptr = w_dt = dw_ptr = dw_dt = 0
    else:
        if not weight.is_contiguous():
            weight = weight.contiguous()
        w_ptr = weight.data_ptr()
        w_dt = DTYPE_CODE[weight.dtype]
        if need_dweight:
            dweight = _empty_like(weight)
            dw_ptr = dweight.data_ptr()
            dw_dt = w_dt
        else:
            dw_ptr = dw_dt = 0
    # The rarer inputs and outputs, tested together so that the common call
    # (none of them) pays for one test rather than four.
    db_ptr = db_dt = dro_ptr = dro_dt = dro_stride = dr_ptr = dr_dt = 0
    if dbias_dtype is not None or dresidual_out is not None or dresidual_dtype is not None:
        if dbias_dtype is not None:
            dbias = _empty(cols, dtype=dbias_dtype, device=x.device)
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
    if rstd is None:
        rstd_ptr = mean_ptr = 0
    else:
        rstd_ptr = rstd.data_ptr()
        mean_ptr = mean.data_ptr() if mean is not None else 0
    if rows == 0:
        # Nothing to normalize: the weight/bias gradients of zero rows are zero.
        if dweight is not None:
            dweight.zero_()
        if dbias is not None:
            dbias.zero_()
        return dx, dweight, dbias, dresidual
    dy_code = DTYPE_CODE[dy.dtype]
    dx_ptr = dx.data_ptr()
    if x.is_cuda:
        device = x.get_device()
        backend, stream = _CUDA, _raw_stream(device)
        key = device
    else:
        backend = device = stream = 0
        key = -1
    if not stream:
        # The default stream or the CPU: try the cached workspace first, packing
        # the arguments in one call (no intermediate tuple).
        cache = _ws_local.__dict__.get("by_device") or _ws_cache()
        cached = cache.get(key)
        if cached is None:
            ws_ptr = ws_bytes = 0
        else:
            ws, ws_ptr, ws_bytes = cached
            if _ws_reuse_hook is not None:
                _ws_reuse_hook(ws)
        s = _c_bwd(_bwd_pack(norm, rows, cols, eps, weight_offset, 0, dy_ptr, dy_code, dy_stride,
                             x_ptr, x_code, x_stride, w_ptr, w_dt, 0, dro_ptr, dro_dt, dro_stride,
                             rstd_ptr, mean_ptr, dx_ptr, dx_code, 0, dr_ptr, dr_dt, 0, dw_ptr, dw_dt, 0,
                             db_ptr, db_dt, 0, ws_ptr, ws_bytes, backend, device, stream))
        if s != _ERROR_WORKSPACE:
            if s:
                _raise(s, "fusednorm_bwd")
            return dx, dweight, dbias, dresidual
    head = (norm, rows, cols, eps, weight_offset, 0,
            dy_ptr, dy_code, dy_stride,
            x_ptr, x_code, x_stride,
            w_ptr, w_dt, 0,
            dro_ptr, dro_dt, dro_stride,
            rstd_ptr, mean_ptr,
            dx_ptr, dx_code, 0,
            dr_ptr, dr_dt, 0,
            dw_ptr, dw_dt, 0,
            db_ptr, db_dt, 0)
    need = _c_ws(_bwd_pack(*head, 0, 0, backend, device, stream))
    if stream:  # a side stream or a graph capture: a workspace of this call's own
        ws = _empty(need, dtype=_U8, device=x.device) if need else None
        s = _c_bwd(_bwd_pack(*head, ws.data_ptr() if need else 0, need, backend, device, stream))
    else:  # the cached workspace is missing or too small: nothing was written
        ws = _empty(need, dtype=_U8, device=x.device)
        ws_ptr = ws.data_ptr()
        if need <= _WS_CACHE_MAX_BYTES:
            cache[key] = (ws, ws_ptr, need)
        s = _c_bwd(_bwd_pack(*head, ws_ptr, need, backend, device, stream))
    if s:
        _raise(s, "fusednorm_bwd")
    return dx, dweight, dbias, dresidual


def _or_empty(ts, like):
    # A custom op returns a fixed number of fresh tensors: absent ones are (0,).
    # torch.empty with an int size parses faster than new_empty with a shape.
    dev = like.device
    return tuple(t if t is not None else _empty(0, dtype=_F32, device=dev) for t in ts)


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


def _setup(ctx, x, weight, bias, residual, norm, eps, weight_offset):
    # One tuple: fewer attribute stores per call than one attribute per value.
    ctx.meta = (norm, eps, weight_offset, x.dtype, residual.dtype if residual is not None else None,
                bias.dtype if bias is not None else None)


def _grads(ctx, dy, dresidual_out, bwd, normalized, weight, rstd, mean):
    norm, eps, weight_offset, x_dtype, residual_dtype, bias_dtype = ctx.meta
    need_x, need_w, need_b, need_r = ctx.needs_input_grad[:4]  # (x, weight, bias, residual, ...)
    if dy is None:  # only residual_out reached the loss: y's gradient is zero
        if dresidual_out is None:
            return None, None, None, None
        dy = torch.zeros(normalized.shape, dtype=normalized.dtype, device=normalized.device)
    want_dresidual = residual_dtype is not None and need_r
    # dx and dresidual are the same numbers; a second buffer only when dtypes differ.
    separate_dresidual = want_dresidual and residual_dtype is not x_dtype
    if dresidual_out is not None and dresidual_out.numel() == 0:
        dresidual_out = None
    want_dweight = weight is not None and need_w
    want_dbias = bias_dtype is not None and need_b
    dx, dweight, dbias, dresidual = bwd(
        dy, normalized, weight, rstd, mean, dresidual_out, norm, eps, weight_offset, x_dtype,
        residual_dtype if separate_dresidual else None, want_dweight, bias_dtype if want_dbias else None)
    # The ops give empty (0,) tensors, not None, for what was not asked for.
    return (dx if need_x else None, dweight if want_dweight else None, dbias if want_dbias else None,
            (dresidual if separate_dresidual else dx) if want_dresidual else None)


def _op_setup_context(ctx, inputs, output):
    x, weight, bias, residual, norm, eps, weight_offset = inputs[:7]
    _, residual_out, rstd, mean = output
    ctx.set_materialize_grads(False)
    # rstd and mean are outputs of the op: saved as tensors (an attribute would
    # make a reference cycle, and compiled autograd must see them saved). The op
    # gives empty (0,) tensors for absent stats.
    ctx.save_for_backward(residual_out if residual is not None else x, weight,
                          rstd if rstd.numel() else None, mean if mean.numel() else None)
    _setup(ctx, x, weight, bias, residual, norm, eps, weight_offset)


def _op_backward(ctx, dy, dresidual_out, _drstd, _dmean):
    gx, gw, gb, gr = _grads(ctx, dy, dresidual_out, bwd_op, *ctx.saved_tensors)
    return gx, gw, gb, gr, None, None, None, None, None, None, None


torch.library.register_autograd("fusednorm::fwd", _op_backward, setup_context=_op_setup_context)


# Up to this many elements the eager autograd path stores no rstd/mean (see
# _FusedNormFn.forward): such a problem is launch-bound on the device and a few
# microseconds on the CPU, so re-reading its rows in the backward is free.
_RECOMPUTE_STATS_MAX_ELEMENTS = 1 << 16


class _FusedNormFn(torch.autograd.Function):
    """Eager path: the same implementation and formula as the ops, without the
    dispatcher round trip. apply(x, weight, bias, residual, cfg) with cfg =
    (norm, eps, weight_offset, out_dtype, residual_dtype, store_residual_out):
    one tuple rather than six arguments, which apply would scan one by one.
    Returns (y, residual_out); residual_out may be None."""

    @staticmethod
    def forward(ctx, x, weight, bias, residual, cfg):
        norm, eps, weight_offset, out_dtype, residual_dtype, store_residual_out = cfg
        # Small problems keep no stats: their backward recomputes rstd (and mean)
        # from the normalized rows at no measurable cost, and the forward saves
        # an allocation or two, a large share of its host time at these sizes.
        y, residual_out, rstd, mean = _fwd_impl(x, weight, bias, residual, norm, eps, weight_offset, out_dtype,
                                                residual_dtype, store_residual_out,
                                                x.numel() > _RECOMPUTE_STATS_MAX_ELEMENTS)
        ctx.set_materialize_grads(False)
        # What autograd must guard goes through save_for_backward: the
        # normalized tensor (x, an input, or residual_out, an output) and weight,
        # so that in-place changes to them are caught. rstd and mean are this
        # call's private buffers, neither inputs nor outputs: a plain attribute
        # holds them without a cycle and costs less than a saved variable.
        ctx.save_for_backward(residual_out if residual is not None else x, weight)
        ctx.stats = (rstd, mean)
        _setup(ctx, x, weight, bias, residual, norm, eps, weight_offset)
        return y, residual_out

    @staticmethod
    def backward(ctx, dy, dresidual_out):
        gx, gw, gb, gr = _grads(ctx, dy, dresidual_out, _bwd_impl, *ctx.saved_tensors, *ctx.stats)
        return gx, gw, gb, gr, None


class _PlainNormFn(torch.autograd.Function):
    """The common eager call, without bias or residual: apply(x, weight, cfg)
    with cfg = (norm, eps, weight_offset, out_dtype, x_code, weight_code, cols,
    on_cuda), the last four as the caller's checks read them (weight_code 0
    without weight); returns y alone. autograd's apply costs a few tenths of a
    microsecond per argument and per output it scans, so this class takes three
    arguments and gives one output where _FusedNormFn takes five and gives two."""

    @staticmethod
    def forward(ctx, x, weight, cfg):
        norm, eps, weight_offset, out_dtype, x_code, w_code, cols, on_cuda = cfg
        n = x.numel()
        if (n and n <= _RECOMPUTE_STATS_MAX_ELEMENTS and out_dtype is None and x.is_contiguous()
                and (weight is None or weight.is_contiguous())):
            # The usual small call, inlined: y like x, no stats (the backward
            # recomputes them, as _FusedNormFn does below the same threshold).
            y = _empty_like(x)
            if on_cuda:
                device = x.get_device()
                backend, stream = _CUDA, _raw_stream(device)
            else:
                backend = device = stream = 0
            s = _c_fwd(_fwd_pack(norm, n // cols, cols, eps, weight_offset,
                                 x.data_ptr(), x_code, 0,
                                 0, 0, 0,
                                 weight.data_ptr() if weight is not None else 0, w_code, 0,
                                 0, 0, 0,
                                 y.data_ptr(), x_code, 0,
                                 0, 0, 0,
                                 0, 0, backend, device, stream))
            if s:
                _raise(s, "fusednorm_fwd")
            ctx.meta = (cfg, None, None)
        else:
            y, _, rstd, mean = _fwd_impl(x, weight, None, None, norm, eps, weight_offset, out_dtype, None, False,
                                         n > _RECOMPUTE_STATS_MAX_ELEMENTS)
            # One attribute for everything the backward reads besides the saved tensors.
            ctx.meta = (cfg, rstd, mean)
        ctx.save_for_backward(x, weight)
        return y

    @staticmethod
    def backward(ctx, dy):
        if dy is None:
            return None, None, None
        x, weight = ctx.saved_tensors
        (norm, eps, weight_offset, _, x_code, w_code, cols, on_cuda), rstd, mean = ctx.meta
        need_x, need_w = ctx.needs_input_grad[:2]
        need_dweight = need_w and weight is not None
        if on_cuda:
            device = x.get_device()
            backend, stream = _CUDA, _raw_stream(device)
        else:
            backend = device = stream = 0
        if not stream and dy.is_contiguous() and x.is_contiguous() and (weight is None or weight.is_contiguous()):
            # The usual call (the CPU, or CUDA's default stream), inlined: codes
            # and cols from the forward's checks, the thread's cached workspace
            # for the device (keyed as _bwd_impl keys it). Anything else (a side
            # stream or graph capture, strided tensors, a workspace to grow)
            # goes through _bwd_impl.
            cached = (_ws_local.__dict__.get("by_device") or _ws_cache()).get(device if on_cuda else -1)
            dy_code = DTYPE_CODE.get(dy.dtype)
            rows = x.numel() // cols
            if cached is not None and dy_code is not None and rows:
                ws, ws_ptr, ws_bytes = cached
                if _ws_reuse_hook is not None:
                    _ws_reuse_hook(ws)
                dx = _empty_like(x)
                if need_dweight:
                    dweight = _empty_like(weight)
                    dw_ptr = dweight.data_ptr()
                else:
                    dweight = None
                    dw_ptr = 0
                s = _c_bwd(_bwd_pack(norm, rows, cols, eps, weight_offset, 0,
                                     dy.data_ptr(), dy_code, 0,
                                     x.data_ptr(), x_code, 0,
                                     weight.data_ptr() if weight is not None else 0, w_code, 0,
                                     0, 0, 0,
                                     rstd.data_ptr() if rstd is not None else 0,
                                     mean.data_ptr() if mean is not None else 0,
                                     dx.data_ptr(), x_code, 0,
                                     0, 0, 0,
                                     dw_ptr, w_code if need_dweight else 0, 0,
                                     0, 0, 0,
                                     ws_ptr, ws_bytes, backend, device, 0))
                if not s:
                    return (dx if need_x else None), dweight, None
                if s != _ERROR_WORKSPACE:  # a workspace too small wrote nothing: _bwd_impl grows it
                    _raise(s, "fusednorm_bwd")
        dx, dweight, _, _ = _bwd_impl(dy, x, weight, rstd, mean, None, norm, eps, weight_offset, x.dtype, None,
                                      need_dweight, None)
        return (dx if need_x else None), dweight, None
