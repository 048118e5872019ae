"""The onnxruntime GEMM engine of the CPU backend: MatMulInteger on the CPU's int8 units.

onnxruntime's CPU kernels (MLAS) run uint8 x int8 products on AVX-512 VNNI, AVX-VNNI
and AMX on x86-64 and on the dot-product instructions on arm64, accumulating into int32.
int8 x int8 has no fast kernel there, so `a` is shifted: a_u8 = a + 128 (a XOR 0x80
read as uint8) with a zero point of 128, and MatMulInteger computes
(a_u8 - 128) @ b = a @ b. MLAS applies the zero point with column sums in wrapping int32;
the true result fits int32 (K <= 131071), so the wrap cancels and the result is exact.

Without VNNI/AMX/dot-product the same kernels multiply-add pairs of uint8 x int8 into
int16 with saturation (x86 vpmaddubsw) and are wrong on full-range int8, which is why
the CPU backend serves a process through this engine only after int8nax.backends.cpu.check
has reproduced a set of products exactly (see cpu_engines.select).

MatMulInteger takes B as [K, N]; int8nax's weights are [N, K]. Transposing N*K bytes per
call would cost more than the product at small M, so the stateless product is computed
transposed instead: C.T [N, M] = b_u8 [N, K] @ a.T [K, M], shifting b (one streaming pass
over its bytes) and transposing only a (inside onnxruntime). The result comes back as a
transposed view of C.T. A b that arrives as the transpose of a [K, N] array (b_layout="kn")
is already MatMulInteger's B and goes straight in. A prepared weight (`prepare`) is transposed once into an
onnxruntime session as a constant, which MLAS packs once for its kernels.

The ONNX models are written here directly in protobuf wire format (a handful of fields),
so the engine needs onnxruntime only, not the onnx package.
"""

from __future__ import annotations

import os

import numpy as np

from .quant import in_row_blocks

NAME = "onnx"
THREADS_ENV_VAR = "INT8NAX_CPU_THREADS"

# ONNX TensorProto.DataType codes.
_FLOAT, _UINT8, _INT8, _INT32, _INT64, _FLOAT16 = 1, 2, 3, 6, 7, 10
_OPSET = 13
_IR_VERSION = 8


# --- a minimal ONNX (protobuf) writer ---------------------------------------------------
# Field numbers are those of onnx.proto: ModelProto{ir_version=1, graph=7, opset_import=8},
# GraphProto{node=1, name=2, initializer=5, input=11, output=12},
# NodeProto{input=1, output=2, op_type=4, attribute=5}, TensorProto{dims=1, data_type=2, name=8,
# raw_data=9}, ValueInfoProto{name=1, type=2}, TypeProto{tensor_type=1},
# TypeProto.Tensor{elem_type=1, shape=2}, TensorShapeProto{dim=1},
# Dimension{dim_value=1, dim_param=2}, OperatorSetIdProto{domain=1, version=2}.


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _int_field(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _bytes_field(field: int, payload) -> bytes:
    if isinstance(payload, str):
        payload = payload.encode()
    return _varint((field << 3) | 2) + _varint(len(payload)) + payload


def _tensor(name: str, dtype: int, dims, raw: bytes) -> bytes:
    return (b"".join(_int_field(1, d) for d in dims) + _int_field(2, dtype)
            + _bytes_field(8, name) + _bytes_field(9, raw))


def _value_info(name: str, dtype: int, dims) -> bytes:
    shape = b"".join(_bytes_field(1, _int_field(1, d) if isinstance(d, int) else _bytes_field(2, d))
                     for d in dims)
    tensor_type = _int_field(1, dtype) + _bytes_field(2, shape)
    return _bytes_field(1, name) + _bytes_field(2, _bytes_field(1, tensor_type))


def _int_attribute(name: str, value: int) -> bytes:
    # AttributeProto{name=1, i=3, type=20}; AttributeType INT = 2.
    return _bytes_field(1, name) + _int_field(3, value) + _int_field(20, 2)


def _node(op: str, inputs, outputs, int_attributes=None) -> bytes:
    attributes = b"".join(_bytes_field(5, _int_attribute(k, v)) for k, v in (int_attributes or {}).items())
    return (b"".join(_bytes_field(1, i) for i in inputs) + b"".join(_bytes_field(2, o) for o in outputs)
            + _bytes_field(4, op) + attributes)


def onnx_model(nodes, initializers, inputs, outputs) -> bytes:
    """Serialized ModelProto of one graph (default ONNX domain, opset 13)."""
    graph = (b"".join(_bytes_field(1, n) for n in nodes) + _bytes_field(2, "int8nax")
             + b"".join(_bytes_field(5, t) for t in initializers)
             + b"".join(_bytes_field(11, v) for v in inputs) + b"".join(_bytes_field(12, v) for v in outputs))
    opset = _bytes_field(1, "") + _int_field(2, _OPSET)
    return _int_field(1, _IR_VERSION) + _bytes_field(8, opset) + _bytes_field(7, graph)


_ZERO_POINT_128 = _tensor("zp", _UINT8, [], bytes([128]))

# C.T [N, M] = (b_u8 - 128) @ a.T: inputs b_u8 uint8 [N, K] and a int8 [M, K].
_STATELESS_MODEL = onnx_model(
    [_node("Transpose", ["a"], ["a_t"]), _node("MatMulInteger", ["b_u8", "a_t", "zp"], ["c_t"])],
    [_ZERO_POINT_128],
    [_value_info("a", _INT8, ["M", "K"]), _value_info("b_u8", _UINT8, ["N", "K"])],
    [_value_info("c_t", _INT32, ["N", "M"])],
)


# float32 -> float16, rounding to nearest even (MLAS's vectorized conversion: ~20x numpy's).
_FLOAT16_MODEL = onnx_model(
    [_node("Cast", ["y32"], ["y16"], {"to": _FLOAT16})], [],
    [_value_info("y32", _FLOAT, ["M", "N"])], [_value_info("y16", _FLOAT16, ["M", "N"])],
)


_WIDEN_FLOAT16_MODEL = onnx_model(
    [_node("Cast", ["x16"], ["x32"], {"to": _FLOAT})], [],
    [_value_info("x16", _FLOAT16, ["M", "K"])], [_value_info("x32", _FLOAT, ["M", "K"])],
)


# C [M, N] = (a_u8 - 128) @ b_kn: for b given as the transpose of a C-contiguous [K, N].
_KN_MODEL = onnx_model(
    [_node("MatMulInteger", ["a_u8", "b_kn", "zp"], ["c"])],
    [_ZERO_POINT_128],
    [_value_info("a_u8", _UINT8, ["M", "K"]), _value_info("b_kn", _INT8, ["K", "N"])],
    [_value_info("c", _INT32, ["M", "N"])],
)


def _prepared_model(b_kn: np.ndarray) -> bytes:
    """C [M, N] = (a_u8 - 128) @ b_kn with b_kn int8 [K, N] a constant of the graph."""
    k, n = b_kn.shape
    return onnx_model(
        [_node("MatMulInteger", ["a_u8", "b", "zp"], ["c"])],
        [_ZERO_POINT_128, _tensor("b", _INT8, [k, n], b_kn.tobytes())],
        [_value_info("a_u8", _UINT8, ["M", k])],
        [_value_info("c", _INT32, ["M", n])],
    )


def _shifted(x: np.ndarray, threads: int = 1) -> np.ndarray:
    """int8 -> uint8 x + 128, bit for bit x XOR 0x80 (one pass, C-contiguous result), in row
    blocks on `threads` threads when x is large (a weight's 16 MB at small M)."""
    out = np.empty(x.shape, np.uint8)
    src = x.view(np.uint8)
    in_row_blocks(x.shape[0], x.shape[1], threads,
                  lambda lo, hi: np.bitwise_xor(src[lo:hi], np.uint8(0x80), out=out[lo:hi]))
    return out


class PreparedWeight:
    """An [N, K] int8 weight held as an onnxruntime session with the weight as a constant.

    Cost: one transpose of N*K bytes and one session build (MLAS packs the weight), about
    0.1 s for 4096 x 4096 on a 2-core Zen 4; memory about twice the weight's bytes while
    the session lives (the packed copy plus onnxruntime's initializer).
    """

    def __init__(self, session, n: int, k: int):
        self.session = session
        self.shape = (n, k)


class OnnxEngine:
    """Exact int8 GEMM through onnxruntime's MatMulInteger (see the module docstring)."""

    name = NAME
    prepares = True

    def __init__(self):
        self.threads = 0
        self._ort = None
        self._stateless = None

    def load(self) -> str:
        """Import onnxruntime and build the stateless session; returns a description.

        Raises ImportError when onnxruntime is not installed, RuntimeError when it lacks
        the CPU execution provider."""
        if self._ort is None:
            # INT8NAX_CPU_THREADS: threads per product (default: onnxruntime's, one per core).
            threads = os.environ.get(THREADS_ENV_VAR, "").strip()
            if threads and not (threads.isdigit() and int(threads) > 0):
                raise ValueError(f"{THREADS_ENV_VAR} must be a positive integer, got {threads!r}")
            self.threads = int(threads or 0)
            import onnxruntime as ort

            if "CPUExecutionProvider" not in ort.get_available_providers():
                raise RuntimeError(f"onnxruntime {ort.__version__} has no CPUExecutionProvider")
            self._ort = ort
            self._stateless = self._session(_STATELESS_MODEL)
            self._kn = self._session(_KN_MODEL)
            # One thread for the conversions: waking a pool costs more than it saves on them.
            self._to_float16 = self._session(_FLOAT16_MODEL, threads=1)
            self._widen_float16 = self._session(_WIDEN_FLOAT16_MODEL, threads=1)
        threads = self.threads or "one per core"
        return (f"onnxruntime {self._ort.__version__} MatMulInteger (uint8 x int8, zero point 128; "
                f"threads: {threads})")

    def _session(self, model: bytes, threads: int | None = None):
        options = self._ort.SessionOptions()
        threads = threads or self.threads
        if threads:
            options.intra_op_num_threads = threads
        options.log_severity_level = 3  # errors only: no warnings on stderr at import
        # Each session has its own thread pool, whose workers by default spin for a while after
        # a run: the pool of one session (a cast) then steals the cores of the next (the GEMM).
        # Off, too, it leaves the cores to the rest of a shared machine between calls.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return self._ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])

    def float16(self, y32: np.ndarray) -> np.ndarray:
        """float16 of a C-contiguous float32 [M, N] array, rounded to nearest even."""
        return self._to_float16.run(None, {"y32": y32})[0]

    def float32(self, x16: np.ndarray) -> np.ndarray:
        """float32 of a C-contiguous float16 [M, K] array (exact)."""
        return self._widen_float16.run(None, {"x16": x16})[0]

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """int32 [M, N] = a @ b.T for int8 a [M, K], b [N, K]: a transposed view of [N, M],
        or C-contiguous [M, N] when b is the transpose of a C-contiguous [K, N] (b_layout="kn")."""
        if b.T.flags.c_contiguous and not b.flags.c_contiguous:
            return self._kn.run(None, {"a_u8": _shifted(a), "b_kn": b.T})[0]
        b_u8 = _shifted(b, self.threads or os.cpu_count() or 1)
        c_t = self._stateless.run(None, {"a": np.ascontiguousarray(a), "b_u8": b_u8})[0]
        return c_t.T

    def prepare(self, b: np.ndarray) -> PreparedWeight:
        """Hold int8 b [N, K] for repeated products (see PreparedWeight for the cost)."""
        n, k = b.shape
        return PreparedWeight(self._session(_prepared_model(np.ascontiguousarray(b.T))), n, k)

    def matmul_prepared(self, a: np.ndarray, prepared: PreparedWeight) -> np.ndarray:
        """int32 [M, N] = a @ b.T for int8 a [M, K] and a prepared b [N, K] (C-contiguous)."""
        return prepared.session.run(None, {"a_u8": _shifted(a)})[0]
