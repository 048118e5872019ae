// int8nax CUDA kernels, part 3: Hopper (sm_90a) int8 GEMMs fed by the tensor memory accelerator.
//
// C[M, N] = A[M, K] . B[N, K]^T, int8 in, exact int32 accumulation. Three variants share the helpers
// below; each takes gemm_sm90's epilogues (int32 out, or the W8A8 dequantization):
//
//   gemm_tma_simple  the cp.async kernel of gemm_sm90.cuh with its loads replaced by TMA: the
//                    same kind of grid (one block per output tile and K split; its plans come
//                    from int8nax.tiling.tma_plan), WM warpgroups that all
//                    compute, STAGES stages loaded AHEAD ahead (as there); thread 0 issues
//                    two cp.async.bulk.tensor.2d per stage, completion on a "full" mbarrier with
//                    expect_tx; a __syncthreads per K block frees the slot that is refilled.
//   gemm_tma_ws      warp-specialised and persistent: 384 threads = a producer warpgroup (one
//                    thread issues the TMA, setmaxnreg.dec) + 2 consumer warpgroups (setmaxnreg.inc)
//                    that multiply from full/empty mbarrier pairs per stage; gridDim.x blocks walk
//                    the (tile, split) work units in a rasterised order (int8nax.tiling.ws_unit).
//   gemm_tma_pp      gemm_tma_ws's producer and units with ping-pong consumers: each consumer
//                    warpgroup computes whole 128 x BN tiles, the block's units alternating between
//                    the two, their main loops taking turns, so one's epilogue overlaps the other's
//                    main loop (cuBLASLt's kernels at 2048 x 4096^2 and 8192^3 are named for
//                    one warpgroup per 128 x 128 tile and launch 384 threads: this schedule).
//
// Tensor maps: cuda_kernel passes no by-value CUtensorMap, so each block encodes the maps of A
// and B itself (tensormap.replace on a zeroed 128-byte shared buffer), publishes them to its
// 256-byte slot of the uint8 output `maps` and acquires them before the first TMA
// (docs/cuda.md, "Tensor maps on the device": the sequence verified on the H200).
// The maps use the 128-byte swizzle, so every stage holds the layout of gemm_sm90.cuh's
// sw128_descriptor (16-byte chunk j of row r at chunk j ^ (r % 8); stages 1024-byte aligned).
// Boxes are 128 bytes (one swizzle row) x the tile's rows; rows and columns past the matrix are
// zero-filled by the TMA and still count toward complete_tx.
// Requirements: K % 16 == 0 (the row stride of a map must be a multiple of 16 bytes) and bases
// on 16-byte boundaries (a map's global address must be). A row-contiguous view that starts
// inside its buffer can break the second (MLX passes such views without a copy): gemm_tma_simple
// then runs the cp.async kernel's main loop instead (same grid, same tile, its byte-wise loads);
// the persistent kernels' consumers load their own K blocks one at a time instead.
#pragma once

namespace int8nax {

// ---- mbarrier ----

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes the initialised barriers visible to the other threads and to the async proxy (TMA).
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Cycles after which a wait is taken for a deadlock (~2 s at 1.98 GHz; no legitimate wait comes
// near it): with TRAP the kernel traps, so a pipeline bug surfaces as a launch error, not as a
// hang. Only the warp-specialised kernels use it: in gemm_tma_simple the trap path made ptxas
// inject a warpgroup.wait before the loop (C7517), serialising the wgmma.
constexpr long long MBAR_DEADLOCK_CYCLES = 1ll << 32;

// Blocks until the phase of parity `parity` of the barrier has completed.
template <bool TRAP = false>
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  if (!TRAP) {
    while (!mbar_try_wait(bar, parity)) {
    }
    return;
  }
  if (mbar_try_wait(bar, parity)) {
    return;
  }
  const long long start = clock64();
  while (!mbar_try_wait(bar, parity)) {
    if (clock64() - start > MBAR_DEADLOCK_CYCLES) {
      asm volatile("trap;\n");
    }
  }
}

// ---- tensor maps built on the device ----

// Encodes the tiled 2-D map of a row-major int8 [rows, K] matrix at `base` (box: 128 bytes x
// box_rows rows, 128-byte swizzle, zero fill) in the 128-byte shared scratch `tmp`, copies it to
// the global slot `gmap` (64-byte aligned) and acquires it for the tensor-map proxy.
// Executed by one whole warp; `base` must be 16-byte aligned (bases_tma_aligned).
__device__ __forceinline__ void build_tensor_map(uint8_t* gmap, uint32_t tmp, const int8_t* base, int rows, int K,
                                                 int box_rows) {
  const int lane = threadIdx.x & 31;
  const unsigned long long addr = reinterpret_cast<unsigned long long>(base);
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(tmp + 4 * lane), "r"(0) : "memory");
  __syncwarp();
  if (lane == 0) {
    const uint32_t dim0 = static_cast<uint32_t>(K);
    const uint32_t dim1 = static_cast<uint32_t>(rows);
    const unsigned long long stride = static_cast<unsigned long long>(K);  // bytes (PTX ISA >= 8.5)
    const uint32_t box0 = 128;
    const uint32_t box1 = static_cast<uint32_t>(box_rows);
    asm volatile(
        "tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;\n"
        "tensormap.replace.tile.rank.shared::cta.b1024.b32 [%0], 1;\n"
        "tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%0], 0, %2;\n"
        "tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%0], 1, %3;\n"
        "tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 0, %4;\n"
        "tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 1, %5;\n"
        "tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], 0, %6;\n"
        "tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%0], 0, 1;\n"
        "tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%0], 1, 1;\n"
        "tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [%0], 0;\n"
        "tensormap.replace.tile.interleave_layout.shared::cta.b1024.b32 [%0], 0;\n"
        "tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [%0], 3;\n"
        "tensormap.replace.tile.fill_mode.shared::cta.b1024.b32 [%0], 0;\n"
        ::"r"(tmp), "l"(addr), "r"(box0), "r"(box1), "r"(dim0), "r"(dim1), "l"(stride)
        : "memory");
  }
  __syncwarp();
  asm volatile(
      "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%0], [%1], 128;\n"
      ::"l"(gmap), "r"(tmp)
      : "memory");
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(gmap) : "memory");
}

// Whether both operands can be read through tensor maps (the same answer in every thread).
__device__ __forceinline__ bool bases_tma_aligned(const int8_t* a, const int8_t* b) {
  return ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b)) & 15ull) == 0;
}

// Both operands' maps into a block's 256-byte slot (A's first, B's 128 bytes on), encoded in
// `scratch` (256 bytes of shared memory); executed by warp 0 only.
__device__ __forceinline__ void build_operand_maps(uint8_t* slot, uint32_t scratch, const int8_t* a, const int8_t* b,
                                                   int M, int N, int K, int a_box_rows, int b_box_rows) {
  build_tensor_map(slot, scratch, a, M, K, a_box_rows);
  build_tensor_map(slot + 128, scratch + 128, b, N, K, b_box_rows);
}

// One box (128 bytes from column k, rows from `row`) of the map into shared memory at `dst`,
// completing `bar`'s transaction count.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const uint8_t* gmap, int k, int row, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(dst), "l"(gmap), "r"(k), "r"(row), "r"(bar)
      : "memory");
}

// ---- variant 1: TMA + mbarrier pipeline, no warp specialisation, one block per tile ----
//
// Shared memory: STAGES x (BM + BN) x 128 bytes (1024-aligned), then STAGES full barriers, then
// 2 x 128 bytes of map scratch (int8nax.tiling.CudaTileConfig.tma_shared_bytes).

// The main loop on TMA loads: acc (zeroed here) = tile t over its K blocks; every wgmma has
// completed on return. Both bases must be 16-byte aligned.
template <int BM, int BN, int BK, int WM, int STAGES, int AHEAD>
__device__ __forceinline__ void tma_mainloop(const int8_t* a, const int8_t* b, int M, int N, int K,
                                             const TileCoords& t, uint8_t* maps, int (&acc)[BN / 2]) {
  static_assert(BK == 128, "the 128-byte swizzle needs K tiles of 128 int8");
  static_assert(BM == 64 * WM, "a warpgroup covers 64 rows (wgmma m64)");
  // As in gemm_sm90: AHEAD = STAGES - 2 keeps one wgmma batch in flight across the barrier,
  // AHEAD = STAGES - 1 one more stage of loads instead.
  constexpr int INFLIGHT = STAGES - 1 - AHEAD;
  static_assert(AHEAD >= 1 && (INFLIGHT == 0 || INFLIGHT == 1), "AHEAD must be STAGES - 1 or STAGES - 2");
  constexpr int A_BYTES = BM * BK;
  constexpr int STAGE_BYTES = (BM + BN) * BK;

  const int tid = threadIdx.x;
  const uint32_t base = aligned_smem_base();
  const uint32_t full = base + STAGES * STAGE_BYTES;
  const uint32_t scratch = full + ((STAGES * 8 + 127) & ~127);
  const size_t block = blockIdx.x + static_cast<size_t>(gridDim.x) * (blockIdx.y + static_cast<size_t>(gridDim.y) * blockIdx.z);
  uint8_t* map_a = maps + block * 256;
  uint8_t* map_b = map_a + 128;

  // Warp 0 builds and acquires both maps; thread 0 (in warp 0) is the only one issuing TMA.
  if (tid < 32) {
    build_operand_maps(map_a, scratch, a, b, M, N, K, BM, BN);
  }
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
    }
    mbar_fence_init();
  }
  __syncthreads();

  auto issue = [&](int slot, int kb) {
    const uint32_t s = base + slot * STAGE_BYTES;
    const uint32_t bar = full + 8 * slot;
    mbar_arrive_expect_tx(bar, STAGE_BYTES);
    tma_load_2d(s, map_a, kb * BK, t.m0, bar);
    tma_load_2d(s + A_BYTES, map_b, kb * BK, t.n0, bar);
  };

  if (tid == 0) {
    for (int s = 0; s < AHEAD && s < t.kbs; ++s) {
      issue(s, t.kb0 + s);
    }
  }

  zero_accumulators(acc);
  const int warpgroup = tid >> 7;
  for (int i = 0; i < t.kbs; ++i) {
    const int slot = i % STAGES;
    mbar_wait(full + 8 * slot, (i / STAGES) & 1);
    // Every thread has passed wgmma_wait<INFLIGHT> of iteration i - 1, so batch
    // i + AHEAD - STAGES has finished reading slot (i + AHEAD) % STAGES: it can be refilled.
    __syncthreads();
    const int next = i + AHEAD;
    if (tid == 0 && next < t.kbs) {
      issue(next % STAGES, t.kb0 + next);
    }
    const uint32_t stage = base + slot * STAGE_BYTES;
    wgmma_k_block<BN>(acc, stage + warpgroup * 64 * BK, stage + A_BYTES);
    wgmma_wait<INFLIGHT>();
  }
  wgmma_wait<0>();
  fence_registers(acc);
}

template <int BM, int BN, int BK, int WM, int STAGES, int AHEAD, int CHUNK, class Epilogue>
__device__ __forceinline__ void gemm_tma_simple(const int8_t* a, const int8_t* b, int M, int N, int K, uint8_t* maps,
                                                const Epilogue& epi) {
  const TileCoords t = tile_coords<BM, BN, BK>(M, N, K);
  if (t.filler) {
    return;
  }
  int acc[BN / 2];
  if (bases_tma_aligned(a, b)) {
    tma_mainloop<BM, BN, BK, WM, STAGES, AHEAD>(a, b, M, N, K, t, maps, acc);
  } else {
    // Uniform over the grid; this kernel's shared memory holds gemm_sm90's stages.
    sm90_mainloop<BM, BN, BK, WM, STAGES, AHEAD>(a, b, M, N, K, t, acc);
  }
  store_accumulators<BN, CHUNK>(acc, t.m0 + (threadIdx.x >> 7) * 64, t.n0, epi);
}

// ---- variant 2: warp-specialised, persistent ----
//
// A work unit u (< units = tiles_m * tiles_n * splits) is split z = u % splits of tile
// u / splits; tiles are numbered in bands of GROUP M-tiles, N-major inside a band, so that the
// blocks running at once share A rows and B columns in L2 (int8nax.tiling.ws_unit mirrors this).
// BM = 128: consumer c owns rows 64c .. 64c + 63 over the whole BN; BM = 64: both own the 64 rows
// and consumer c the columns c BN/2 .. (c + 1) BN/2 - 1. Each consumer stores its share of a unit
// of split z through epis(z) (SplitInt32, SameEpilogue) while the producer already fills the
// stages of the block's next unit; CHUNK_EXACT is store_accumulators' (true for W8A8, whose
// epilogue would spill within the consumers' 232 registers otherwise; false for int32, whose
// pairs never ask for the exact path).
// Shared memory: STAGES x (BM + BN) x 128 bytes (1024-aligned), STAGES full + STAGES empty
// barriers, 2 x 128 bytes of map scratch (int8nax.tiling.CudaWsConfig.shared_bytes).
// The body's launch bound (384 threads, 1 block) comes from kernels/tma_bounds.cuh. splits and group
// arrive as the shape of the launch's `plan` input (kernel arguments), not as data: a load from
// an array made on the host (managed memory) held up every warp's first instruction.

struct WsUnit {
  int m0;
  int n0;
  int z;
  int kb0;
  int kbs;
};

template <int BM, int BN>
__device__ __forceinline__ WsUnit ws_unit(int u, int M, int N, int K, int splits, int group) {
  const int tiles_m = ceil_div(M, BM);
  const int tiles_n = ceil_div(N, BN);
  const int tile = u / splits;
  const int z = u - tile * splits;
  const int band = tile / (group * tiles_n);
  const int r = tile - band * group * tiles_n;
  const int first_m = band * group;
  const int rows = min(group, tiles_m - first_m);
  const int tile_m = first_m + r % rows;
  const int tile_n = r / rows;
  const int k_blocks = ceil_div(K, 128);
  const int kb0 = static_cast<int>(static_cast<long long>(k_blocks) * z / splits);
  const int kb1 = static_cast<int>(static_cast<long long>(k_blocks) * (z + 1) / splits);
  return WsUnit{tile_m * BM, tile_n * BN, z, kb0, kb1 - kb0};
}

// The producer of the persistent kernels (one thread): every K block of the block's units u =
// blockIdx.x, + gridDim.x, ... in order into the ring of STAGES slots, each fill of a slot after
// the consumers released the one before.
template <int BM, int BN, int STAGES>
__device__ __forceinline__ void ws_produce(int M, int N, int K, int splits, int group, int units, uint32_t base,
                                           uint32_t full, uint32_t empty, const uint8_t* map_a,
                                           const uint8_t* map_b) {
  constexpr int BK = 128;
  constexpr int A_BYTES = BM * BK;
  constexpr int STAGE_BYTES = (BM + BN) * BK;
  int it = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const WsUnit w = ws_unit<BM, BN>(u, M, N, K, splits, group);
    for (int j = 0; j < w.kbs; ++j, ++it) {
      const int slot = it % STAGES;
      // The fill number it / STAGES of a slot waits for the release of the previous one
      // (parity 1 passes at once on a fresh barrier).
      mbar_wait<true>(empty + 8 * slot, ((it / STAGES) & 1) ^ 1);
      const uint32_t s = base + slot * STAGE_BYTES;
      const uint32_t bar = full + 8 * slot;
      const int k = (w.kb0 + j) * BK;
      mbar_arrive_expect_tx(bar, STAGE_BYTES);
      tma_load_2d(s, map_a, k, w.m0, bar);
      tma_load_2d(s + A_BYTES, map_b, k, w.n0, bar);
    }
  }
}

// `threads` threads meet at named barrier `id` (ids 1.. are free: __syncthreads uses 0).
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// One arrival of the calling warp on `bar`, once all of its lanes got here.
__device__ __forceinline__ void warp_arrive(uint32_t bar) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) {
    mbar_arrive(bar);
  }
}

// The start the persistent kernels share. Shared memory from `base`: STAGES stages, STAGES full
// barriers (one arrival: the producer's expect_tx), STAGES empty barriers and EXTRA more barriers
// (CONSUMER_WARPS arrivals each), the 256-byte map scratch at `scratch`. Warp 0 builds the
// operand maps when the TMA can take the bases (`tma`); then warpgroup 0 hands its registers to
// the consumers and its thread 0 runs the producer. Returns false in warpgroup 0 (which should
// return), true in the two consumer warpgroups.
template <int BM, int BN, int STAGES, int CONSUMER_WARPS, int EXTRA>
__device__ __forceinline__ bool persistent_start(const int8_t* a, const int8_t* b, int M, int N, int K, int splits,
                                                 int group, int units, bool tma, uint32_t base, uint32_t scratch,
                                                 uint8_t* map_a) {
  const int tid = threadIdx.x;
  const uint32_t full = base + STAGES * (BM + BN) * 128;
  const uint32_t empty = full + 8 * STAGES;
  if (tma && tid < 32) {
    build_operand_maps(map_a, scratch, a, b, M, N, K, BM, BN);
  }
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, CONSUMER_WARPS);
    }
    for (int e = 0; e < EXTRA; ++e) {
      mbar_init(empty + 8 * (STAGES + e), CONSUMER_WARPS);
    }
    mbar_fence_init();
  }
  __syncthreads();
  if ((tid >> 7) == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (tma && tid == 0) {
      ws_produce<BM, BN, STAGES>(M, N, K, splits, group, units, base, full, empty, map_a, map_a + 128);
    }
    return false;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  return true;
}

// The persistent kernels' path for a base the TMA cannot take (not 16-byte aligned; MLX passes
// offset views): the THREADS consumer threads (ctid = 0 .. THREADS - 1) load K block kb of the
// BM x BN unit at (m0, n0) into `stage` themselves, by cp.async or byte-wise, and meet at named
// barrier `bar` once all of it is visible to the wgmma. Exact and slow: no plan is made for it.
template <int BM, int BN, int THREADS>
__device__ __forceinline__ void consumers_load_k_block(uint32_t stage, const int8_t* a, const int8_t* b, int M, int N,
                                                       int K, int m0, int n0, int kb, int ctid, int bar) {
  constexpr int BK = 128;
  const bool fast_a = (K & 15) == 0 && (reinterpret_cast<unsigned long long>(a) & 15ull) == 0;
  const bool fast_b = (K & 15) == 0 && (reinterpret_cast<unsigned long long>(b) & 15ull) == 0;
  load_tile<BM, THREADS>(stage, a, M, K, m0, kb * BK, fast_a, ctid);
  load_tile<BN, THREADS>(stage + BM * BK, b, N, K, n0, kb * BK, fast_b, ctid);
  cp_async_commit();
  cp_async_wait<0>();
  fence_proxy_async();
  named_sync(bar, THREADS);
}

// Epilogue factories of the persistent kernels (epis(z): the epilogue of a unit of split z): the
// int32 [splits, M, N] workspace, slice z per split (the grid is 1-D, so StoreInt32's blockIdx.z
// slice offset is 0), or one epilogue for every unit (W8A8's fused dequantization, launched
// unsplit only: a split W8A8 plan writes the int32 workspace and the dequantizing reduction sums it).
struct SplitInt32 {
  int32_t* out;
  int M;
  int N;
  __device__ __forceinline__ StoreInt32 operator()(int z) const {
    return StoreInt32{out + static_cast<size_t>(z) * M * N, M, N};
  }
};

template <class Epilogue>
struct SameEpilogue {
  Epilogue epi;
  __device__ __forceinline__ const Epilogue& operator()(int) const {
    return epi;
  }
};

template <class Epilogue>
__device__ __forceinline__ SameEpilogue<Epilogue> same_epilogue(const Epilogue& epi) {
  return SameEpilogue<Epilogue>{epi};
}

template <int BM, int BN, int STAGES, int CHUNK, bool CHUNK_EXACT, class Epilogues>
__device__ __forceinline__ void gemm_tma_ws(const int8_t* a, const int8_t* b, int M, int N, int K,
                                            int splits, int group, uint8_t* maps, const Epilogues& epis) {
  static_assert(BM == 128 || BM == 64, "two consumer warpgroups: 2 x m64 rows, or 64 rows split along N");
  constexpr int BK = 128;
  constexpr int WIDTH = BM == 128 ? BN : BN / 2;  // columns per consumer warpgroup
  static_assert(WIDTH % 8 == 0 && WIDTH >= 8 && WIDTH <= 256, "wgmma N must be 8..256 in steps of 8");
  constexpr int A_BYTES = BM * BK;
  constexpr int STAGE_BYTES = (BM + BN) * BK;
  constexpr int CONSUMER_WARPS = 8;

  const int units = ceil_div(M, BM) * ceil_div(N, BN) * splits;
  const int tid = threadIdx.x;
  const uint32_t base = aligned_smem_base();
  const uint32_t full = base + STAGES * STAGE_BYTES;
  const uint32_t empty = full + 8 * STAGES;
  const uint32_t scratch = full + ((16 * STAGES + 127) & ~127);
  const bool tma = bases_tma_aligned(a, b);
  if (!persistent_start<BM, BN, STAGES, CONSUMER_WARPS, 0>(a, b, M, N, K, splits, group, units, tma, base, scratch,
                                                         maps + static_cast<size_t>(blockIdx.x) * 256)) {
    return;
  }
  const int c = (tid >> 7) - 1;
  if (!tma) {
    // Both consumers load each K block of their shared unit into slot 0 (named barrier 1).
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      const WsUnit w = ws_unit<BM, BN>(u, M, N, K, splits, group);
      int acc[WIDTH / 2];
      zero_accumulators(acc);
      for (int j = 0; j < w.kbs; ++j) {
        consumers_load_k_block<BM, BN, 256>(base, a, b, M, N, K, w.m0, w.n0, w.kb0 + j, tid - 128, 1);
        wgmma_k_block<WIDTH>(acc, base + (BM == 128 ? c * 64 * BK : 0), base + A_BYTES + (BM == 128 ? 0 : c * WIDTH * BK));
        wgmma_wait<0>();
        fence_registers(acc);
        named_sync(1, 256);  // every wgmma has read slot 0 before it is refilled
      }
      store_accumulators<WIDTH, CHUNK, CHUNK_EXACT>(acc, w.m0 + (BM == 128 ? c * 64 : 0),
                                                    w.n0 + (BM == 128 ? 0 : c * WIDTH), epis(w.z));
    }
    return;
  }
  const uint32_t a_off = BM == 128 ? c * 64 * BK : 0;
  const uint32_t b_off = A_BYTES + (BM == 128 ? 0 : c * WIDTH * BK);
  int it = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const WsUnit w = ws_unit<BM, BN>(u, M, N, K, splits, group);
    int acc[WIDTH / 2];
    zero_accumulators(acc);
    for (int j = 0; j < w.kbs; ++j, ++it) {
      const int slot = it % STAGES;
      mbar_wait<true>(full + 8 * slot, (it / STAGES) & 1);
      const uint32_t stage = base + slot * STAGE_BYTES;
      wgmma_k_block<WIDTH>(acc, stage + a_off, stage + b_off);
      wgmma_wait<1>();
      if (j > 0) {
        // Batch j - 1 has finished reading its slot: one arrival per consumer warp.
        warp_arrive(empty + 8 * ((it - 1) % STAGES));
      }
    }
    wgmma_wait<0>();
    fence_registers(acc);
    if (w.kbs > 0) {
      warp_arrive(empty + 8 * ((it - 1) % STAGES));
    }
    store_accumulators<WIDTH, CHUNK, CHUNK_EXACT>(acc, w.m0 + (BM == 128 ? c * 64 : 0),
                                                  w.n0 + (BM == 128 ? 0 : c * WIDTH), epis(w.z));
  }
}


// ---- variant 3: warp-specialised, persistent, ping-pong ----
//
// gemm_tma_ws's producer and units, but each consumer warpgroup computes whole 128 x BN tiles
// (two m64 wgmma per k32 step, BN accumulators a thread) and the block's units alternate between
// the two: consumer c takes the block's units i = c, c + 2, ... (i counts u = blockIdx.x,
// + gridDim.x, ...). Their main loops take turns (the `turn` mbarrier pair: consumer c waits on
// turn[c], and arrives on turn[1 - c] once it has issued its last wgmma), so one consumer's
// epilogue can run while the other multiplies. The turns
// also keep each consumer within one phase of every stage barrier it waits on: a consumer starts
// waiting on its first stage only after the other has waited on all of its own.
// A base the TMA cannot take makes each consumer load its own K blocks into slot c
// (consumers_load_k_block). The epilogue of split z is epis(z), as in gemm_tma_ws.
// Shared memory: STAGES x (128 + BN) x 128 bytes (1024-aligned), STAGES full + STAGES empty + 2
// turn barriers, 256 bytes of map scratch (int8nax.tiling.CudaPingPongConfig.shared_bytes).

// The 8 wgmma (4 k32 steps x 2 m64 halves) of one K block of a 128-row tile, one commit group.
template <int WIDTH>
__device__ __forceinline__ void wgmma_k_block_128(int (&acc0)[WIDTH / 2], int (&acc1)[WIDTH / 2], uint32_t a_tile,
                                                  uint32_t b_tile) {
  fence_registers(acc0);
  fence_registers(acc1);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint64_t db = sw128_descriptor(b_tile + kk * 32);
    wgmma_s8<WIDTH>(acc0, sw128_descriptor(a_tile + kk * 32), db);
    wgmma_s8<WIDTH>(acc1, sw128_descriptor(a_tile + 64 * 128 + kk * 32), db);
  }
  wgmma_commit();
  fence_registers(acc0);
  fence_registers(acc1);
}

template <int BN, int STAGES, int CHUNK, class Epilogues>
__device__ __forceinline__ void gemm_tma_pp(const int8_t* a, const int8_t* b, int M, int N, int K,
                                            int splits, int group, uint8_t* maps, const Epilogues& epis) {
  constexpr int BM = 128;
  constexpr int BK = 128;
  static_assert(BN % 8 == 0 && BN >= 8 && BN <= 128, "wgmma N in 8..128 (two halves of BN/2 registers each)");
  static_assert(STAGES >= 2, "the fallback loads use slots 0 and 1");
  constexpr int A_BYTES = BM * BK;
  constexpr int STAGE_BYTES = (BM + BN) * BK;
  constexpr int CONSUMER_WARPS = 4;  // one consumer warpgroup multiplies (and releases) each stage

  const int units = ceil_div(M, BM) * ceil_div(N, BN) * splits;
  const int tid = threadIdx.x;
  const uint32_t base = aligned_smem_base();
  const uint32_t full = base + STAGES * STAGE_BYTES;
  const uint32_t empty = full + 8 * STAGES;
  const uint32_t turn = empty + 8 * STAGES;  // the 2 turn barriers follow the empty ones
  const uint32_t scratch = full + ((16 * STAGES + 16 + 127) & ~127);
  const bool tma = bases_tma_aligned(a, b);
  if (!persistent_start<BM, BN, STAGES, CONSUMER_WARPS, 2>(a, b, M, N, K, splits, group, units, tma, base, scratch,
                                                         maps + static_cast<size_t>(blockIdx.x) * 256)) {
    return;
  }
  const int c = (tid >> 7) - 1;
  int it = 0;    // the block's stage sequence: the K blocks of every unit before this one
  int mine = 0;  // units this consumer has taken
  for (int u = blockIdx.x, i = 0; u < units; u += gridDim.x, ++i) {
    const WsUnit w = ws_unit<BM, BN>(u, M, N, K, splits, group);
    if ((i & 1) != c) {
      it += w.kbs;
      continue;
    }
    int acc0[BN / 2];
    int acc1[BN / 2];
    zero_accumulators(acc0);
    zero_accumulators(acc1);
    if (tma) {
      if (c == 1 || mine > 0) {
        mbar_wait<true>(turn + 8 * c, (c == 1 ? mine : mine - 1) & 1);
      }
      for (int j = 0; j < w.kbs; ++j, ++it) {
        const int slot = it % STAGES;
        mbar_wait<true>(full + 8 * slot, (it / STAGES) & 1);
        const uint32_t stage = base + slot * STAGE_BYTES;
        wgmma_k_block_128<BN>(acc0, acc1, stage, stage + A_BYTES);
        wgmma_wait<1>();
        if (j > 0) {
          // Batch j - 1 has finished reading its slot: one arrival per warp of this consumer.
          warp_arrive(empty + 8 * ((it - 1) % STAGES));
        }
      }
      // The other consumer's turn: its first stage is the one after this unit's last.
      warp_arrive(turn + 8 * (1 - c));
      wgmma_wait<0>();
      fence_registers(acc0);
      fence_registers(acc1);
      if (w.kbs > 0) {
        warp_arrive(empty + 8 * ((it - 1) % STAGES));
      }
    } else {
      // This consumer loads its own K blocks into slot c (named barrier 1 + c).
      const uint32_t stage = base + c * STAGE_BYTES;
      for (int j = 0; j < w.kbs; ++j) {
        consumers_load_k_block<BM, BN, 128>(stage, a, b, M, N, K, w.m0, w.n0, w.kb0 + j, tid & 127, 1 + c);
        wgmma_k_block_128<BN>(acc0, acc1, stage, stage + A_BYTES);
        wgmma_wait<0>();
        fence_registers(acc0);
        fence_registers(acc1);
        named_sync(1 + c, 128);  // every wgmma has read the slot before it is refilled
      }
    }
    ++mine;
    const auto& epi = epis(w.z);
    store_accumulators<BN, CHUNK>(acc0, w.m0, w.n0, epi);
    store_accumulators<BN, CHUNK>(acc1, w.m0 + 64, w.n0, epi);
  }
}

}  // namespace int8nax
