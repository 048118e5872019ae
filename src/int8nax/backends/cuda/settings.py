"""The CUDA backend's environment choices, each read once per process (backend.clear_caches()
forgets them): INT8NAX_CUDA_KERNEL, INT8NAX_CUDA_EPILOGUE, INT8NAX_CUDA_SWIGLU, INT8NAX_CUDA_BIAS,
INT8NAX_CUDA_MLP."""

from __future__ import annotations

import os
from functools import lru_cache

from . import choice as cuda_choice

# ---- the choice (INT8NAX_CUDA_KERNEL: cuda_choice.OVERRIDES; read once per process, clear_caches()) ----

KERNEL_ENV = cuda_choice.KERNEL_ENV


@lru_cache(maxsize=1)
def kernel_choice() -> str:
    """"auto" or the variant INT8NAX_CUDA_KERNEL names (its old names are aliases)."""
    return cuda_choice.override_name(os.environ.get(KERNEL_ENV, ""))


# INT8NAX_CUDA_EPILOGUE picks W8A8's dequantization into float16 / bfloat16 outputs:
#   eft      float32 with error-free transformations, within 1 ulp of float32, then one rounding
#            to the output type;
#   narrow   float32 with only the exactness the output type's ulp needs (11-15 fewer PTX
#            instructions a value); the rare pairs where it could miss 1 ulp take the eft path
#            (kernels/cuda/epilogue/dequantize.cuh, dequantize_narrow). Checked on the CPU against long
#            double (tests/test_cuda_epilogue.py).
# float32 outputs always take eft. Read once per process (clear_caches()).

EPILOGUE_ENV = "INT8NAX_CUDA_EPILOGUE"
EPILOGUE_CHOICES = ("eft", "narrow")
EPILOGUE_DEFAULT = "narrow"
"""The epilogue when INT8NAX_CUDA_EPILOGUE is unset. narrow is within 1 ulp of the float64 model
like eft (its GPU tests and kernel-time checks pass on the H200) and skips eft's cancellation test,
which sends about 1 biased value in 250 to the exact path and so nearly every tile of a biased
layer through its slow pass. INT8NAX_CUDA_EPILOGUE=eft takes eft for every output type."""


def _check_choice(value: str, choices: tuple[str, ...], source: str) -> str:
    if value not in choices:
        raise ValueError(f"{source}: expected one of {list(choices)}, got {value!r}")
    return value


def _env_choice(env: str, choices: tuple[str, ...], default: str) -> str:
    """The value of the environment variable `env` (trimmed, lower case), one of `choices`, or
    `default` where it is unset or empty; a ValueError naming `env` otherwise."""
    return _check_choice(os.environ.get(env, "").strip().lower() or default, choices, env)


@lru_cache(maxsize=1)
def epilogue_choice() -> str:
    """"eft" or "narrow", from INT8NAX_CUDA_EPILOGUE (EPILOGUE_DEFAULT where unset)."""
    return _env_choice(EPILOGUE_ENV, EPILOGUE_CHOICES, EPILOGUE_DEFAULT)


def _narrow(epilogue: str | None = None) -> bool:
    """Whether W8A8 takes the narrow epilogue: `epilogue` ("eft" or "narrow") where given, else
    epilogue_choice()."""
    chosen = epilogue_choice() if epilogue is None else _check_choice(epilogue, EPILOGUE_CHOICES, "epilogue")
    return chosen == "narrow"


# ---- SwiGLU's quantization: one kernel, or swiglu then the quantization kernel ----
#
#   fused   kernels/cuda/quant/swiglu_quantize.cuh: h = silu(gate) * up with MLX's own device functors,
#           quantized from the registers; h never reaches memory (at 4096 tokens of Qwen2.5-7B,
#           0.39 GB a layer read and written instead of 0.70). Same bits as split.
#   staged  fused's kernel with persistent blocks that copy each row into shared memory while
#           they quantize the previous one (kernels/cuda/quant/swiglu_quantize_staged.cuh), where
#           cuda_plans.cuda_swiglu_staged_launch takes the shape (many rows of 2-byte types);
#           elsewhere fused's. Same bits.
#   split   MLX's fused swiglu kernel writes h, the quantization kernel reads it.
# Read once per process (clear_caches()).

SWIGLU_ENV = "INT8NAX_CUDA_SWIGLU"
SWIGLU_CHOICES = ("fused", "staged", "split")
SWIGLU_DEFAULT = "split"
"""split. fused and staged are opt-in. fused's kernels passed their bit-for-bit test on an H100
(tests/test_cuda_swiglu.py, every launch) and a model's MLPs with it passed there too
(tests/test_swiglu.py and tests/test_tape.py with INT8NAX_CUDA_SWIGLU=fused; at decode's rows the
MLP keeps its taped own call, Backend.swiglu_one_step_at). But in mlx-lm's loop it did not gain:
Qwen3-8B, 2048 tokens, one H100 VM, split / fused / split in turn, the forward rung 51.0k / 48.8k /
49.6k tok/s and the loop within its spread (docs/results/cuda-h100.md, the one-wave section),
though it writes one buffer fewer a layer and the H200 timed its kernel faster than the two
steps (with cuda_plans.SWIGLU_PAIR_LAUNCH, two rows an SM). staged has not been timed
(cuda_plans.cuda_swiglu_staged_launch; docs/cuda.md, the sibling layers' section)."""


@lru_cache(maxsize=1)
def swiglu_choice() -> str:
    """"fused", "staged" or "split", from INT8NAX_CUDA_SWIGLU (SWIGLU_DEFAULT where unset)."""
    return _env_choice(SWIGLU_ENV, SWIGLU_CHOICES, SWIGLU_DEFAULT)


# ---- W8A8's bias: in its own type, or cast to float32 before the call ----
#
#   own   the dequantizing kernels read a float16 / bfloat16 bias as it is (kernels/cuda/
#         epilogue/epilogue.cuh, load_pair and to_float: exact), so a call makes no extra node;
#   cast  MLX casts it to float32 first: one more node and copy kernel a call (a few µs of kernel
#         time: docs/cuda.md, the bias's type), the same bits.
# A float32 bias (int8nax.nn's layers hold theirs so) goes as it is either way. Read once per
# process (clear_caches()).

BIAS_ENV = "INT8NAX_CUDA_BIAS"
BIAS_CHOICES = ("cast", "own")
BIAS_DEFAULT = "own"
"""own: a call with a 16-bit bias launches no cast (MLX's node and copy kernel, 1.4-4.1 µs of kernel
time on the H200 and H100), with the cast's bits (tests/test_cuda_bias.py passed on an H100). A model
through int8nax.nn reads neither: its layers hold their biases in float32."""


@lru_cache(maxsize=1)
def bias_choice() -> str:
    """"own" or "cast", from INT8NAX_CUDA_BIAS (BIAS_DEFAULT where unset)."""
    return _env_choice(BIAS_ENV, BIAS_CHOICES, BIAS_DEFAULT)


# ---- a SwiGLU MLP's call: one compiled step, or the model's own three calls ----
#
#   step  backend.w8a8_mlp_marked: one mx.compile entry per x shape holds the gate/up launches,
#         swiglu and the down launches (the same launches, in the same order, as the own call:
#         the same bits); a decode step's MLP builds one replay instead of two, a split, the
#         swiglu and the sibling group's bookkeeping (host work: docs/results);
#   own   the model's own call: gate/up through their sibling group, mlx-lm's swiglu, down.
# Where INT8NAX_CUDA_SWIGLU is fused or staged, that one-step kernel serves the MLP instead.
# Read once per process (clear_caches()).

MLP_ENV = "INT8NAX_CUDA_MLP"
MLP_CHOICES = ("step", "own")
MLP_DEFAULT = "own"
"""own. step gives the own call's bits on an H100 (tests/test_swiglu.py,
test_cuda_whole_step_gives_the_models_bits) but no gain in mlx-lm's loop there, which was near
GPU-bound (docs/results/cuda-h100.md). Where the host sets the loop's pace it takes less host work
(a decoder layer 79 µs against 87 on an H200 VM, docs/results/cuda-h200.md), but the loop's gain
there stayed inside that VM's spread. So it stays opt-in."""


@lru_cache(maxsize=1)
def mlp_choice() -> str:
    """"step" or "own", from INT8NAX_CUDA_MLP (MLP_DEFAULT where unset)."""
    return _env_choice(MLP_ENV, MLP_CHOICES, MLP_DEFAULT)


def w8a8_settings() -> str:
    """W8A8's environment choices as int8nax.info() reports them (read once per process)."""
    swiglu = {"fused": "quantized in one step", "staged": "quantized in one step, rows staged in shared memory",
              "split": "swiglu, then the quantization"}[swiglu_choice()]
    bias = {"own": "read in its own type", "cast": "cast to float32 first"}[bias_choice()]
    mlp = {"step": "in one compiled step", "own": "by their own call"}[mlp_choice()]
    return (f"W8A8: {epilogue_choice()} epilogue ({EPILOGUE_ENV}), SwiGLU {swiglu} ({SWIGLU_ENV}), "
            f"a 16-bit bias {bias} ({BIAS_ENV}), SwiGLU MLPs {mlp} ({MLP_ENV})")
