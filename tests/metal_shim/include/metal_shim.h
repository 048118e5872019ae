// A CPU stand-in for the subset of Metal Shading Language and MetalPerformancePrimitives that
// int8nax's kernels use, so that g++ can compile the real .metal sources and run them, one
// green thread per GPU thread, for tests on machines without Apple hardware.
//
// What it models (and what it does not):
// - every GPU thread of a threadgroup is a ucontext green thread; threadgroup_barrier and the
//   simdgroup operations (simd_max, simd_any, matmul2d::run) block until every thread of the
//   threadgroup / all 32 lanes of the simdgroup arrive. A barrier that not every thread reaches
//   is a deadlock, which the scheduler reports: that is the "tiles outside still meet every
//   barrier" rule, checked on the real code;
// - cooperative tensors hold each lane's elements; where an element sits in the fragment is a
//   table (the lane layout) loaded at run time, so the kernels can be run under any layout;
// - matmul2d::run gathers the 32 lanes' elements into whole fragments and multiplies them
//   exactly (int64, checked to fit int32), as the hardware is specified to;
// - float arithmetic is x86 SSE IEEE single precision with subnormals, fma is a true fused
//   multiply-add, half is _Float16, bfloat16 rounds to nearest even; or, when the driver is run
//   with INT8NAX_SHIM_FLUSH_SUBNORMALS set, a GPU that flushes float32 subnormals: the SSE
//   control register's flush-to-zero and denormals-are-zero bits are set for every thread, so
//   each float operation reads subnormal operands as zero and writes zero for a subnormal
//   result (moves, stores and bit casts leave them alone, as on a GPU);
// - address spaces: `device`, `constant`, `thread`, `threadgroup` expand to nothing (g++ has no
//   address spaces; tests/metal_lint.py checks the rules Metal enforces on them). What MLX's
//   generator does with small inputs IS modelled: shim.py declares an input of fewer than 8
//   elements `const volatile T*` where MLX writes `const constant T*`, a pointer type that, as
//   on Metal, does not convert to `const device T*` or bind to a plain `const T&`, so code
//   that assumes every input is a device pointer fails to build here too;
// - NOT modelled: timing, memory ordering, the real int8 lane layout, relaxed_precision (the
//   product is exact either way), the Metal compiler.
#pragma once

#include <setjmp.h>
#include <ucontext.h>
#include <xmmintrin.h>

#include <array>
#include <cfloat>  // FLT_MIN, FLT_MAX: MSL defines them in metal_stdlib
#include <climits>  // CHAR_BIT, likewise
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

#define device
#define constant
#define thread
#define threadgroup  // as an address-space qualifier; declarations are rewritten to `static`

typedef unsigned int uint;
typedef unsigned long ulong;
typedef unsigned short ushort;
typedef _Float16 float16_t;
typedef _Float16 half;

struct bfloat16_t {
  uint16_t bits;
  bfloat16_t() = default;
  bfloat16_t(const bfloat16_t&) = default;
  bfloat16_t(const volatile bfloat16_t& o) : bits(o.bits) {}  // a copy read through `constant`
  bfloat16_t& operator=(const bfloat16_t&) = default;
  bfloat16_t(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = uint16_t((u >> 16) | 0x40u);  // quiet NaN
    } else {
      bits = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // round to nearest even
    }
  }
  operator float() const {
    uint32_t u = uint32_t(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  operator float() const volatile {  // read through a `constant` input (see shim.py)
    const uint16_t b = bits;
    bfloat16_t copy;
    copy.bits = b;
    return float(copy);
  }
};

struct uint2 {
  uint x, y;
};
struct uint3 {
  uint x, y, z;
  uint2 xy;
};

#ifndef NAN
#define NAN __builtin_nanf("")
#endif
// MSL's half constants (metal_stdlib), as IEEE binary16 defines them.
#define HALF_MANT_DIG 11
#define HALF_MAX_EXP 16

namespace shim {

// ---- green threads ------------------------------------------------------------------------

struct Barrier {
  int arrived = 0;
  uint64_t generation = 0;
  int participants = 0;
};

// One simdgroup's matmul2d result, computed once per run() by the first lane past the barrier.
struct Product {
  uint64_t generation = ~uint64_t(0);
  int64_t c[32][32] = {};
};
inline std::vector<Product> g_products;

struct GreenThread {
  ucontext_t ctx;  // the first entry only; later switches use _setjmp/_longjmp (no syscalls)
  jmp_buf jb;
  bool started = false;
  std::vector<char> stack;
  enum { RUNNABLE, WAITING, DONE } state = RUNNABLE;
  Barrier* waiting_on = nullptr;
  uint64_t waiting_generation = 0;
  uint tid = 0, sg = 0, lane = 0;
};

inline ucontext_t g_scheduler;
inline jmp_buf g_scheduler_jb;
inline std::vector<GreenThread> g_threads;
inline GreenThread* g_current = nullptr;
inline Barrier g_tg_barrier;
inline std::vector<Barrier> g_simd_barriers;
inline std::function<void(const GreenThread&)> g_body;
inline uint64_t g_barriers_met = 0;

// The flushing GPU: MXCSR FTZ (bit 15) and DAZ (bit 6). Set before any green thread's context
// is made, so every thread inherits it.
inline void flush_subnormals_if_asked() {
  if (std::getenv("INT8NAX_SHIM_FLUSH_SUBNORMALS")) _mm_setcsr(_mm_getcsr() | (1u << 15) | (1u << 6));
}

inline void fail(const char* what) {
  std::fprintf(stderr, "metal_shim: %s\n", what);
  std::exit(3);
}

inline void arrive(Barrier& b) {
  if (++b.arrived == b.participants) {
    b.arrived = 0;
    ++b.generation;
    return;
  }
  g_current->state = GreenThread::WAITING;
  g_current->waiting_on = &b;
  g_current->waiting_generation = b.generation;
  if (!_setjmp(g_current->jb)) _longjmp(g_scheduler_jb, 1);
}

inline void trampoline() {
  g_body(*g_current);
  g_current->state = GreenThread::DONE;
  _longjmp(g_scheduler_jb, 1);
}

// Runs one threadgroup of `threads` GPU threads (1-D), 32 lanes per simdgroup.
inline void run_threadgroup(uint threads, const std::function<void(const GreenThread&)>& body) {
  const uint simd = 32;
  if (threads % simd) fail("threadgroup is not whole simdgroups");
  g_body = body;
  g_threads.resize(threads);
  g_tg_barrier = Barrier{0, 0, int(threads)};
  g_simd_barriers.assign(threads / simd, Barrier{0, 0, int(simd)});
  g_products.assign(threads / simd, Product{});
  for (uint t = 0; t < threads; ++t) {
    GreenThread& th = g_threads[t];
    th.stack.resize(1 << 18);
    th.state = GreenThread::RUNNABLE;
    th.started = false;
    th.tid = t;
    th.sg = t / simd;
    th.lane = t % simd;
    getcontext(&th.ctx);
    th.ctx.uc_stack.ss_sp = th.stack.data();
    th.ctx.uc_stack.ss_size = th.stack.size();
    th.ctx.uc_link = nullptr;
    makecontext(&th.ctx, trampoline, 0);
  }
  for (;;) {
    bool progress = false, all_done = true;
    for (GreenThread& th : g_threads) {
      if (th.state == GreenThread::DONE) continue;
      all_done = false;
      if (th.state == GreenThread::WAITING && th.waiting_on->generation == th.waiting_generation)
        continue;
      th.state = GreenThread::RUNNABLE;
      g_current = &th;
      if (!_setjmp(g_scheduler_jb)) {
        if (th.started) {
          _longjmp(th.jb, 1);
        } else {
          th.started = true;
          swapcontext(&g_scheduler, &th.ctx);
        }
      }
      progress = true;
    }
    if (all_done) return;
    if (!progress) fail("deadlock: a barrier or simdgroup operation that not every thread reaches");
  }
}

// ---- simdgroup data exchange --------------------------------------------------------------

inline std::vector<std::array<int64_t, 64>> g_exchange;  // [threads][slot]

inline void simd_sync() { arrive(g_simd_barriers[g_current->sg]); }


template <class T>
inline std::array<T, 32> simd_gather(T value) {
  if (g_exchange.size() < g_threads.size()) g_exchange.resize(g_threads.size());
  int64_t slot;
  static_assert(sizeof(T) <= sizeof(int64_t));
  std::memcpy(&slot, &value, sizeof(T));
  g_exchange[g_current->tid][0] = slot;
  simd_sync();
  std::array<T, 32> all;
  for (uint l = 0; l < 32; ++l)
    std::memcpy(&all[l], &g_exchange[g_current->sg * 32 + l][0], sizeof(T));
  simd_sync();
  return all;
}

// ---- cooperative-tensor layout ------------------------------------------------------------

struct Cell {
  int row, col;  // -1: invalid element
};
enum Operand { LEFT = 0, RIGHT = 1, DEST = 2 };
// g_layout[operand][lane][element]
inline std::vector<Cell> g_layout[3];
inline int g_layout_elems[3] = {0, 0, 0};

inline Cell cell(Operand op, uint lane, int i) {
  if (i < 0 || i >= g_layout_elems[op]) fail("cooperative-tensor element index out of range");
  return g_layout[op][lane * g_layout_elems[op] + i];
}

}  // namespace shim

namespace metal {

enum class mem_flags { mem_none, mem_threadgroup, mem_device };

inline void threadgroup_barrier(mem_flags) {
  ++shim::g_barriers_met;
  shim::arrive(shim::g_tg_barrier);
}

inline float simd_max(float v) {
  auto all = shim::simd_gather(v);
  float m = all[0];
  for (float x : all) m = std::fmax(m, x);
  return m;
}

inline int simd_sum(int v) {  // exact: int64 here, checked to fit int32 as the GPU's would wrap
  auto all = shim::simd_gather(v);
  int64_t sum = 0;
  for (int x : all) sum += x;
  if (sum != int64_t(int32_t(sum))) shim::fail("int32 overflow in simd_sum");
  return int(sum);
}

inline uint simd_max(uint v) {
  auto all = shim::simd_gather(v);
  uint m = all[0];
  for (uint x : all) m = x > m ? x : m;
  return m;
}

inline bool simd_any(bool v) {
  auto all = shim::simd_gather(v);
  for (bool x : all)
    if (x) return true;
  return false;
}

namespace precise {
inline float divide(float a, float b) { return a / b; }  // IEEE, correctly rounded
}  // namespace precise

using std::copysign;
using std::fabs;
using std::fma;
using std::isfinite;
template <bool B, class T, class U>
using conditional_t = std::conditional_t<B, T, U>;
template <class To, class From>
inline To as_type(const From& v) {
  static_assert(sizeof(To) == sizeof(From), "as_type: sizes differ");
  To out;
  std::memcpy(&out, &v, sizeof(To));
  return out;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline uint max(uint a, uint b) { return a > b ? a : b; }
template <class A, class B>
inline constexpr bool is_same_v = std::is_same_v<A, B>;
inline float round(float x) { return std::round(x); }  // half away from zero, like Metal's
inline float clamp(float x, float lo, float hi) { return std::fmin(std::fmax(x, lo), hi); }
inline float max(float a, float b) { return std::fmax(a, b); }
template <class T>
using remove_addrspace_t = T;
struct execution_simdgroup {};

}  // namespace metal

namespace mpp {
namespace tensor_ops {

struct matmul2d_descriptor {
  enum class mode { multiply, multiply_accumulate };
  int m, n, k;
  bool transpose_left, transpose_right, relaxed_precision;
  mode md;
  constexpr matmul2d_descriptor(int m_, int n_, int k_, bool tl, bool tr, bool rp, mode md_)
      : m(m_), n(n_), k(k_), transpose_left(tl), transpose_right(tr), relaxed_precision(rp), md(md_) {}
};

template <class T, shim::Operand OP, int ELEMS>
struct cooperative_tensor {
  T v[ELEMS] = {};
  int get_capacity() const { return ELEMS; }
  bool is_valid_element(int i) const { return shim::cell(OP, shim::g_current->lane, i).row >= 0; }
  std::array<int, 2> get_multidimensional_index(int i) const {
    const shim::Cell c = shim::cell(OP, shim::g_current->lane, i);
    return {c.col, c.row};  // [0] the column (contiguous dimension), [1] the row
  }
  T& operator[](int i) { return v[i]; }
  const T& operator[](int i) const { return v[i]; }
};

template <matmul2d_descriptor D, class Scope>
struct matmul2d {
  // MPP's rule for fully cooperative operands: m, n, k in {16, 32}, at least one of them 32.
  static_assert((D.m == 16 || D.m == 32) && (D.n == 16 || D.n == 32) && (D.k == 16 || D.k == 32) &&
                    (D.m == 32 || D.n == 32 || D.k == 32),
                "matmul2d: illegal cooperative descriptor");
  static_assert(!D.transpose_left && D.transpose_right, "the shim models (false, true) only");
  static constexpr int A_ELEMS = D.m * D.k / 32, B_ELEMS = D.n * D.k / 32, C_ELEMS = D.m * D.n / 32;

  template <class A, class B, class C>
  cooperative_tensor<A, shim::LEFT, A_ELEMS> get_left_input_cooperative_tensor() const { return {}; }
  template <class A, class B, class C>
  cooperative_tensor<B, shim::RIGHT, B_ELEMS> get_right_input_cooperative_tensor() const { return {}; }
  template <class L, class R, class C>
  cooperative_tensor<C, shim::DEST, C_ELEMS> get_destination_cooperative_tensor() const { return {}; }

  template <class TA, class TB, class TC>
  void run(TA& a, TB& b, TC& c) const {
    using namespace shim;
    if (g_layout_elems[LEFT] != A_ELEMS || g_layout_elems[RIGHT] != B_ELEMS || g_layout_elems[DEST] != C_ELEMS)
      fail("layout table does not match the descriptor");
    // Every lane deposits its elements; after the simdgroup meets, the first lane to run
    // multiplies the whole fragments once; then every lane takes its own destination elements.
    if (g_exchange.size() < g_threads.size()) g_exchange.resize(g_threads.size());
    auto& mine = g_exchange[g_current->tid];
    for (int i = 0; i < A_ELEMS; ++i) mine[i] = a.v[i];
    for (int i = 0; i < B_ELEMS; ++i) mine[A_ELEMS + i] = b.v[i];
    for (int i = 0; i < C_ELEMS; ++i) mine[A_ELEMS + B_ELEMS + i] = c.v[i];
    simd_sync();
    Product& prod = g_products[g_current->sg];
    const uint64_t generation = g_simd_barriers[g_current->sg].generation;
    if (prod.generation != generation) {
      prod.generation = generation;
      int64_t fa[32][32] = {}, fb[32][32] = {};  // fa[m][k], fb[n][k]
      const uint base = g_current->sg * 32;
      for (uint l = 0; l < 32; ++l) {
        for (int i = 0; i < A_ELEMS; ++i) {
          const Cell e = cell(LEFT, l, i);
          if (e.row >= 0) fa[e.row][e.col] = g_exchange[base + l][i];
        }
        for (int i = 0; i < B_ELEMS; ++i) {
          const Cell e = cell(RIGHT, l, i);
          if (e.row >= 0) fb[e.row][e.col] = g_exchange[base + l][A_ELEMS + i];
        }
        for (int i = 0; i < C_ELEMS; ++i) {
          const Cell e = cell(DEST, l, i);
          if (e.row >= 0) prod.c[e.row][e.col] = g_exchange[base + l][A_ELEMS + B_ELEMS + i];
        }
      }
      const bool accumulate = D.md == matmul2d_descriptor::mode::multiply_accumulate;
      for (int m = 0; m < D.m; ++m)
        for (int n = 0; n < D.n; ++n) {
          int64_t sum = accumulate ? prod.c[m][n] : 0;
          for (int kk = 0; kk < D.k; ++kk) sum += fa[m][kk] * fb[n][kk];
          if (sum != int64_t(int32_t(sum))) fail("int32 accumulator overflow in matmul2d");
          prod.c[m][n] = sum;
        }
    }
    for (int i = 0; i < C_ELEMS; ++i) {
      const Cell e = cell(DEST, g_current->lane, i);
      if (e.row >= 0) c.v[i] = decltype(c.v[i] + 0)(prod.c[e.row][e.col]);
    }
    simd_sync();
  }
};

}  // namespace tensor_ops
}  // namespace mpp
