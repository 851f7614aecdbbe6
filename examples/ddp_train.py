"""Train a small pre-norm transformer with fusednorm's norms under
torch.distributed: DistributedDataParallel over NCCL (or FSDP2's fully_shard
with --fsdp), one process per GPU, launched by torchrun:

    torchrun --standalone --nproc_per_node=2 examples/ddp_train.py --steps 20
    torchrun --standalone --nproc_per_node=2 examples/ddp_train.py --fsdp --dtype bf16
    python3 examples/ddp_train.py --cpu --steps 5      # one process, gloo, CPU

The model: token embedding, a few blocks of [norm -> causal self-attention
(F.scaled_dot_product_attention) -> norm -> MLP], a final norm and an output
layer. The norms fuse the residual add (fusednorm.ResidualRMSNorm /
ResidualLayerNorm, prenorm style): each norm takes the previous sublayer's
output and the residual stream and returns (normalized, new residual stream),
so the add and the norm are one pass over memory in the forward and one in the
backward.

--impl torch builds the identical architecture from torch.nn.RMSNorm /
torch.nn.LayerNorm with explicit residual adds; every parameter has the same
name, so a state_dict loads into either (tests/multigpu/test_ddp_parity.py
trains both and compares them step by step).

Data: next-token prediction on sequences drawn from a fixed random Markov
chain (learnable, so the loss falls), each rank reading its own shard of
every global batch, all from fixed seeds: the run is a pure function of its
arguments and the world size. --dump FILE makes rank 0 write, per step, the
loss (averaged over ranks), the global gradient norm and the gradient norm of
every norm weight/bias, and at the end the full gradient of each norm weight.

With DDP every rank checks after each backward that its reduced norm-weight
gradients equal rank 0's, bit for bit: fusednorm writes a per-rank dweight and
DDP's all-reduce averages it, like any other parameter's gradient.
"""
import os

# No NVLink multicast (NVLS) anywhere: set before torch.distributed (and NCCL)
# start. Callers may still override these in the environment.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

try:
    import fusednorm
except ImportError:  # running from a checkout without PYTHONPATH=python
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import fusednorm

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def fsdp2_available():
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        return False
    return True


# ---- the torch.nn reference norms: same parameters, same names, same results ----


class TorchResidualRMSNorm(nn.RMSNorm):
    """torch.nn.RMSNorm of x + residual, returning (normalized, x + residual)."""

    def forward(self, x, residual=None):
        h = x if residual is None else x + residual
        return super().forward(h), h


class TorchResidualLayerNorm(nn.LayerNorm):
    """torch.nn.LayerNorm of x + residual, returning (normalized, x + residual)."""

    def forward(self, x, residual=None):
        h = x if residual is None else x + residual
        return super().forward(h), h


def make_norm(impl, kind, dim):
    if kind == "rms":
        cls = fusednorm.ResidualRMSNorm if impl == "fusednorm" else TorchResidualRMSNorm
        return cls(dim, eps=1e-6)
    cls = fusednorm.ResidualLayerNorm if impl == "fusednorm" else TorchResidualLayerNorm
    return cls(dim, eps=1e-5)


# ---- the model ----------------------------------------------------------------


class Block(nn.Module):
    def __init__(self, impl, norm, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = make_norm(impl, norm, dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.proj = nn.Linear(dim, dim, bias=False)
        self.norm2 = make_norm(impl, norm, dim)
        self.up = nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, hidden, residual):
        # Pre-norm with the residual add inside the norm: residual is the
        # stream so far (None in the first block), hidden the last sublayer's
        # output.
        y, residual = self.norm1(hidden, residual)
        b, t, d = y.shape
        q, k, v = self.qkv(y).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        hidden = self.proj(a.transpose(1, 2).reshape(b, t, d))
        y, residual = self.norm2(hidden, residual)
        hidden = self.down(F.gelu(self.up(y), approximate="tanh"))
        return hidden, residual


class PreNormTransformer(nn.Module):
    def __init__(self, impl="fusednorm", norm="rms", vocab=256, dim=256, heads=4, layers=4):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(Block(impl, norm, dim, heads) for _ in range(layers))
        self.norm_f = make_norm(impl, norm, dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        hidden, residual = self.embed(tokens), None
        for block in self.blocks:
            hidden, residual = block(hidden, residual)
        y, _ = self.norm_f(hidden, residual)
        return self.head(y)


def norm_parameter_names(model):
    """Names of the norms' weights and biases, in a fixed order."""
    return sorted(n for n, _ in model.named_parameters() if ".norm" in "." + n)


def init_parameters(model, seed):
    """Every parameter from a generator seeded per name, so both impls (and any
    construction order) start from the same numbers. Norm weights are 1 plus
    noise and LayerNorm biases small noise, so that a gradient applied to the
    wrong column cannot pass as correct."""
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            g = torch.Generator().manual_seed(seed * 1000003 + sum(map(ord, name)) * 7919 + len(name))
            if "norm" in name and name.endswith("weight"):
                v = 1.0 + 0.1 * torch.randn(p.shape, generator=g)
            elif "norm" in name and name.endswith("bias"):
                v = 0.05 * torch.randn(p.shape, generator=g)
            else:
                v = 0.02 * torch.randn(p.shape, generator=g)
            p.copy_(v)


# ---- data ------------------------------------------------------------------------


class MarkovData:
    """Sequences from a random first-order Markov chain over `vocab` tokens,
    each token followed by one of 4 likely successors: learnable structure."""

    def __init__(self, vocab, seed):
        g = torch.Generator().manual_seed(seed)
        logits = torch.full((vocab, vocab), -4.0)
        succ = torch.randint(0, vocab, (vocab, 4), generator=g)
        logits.scatter_(1, succ, torch.tensor([3.0, 2.0, 1.0, 0.5]).expand(vocab, 4))
        self.probs = logits.softmax(-1)
        self.vocab = vocab
        self.seed = seed

    def batch(self, step, rank, world, batch_per_rank, seq):
        """Rank `rank`'s shard of global batch `step`: the global batch is the
        same for every world size that divides it, rows split by rank."""
        g = torch.Generator().manual_seed(self.seed * 7777 + step)
        total = batch_per_rank * world
        toks = torch.empty(total, seq + 1, dtype=torch.long)
        toks[:, 0] = torch.randint(0, self.vocab, (total,), generator=g)
        for t in range(seq):
            toks[:, t + 1] = torch.multinomial(self.probs[toks[:, t]], 1, generator=g).squeeze(1)
        mine = toks[rank * batch_per_rank:(rank + 1) * batch_per_rank]
        return mine[:, :-1], mine[:, 1:]


# ---- distributed set-up ----------------------------------------------------------------


def setup(args):
    """(rank, world, device). Under torchrun: NCCL on cuda:LOCAL_RANK (gloo with
    --cpu). Without torchrun: a one-process gloo group, so the same code runs."""
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT", "29531"))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.cpu:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    else:
        if not torch.cuda.is_available():
            raise SystemExit("ddp_train: no CUDA device (use --cpu to run on the CPU with gloo)")
        if not fusednorm.cuda_available() and args.impl == "fusednorm":
            raise SystemExit(f"ddp_train: {fusednorm.library_path} was built without CUDA; rebuild with nvcc present")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    return rank, world, device


def wrap(model, args, device, world):
    if args.fsdp:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh(device.type, (world,))
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None)


def full_grad(p):
    """The whole gradient of p on every rank (FSDP2 shards it as a DTensor;
    gathering is a collective, so every rank calls this in the same order)."""
    g = p.grad
    if g is None:
        return None
    if hasattr(g, "full_tensor"):
        g = g.full_tensor()
    return g.detach()


def check_ranks_agree(named_grads, device):
    """All ranks hold bitwise the same reduced gradients (DDP). Compared as raw
    bytes through an all-gather of the flattened gradients."""
    flat = torch.cat([g.reshape(-1).float() for _, g in named_grads]).to(device)
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    for r, other in enumerate(gathered):
        if not torch.equal(other.view(torch.int32), flat.view(torch.int32)):
            bad = (other != flat).nonzero().flatten()[:5].tolist()
            raise RuntimeError(f"ddp_train: reduced norm gradients differ between rank {dist.get_rank()} and rank {r} "
                               f"at flat indices {bad}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--impl", choices=["fusednorm", "torch"], default="fusednorm")
    ap.add_argument("--norm", choices=["rms", "ln"], default="rms")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8, help="sequences per rank and step")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fsdp", action="store_true", help="FSDP2 fully_shard instead of DDP")
    ap.add_argument("--cpu", action="store_true", help="CPU tensors and gloo (one process without torchrun)")
    ap.add_argument("--dump", metavar="FILE", help="rank 0 writes per-step losses and norm gradients (json)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.fsdp and not fsdp2_available():
        raise SystemExit("ddp_train: --fsdp needs FSDP2 (torch.distributed.fsdp.fully_shard, PyTorch >= 2.6)")
    if args.dim % args.heads:
        raise SystemExit(f"ddp_train: --dim ({args.dim}) must be a multiple of --heads ({args.heads})")

    rank, world, device = setup(args)
    dtype = DTYPES[args.dtype]
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        # Same kernels for both impls and every run: no TF32 in the f32 matmuls.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

    model = PreNormTransformer(args.impl, args.norm, args.vocab, args.dim, args.heads, args.layers)
    init_parameters(model, args.seed)
    model = model.to(device=device, dtype=dtype)
    norm_names = norm_parameter_names(model)
    wrapped = wrap(model, args, device, world)
    params = dict(model.named_parameters())
    # foreach=False: the same per-parameter update for plain tensors and DTensors.
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, foreach=False)
    data = MarkovData(args.vocab, args.seed + 1)

    log = {"args": vars(args), "world": world, "impl": args.impl, "steps": []}
    t0 = time.perf_counter()
    for step in range(args.steps):
        inputs, targets = data.batch(step, rank, world, args.batch, args.seq)
        inputs, targets = inputs.to(device), targets.to(device)
        logits = wrapped(inputs)
        loss = F.cross_entropy(logits.float().reshape(-1, args.vocab), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()

        grads = [(n, full_grad(params[n])) for n in norm_names]
        missing = [n for n, g in grads if g is None]
        if missing:
            raise RuntimeError(f"ddp_train: no gradient reached {missing}")
        if not args.fsdp and world > 1:
            check_ranks_agree(grads, device)
        # The global gradient norm (every parameter), computed in fp32.
        sq = torch.zeros((), dtype=torch.float32, device=device)
        for p in model.parameters():
            if p.grad is not None:
                g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                sq += g.float().pow(2).sum()
        if args.fsdp:  # each rank holds a shard: sum the squares
            dist.all_reduce(sq)
        mean_loss = loss.detach().float().clone()
        dist.all_reduce(mean_loss)
        mean_loss /= world
        opt.step()

        rec = {"step": step, "loss": mean_loss.item(), "grad_norm": math.sqrt(sq.item()),
               "norm_grad_norms": {n: g.float().norm().item() for n, g in grads}}
        if step == args.steps - 1:
            rec["norm_grads"] = {n: g.float().cpu().tolist() for n, g in grads}
        log["steps"].append(rec)
        if rank == 0 and not args.quiet:
            print(f"step {step:3d}  loss {rec['loss']:.5f}  grad norm {rec['grad_norm']:.4f}", flush=True)

    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    if rank == 0:
        first, last = log["steps"][0]["loss"], log["steps"][-1]["loss"]
        print(f"ddp_train: impl={args.impl} norm={args.norm} dtype={args.dtype} "
              f"{'fsdp2' if args.fsdp else 'ddp'} world={world} device={device.type}: "
              f"loss {first:.4f} -> {last:.4f} in {args.steps} steps, {elapsed:.1f} s", flush=True)
        if args.dump:
            log["elapsed_s"] = elapsed
            with open(args.dump, "w") as f:
                json.dump(log, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
