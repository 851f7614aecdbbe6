"""fusednorm for PyTorch: fused RMSNorm / LayerNorm (optionally with the residual
add) forward and backward from the fusednorm C library, as autograd functions,
torch.library custom ops (torch.compile, CUDA graphs) and nn modules.

    import fusednorm
    y = fusednorm.rmsnorm(x, weight, eps=1e-6)
    norm = fusednorm.RMSNorm(4096)           # drop-in for torch.nn.RMSNorm
"""
from ._lib import cuda_available, library_path, version
from .functional import layernorm, layernorm_bwd, layernorm_fwd, rmsnorm, rmsnorm_bwd, rmsnorm_fwd
from .modules import LayerNorm, ResidualLayerNorm, ResidualRMSNorm, RMSNorm

__version__ = "0.1.0"

__all__ = [
    "rmsnorm", "layernorm", "rmsnorm_fwd", "rmsnorm_bwd", "layernorm_fwd", "layernorm_bwd",
    "RMSNorm", "LayerNorm", "ResidualRMSNorm", "ResidualLayerNorm",
    "version", "cuda_available", "library_path",
]
