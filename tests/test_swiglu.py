"""swiglu_w8a8_linear and the SwiGLU MLP call quantize_linears gives mlx-lm's MLPs: the bits of
the model's own two steps (mlx-lm's swiglu, then w8a8_linear), on every backend here."""

from __future__ import annotations

import copy
import pickle

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

import int8nax
from int8nax import backends
from int8nax.backends.base import BodyRan
from int8nax import nn as inn
from int8nax.nn import swiglu_mlp
from int8nax.per_thread import compile_per_thread

mlx_lm_models = pytest.importorskip("mlx_lm.models", reason="mlx-lm (the test extra) gives the MLP classes")
from mlx_lm.models import llama, qwen2, qwen3  # noqa: E402
from mlx_lm.models.activations import swiglu as mlx_lm_swiglu  # noqa: E402

DTYPES = (mx.float32, mx.float16, mx.bfloat16)


def problem(m=7, k=96, n=40, dtype=mx.bfloat16, bias=False, seed=0):
    rng = np.random.default_rng(seed)
    gate_up = mx.array((rng.standard_normal((m, 2 * k)) * 3).astype(np.float32)).astype(dtype)
    w, s = int8nax.quantize_weight_int8(mx.array(rng.standard_normal((n, k)).astype(np.float32)))
    b = mx.array(rng.standard_normal(n).astype(np.float32)) if bias else None
    return gate_up, w, s, b


def two_steps(gate_up, w, s, b, backend=None):
    k = gate_up.shape[-1] // 2
    return int8nax.w8a8_linear(mlx_lm_swiglu(gate_up[..., :k], gate_up[..., k:]), w, s, b, backend=backend)


# ---- the function ----

@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("bias", [False, True])
def test_bits_of_swiglu_then_w8a8(dtype, bias):
    gate_up, w, s, b = problem(dtype=dtype, bias=bias)
    got = int8nax.swiglu_w8a8_linear(gate_up, w, s, b)
    assert got.dtype == dtype and got.shape == (7, 40)
    assert mx.array_equal(got, two_steps(gate_up, w, s, b)).item()


def test_leading_axes_and_numpy_inputs():
    gate_up, w, s, b = problem(m=6, bias=True)
    want = two_steps(gate_up, w, s, b)
    got = int8nax.swiglu_w8a8_linear(gate_up.reshape(2, 3, -1), w, s, b)
    assert got.shape == (2, 3, 40) and mx.array_equal(got.reshape(6, 40), want).item()
    f32 = gate_up.astype(mx.float32)
    got = int8nax.swiglu_w8a8_linear(np.array(f32), np.array(w), np.array(s), np.array(b))
    assert mx.array_equal(got, two_steps(f32, w, s, b)).item()


def test_no_rows_give_the_bias_shape():
    _, w, s, b = problem(bias=True)
    y = int8nax.swiglu_w8a8_linear(mx.zeros((0, 192), dtype=mx.float16), w, s, b)
    assert y.shape == (0, 40) and y.dtype == mx.float16


@pytest.mark.parametrize("args,exc,words", [
    (lambda g, w, s: (g[:, :95], w, s), ValueError, "'gate_up' must have last dimension 2K = 192"),
    (lambda g, w, s: (g.astype(mx.int32), w, s), TypeError, "gate_up"),
    (lambda g, w, s: (g, w.astype(mx.int32), s), TypeError, "w_int8"),
    (lambda g, w, s: (g, w, s[:3]), ValueError, "scale_w"),
    (lambda g, w, s: (mx.array(1.0), w, s), ValueError, "gate_up"),
])
def test_bad_input_is_named(args, exc, words):
    gate_up, w, s, _ = problem()
    with pytest.raises(exc, match=words):
        int8nax.swiglu_w8a8_linear(*args(gate_up, w, s))
    with pytest.raises(ValueError, match="backend"):
        int8nax.swiglu_w8a8_linear(gate_up, w, s, backend="tpu")


@pytest.mark.parametrize("bias", [False, True])
def test_gradients_are_those_of_the_two_steps(bias):
    gate_up, w, s, b = problem(dtype=mx.float32, bias=bias, seed=4)

    def loss(f):
        return lambda g, bb: (f(g, w, s, bb) * mx.arange(40, dtype=mx.float32)).sum()

    argnums = (0, 1) if bias else 0
    got = mx.grad(loss(int8nax.swiglu_w8a8_linear), argnums=argnums)(gate_up, b)
    want = mx.grad(loss(two_steps), argnums=argnums)(gate_up, b)
    for g_, w_ in zip(got if bias else [got], want if bias else [want]):
        assert mx.array_equal(g_, w_).item()
    tangent = mx.sin(mx.arange(gate_up.size, dtype=mx.float32)).reshape(gate_up.shape)
    jg = mx.jvp(lambda g: int8nax.swiglu_w8a8_linear(g, w, s, b), [gate_up], [tangent])[1][0]
    jw = mx.jvp(lambda g: two_steps(g, w, s, b), [gate_up], [tangent])[1][0]
    assert mx.array_equal(jg, jw).item()


# ---- the MLP call quantize_linears gives ----

class GeluMLP(nn.Module):
    def __init__(self, dims=64, hidden=96):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(dims, hidden, bias=False), nn.Linear(dims, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dims, bias=False)

    def __call__(self, x):
        return self.down_proj(nn.gelu(self.gate_proj(x)) * self.up_proj(x))


def swiglu(gate, x):  # the name mlx-lm uses, computing something else
    return nn.gelu(gate) * x


class LookalikeMLP(GeluMLP):
    def __call__(self, x):
        return self.down_proj(swiglu(self.gate_proj(x), self.up_proj(x)))


class SwappedMLP(GeluMLP):
    def __call__(self, x):
        return self.down_proj(mlx_lm_swiglu(self.up_proj(x), self.gate_proj(x)))


def test_recognises_exactly_mlx_lms_swiglu_call():
    for cls in (qwen2.MLP, qwen3.MLP, llama.MLP):
        assert swiglu_mlp._mlx_lm_swiglu_call(cls), cls.__module__
    for cls in (GeluMLP, LookalikeMLP, SwappedMLP, nn.Linear):
        assert not swiglu_mlp._mlx_lm_swiglu_call(cls), cls.__name__


def force_one_step(monkeypatch, value: bool) -> None:
    """Every backend's swiglu_one_step answers `value` (CUDA's own answer included)."""
    from int8nax.backends.cuda import backend as cuda

    for cls in (backends.Backend, cuda.CUDABackend):
        monkeypatch.setattr(cls, "swiglu_one_step", lambda self: value)


@pytest.fixture
def one_step(monkeypatch):
    """Every backend here as if it ran swiglu_w8a8_linear in one step (as CUDA does with
    INT8NAX_CUDA_SWIGLU=fused), so that taken-over MLPs use it: the backends without the kernel
    take the two steps inside it, with the same bits, which these tests check."""
    force_one_step(monkeypatch, True)


def pair(make, seed=1, backend=None):
    """(taken over, reference with fuse=False) copies of one quantized MLP."""
    mx.random.seed(seed)
    ref = make()
    mx.eval(ref.parameters())
    mlp = copy.deepcopy(ref)
    inn.quantize_linears(ref, backend=backend, fuse=False)
    inn.quantize_linears(mlp, backend=backend)
    return mlp, ref


@pytest.mark.parametrize("make", [lambda: qwen2.MLP(64, 160), lambda: qwen3.MLP(64, 160)], ids=["qwen2", "qwen3"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_taken_over_mlp_gives_the_models_bits(one_step, make, dtype):
    mlp, ref = pair(make)
    assert isinstance(mlp, inn.SwiGLUMLPCall) and isinstance(mlp, type(ref)) and type(mlp).__name__ == "MLP"
    assert not isinstance(ref, inn.SwiGLUMLPCall)
    x = mx.random.normal((2, 5, 64)).astype(dtype)
    assert mx.array_equal(mlp(x), ref(x)).item()
    assert mx.array_equal(mlp(x), mlp.own_call(x)).item()


def test_taken_over_mlp_calls_the_one_step_function_where_there_is_one(monkeypatch):
    mlp, ref = pair(lambda: qwen2.MLP(64, 160), backend="cpu")
    # patched on the class: pytest before 9.2 undoes an instance's patch by writing the inherited
    # method into the instance, which then shadows later tests' patches of the class
    # (test_taken_over_mlp_from_threads' force_one_step)
    cls = type(backends.get("cpu"))
    seen = []
    real = cls.swiglu_w8a8_linear
    monkeypatch.setattr(cls, "swiglu_w8a8_linear", lambda self, g, w, s, b: seen.append(g.shape) or real(self, g, w, s, b))
    x = mx.random.normal((3, 64))
    assert mx.array_equal(mlp(x), ref(x)).item() and seen == []  # no one-step kernel: the model's call
    monkeypatch.setattr(cls, "swiglu_one_step", lambda self: True)
    assert mx.array_equal(mlp(x), ref(x)).item() and seen == [(3, 320)]
    seen.clear()
    mx.eval(mlp.own_call(x))
    assert seen == []


def test_taken_over_mlp_keeps_its_own_call_at_the_rows_the_backend_takes_in_two_steps(monkeypatch):
    """Backend.swiglu_one_step_at: where it says no for a call's token count (CUDA's decode rows),
    the MLP runs the model's own call there, the one-step function elsewhere; the same bits."""
    mlp, ref = pair(lambda: qwen2.MLP(64, 160), backend="cpu")
    cls = type(backends.get("cpu"))
    seen = []
    real = cls.swiglu_w8a8_linear
    monkeypatch.setattr(cls, "swiglu_w8a8_linear", lambda self, g, w, s, b: seen.append(g.shape) or real(self, g, w, s, b))
    monkeypatch.setattr(cls, "swiglu_one_step", lambda self: True)
    monkeypatch.setattr(cls, "swiglu_one_step_at", lambda self, rows: rows > 16)
    for shape, one_step in (((1, 1, 64), False), ((2, 8, 64), False), ((17, 64), True), ((1, 20, 64), True)):
        seen.clear()
        x = mx.random.normal(shape)
        assert mx.array_equal(mlp(x), ref(x)).item(), shape
        assert seen == ([(shape[-2] * (shape[0] if len(shape) == 3 else 1), 320)] if one_step else []), (shape, seen)


def test_cuda_takes_swiglu_in_one_step_where_the_gemv_does_not_quantize_its_input(monkeypatch, gemv_inside):
    # at the GEMV's rows with GEMV_QUANTIZE_INSIDE, the GEMV quantizes h itself: no one-step kernel there
    from int8nax.backends.cuda import backend as cuda, plans as cuda_plans, settings as cuda_settings

    edge = cuda_plans.GEMV_MAX_M
    for choice in ("split", "fused", "staged"):
        monkeypatch.setattr(cuda_settings, "swiglu_choice", lambda: choice)
        got = [cuda.BACKEND.swiglu_one_step_at(m) for m in (1, edge, edge + 1, 4096)]
        want = [False] * 4 if choice == "split" else [not gemv_inside] * 2 + [True, True]
        assert got == want, (choice, got)


def test_other_mlps_keep_their_call():
    for make in (GeluMLP, LookalikeMLP, SwappedMLP):
        mlp, ref = pair(make)
        assert type(mlp) is make
        x = mx.random.normal((3, 64))
        assert mx.array_equal(mlp(x), ref(x)).item()
    mlp, _ = pair(lambda: qwen2.MLP(64, 160))
    unfused = qwen2.MLP(64, 160)
    inn.quantize_linears(unfused, fuse=False)  # no group: nothing to take over
    assert type(unfused) is qwen2.MLP


def test_a_changed_module_takes_its_own_call(one_step):
    mlp, ref = pair(lambda: qwen2.MLP(64, 160))
    x = mx.random.normal((3, 64))
    mlp.down_proj = nn.Linear(160, 64, bias=False)  # a float layer again
    want = mlx_lm_swiglu(mlp.gate_proj(x), mlp.up_proj(x))
    assert mx.array_equal(mlp(x), mlp.down_proj(want)).item()


class GraphBackend(backends.Backend):
    """Stays in MLX's graph (float math on the dequantized weights), as the CUDA backend does:
    what mx.compile of a whole model needs (the CPU backend computes in numpy)."""

    name = "graph"

    def __init__(self):
        self.calls = []

    def w8a8_linear(self, x, w, scale_w, bias):
        y = x.astype(mx.float32) @ (w.astype(mx.float32) * scale_w[:, None]).T
        return (y if bias is None else y + bias).astype(x.dtype)

    def swiglu_one_step(self):
        return True

    def swiglu_w8a8_linear(self, gate_up, w, scale_w, bias):
        self.calls.append(gate_up.shape)
        return super().swiglu_w8a8_linear(gate_up, w, scale_w, bias)


def test_taken_over_mlp_under_compile_and_grad(monkeypatch):
    graph = GraphBackend()
    monkeypatch.setattr(backends, "resolve", lambda requested=None: graph)
    mlp, ref = pair(lambda: qwen2.MLP(64, 160))
    x = mx.random.normal((2, 3, 64))
    eager = mlp(x)
    assert graph.calls == [(6, 320)] and mx.array_equal(eager, ref(x)).item()
    graph.calls.clear()
    step = mx.compile(mlp)
    assert mx.array_equal(step(x), eager).item() and graph.calls == [(6, 320)]  # traced once
    assert mx.array_equal(step(x * 2), mlp(x * 2)).item()
    # the gradient of the group's own two steps; the separate layers' sums two products instead of one
    gx = mx.grad(lambda v: mlp(v).sum())(x)
    assert mx.array_equal(gx, mx.grad(lambda v: mlp.own_call(v).sum())(x)).item()
    assert mx.allclose(gx, mx.grad(lambda v: ref(v).sum())(x), rtol=1e-5, atol=1e-6).item()


def test_a_split_group_takes_the_models_call(one_step):
    mlp, ref = pair(lambda: qwen2.MLP(64, 160))
    mlp.gate_proj._group.shared = False
    x = mx.random.normal((3, 64))
    assert mx.array_equal(mlp(x), ref(x)).item()


def test_wrong_input_width_is_named(one_step):
    mlp, _ = pair(lambda: qwen2.MLP(64, 160))
    with pytest.raises(ValueError, match="input_dims = 64"):
        mlp(mx.zeros((2, 63)))


def test_copy_pickle_and_weights_round_trip(one_step, tmp_path):
    mlp, ref = pair(lambda: qwen3.MLP(64, 160))
    x = mx.random.normal((4, 64)).astype(mx.bfloat16)
    want = ref(x)
    for twin in (copy.deepcopy(mlp), pickle.loads(pickle.dumps(mlp))):
        assert type(twin) is type(mlp) and twin.gate_proj._group is not mlp.gate_proj._group
        assert mx.array_equal(twin(x), want).item()
    mlp.save_weights(str(tmp_path / "w.safetensors"))
    fresh, _ = pair(lambda: qwen3.MLP(64, 160), seed=9)
    assert not mx.array_equal(fresh(x), want).item()
    fresh.load_weights(str(tmp_path / "w.safetensors"))
    assert mx.array_equal(fresh(x), want).item()


def test_a_whole_mlx_lm_model(one_step):
    args = qwen2.ModelArgs(model_type="qwen2", hidden_size=64, num_hidden_layers=2, intermediate_size=160,
                           num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, vocab_size=97)
    mx.random.seed(5)
    ref = qwen2.Model(args)
    mx.eval(ref.parameters())
    model = copy.deepcopy(ref)
    inn.quantize_linears(ref, fuse=False)
    assert inn.quantize_linears(model) == 14
    assert sum(isinstance(m, inn.SwiGLUMLPCall) for _, m in model.named_modules()) == 2
    assert inn.take_over_swiglu_mlps(model) == 0  # once is enough
    ids = mx.array([[3, 14, 15, 92, 65, 35, 89, 79]])
    assert mx.array_equal(model(ids), ref(ids)).item()


def test_computes_swiglu_refuses_other_functions():
    assert swiglu_mlp._computes_swiglu(mlx_lm_swiglu)
    assert not swiglu_mlp._computes_swiglu(swiglu)
    assert not swiglu_mlp._computes_swiglu(lambda g, u: nn.silu(g) * u.astype(mx.float32))
    assert not swiglu_mlp._computes_swiglu(None)


# ---- CUDA: the switch, and the one-kernel path on a GPU ----

def test_cuda_switch_is_read_and_checked(monkeypatch):
    from int8nax.backends.cuda import settings as cuda_settings, backend as cuda

    seen = []
    monkeypatch.setattr(cuda, "swiglu_w8a8", lambda *a: seen.append("fused") or "fused")
    monkeypatch.setattr(backends.Backend, "swiglu_w8a8_linear", lambda self, *a: seen.append("split") or "split")
    try:
        default = "split" if cuda_settings.SWIGLU_DEFAULT == "split" else "fused"
        for value, want in (("", default), ("fused", "fused"), (" Split ", "split"), ("staged", "fused")):
            monkeypatch.setenv(cuda_settings.SWIGLU_ENV, value)
            cuda.clear_caches()
            assert cuda.BACKEND.swiglu_w8a8_linear(None, None, None, None) == want
            assert cuda.BACKEND.swiglu_one_step() == (want == "fused")
        monkeypatch.setenv(cuda_settings.SWIGLU_ENV, "fast")
        cuda.clear_caches()
        with pytest.raises(ValueError, match=r"INT8NAX_CUDA_SWIGLU: expected one of \['fused', 'staged', 'split'\], "
                                             r"got 'fast'"):
            cuda.BACKEND.swiglu_w8a8_linear(None, None, None, None)
    finally:
        monkeypatch.delenv(cuda_settings.SWIGLU_ENV)
        cuda.clear_caches()


def _on_cuda() -> bool:
    return getattr(mx, "cuda", None) is not None and mx.cuda.is_available()


@pytest.mark.skipif(not _on_cuda(), reason="needs MLX's CUDA backend and an NVIDIA GPU")
@pytest.mark.parametrize("schedule", ["fused", "staged"])
@pytest.mark.parametrize("make", [lambda: qwen2.MLP(3584, 18944), lambda: qwen3.MLP(4096, 12288)], ids=["qwen2.5-7b", "qwen3-8b"])
def test_model_sized_mlp_fused_on_the_gpu(monkeypatch, make, schedule):
    """INT8NAX_CUDA_SWIGLU=fused (kernels/cuda/quant/swiglu_quantize.cuh) and staged (its rows staged in
    shared memory where 2 x SMs rows or more: quant/swiglu_quantize_staged.cuh) against the model's own
    call, bit for bit, at decode (the GEMV where it is the default) and prefill row counts."""
    from int8nax.backends.cuda import probe as cuda_probe, settings as cuda_settings, backend as cuda

    monkeypatch.setenv(cuda_settings.SWIGLU_ENV, schedule)
    cuda.clear_caches()
    try:
        mlp, _ = pair(make)
        mlp.set_dtype(mx.bfloat16)
        for m in (1, 16, 300, 512, 2 * cuda_probe.sm_count() + 7):
            x = (mx.random.normal((m, mlp.gate_proj.input_dims)) * 2).astype(mx.bfloat16)
            assert mx.array_equal(mlp(x), mlp.own_call(x)).item(), m
    finally:
        cuda.clear_caches()


def test_the_model_check_compares_one_step_calls_with_the_models_own(one_step, monkeypatch):
    from int8nax.bench.checks import MismatchError
    from int8nax.bench.models import projections

    args = qwen2.ModelArgs(model_type="qwen2", hidden_size=64, num_hidden_layers=2, intermediate_size=160,
                           num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, vocab_size=97)
    mx.random.seed(6)
    model = qwen2.Model(args)
    inn.quantize_linears(model)
    ids = mx.array([list(range(1, 21))])  # above the GEMV's rows, where CUDA's MLPs take one step too
    with projections._recording(model) as recorders:
        mx.eval(model(ids))
    assert projections._check_swiglu_calls(model, recorders, "m") == " (2 SwiGLU MLP calls bit-identical)"
    real = swiglu_mlp.swiglu_w8a8_linear  # the one step, made wrong on whichever backend runs it
    monkeypatch.setattr(swiglu_mlp, "swiglu_w8a8_linear", lambda g, w, s, b, backend=None: real(g, w, s * 1.001, b))
    with pytest.raises(MismatchError, match=r"the MLP model\.layers\.[01]\.mlp's one-step SwiGLU call differs"):
        projections._check_swiglu_calls(model, recorders, "m")
    force_one_step(monkeypatch, False)
    assert projections._check_swiglu_calls(model, recorders, "m") == ""  # the model's own call ran: nothing to compare


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_cuda_first_use_check_compares_the_kernel_with_the_two_steps(monkeypatch, dtype):
    """cuda_graphs.swiglu_kernel_ok's decision and probe, with the GPU kernel stood in by swiglu and the
    CPU backend's quantization (the real comparison runs in the GPU cases of test_cuda_swiglu.py)."""
    from int8nax.backends.cuda import graphs as cuda_graphs, plans as cuda_plans

    launch = cuda_plans.CUDA_QUANT_LAUNCHES[0]
    seen = []

    def one_step(y, _launch, wrong=False):
        seen.append(y)
        k = y.shape[1] // 2
        q, s = int8nax.quantize_activations(backends.swiglu(y[:, :k], y[:, k:]), backend="cpu")
        return (q, s * 2) if wrong else (q, s)

    monkeypatch.setattr(cuda_graphs, "_swiglu_quantize_graph", one_step)
    cuda_graphs.swiglu_kernel_ok.cache_clear()
    assert cuda_graphs.swiglu_kernel_ok(dtype, launch)
    assert [y.shape[1] // 2 for y in seen] == [8 * launch.threads + 8, launch.capacity + 8, 13]
    k = seen[0].shape[1] // 2
    h = backends.swiglu(seen[0][:, :k], seen[0][:, k:])
    probe = np.array(h.astype(mx.float32))
    assert np.isnan(probe).any() and (probe == 0).all(axis=1).any()  # the inf and NaN rows, the zero row
    scales = np.array(int8nax.quantize_activations(h, backend="cpu")[1])
    if dtype == mx.float32:  # quant's tiny-row rule is on the probe
        assert (scales[np.isfinite(scales)] < 2.0 ** -126).any()
    monkeypatch.setattr(cuda_graphs, "_swiglu_quantize_graph", lambda y, l: one_step(y, l, wrong=True))
    cuda_graphs.swiglu_kernel_ok.cache_clear()
    with pytest.warns(RuntimeWarning, match="SwiGLU MLPs take the two steps in this process"):
        assert not cuda_graphs.swiglu_kernel_ok(dtype, launch)
    cuda_graphs.swiglu_kernel_ok.cache_clear()


def test_cuda_one_step_falls_back_to_two_steps_where_the_check_failed(monkeypatch):
    from int8nax.backends.cuda import graphs as cuda_graphs, backend as cuda, plans as cuda_plans

    launch = cuda_plans.CUDA_QUANT_LAUNCHES[1]
    calls = []
    monkeypatch.setattr(cuda, "_swiglu_w8a8_for_shape",
                        lambda m, n, k, b, dtype: (launch, lambda *a: calls.append(("one", m, n, k, b))))
    monkeypatch.setattr(cuda, "w8a8", lambda x, w, s, b: calls.append(("two", x.shape)))
    gate_up, w, s, _ = problem(m=3, k=16, n=8)
    for ok in (True, False):
        monkeypatch.setattr(cuda_graphs, "swiglu_kernel_ok", lambda dtype, l, ok=ok: ok and l is launch)
        cuda.swiglu_w8a8(gate_up, w, s, None)
    assert calls == [("one", 3, 8, 16, False), ("two", (3, 16))]


def test_cuda_first_use_check_of_a_staged_launch_probes_its_width_over_more_rows_than_blocks(monkeypatch):
    """A staged launch is probed at its own row width (staged) and at two widths it quantizes from y,
    each with rows enough that every block refills its buffers, and no two neighbouring rows alike
    (a row quantized from the wrong buffer must show)."""
    from int8nax.backends.cuda import graphs as cuda_graphs, plans as cuda_plans

    launch = cuda_plans.CudaStagedLaunch(512, 1, 24, 2, 4)
    seen = []

    def stand_in(y, _launch, wrong=False):
        seen.append(y)
        k = y.shape[1] // 2
        q, s = int8nax.quantize_activations(backends.swiglu(y[:, :k], y[:, k:]), backend="cpu")
        return (q[::-1], s[::-1]) if wrong else (q, s)  # wrong: each row given another row's result

    monkeypatch.setattr(cuda_graphs, "_swiglu_quantize_graph", stand_in)
    cuda_graphs.swiglu_kernel_ok.cache_clear()
    try:
        assert cuda_graphs.swiglu_kernel_ok(mx.bfloat16, launch)
        assert [(y.shape[0], y.shape[1] // 2) for y in seen] == [(11, 24), (11, launch.capacity + 8), (11, 13)]
        y = np.array(seen[0].astype(mx.float32))
        assert not any(np.array_equal(y[i], y[i + 1], equal_nan=True) for i in range(10) if np.abs(y[i]).max() > 0)
        monkeypatch.setattr(cuda_graphs, "_swiglu_quantize_graph", lambda y, l: stand_in(y, l, wrong=True))
        cuda_graphs.swiglu_kernel_ok.cache_clear()
        with pytest.warns(RuntimeWarning, match="SwiGLU MLPs take the two steps"):
            assert not cuda_graphs.swiglu_kernel_ok(mx.bfloat16, launch)
    finally:
        cuda_graphs.swiglu_kernel_ok.cache_clear()


class RecordingKernel:
    """Stands in for mx.fast.cuda_kernel's kernel object: records each launch, returns zeros."""

    def __init__(self, spec, launches):
        self.spec, self.launches = spec, launches

    def __call__(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup, template, **_):
        self.launches.append(dict(name=self.spec.name.rsplit("_", 1)[0], inputs=[a.shape for a in inputs],
                                  outputs=list(output_shapes), grid=grid, block=threadgroup, template=dict(template)))
        return [mx.zeros(s, dtype=d) for s, d in zip(output_shapes, output_dtypes)]


@pytest.mark.parametrize("gemv", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_cuda_fused_entry_launches_the_swiglu_kernel_then_the_gemm(monkeypatch, dtype, gemv, gemv_inside):
    """What INT8NAX_CUDA_SWIGLU=fused launches for Qwen2.5-7B's down projection (kernels stood in,
    the first-use check passed): the SwiGLU quantization kernel on y [M, 2H] with its launch, then
    the dequantizing GEMM on its codes; where the GEMV quantizes its own input (decode with
    GEMV_DEFAULT and GEMV_QUANTIZE_INSIDE), swiglu then that one kernel."""
    from int8nax.backends.cuda import (
        device as cuda_device, kernels as cuda_kernels, probe as cuda_probe,
        settings as cuda_settings, graphs as cuda_graphs, backend as cuda, choice as cuda_choice,
        pack as cuda_pack, plans as cuda_plans,
    )

    launches = []
    monkeypatch.setattr(cuda_kernels, "_kernel", lambda spec: RecordingKernel(spec, launches))
    monkeypatch.setattr(cuda_device, "_family", lambda: "sm90")
    monkeypatch.setattr(cuda_probe, "sm_count", lambda: 132)
    asked = []  # the first-use check: only where the SwiGLU kernel will run
    monkeypatch.setattr(cuda_graphs, "swiglu_kernel_ok", lambda dtype, launch: asked.append(launch) or True)
    monkeypatch.setattr(cuda_choice, "GEMV_DEFAULT", gemv)
    monkeypatch.delenv(cuda_settings.KERNEL_ENV, raising=False)
    cuda.clear_caches()
    try:
        n, h = 3584, 18944
        w, s = mx.zeros((n, h), dtype=mx.int8), mx.ones((n,), dtype=mx.float32)
        for m in (1, 512):
            launches.clear()
            asked.clear()
            mx.eval(cuda.swiglu_w8a8(mx.zeros((m, 2 * h), dtype=dtype), w, s, None))
            names = [x["name"] for x in launches]
            if gemv and m == 1 and cuda_plans.gemv_inside(m, h, dtype.size):
                assert names == ["int8nax_gemv_w8a8_x"] and launches[0]["inputs"][0] == (1, h) and asked == []
                continue
            first = launches[0]
            launch = cuda_plans.cuda_swiglu_quant_launch(m, h, dtype.size, 132)
            assert asked == [launch]
            assert first["name"] == "int8nax_swiglu_quantize" and first["inputs"] == [(m, 2 * h)]
            # its one output, the activation pack (codes, scales and the GEMM's scratch), is the GEMM's input
            [(rows, cols)] = first["outputs"]
            assert rows == m and cols >= cuda_pack.pack_shape(m, h)[1] and (first["grid"], first["block"]) == launch.grid(m)
            assert first["template"] == {"T": dtype, "THREADS": launch.threads, "HELD": launch.held}
            assert "int8nax_quantize" not in names and launches[1]["inputs"][0] == (rows, cols)
            assert launches[-1]["outputs"][0] == (m, n) and launches[-1]["template"]["TOut"] == dtype
    finally:
        cuda.clear_caches()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_cuda_staged_entry_launches_the_staged_kernel_where_its_launch_takes_the_shape(monkeypatch, dtype):
    """INT8NAX_CUDA_SWIGLU=staged for Qwen2.5-7B's down projection (kernels stood in, the first-use
    check passed): the staged kernel with cuda_swiglu_staged_launch's launch and its buffers'
    template where that takes (M, H, dtype), else the fused kernel's launch."""
    from int8nax.backends.cuda import (
        device as cuda_device, kernels as cuda_kernels, probe as cuda_probe,
        settings as cuda_settings, graphs as cuda_graphs, backend as cuda, pack as cuda_pack, plans as cuda_plans,
    )

    launches = []
    monkeypatch.setattr(cuda_kernels, "_kernel", lambda spec: RecordingKernel(spec, launches))
    monkeypatch.setattr(cuda_device, "_family", lambda: "sm90")
    monkeypatch.setattr(cuda_probe, "sm_count", lambda: 132)
    asked = []
    monkeypatch.setattr(cuda_graphs, "swiglu_kernel_ok", lambda dtype, launch: asked.append(launch) or True)
    monkeypatch.setenv(cuda_settings.SWIGLU_ENV, "staged")
    cuda.clear_caches()
    try:
        n, h = 3584, 18944
        w, s = mx.zeros((n, h), dtype=mx.int8), mx.ones((n,), dtype=mx.float32)
        for m in (200, 264, 4096):
            launches.clear()
            asked.clear()
            mx.eval(cuda.swiglu_w8a8(mx.zeros((m, 2 * h), dtype=dtype), w, s, None))
            first, staged = launches[0], cuda_plans.cuda_swiglu_staged_launch(m, h, dtype.size, 132)
            if staged is None:  # too few rows (two a block at least), or float32
                assert m == 200 or dtype == mx.float32
                assert first["name"] == "int8nax_swiglu_quantize"
                assert asked == [cuda_plans.cuda_swiglu_quant_launch(m, h, dtype.size, 132)]
                continue
            assert first["name"] == "int8nax_swiglu_quantize_staged" and asked == [staged]
            [(rows, cols)] = first["outputs"]  # the activation pack, the GEMM's input
            assert first["inputs"] == [(m, 2 * h)] and rows == m and cols >= cuda_pack.pack_shape(m, h)[1]
            assert (first["grid"], first["block"]) == ((132 * 512, 1, 1), (512, 1, 1))
            assert first["template"] == {"T": dtype, "THREADS": 512, "HELD": 5, "STAGE_BYTES": 4 * h * 2}
            assert launches[-1]["inputs"][0] == (rows, cols) and launches[-1]["outputs"][0] == (m, n)
    finally:
        monkeypatch.delenv(cuda_settings.SWIGLU_ENV)
        cuda.clear_caches()


def test_taken_over_mlp_from_threads(one_step):
    from conftest import same_on_cpu_threads

    mlp, ref = pair(lambda: qwen2.MLP(64, 160), backend="cpu")
    inputs = [mx.random.normal((3, 64), stream=mx.cpu) for _ in range(4)]
    with mx.stream(mx.cpu):
        want = [np.array(ref(x)) for x in inputs]
    assert same_on_cpu_threads(mlp, inputs, want, rounds=10) == []
    # each condition of one_step on its own, so that a failure says which
    group, down = swiglu_mlp._gate_up_group(mlp), mlp.get("down_proj")
    assert group is not None and group.shared and down._group is None and down._backend == group.backend
    assert backends.resolve(down._backend).swiglu_one_step() and mlp.one_step() is not None


@pytest.mark.parametrize("kernel", [False, True])
def test_the_model_benchmark_says_which_swiglu_path_runs(monkeypatch, kernel):
    from int8nax.bench import models

    force_one_step(monkeypatch, kernel)
    from int8nax.backends.cuda import backend as cuda

    for cls in (backends.Backend, cuda.CUDABackend):  # at every row count, CUDA's included
        monkeypatch.setattr(cls, "swiglu_one_step_at", lambda self, rows: self.swiglu_one_step())
    model = models.build(models.CONFIGS["qwen2.5-0.5b"], 2)
    text = models.convert(model, "w8a8")
    assert text.startswith("int8nax.nn.quantize_linears: 14 W8A8Linear on the ")
    assert text.endswith("SwiGLU MLPs: 2 of 2 quantize h in one step" if kernel
                         else "SwiGLU MLPs: swiglu, then the quantization (2)")
    if kernel:  # a backend that takes decode's rows in two steps (CUDA's GEMV rows) says from where
        for cls in (backends.Backend, cuda.CUDABackend):
            monkeypatch.setattr(cls, "swiglu_one_step_at", lambda self, rows: rows > 16)
        text = models.convert(models.build(models.CONFIGS["qwen2.5-0.5b"], 2), "w8a8")
        assert text.endswith("SwiGLU MLPs: 2 of 2 quantize h in one step from 17 tokens (the model's own call below)")


# ---- the whole MLP in one step (Backend.w8a8_mlp_marked) ----

class StepBackend(GraphBackend):
    """GraphBackend without a one-step SwiGLU kernel, with the whole-MLP step the CUDA backend has:
    one compiled function per x shape (compile_per_thread, BodyRan set by its body) computing the
    MLP's three steps. Counts its calls and body runs; `refuse` makes it answer None, `fail` raise."""

    name = "step"

    def __init__(self):
        super().__init__()
        self.body = BodyRan()
        self.entries = {}
        self.step_calls = 0
        self.body_runs = 0
        self.refuse = self.fail = False
        self.scale = 1  # other than 1: a step whose bits are wrong

    def swiglu_one_step(self):
        return False

    def _entry(self, shape, h):
        if shape not in self.entries:
            def body(x, w1, s1, w2, s2, *biases):
                self.body.ran = True
                self.body_runs += 1
                b1, b2 = biases if biases else (None, None)
                g_u = self.w8a8_linear(x, w1, s1, b1)
                return self.w8a8_linear(mlx_lm_swiglu(g_u[..., :h], g_u[..., h:]), w2, s2, b2)

            self.entries[shape] = compile_per_thread(body)
        return self.entries[shape]

    def w8a8_mlp_marked(self, x, w1, s1, b1, w2, s2, b2):
        self.step_calls += 1
        if self.fail:
            raise RuntimeError("the step broke")
        if self.refuse:
            return None
        self.body.ran = False
        biases = () if b1 is None else (b1, b2)
        y = self._entry((x.shape, b1 is not None), w1.shape[0] // 2)(x, w1, s1, w2, s2, *biases)
        return y * self.scale if self.scale != 1 else y, self.body.ran


@pytest.fixture
def step(monkeypatch):
    impl = StepBackend()
    monkeypatch.setattr(backends, "resolve", lambda requested=None: impl)
    return impl


def with_biases(make):
    """An mlx-lm MLP (its own class and call) whose three projections have biases."""
    def made():
        mlp = make()
        dims, hidden = mlp.gate_proj.weight.shape[1], mlp.gate_proj.weight.shape[0]
        mlp.gate_proj, mlp.up_proj = nn.Linear(dims, hidden), nn.Linear(dims, hidden)
        mlp.down_proj = nn.Linear(hidden, dims)
        return mlp
    return made


@pytest.mark.parametrize("make", [lambda: qwen2.MLP(64, 160), lambda: qwen3.MLP(64, 160),
                                  with_biases(lambda: qwen2.MLP(64, 160))], ids=["qwen2", "qwen3", "biases"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).split(".")[-1])
def test_whole_step_gives_the_models_bits(step, make, dtype):
    mlp, ref = pair(make)
    x = mx.random.normal((2, 5, 64)).astype(dtype)
    want = ref(x)
    for i in range(4):
        got = mlp(x)
        assert got.dtype == dtype and got.shape == (2, 5, 64)
        assert mx.array_equal(got, want).item() and mx.array_equal(got, mlp.own_call(x)).item()
    assert step.step_calls == 4 and step.body_runs == 1  # traced once, replayed since
    assert step.calls == []  # never the one-step SwiGLU kernel


def test_whole_step_follows_replaced_weights(step):
    mlp, _ = pair(lambda: qwen3.MLP(64, 160))
    other, other_ref = pair(lambda: qwen3.MLP(64, 160), seed=7)
    x = mx.random.normal((3, 64))
    before = mlp(x)
    mlp.update(other.parameters())
    after = mlp(x)
    assert not mx.array_equal(before, after).item() and mx.array_equal(after, other_ref(x)).item()
    mlp.down_proj.update(pair(lambda: qwen3.MLP(64, 160), seed=8)[0].down_proj.parameters())
    assert mx.array_equal(mlp(x), mlp.own_call(x)).item()


def test_whole_step_leaves_traced_calls_to_the_models_call(step):
    mlp, ref = pair(lambda: qwen2.MLP(64, 160))
    x = mx.random.normal((2, 3, 64))
    eager = mlp(x)
    calls = step.step_calls
    gx = mx.grad(lambda v: mlp(v).sum())(x)  # the step has no vjp: the own call's path serves it
    assert mx.array_equal(gx, mx.grad(lambda v: mlp.own_call(v).sum())(x)).item()
    assert mx.array_equal(mx.compile(mlp)(x), eager).item()
    assert step.step_calls > calls
    assert mx.array_equal(mlp(x), ref(x)).item()


def test_whole_step_falls_back_where_it_cannot_serve(step):
    mlp, ref = pair(lambda: qwen2.MLP(64, 160))
    x = mx.random.normal((3, 64))
    want = ref(x)
    step.refuse = True  # the backend's answer None (the CUDA backend's with COMPILE off)
    assert mx.array_equal(mlp(x), want).item() and step.step_calls == 1
    step.refuse, step.fail = False, True  # an error in the step: the own call runs, and names any error
    assert mx.array_equal(mlp(x), want).item() and step.step_calls == 2
    step.fail = False
    calls = step.step_calls
    assert mx.array_equal(mlp(np.array(x)), want).item()  # not an mx.array: the layers convert it
    assert mlp(mx.zeros((0, 64))).shape == (0, 64)
    with pytest.raises(ValueError, match="input_dims = 64"):
        mlp(mx.zeros((2, 63)))
    with pytest.raises(TypeError, match="'x' must have dtype"):
        mlp(mx.zeros((2, 64), dtype=mx.int32))
    assert step.step_calls == calls
    mlp.gate_proj._group.shared = False  # a split group
    assert mx.array_equal(mlp(x), want).item() and step.step_calls == calls


def test_whole_step_needs_equal_halves():
    # a gate and an up of other widths (a model's own call may allow it: not mlx-lm's swiglu halves)
    impl = StepBackend()
    mlp, _ = pair(lambda: qwen2.MLP(64, 160))
    group = mlp.gate_proj._group
    down = mlp.down_proj
    x = mx.random.normal((3, 64))
    assert mlp.whole_step(impl, down, x) is not None
    group.bounds = [150]
    assert mlp.whole_step(impl, down, x) is None


def test_the_model_check_compares_whole_steps_with_the_models_own(step):
    from int8nax.bench.checks import MismatchError
    from int8nax.bench.models import projections

    args = qwen2.ModelArgs(model_type="qwen2", hidden_size=64, num_hidden_layers=2, intermediate_size=160,
                           num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, vocab_size=97)
    mx.random.seed(6)
    model = qwen2.Model(args)
    inn.quantize_linears(model)
    with projections._recording(model) as recorders:
        mx.eval(model(mx.array([[1, 2, 3, 4, 5]])))
    assert step.step_calls == 0  # recorded: the model's own call, projection by projection
    assert projections._check_swiglu_calls(model, recorders, "m") == " (2 SwiGLU MLP calls bit-identical)"
    assert step.step_calls == 2
    step.scale = 1.001
    with pytest.raises(MismatchError, match=r"the MLP model\.layers\.[01]\.mlp's whole-MLP step differs"):
        projections._check_swiglu_calls(model, recorders, "m")


def test_cuda_whole_step_launches_the_mlps_two_graphs_with_swiglu_between(monkeypatch, rng):
    # The CUDA entry point's own logic on the CPU box, its launches replaced: gate/up's x and
    # choice, then h's (the down projection's M, N, K), each as its own layer's entry point would
    # hand w8a8_graph (x and h in the model's leading dims: no reshape node); its flag set at a
    # signature's first call and for tracers only.
    from int8nax.backends.cuda import backend as cuda
    from test_layer_host_path import cuda_graphs_recorded

    graph = GraphBackend()
    seen = cuda_graphs_recorded(monkeypatch, graph.w8a8_linear, narrow=False)
    cuda._w8a8_mlp_any_rows.cache_clear()
    try:
        w1, s1 = int8nax.quantize_weight_int8(mx.array(rng.standard_normal((2 * 24, 16)).astype(np.float32)))
        w2, s2 = int8nax.quantize_weight_int8(mx.array(rng.standard_normal((10, 24)).astype(np.float32)))
        x = mx.array(rng.standard_normal((2, 3, 16)).astype(np.float32))
        y, ran = cuda.w8a8_mlp_marked(x, w1, s1, None, w2, s2, None)
        assert ran and y.shape == (2, 3, 10)
        assert seen == [((2, 3, 16), "v6", (48, 16), False, ("quant", 6, 16), False),
                        ((2, 3, 24), "v6", (10, 24), False, ("quant", 6, 24), False)]
        y2, ran2 = cuda.w8a8_mlp_marked(x, w1, s1, None, w2, s2, None)
        assert not ran2 and len(seen) == 2
        g_u = graph.w8a8_linear(x.reshape(6, 16), w1, s1, None)
        want = graph.w8a8_linear(mlx_lm_swiglu(g_u[:, :24], g_u[:, 24:]), w2, s2, None).reshape(2, 3, 10)
        assert mx.array_equal(y2, want).item()
        flags = []
        mx.grad(lambda v: flags.append(cuda.w8a8_mlp_marked(v, w1, s1, None, w2, s2, None)[1]) or v.sum())(x)
        assert flags == [True]
        monkeypatch.setattr(cuda, "COMPILE", False)
        assert cuda.w8a8_mlp_marked(x, w1, s1, None, w2, s2, None) is None
    finally:
        cuda._w8a8_mlp_any_rows.cache_clear()


def test_cuda_whole_step_is_opt_in(monkeypatch):
    # INT8NAX_CUDA_MLP=step offers the step (Backend.w8a8_mlp_marked), the default and "own" none
    from int8nax.backends.cuda import backend as cuda, settings as cuda_settings

    try:
        for value, want in (("", None), ("own", None), (" STEP ", cuda.w8a8_mlp_marked)):
            monkeypatch.setenv(cuda_settings.MLP_ENV, value)
            cuda.clear_caches()
            assert cuda.BACKEND.w8a8_mlp_marked is want
    finally:
        monkeypatch.delenv(cuda_settings.MLP_ENV)
        cuda.clear_caches()


@pytest.mark.skipif(not _on_cuda(), reason="needs MLX's CUDA backend and an NVIDIA GPU")
@pytest.mark.parametrize("make", [lambda: qwen2.MLP(3584, 18944), with_biases(lambda: qwen3.MLP(512, 1536))],
                         ids=["qwen2.5-7b", "biases"])
@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float16], ids=lambda d: str(d).split(".")[-1])
def test_cuda_whole_step_gives_the_models_bits(monkeypatch, make, dtype):
    """The CUDA backend's whole-MLP step (INT8NAX_CUDA_MLP=step, INT8NAX_CUDA_SWIGLU=split) against the model's
    own three calls, bit for bit, at decode (the GEMV) and prefill row counts, and taken: the step
    replays once per shape after its first call. The MLP's very first call takes its own call (its
    fresh arrays' tracer check runs its first trace there) and records its tape for that shape,
    whose later calls replay the tape, so one call at a shape outside the record comes first."""
    from int8nax.backends.cuda import backend as cuda, settings as cuda_settings

    monkeypatch.setenv(cuda_settings.MLP_ENV, "step")
    monkeypatch.delenv(cuda_settings.SWIGLU_ENV, raising=False)
    cuda.clear_caches()
    try:
        mlp, _ = pair(make)
        mlp.set_dtype(dtype)
        seen = []
        real = cuda.w8a8_mlp_marked
        monkeypatch.setattr(cuda, "w8a8_mlp_marked", lambda *a: seen.append(a[0].shape) or real(*a))
        assert mlp.fused_call() == "whole-step"
        mlp(mx.zeros((1, 2, mlp.gate_proj.input_dims), dtype=dtype))
        seen.clear()
        for m in (1, 5, 16, 300, 512):
            x = (mx.random.normal((1, m, mlp.gate_proj.input_dims)) * 2).astype(dtype)
            assert mx.array_equal(mlp(x), mlp.own_call(x)).item(), m
        assert seen == [(1, m, mlp.gate_proj.input_dims) for m in (1, 5, 16, 300, 512)]
    finally:
        monkeypatch.delenv(cuda_settings.MLP_ENV)
        cuda.clear_caches()
