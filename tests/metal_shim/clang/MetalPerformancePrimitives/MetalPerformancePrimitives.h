// A stub of MetalPerformancePrimitives' matmul2d for the clang address-space check: the calls
// int8nax makes, with the rules Apple's header enforces and our kernels rely on:
//   - with both operands cooperative, m, n and k each 16 or 32, at least one of them 32;
//   - element types from the header's table (int8 x int8 -> int32; int8_t, not char);
//   - the destination getter takes exactly the two input cooperative-tensor types (an
//     address-space-qualified type, e.g. a bare decltype of a local, is another type);
//   - run() takes the three tensors the getters return, non-const.
// The descriptor is a C++20 class-type template argument in Apple's header; this front end is
// C++17, so the stub encodes it as an integer the descriptor converts to (same call syntax).
#pragma once

namespace mpp {
namespace tensor_ops {

struct matmul2d_descriptor {
  enum class mode { multiply, multiply_accumulate };
  int m, n, k;
  bool transpose_left, transpose_right, relaxed_precision;
  mode md;
  constexpr matmul2d_descriptor(int m_, int n_, int k_, bool tl, bool tr, bool rp, mode md_)
      : m(m_), n(n_), k(k_), transpose_left(tl), transpose_right(tr), relaxed_precision(rp), md(md_) {}
  constexpr operator ulong() const {
    return ulong(m) | ulong(n) << 8 | ulong(k) << 16 | ulong(transpose_left) << 24 | ulong(transpose_right) << 25 |
           ulong(relaxed_precision) << 26 | ulong(md == mode::multiply_accumulate) << 27;
  }
};

enum class operand { left, right, destination };

template <class T, operand OP, int ELEMS>
struct cooperative_tensor {
  T v[ELEMS];
  int get_capacity() const { return ELEMS; }
  bool is_valid_element(int i) const { return i >= 0; }
  metal::array<int, 2> get_multidimensional_index(int i) const { return {{i, i}}; }
  T& operator[](int i) { return v[i]; }
  const T& operator[](int i) const { return v[i]; }
};

template <class T> constant constexpr bool is_input_element = false;
template <> constant constexpr bool is_input_element<int8_t> = true;
template <> constant constexpr bool is_input_element<uint8_t> = true;
template <> constant constexpr bool is_input_element<half> = true;
template <> constant constexpr bool is_input_element<float> = true;

template <class A, class B, class C>
constant constexpr bool is_valid_combination =
    is_input_element<A> && is_input_element<B> &&
    ((metal::is_same_v<A, int8_t> || metal::is_same_v<A, uint8_t>) ==
     (metal::is_same_v<B, int8_t> || metal::is_same_v<B, uint8_t>)) &&
    (!(metal::is_same_v<A, int8_t> || metal::is_same_v<A, uint8_t>) || metal::is_same_v<C, int32_t> ||
     metal::is_same_v<C, float> || metal::is_same_v<C, half>) &&
    (metal::is_same_v<A, int8_t> || metal::is_same_v<A, uint8_t> || metal::is_same_v<C, float> ||
     metal::is_same_v<C, half>);

template <ulong D, class Scope>
struct matmul2d {
  static constant constexpr const int M = int(D & 0xff), N = int((D >> 8) & 0xff), K = int((D >> 16) & 0xff);
  static_assert((M == 16 || M == 32) && (N == 16 || N == 32) && (K == 16 || K == 32) && (M == 32 || N == 32 || K == 32),
                "matmul2d: with cooperative operands m, n, k must each be 16 or 32, one of them 32");
  static constant constexpr const int A_ELEMS = M * K / 32, B_ELEMS = N * K / 32, C_ELEMS = M * N / 32;

  template <class A, class B, class C>
  using left_t = cooperative_tensor<A, operand::left, A_ELEMS>;
  template <class A, class B, class C>
  using right_t = cooperative_tensor<B, operand::right, B_ELEMS>;

  template <class A, class B, class C>
  left_t<A, B, C> get_left_input_cooperative_tensor() const {
    static_assert(is_valid_combination<A, B, C>, "matmul2d: element types not in MPP's table");
    return {};
  }
  template <class A, class B, class C>
  right_t<A, B, C> get_right_input_cooperative_tensor() const {
    static_assert(is_valid_combination<A, B, C>, "matmul2d: element types not in MPP's table");
    return {};
  }
  template <class L, class R, class C>
  cooperative_tensor<C, operand::destination, C_ELEMS> get_destination_cooperative_tensor() const;

  template <class TA, class TB, class TC>
  void run(TA& a, TB& b, TC& c) const;
};

template <class T> struct coop_info { static constant constexpr const bool ok = false; };
template <class T, operand OP, int E> struct coop_info<cooperative_tensor<T, OP, E>> {
  static constant constexpr const bool ok = true;
  using element = T;
  static constant constexpr const operand op = OP;
  static constant constexpr const int elems = E;
};

template <ulong D, class Scope>
template <class L, class R, class C>
cooperative_tensor<C, operand::destination, matmul2d<D, Scope>::C_ELEMS>
matmul2d<D, Scope>::get_destination_cooperative_tensor() const {
  static_assert(coop_info<L>::ok && coop_info<R>::ok,
                "matmul2d: the destination getter takes the input cooperative-tensor types "
                "(wrap a decltype in remove_addrspace_t)");
  static_assert(coop_info<L>::op == operand::left && coop_info<L>::elems == A_ELEMS &&
                    coop_info<R>::op == operand::right && coop_info<R>::elems == B_ELEMS,
                "matmul2d: destination getter given tensors of another descriptor");
  static_assert(is_valid_combination<typename coop_info<L>::element, typename coop_info<R>::element, C>,
                "matmul2d: element types not in MPP's table");
  return {};
}

template <ulong D, class Scope>
template <class TA, class TB, class TC>
void matmul2d<D, Scope>::run(TA& a, TB& b, TC& c) const {
  // The operands are the caller's (thread) variables: their address space is not the type's.
  using A = metal::remove_addrspace_t<TA>;
  using B = metal::remove_addrspace_t<TB>;
  using C = metal::remove_addrspace_t<TC>;
  static_assert(coop_info<A>::ok && coop_info<A>::op == operand::left && coop_info<A>::elems == A_ELEMS,
                "matmul2d::run: left operand is not this descriptor's left cooperative tensor");
  static_assert(coop_info<B>::ok && coop_info<B>::op == operand::right && coop_info<B>::elems == B_ELEMS,
                "matmul2d::run: right operand is not this descriptor's right cooperative tensor");
  static_assert(coop_info<C>::ok && coop_info<C>::op == operand::destination && coop_info<C>::elems == C_ELEMS,
                "matmul2d::run: destination is not this descriptor's destination cooperative tensor");
}

}  // namespace tensor_ops
}  // namespace mpp
