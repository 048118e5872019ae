"""Stand-ins for optional peer libraries (cider, torch), for tests on machines without them.

The fakes compute with int8nax on the CPU and mimic what the adapters rely on: cider's
exports, its lazily sized outputs in either weight layout, and torch._int_mm's
checks; `wrong=` makes them compute a different problem, as a buggy peer or a
mislabelled benchmark would.
"""

from __future__ import annotations

import types

import mlx.core as mx
import numpy as np

import int8nax


def fake_cider(layout="nk", linear_name="perchannel_linear", available=True, checks_k=True, wrong=None):
    """(cider, cider.ops) modules of the Mininglamp-AI/cider shape.

    layout: "nk" (weights [N, K], newer) or "kn" ([K, N], older). checks_k: whether a K
    mismatch raises (else a zero output sized from the weight, like cider's unchecked
    wrappers). wrong: None, or "transposed": a square weight is used transposed, so the
    output has the right shape and wrong values (what cider's own benchmark times when it
    hands [K, N] weights to the [N, K] API on a square shape).
    """
    pkg = types.ModuleType("cider")
    ops = types.ModuleType("cider.ops")
    pkg.__version__ = "0.7.0"
    pkg.__file__ = "<fake cider>"

    def weight_nk(w):
        w_nk = w if layout == "nk" else w.T
        return w_nk.T if wrong == "transposed" and w.shape[0] == w.shape[1] else w_nk

    def out_width(w):
        return w.shape[0] if layout == "nk" else w.shape[1]

    def int8_matmul_int32(a, b):
        b_nk = weight_nk(b)
        if a.shape[1] != b_nk.shape[1]:
            if checks_k:
                raise ValueError(f"K mismatch: {a.shape} vs {b.shape}")
            return mx.zeros((a.shape[0], out_width(b)), dtype=mx.int32)
        return int8nax.int8_matmul(a, b_nk, backend="cpu")

    def linear(x, w, scale_w, bias=None):
        w_nk = weight_nk(w)
        if x.shape[1] != w_nk.shape[1]:
            if checks_k:
                raise ValueError(f"K mismatch: {x.shape} vs {w.shape}")
            return mx.zeros((x.shape[0], out_width(w)), dtype=mx.float16)
        return int8nax.w8a8_linear(x, w_nk, scale_w, backend="cpu").astype(mx.float16)

    ops.is_available = lambda: available
    ops.int8_matmul_int32 = int8_matmul_int32
    pkg.ops = ops
    pkg.is_available = ops.is_available
    if available:
        setattr(pkg, linear_name, linear)
        pkg.int8_matmul_int32 = int8_matmul_int32
    return pkg, ops


def pypi_cider():
    """The unrelated PyPI 'cider' (a Homebrew bootstrapping tool): no is_available, no ops."""
    pkg = types.ModuleType("cider")
    pkg.__version__ = "1.1.12"
    pkg.__file__ = "/site-packages/cider/__init__.py"
    pkg.Cider = type("Cider", (), {})
    return pkg


class FakeTensor:
    """Just enough of torch.Tensor for int8nax.bench.peers.torch_int: a numpy array on a 'device'."""

    def __init__(self, array, device="cpu"):
        self.array, self.device = array, device

    def to(self, device):
        return FakeTensor(np.array(self.array), str(device))

    def t(self):
        return FakeTensor(self.array.T, self.device)  # a view, like torch

    def detach(self):
        return self

    def cpu(self):
        return FakeTensor(self.array, "cpu")

    def numpy(self):
        return self.array


def fake_torch(cuda=True, wrong=None):
    """A torch module whose _int_mm enforces cuBLASLt's rules, including the column-major B
    that makes it fast (here: required), and counts synchronize() calls."""
    torch = types.ModuleType("torch")
    torch.__version__ = "2.99.0+fake"
    torch.version = types.SimpleNamespace(cuda="13.0" if cuda else None)
    torch.device = str
    torch.from_numpy = FakeTensor
    torch.syncs = 0

    def synchronize():
        torch.syncs += 1

    torch.cuda = types.SimpleNamespace(is_available=lambda: cuda, synchronize=synchronize,
                                       get_device_name=lambda: "Fake GPU")

    def _int_mm(a, b):
        assert a.device == "cuda" and b.device == "cuda"
        m, k = a.array.shape
        if m <= 16 or k % 8 or b.array.shape[1] % 8:
            raise RuntimeError("cuBLASLt shape rules")
        if not b.array.flags.f_contiguous:
            raise RuntimeError("fake cuBLASLt: B must be column-major ([N, K] rows, transposed view)")
        bb = b.array.T if wrong == "transposed" else b.array
        return FakeTensor((a.array.astype(np.int64) @ bb.astype(np.int64)).astype(np.int32), "cuda")

    torch._int_mm = _int_mm
    return torch
