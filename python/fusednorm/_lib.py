"""The ctypes binding to libfusednorm: finds the shared library, mirrors the
public structs of include/fusednorm.h, and exposes fwd / bwd / workspace-size
calls that raise RuntimeError carrying fusednorm_last_error() on failure.

Everything that can be done once (loading, argtypes, struct classes, field
offsets) is done at import; a call only fills one struct and crosses into C.
"""
import ctypes
import os
import struct

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIB_NAME = "libfusednorm.so"


def _candidate_paths():
    env = os.environ.get("FUSEDNORM_LIBRARY")
    if env:
        # An explicit choice is the only candidate: falling back silently would
        # hide a wrong path.
        return [env]
    return [
        os.path.join(_HERE, _LIB_NAME),  # installed by `pip install .`
        os.path.normpath(os.path.join(_HERE, "..", "..", "build", _LIB_NAME)),  # repo checkout after `make`
    ]


def _load():
    tried = []
    for path in _candidate_paths():
        if os.path.exists(path):
            try:
                return ctypes.CDLL(path), path
            except OSError as e:
                tried.append(f"{path}: {e}")
        else:
            tried.append(f"{path}: not found")
    raise ImportError(
        "fusednorm: cannot load the C library libfusednorm.so (build it with `make`, "
        "install with `pip install .`, or set FUSEDNORM_LIBRARY). Tried:\n  " + "\n  ".join(tried)
    )


lib, library_path = _load()
if not hasattr(lib, "fusednorm_fwd"):
    raise ImportError(f"fusednorm: {library_path} does not export fusednorm_fwd (the public functions must be "
                      "built with default symbol visibility)")

# ---- enums (include/fusednorm.h) ------------------------------------------------
OK = 0
ERROR_INVALID_ARGUMENT = 1
ERROR_UNSUPPORTED = 2
ERROR_WORKSPACE = 3
ERROR_DEVICE = 4
ERROR_OUT_OF_MEMORY = 5

F32, F16, BF16 = 0, 1, 2
RMSNORM, LAYERNORM = 0, 1
CPU, CUDA = 0, 1
ACCUMULATE = 1 << 0
ATOMIC_DWEIGHT = 1 << 1


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("row_stride", ctypes.c_int64)]


class FwdArgs(ctypes.Structure):
    _fields_ = [
        ("norm", ctypes.c_int),
        ("rows", ctypes.c_int64),
        ("cols", ctypes.c_int64),
        ("eps", ctypes.c_float),
        ("weight_offset", ctypes.c_float),
        ("x", Tensor),
        ("residual", Tensor),
        ("weight", Tensor),
        ("bias", Tensor),
        ("y", Tensor),
        ("residual_out", Tensor),
        ("rstd", ctypes.c_void_p),
        ("mean", ctypes.c_void_p),
        ("backend", ctypes.c_int),
        ("device", ctypes.c_int),
        ("stream", ctypes.c_void_p),
    ]


class BwdArgs(ctypes.Structure):
    _fields_ = [
        ("norm", ctypes.c_int),
        ("rows", ctypes.c_int64),
        ("cols", ctypes.c_int64),
        ("eps", ctypes.c_float),
        ("weight_offset", ctypes.c_float),
        ("flags", ctypes.c_uint),
        ("dy", Tensor),
        ("x", Tensor),
        ("weight", Tensor),
        ("dresidual_out", Tensor),
        ("rstd", ctypes.c_void_p),
        ("mean", ctypes.c_void_p),
        ("dx", Tensor),
        ("dresidual", Tensor),
        ("dweight", Tensor),
        ("dbias", Tensor),
        ("workspace", ctypes.c_void_p),
        ("workspace_bytes", ctypes.c_size_t),
        ("backend", ctypes.c_int),
        ("device", ctypes.c_int),
        ("stream", ctypes.c_void_p),
    ]


# The hot path packs the args with one struct.Struct.pack call into a bytes
# object and passes its buffer (a ctypes Structure costs ~0.3 us per nested
# field set). Native ('@') packing applies the C alignment rules; the layout is
# checked against the ctypes mirror below, at import, field by field.
FWD_FORMAT = struct.Struct("@i q q f f" + " P i q" * 6 + " P P i i P")
BWD_FORMAT = struct.Struct("@i q q f f I" + " P i q" * 4 + " P P" + " P i q" * 4 + " P N i i P")


def _check_layout(fmt, cls):
    # Give every field a distinct value through ctypes, pack the same values in
    # declaration order, and compare the bytes the C library would read.
    obj = cls()
    values = []
    counter = [1]

    def fill(target, ctype):
        for name, ftype in ctype._fields_:
            if isinstance(ftype, type) and issubclass(ftype, ctypes.Structure):
                fill(getattr(target, name), ftype)
                continue
            v = counter[0]
            counter[0] += 1
            if ftype is ctypes.c_float:
                v = float(v)
            setattr(target, name, v)
            values.append(v)

    fill(obj, cls)
    packed = fmt.pack(*values)
    if bytes(memoryview(obj).cast("B"))[:len(packed)] != packed:
        raise ImportError(f"fusednorm: the packed layout of {cls.__name__} does not match the C struct")


_check_layout(FWD_FORMAT, FwdArgs)
_check_layout(BWD_FORMAT, BwdArgs)

_fwd = lib.fusednorm_fwd
_fwd.argtypes = [ctypes.c_char_p]
_fwd.restype = ctypes.c_int
_bwd = lib.fusednorm_bwd
_bwd.argtypes = [ctypes.c_char_p]
_bwd.restype = ctypes.c_int
_ws = lib.fusednorm_bwd_workspace_size
_ws.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
_ws.restype = ctypes.c_int
lib.fusednorm_status_string.argtypes = [ctypes.c_int]
lib.fusednorm_status_string.restype = ctypes.c_char_p
lib.fusednorm_last_error.argtypes = []
lib.fusednorm_last_error.restype = ctypes.c_char_p
lib.fusednorm_version.argtypes = []
lib.fusednorm_version.restype = ctypes.c_int
lib.fusednorm_cuda_available.argtypes = []
lib.fusednorm_cuda_available.restype = ctypes.c_int

_addressof = ctypes.addressof
# The raw entry points for the hot path: they take FWD_FORMAT / BWD_FORMAT bytes
# and return the status, which the caller checks (no wrapper frame per call).
c_fwd = _fwd
c_bwd = _bwd


def version():
    """The C library's version as MAJOR*10000 + MINOR*100 + PATCH."""
    return lib.fusednorm_version()


def cuda_available():
    """True when the C library was built with CUDA and a device is usable."""
    return bool(lib.fusednorm_cuda_available())


def raise_status(status, where):
    """Raise the RuntimeError for a failed call (status != 0) of the C function where."""
    # fusednorm_last_error is per thread; ctypes calls run on this thread, so
    # the message read here is the one the failed call just set.
    msg = lib.fusednorm_last_error().decode("utf-8", "replace")
    kind = lib.fusednorm_status_string(status).decode()
    raise RuntimeError(f"{where}: {kind}: {msg}")


def fwd(packed):
    """packed: FWD_FORMAT bytes (or a FwdArgs)."""
    s = _fwd(packed if isinstance(packed, bytes) else bytes(packed))
    if s:
        raise_status(s, "fusednorm_fwd")


def bwd(packed):
    """packed: BWD_FORMAT bytes (or a BwdArgs)."""
    s = _bwd(packed if isinstance(packed, bytes) else bytes(packed))
    if s:
        raise_status(s, "fusednorm_bwd")


def bwd_workspace_size(packed):
    out = ctypes.c_size_t(0)
    s = _ws(packed if isinstance(packed, bytes) else bytes(packed), _addressof(out))
    if s:
        raise_status(s, "fusednorm_bwd_workspace_size")
    return out.value
