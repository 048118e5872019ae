"""The launches of the activation quantization kernels: the plain one (kernels/cuda/quant/quantize.cuh),
the SwiGLU one (quant/swiglu_quantize.cuh) and its staged form (quant/swiglu_quantize_staged.cuh).
"""

from __future__ import annotations

from dataclasses import dataclass

from ....tiling import ceil_div

# One block per row. A row of whole 8-value groups (16-byte loads) that fits in THREADS * HELD
# groups is loaded into registers at once and read once; longer rows, K % 8 != 0 and misaligned
# bases take the kernel's two-pass loop (correct at any launch).

QUANT_GROUP = 8
"""Values in one of quant/quantize.cuh's register groups: 16 bytes of float16/bfloat16, 32 of float32."""


@dataclass(frozen=True)
class CudaQuantLaunch:
    """A launch of the quantization kernel: `threads` per block (one block per row), each holding
    up to `held` groups of QUANT_GROUP values in registers (template THREADS, HELD)."""

    threads: int
    held: int

    def __post_init__(self):
        if self.threads % 32 or not 32 <= self.threads <= 1024:
            raise ValueError(f"threads={self.threads}: whole warps, at most 1024 (one block)")
        if self.held < 1:
            raise ValueError(f"held={self.held}: at least one group a thread")

    @property
    def capacity(self) -> int:
        """The longest row (in values) held in registers; longer rows are read twice."""
        return self.threads * self.held * QUANT_GROUP

    def template(self) -> list[tuple[str, int]]:
        return [("THREADS", self.threads), ("HELD", self.held)]

    def grid(self, m: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(grid in threads, block) for x [M, K]: one block per row."""
        return (m * self.threads, 1, 1), (self.threads, 1, 1)


CUDA_QUANT_LAUNCHES = (CudaQuantLaunch(128, 4), CudaQuantLaunch(256, 4), CudaQuantLaunch(512, 8))
"""Every launch cuda_quant_launch returns, shortest rows first (each is an NVRTC compile per dtype,
~8 s): rows up to 4096, 8192 and 32768 values in registers."""


def cuda_quant_launch(m: int, k: int, sms: int = 132) -> CudaQuantLaunch:
    """The quantization kernel's launch for x [M, K] (float16, bfloat16 or float32) on `sms` SMs.

    Why (H200: ~4 TB/s at ~0.7 µs of loaded DRAM latency, so ~2.8 MB in flight over the GPU,
    ~21 KB per SM, keeps HBM busy; 64K registers and 2048 threads per SM):
    - A block puts its whole row in flight (K * itemsize bytes: 8 KB at K = 4096 float16), so the
      bytes in flight per SM are (resident rows) x (row bytes), however a row is split over threads.
    - Many rows (M > sms): the fewest threads that hold the row, held 4, so that the most rows are
      resident. ptxas (CUDA 13.0): 38 registers at held 4 for 2-byte types (52 for float32), so
      12 blocks of 128 threads per SM: 12 rows x 8 KB = 96 KB in flight at K = 4096 (128, 4);
      6 rows of 256 threads x 16 KB = 96 KB at K = 8192 (256, 4). Longer rows take (512, 8):
      53 registers (80 for float32), two rows of up to 64 KB per SM (float32: one of up to
      128 KB): 76 KB in flight at K = 18944.
    - Few rows (M <= sms): one row per SM, all resident at once whatever the launch; the kernel is
      then one row's latency chain (load, block max, quantize, store), and more warps shorten
      its arithmetic tail (~7 instructions a value in SASS: 4096 values are ~900 warp
      instructions per SM, ~225 per scheduler): (512, 8), 16 warps, 4 per scheduler. Not (1024, 4): a 1024-thread
      block may use at most 64 registers a thread, and float32 at held 4 needs 52 already.
    - Few instantiations: three launches in all, and a model whose layers have one K <= 8192 and
      one longer K builds two of them per dtype (the long-row launch serves both layers at small M).
    Rows longer than 32768 values run (512, 8)'s two-pass loop.
    """
    if m > sms:
        for launch in CUDA_QUANT_LAUNCHES[:2]:
            if k <= launch.capacity:
                return launch
    return CUDA_QUANT_LAUNCHES[-1]


SWIGLU_HELD_BYTES = 256
"""Most bytes of g and u one thread of the SwiGLU quantization may hold in registers (below)."""


def swiglu_held_bytes(launch: CudaQuantLaunch, itemsize: int) -> int:
    """Bytes of g and u a thread holds at `launch` (two inputs of `held` groups each)."""
    return 2 * launch.held * QUANT_GROUP * itemsize


SWIGLU_PAIR_LAUNCH = CudaQuantLaunch(512, 5)
"""The SwiGLU kernel's launch for many long rows of a 2-byte type: two rows an SM. ptxas (CUDA 13.0,
sm_90a) gives it 59 registers a thread for float16 and bfloat16, allocated as 64: 2 x 512 x 64 =
65536, an SM's whole register file; it holds rows up to 20480 values (Qwen2.5-7B's 18944)."""

SWIGLU_QUANT_LAUNCHES = CUDA_QUANT_LAUNCHES + (SWIGLU_PAIR_LAUNCH,)
"""Every launch cuda_swiglu_quant_launch returns."""


def cuda_swiglu_quant_launch(m: int, hidden: int, itemsize: int, sms: int = 132) -> CudaQuantLaunch:
    """The SwiGLU quantization kernel's launch (kernels/cuda/quant/swiglu_quantize.cuh) for y [M, 2H]
    (H = hidden; itemsize 2 for float16/bfloat16, 4 for float32) on `sms` SMs: one of
    SWIGLU_QUANT_LAUNCHES.

    Why: the kernel is the quantization kernel over h [M, H], with each held group of h loaded as
    a group of g and one of u, so cuda_quant_launch(m, hidden)'s reasoning carries over (a row
    of h fits the launch's capacity in registers; every row's 2H loads in flight), with twice
    the bytes in flight per resident row, and twice the held registers per thread. ptxas (CUDA
    13.0, sm_90a; tools/cuda_compile_check.py) gives, in registers a thread, no spills:
    - float16 / bfloat16: 64 / 54 at (128, 4) and (256, 4), 80 at (512, 8): 128 bytes held at
      held 4, 256 at held 8; every launch fits 64K registers (512 x 80 = 40960: one row per SM,
      2 x 18944 x 2 = 76 KB in flight at Qwen2.5-7B's H = 18944, 48 KB at Qwen3-8B's 12288;
      Qwen2.5-0.5B's 4864 takes (256, 4) at M > sms, 4 rows x 19 KB);
    - float32: 80 at held 4 (256 bytes held), but 144 at (512, 8) (512 bytes): 512 x 144 =
      73728 registers, more than an SM has, so that launch would fail. A launch that holds more
      than SWIGLU_HELD_BYTES a thread is replaced by (256, 4), the widest that fits: rows up to
      8192 held, longer ones read twice (float32 is not a model's serving type).
    - Many long rows of a 2-byte type (M > sms, 8192 < H <= 20480): SWIGLU_PAIR_LAUNCH, two rows
      an SM, where (512, 8)'s 80 registers fit one. On the H200 (2026-12-05) the kernel at (512, 8)
      took 0.252 ms a layer at 4096 tokens of Qwen2.5-7B, 1.5 TB/s over the 388 MB it must move:
      with one row an SM, nothing loads while a row's maximum is reduced and its codes are
      computed and stored. A second row an SM loads meanwhile: 0.161 ms at (512, 5) (H200,
      2026-12-05; ~0.15 predicted), against 0.226 for swiglu and the quantization kernel.
    """
    launch = cuda_quant_launch(m, hidden, sms)
    pair = SWIGLU_PAIR_LAUNCH
    if itemsize == 2 and m > sms and launch.held > pair.held and hidden <= pair.capacity:
        return pair
    if swiglu_held_bytes(launch, itemsize) <= SWIGLU_HELD_BYTES:
        return launch
    return max((x for x in CUDA_QUANT_LAUNCHES if swiglu_held_bytes(x, itemsize) <= SWIGLU_HELD_BYTES),
               key=lambda x: (x.threads, x.capacity))


SMEM_PER_BLOCK = 227 * 1024
"""The most dynamic shared memory one block may ask for on compute capability 9.0."""

STAGED_THREADS = 512
"""Threads of a staged block: the fused kernel's long-row launch (cuda_quant_launch's reasoning)."""

STAGED_STATIC_SMEM = 4 * (STAGED_THREADS // 32)
"""The staged kernel's static shared memory (a word a warp for the row maximum): it counts
against SMEM_PER_BLOCK with the buffers."""

STAGED_MAX_HELD = 8
"""The most groups a thread of a staged block holds (h's row held in registers, read from shared
memory once); longer rows take the one-row-a-block kernel."""


@dataclass(frozen=True)
class CudaStagedLaunch:
    """The staged SwiGLU quantization's launch (kernels/cuda/quant/swiglu_quantize_staged.cuh): `blocks`
    persistent blocks of `threads`, each quantizing every blocks-th row with up to `held` groups a
    thread in registers, over two row buffers of 2H values of `itemsize` bytes in shared memory."""

    threads: int
    held: int
    hidden: int
    itemsize: int
    blocks: int

    @property
    def capacity(self) -> int:
        return self.threads * self.held * QUANT_GROUP

    @property
    def stage_bytes(self) -> int:
        """Both buffers: the kernel's dynamic shared memory."""
        return 2 * 2 * self.hidden * self.itemsize

    def template(self) -> list[tuple[str, int]]:
        return [("THREADS", self.threads), ("HELD", self.held), ("STAGE_BYTES", self.stage_bytes)]

    def grid(self, m: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(grid in threads, block) for y [M, 2H]: min(M, blocks) blocks."""
        return (min(m, self.blocks) * self.threads, 1, 1), (self.threads, 1, 1)


def staged_max_hidden(itemsize: int) -> int:
    """The longest row H (a multiple of 8) whose two buffers of 2H values fit a staged block."""
    return (SMEM_PER_BLOCK - STAGED_STATIC_SMEM) // (4 * itemsize) // QUANT_GROUP * QUANT_GROUP


def cuda_swiglu_staged_launch(m: int, hidden: int, itemsize: int, sms: int = 132) -> CudaStagedLaunch | None:
    """The staged SwiGLU quantization's launch for y [M, 2H] (H = hidden) on `sms` SMs, or None
    where it does not apply (then cuda_swiglu_quant_launch's one-row-a-block kernel runs).

    Why (quant/swiglu_quantize_staged.cuh): the one-row-a-block kernel's blocks load, then compute,
    and an SM's blocks do so in step, so its time is the loads' plus the arithmetic's; a
    persistent block that copies its next row into shared memory while it quantizes this one
    overlaps them. Predicted at 4096 tokens of Qwen2.5-7B on the H200: ~0.09 ms a layer (the
    larger of ~0.08 ms of loads and ~0.08 of arithmetic, plus a row's start), against 0.161.
    - 2-byte types (float16, bfloat16: what models serve in) whose rows are whole 16-byte groups
      (H % 8 == 0), two buffers and the kernel's static words within one block's shared memory
      (staged_max_hidden: H <= 29048), and h's row held in registers (H <= 512 x 8 x 8).
    - 512 threads (the fused kernel's long-row launch), held = the fewest groups a thread that
      hold the row, one block an SM: ptxas wants 112-136 registers a thread (CUDA 13.0, sm_90a),
      so the kernel's launch bound (cuda_source.LAUNCH_BOUNDS) bounds it to 128, an SM's whole register file.
      Qwen2.5-7B's H = 18944 stages 148 KB; Qwen3-8B's 12288, 96 KB.
    - At least two rows a block (M >= 2 x SMs): with one, nothing is loaded while it computes,
      and the one-row-a-block kernel does as well.
    """
    if itemsize != 2 or hidden % QUANT_GROUP:
        return None
    held = ceil_div(hidden, STAGED_THREADS * QUANT_GROUP)
    if held > STAGED_MAX_HELD or hidden > staged_max_hidden(itemsize) or m < 2 * sms:
        return None
    return CudaStagedLaunch(STAGED_THREADS, held, hidden, itemsize, sms)
