#pragma once
// The prelude of every translation unit the CPU JIT generates: vector types
// of `lanes` lanes (vector_math::kLanes: 16 with AVX-512, 8 with AVX2) for
// each dtype and the ops of kiln's op table on them, with exactly the
// semantics of the standard kernels (src/kernels/cpu): float transcendentals
// through vector_math.h, integer arithmetic wrapping modulo 2^bits (computed
// unsigned, never undefined), maximum/minimum propagating NaN, float-to-integer
// casts truncating and saturating with NaN -> 0.
//
// Generated code computes every value as a vector of `lanes` elements; a
// value that does not change along a kernel's inner loop is computed once per
// row as equal lanes (where a kernel puts a row in each lane, once per group of
// rows, each lane its row's value). Booleans are `boolean` vectors of 0/1 lanes.
//
// This is a real header, compiled into kiln's own tests; at build time its
// text (with vector_math.h and runtime_abi.h inlined) is embedded into kiln
// as the prelude string (see cmake/embed_prelude.cmake).

#include "compiler/codegen/cpu/runtime_abi.h"
#include "core/half_precision_bits.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/cpu/vector_math_f64.h"
#include "kernels/scalar_ops.h"

#include <stdint.h>

namespace kiln::jit {

using vector_math::f32v;
using vector_math::f64v;
using vector_math::i32v;
using vector_math::i64v;
using vector_math::u32v;
using vector_math::u64v;

constexpr int lanes = vector_math::kLanes;
using u8v = uint8_t __attribute__((vector_size(lanes)));
// bf16 and f16 lanes as their bits: loaded, moved and stored, never computed on (see "bf16 and f16" below).
using u16v = uint16_t __attribute__((vector_size(2 * lanes)));
using i16v = int16_t __attribute__((vector_size(2 * lanes)));  // their lane masks

// A vector of booleans, each lane 0 or 1 (stored as bytes in memory).
struct boolean {
  i32v lanes;
};

// ---- the vector type of each storage type ---------------------------------------
// clang-format off
template <class T> struct vector_of;
template <> struct vector_of<float> { using type = f32v; };
template <> struct vector_of<double> { using type = f64v; };
template <> struct vector_of<int32_t> { using type = i32v; };
template <> struct vector_of<int64_t> { using type = i64v; };
template <> struct vector_of<uint8_t> { using type = boolean; };
template <> struct vector_of<uint16_t> { using type = u16v; };
// clang-format on
template <class T> using vec = typename vector_of<T>::type;

// ---- loads and stores --------------------------------------------------------------
// A partial vector (the end of a row shorter than a vector, or not a multiple of one) is moved with masked
// loads and stores where the target has them (AVX-512, AVX2): copied element by element into a vector on the
// stack, it cost a call of memcpy and a load that waits for those stores, per row. A row of 10 floats summed
// took 22 ns, the standard kernel's 2.7 (65536 x 10, Zen 4, 2 threads). Masked-off lanes are not read, so
// nothing past the row is touched.
#if defined(__AVX512F__)
[[gnu::always_inline]] inline unsigned short first_bits(int count) {
  return count <= 0 ? 0 : count >= 16 ? 0xffff : static_cast<unsigned short>((1u << count) - 1);
}
using f64r = double __attribute__((vector_size(64)));     // one register of doubles
using i64r = long long __attribute__((vector_size(64)));  // the builtins' type of 64-bit integers
[[gnu::always_inline]] inline f32v load_first(const float* source, int count) {
  return __builtin_ia32_loadups512_mask(source, f32v{}, first_bits(count));
}
[[gnu::always_inline]] inline i32v load_first(const int32_t* source, int count) {
  return __builtin_ia32_loaddqusi512_mask(source, i32v{}, first_bits(count));
}
[[gnu::always_inline]] inline f64v load_first(const double* source, int count) {
  return vector_math::halves::join(__builtin_ia32_loadupd512_mask(source, f64r{}, first_bits(count)),
                                   __builtin_ia32_loadupd512_mask(source + 8, f64r{}, first_bits(count - 8)));
}
[[gnu::always_inline]] inline i64v load_first(const int64_t* source, int count) {
  const long long* from = reinterpret_cast<const long long*>(source);
  return reinterpret_cast<i64v>(
      vector_math::halves::join(__builtin_ia32_loaddqudi512_mask(from, i64r{}, first_bits(count)),
                                __builtin_ia32_loaddqudi512_mask(from + 8, i64r{}, first_bits(count - 8))));
}
[[gnu::always_inline]] inline void store_first(float* destination, f32v value, int count) {
  __builtin_ia32_storeups512_mask(destination, value, first_bits(count));
}
[[gnu::always_inline]] inline void store_first(int32_t* destination, i32v value, int count) {
  __builtin_ia32_storedqusi512_mask(destination, value, first_bits(count));
}
[[gnu::always_inline]] inline void store_first(double* destination, f64v value, int count) {
  __builtin_ia32_storeupd512_mask(destination, vector_math::halves::low(value), first_bits(count));
  __builtin_ia32_storeupd512_mask(destination + 8, vector_math::halves::high(value), first_bits(count - 8));
}
[[gnu::always_inline]] inline void store_first(int64_t* destination, i64v value, int count) {
  long long* to = reinterpret_cast<long long*>(destination);
  __builtin_ia32_storedqudi512_mask(to, reinterpret_cast<i64r>(vector_math::halves::low(value)), first_bits(count));
  __builtin_ia32_storedqudi512_mask(to + 8, reinterpret_cast<i64r>(vector_math::halves::high(value)),
                                    first_bits(count - 8));
}
#if defined(__AVX512BW__) && defined(__AVX512VL__)
using i16r = short __attribute__((vector_size(32)));  // the builtins' type of 16 lanes of 16 bits
#if defined(__clang__)  // its builtins take a pointer to the vector, GCC's to the element
using i16r_target = i16r;
#else
using i16r_target = short;
#endif
[[gnu::always_inline]] inline u16v load_first(const uint16_t* source, int count) {
  return reinterpret_cast<u16v>(
      __builtin_ia32_loaddquhi256_mask(reinterpret_cast<const i16r_target*>(source), i16r{}, first_bits(count)));
}
[[gnu::always_inline]] inline void store_first(uint16_t* destination, u16v value, int count) {
  __builtin_ia32_storedquhi256_mask(reinterpret_cast<i16r_target*>(destination), reinterpret_cast<i16r>(value),
                                    first_bits(count));
}
#define KILN_JIT_MASKED_HALF_MOVES 1
#endif
#define KILN_JIT_MASKED_MOVES 1
#elif defined(__AVX2__)
using f64r = double __attribute__((vector_size(32)));     // one register of doubles
using i64r = long long __attribute__((vector_size(32)));  // the builtins' type of 64-bit integers
// Lanes [0, count) of a mask of 8 x 32 bits, or of 4 x 64 bits from lane `first` on.
[[gnu::always_inline]] inline i32v first_mask(int count) { return i32v{0, 1, 2, 3, 4, 5, 6, 7} < count; }
[[gnu::always_inline]] inline i64r first_mask64(int count, int first) {
  return i64r{first, first + 1, first + 2, first + 3} < count;
}
[[gnu::always_inline]] inline f32v load_first(const float* source, int count) {
  return __builtin_ia32_maskloadps256(reinterpret_cast<const f32v*>(source), first_mask(count));
}
[[gnu::always_inline]] inline i32v load_first(const int32_t* source, int count) {
  return __builtin_ia32_maskloadd256(reinterpret_cast<const i32v*>(source), first_mask(count));
}
[[gnu::always_inline]] inline f64v load_first(const double* source, int count) {
  return vector_math::halves::join(
      __builtin_ia32_maskloadpd256(reinterpret_cast<const f64r*>(source), first_mask64(count, 0)),
      __builtin_ia32_maskloadpd256(reinterpret_cast<const f64r*>(source + 4), first_mask64(count, 4)));
}
[[gnu::always_inline]] inline i64v load_first(const int64_t* source, int count) {
  return reinterpret_cast<i64v>(vector_math::halves::join(
      __builtin_ia32_maskloadq256(reinterpret_cast<const i64r*>(source), first_mask64(count, 0)),
      __builtin_ia32_maskloadq256(reinterpret_cast<const i64r*>(source + 4), first_mask64(count, 4))));
}
[[gnu::always_inline]] inline void store_first(float* destination, f32v value, int count) {
  __builtin_ia32_maskstoreps256(reinterpret_cast<f32v*>(destination), first_mask(count), value);
}
[[gnu::always_inline]] inline void store_first(int32_t* destination, i32v value, int count) {
  __builtin_ia32_maskstored256(reinterpret_cast<i32v*>(destination), first_mask(count), value);
}
[[gnu::always_inline]] inline void store_first(double* destination, f64v value, int count) {
  __builtin_ia32_maskstorepd256(reinterpret_cast<f64r*>(destination), first_mask64(count, 0),
                                vector_math::halves::low(value));
  __builtin_ia32_maskstorepd256(reinterpret_cast<f64r*>(destination + 4), first_mask64(count, 4),
                                vector_math::halves::high(value));
}
[[gnu::always_inline]] inline void store_first(int64_t* destination, i64v value, int count) {
  __builtin_ia32_maskstoreq256(reinterpret_cast<i64r*>(destination), first_mask64(count, 0),
                               reinterpret_cast<i64r>(vector_math::halves::low(value)));
  __builtin_ia32_maskstoreq256(reinterpret_cast<i64r*>(destination + 4), first_mask64(count, 4),
                               reinterpret_cast<i64r>(vector_math::halves::high(value)));
}
#define KILN_JIT_MASKED_MOVES 1
#else
#define KILN_JIT_MASKED_MOVES 0
#endif
#if !defined(KILN_JIT_MASKED_HALF_MOVES)
#define KILN_JIT_MASKED_HALF_MOVES 0
#endif

// `count` lanes from consecutive elements (count == lanes: a full vector);
// missing lanes are 0.
template <class T> [[gnu::always_inline]] inline vec<T> load(const T* source, int count = lanes) {
  if constexpr (__is_same(T, uint8_t)) {
    u8v bytes = {};
    __builtin_memcpy(&bytes, source, static_cast<unsigned>(count));
    return boolean{__builtin_convertvector(bytes, i32v) & 1};
  } else {
#if KILN_JIT_MASKED_MOVES
    if constexpr (sizeof(T) != 2 || KILN_JIT_MASKED_HALF_MOVES)
      if (count < lanes) return load_first(source, count);
#endif
    vec<T> result = {};
    __builtin_memcpy(&result, source, sizeof(T) * static_cast<unsigned>(count));
    return result;
  }
}

template <class T> [[gnu::always_inline]] inline void store(T* destination, vec<T> value, int count = lanes) {
  if constexpr (__is_same(T, uint8_t)) {
    u8v bytes = __builtin_convertvector(value.lanes, u8v);
    __builtin_memcpy(destination, &bytes, static_cast<unsigned>(count));
  } else {
#if KILN_JIT_MASKED_MOVES
    if constexpr (sizeof(T) != 2 || KILN_JIT_MASKED_HALF_MOVES)
      if (count < lanes) return store_first(destination, value, count);
#endif
    __builtin_memcpy(destination, &value, sizeof(T) * static_cast<unsigned>(count));
  }
}

// store() for outputs much larger than the caches: a full vector at an address
// aligned to the register width goes straight to memory (non-temporal stores),
// skipping the read of the destination line that a plain store costs and
// leaving the caches to the inputs (consecutive vectors fill whole lines).
// Anything else is a plain store. The stores are weakly ordered: a kernel that
// streams ends each work item with end_streaming(), or leaves it to the pool,
// which fences after every piece (a GEMM's epilogue, called for every tile).
template <class T> [[gnu::always_inline]] inline void store_streaming(T* destination, vec<T> value, int count = lanes) {
#if defined(__AVX__)
  constexpr unsigned width = vector_math::kRegisterBytes;
  if constexpr (sizeof(vec<T>) == width / 2) {  // bf16 and f16 lanes: half a register
    if (count == lanes && reinterpret_cast<uintptr_t>(destination) % (width / 2) == 0) {
      using half_register = float __attribute__((vector_size(width / 2)));
      half_register piece;
      __builtin_memcpy(&piece, &value, width / 2);
#if defined(__clang__)
      __builtin_nontemporal_store(piece, reinterpret_cast<half_register*>(destination));
#elif defined(__AVX512F__)
      __builtin_ia32_movntps256(reinterpret_cast<float*>(destination), piece);
#else
      __builtin_ia32_movntps(reinterpret_cast<float*>(destination), piece);
#endif
      return;
    }
  } else if constexpr (!__is_same(T, uint8_t) && sizeof(vec<T>) >= width) {
    if (count == lanes && reinterpret_cast<uintptr_t>(destination) % width == 0) {
      for (unsigned part = 0; part < sizeof(vec<T>) / width; ++part) {
        f32v piece;
        __builtin_memcpy(&piece, reinterpret_cast<const char*>(&value) + width * part, width);
        float* target = reinterpret_cast<float*>(reinterpret_cast<char*>(destination) + width * part);
#if defined(__clang__)  // GCC's builtins are not Clang's
        __builtin_nontemporal_store(piece, reinterpret_cast<f32v*>(target));
#elif defined(__AVX512F__)
        __builtin_ia32_movntps512(target, piece);
#else
        __builtin_ia32_movntps256(target, piece);
#endif
      }
      return;
    }
  }
#endif
  store<T>(destination, value, count);
}

[[gnu::always_inline]] inline void end_streaming() {
#if defined(__SSE__)
  __builtin_ia32_sfence();
#endif
}

// Elements `stride` apart (a transposed or sliced input). A full vector is built in registers from its elements:
// written to the stack one by one and loaded back as a vector, it waited for those stores each time (the load
// cannot take its bytes from 16 narrower stores), 2.5-3x slower in a loop summing rows of 3 to 16 floats
// across lanes (Zen 4); the AVX-512 gather instruction was 2-2.5x slower.
template <class T> [[gnu::always_inline]] inline vec<T> gather(const T* source, int64_t stride, int count = lanes) {
  if constexpr (!__is_same(T, uint8_t)) {
    const T* s = source;
    const int64_t k = stride;
    if constexpr (lanes == 16) {
      if (count == lanes)
        return vec<T>{s[0],     s[k],      s[2 * k],  s[3 * k],  s[4 * k],  s[5 * k],  s[6 * k],  s[7 * k],
                      s[8 * k], s[9 * k],  s[10 * k], s[11 * k], s[12 * k], s[13 * k], s[14 * k], s[15 * k]};
    } else if constexpr (lanes == 8) {
      if (count == lanes) return vec<T>{s[0], s[k], s[2 * k], s[3 * k], s[4 * k], s[5 * k], s[6 * k], s[7 * k]};
    } else if constexpr (lanes == 4) {
      if (count == lanes) return vec<T>{s[0], s[k], s[2 * k], s[3 * k]};
    }
  }
  T values[lanes] = {};
  for (int lane = 0; lane < count; ++lane) values[lane] = source[lane * stride];
  return load<T>(values);
}

// ---- padding read in place (compiler/fusion.h: padding read in place) ------------------------------
// Whether a padded input's coordinate lies in [0, size): inside its source, not on the padding.
[[gnu::always_inline]] inline bool inside(int64_t coordinate, int64_t size) {
  return 0 <= coordinate && coordinate < size;
}

// Lanes [0, count) from element i of a row's window of `size` elements `step` apart from `first`: lane l is
// first[(i + l) * step] where 0 <= i + l < size, and `fill` (the padding) elsewhere. Nothing outside the window is
// read; a vector wholly inside it is a plain load.
template <class T>
[[gnu::always_inline]] inline vec<T> load_window(const T* first, int64_t i, int64_t step, int count, int64_t size,
                                                 T fill) {
  if (i >= 0 && i + count <= size)
    return step == 1 ? load<T>(first + i, count) : gather<T>(first + i * step, step, count);
  T values[lanes];
  for (int lane = 0; lane < lanes; ++lane) {
    const int64_t k = i + lane;
    values[lane] = lane < count && 0 <= k && k < size ? first[k * step] : fill;
  }
  return load<T>(values);
}

// N copies of a padding's constant: what a padded load's row pointer points at when the row falls on the padding
// (codegen/cpu/padded_loads.cpp), so that its loads need no condition; built at compile time.
template <class T, int64_t N>
struct constant_row {
  T values[N];
};
template <class T, int64_t N>
constexpr constant_row<T, N> fill_row(T value) {
  constant_row<T, N> row{};
  for (int64_t i = 0; i < N; ++i) row.values[i] = value;
  return row;
}

// Lanes [0, count) to elements `stride` apart (a kernel with a row in each lane writing its rows' elements),
// element by element: the AVX-512 scatter instruction was no faster on Zen 4 (rows of 3 to 15 floats), and AVX2
// has none.
template <class T>
[[gnu::always_inline]] inline void scatter(T* destination, int64_t stride, vec<T> value, int count = lanes) {
  T values[lanes];
  store<T>(values, value);
  for (int lane = 0; lane < count; ++lane) destination[lane * stride] = values[lane];
}

// ---- transposed strips -------------------------------------------------------------
// A loop kernel reading an input whose rows are the kernel's columns (a transpose that moves the innermost
// axis) reads it a tile of lanes x lanes at a time: a vector down each of `lanes` columns, whole cache lines,
// transposed in registers into a strip of rows the kernel then loads like any contiguous input. Element by
// element (a gather per vector) it read a lane per cache line, and every line of a vector fell in the same
// cache set at power-of-two strides. The tile's transpose is vector_math.h's transpose_square, the standard
// transpose kernel's.

// strip[t * strip_stride + j - begin] = source[t + j * source_stride] for the `lanes` rows t and the columns j
// of [begin, end): rows consecutive in memory, columns source_stride apart. Whole tiles go through registers,
// the last columns (fewer than lanes) element by element. Each line of a tile is on a page of its own where the
// stride is large, so the hardware prefetchers fetch nothing ahead; the lines of the next group of rows (the
// next work item: items take the groups of a column block in order) are prefetched into L2 instead. x.T + y.T
// * 2 over 2048 x 4096 floats (Emerald Rapids, 2 threads): 8.5-9.4 ms without, 5.8-6.3 with, 7.7-8.1 when
// prefetching 2-8 tiles ahead along the row or two groups ahead (the standard kernels: 25-27).
template <class T>
inline void transpose_into_strip(T* strip, int64_t strip_stride, const T* source, int64_t source_stride,
                                 int64_t begin, int64_t end) {
  int64_t j = begin;
  for (; j + lanes <= end; j += lanes) {
    vec<T> rows[lanes];
#pragma GCC unroll 16
    for (int k = 0; k < lanes; ++k) rows[k] = load<T>(source + (j + k) * source_stride);
#pragma GCC unroll 16
    for (int k = 0; k < lanes; ++k) __builtin_prefetch(source + lanes + (j + k) * source_stride, 0, 2);
    vector_math::transpose_square(rows);
#pragma GCC unroll 16
    for (int t = 0; t < lanes; ++t) store<T>(strip + t * strip_stride + (j - begin), rows[t]);
  }
  for (; j < end; ++j)
    for (int t = 0; t < lanes; ++t) strip[t * strip_stride + (j - begin)] = source[t + j * source_stride];
}

// Every lane set to `value` (not vec{} + value: 0.0 + -0.0 is +0.0).
using vector_math::lanes_of;

template <class T> [[gnu::always_inline]] inline vec<T> splat(T value) {
  if constexpr (__is_same(T, uint8_t)) {
    return boolean{lanes_of<i32v>(value ? 1 : 0)};
  } else {
    return lanes_of<vec<T>>(value);
  }
}

// start, start + step, ..., start + (lanes - 1) step, for iota.
template <class T> [[gnu::always_inline]] inline vec<T> lane_index(int64_t start, int64_t step) {
  vec<T> result;
  for (int lane = 0; lane < lanes; ++lane) result[lane] = static_cast<T>(start + lane * step);
  return result;
}

// ---- helpers -----------------------------------------------------------------------
// A boolean as a full-width mask for selecting lanes of V.
template <class V> [[gnu::always_inline]] inline auto mask_for(boolean condition) {
  if constexpr (sizeof(V) > sizeof(i32v)) {  // 64-bit lanes
    return vector_math::not_equal(__builtin_convertvector(condition.lanes, i64v), 0);
  } else {
    return vector_math::not_equal(condition.lanes, 0);
  }
}

// ---- the ops of the op table -------------------------------------------------------
// An op of meaning `scalar` in the op table (ir/ops.def) is its scalar meaning (kernels/scalar_ops.h, the
// standard kernels' code): a register at a time where its call operator takes vectors too (arithmetic, maximum,
// comparisons: the operators of GCC's vectors give what a hand-written vector form would, a compare, a masked
// compare and a masked move for a float maximum), else lane by lane (floor, sqrt, integer division, shifts: GCC
// vectorizes the loop over the lanes where the target can, and x86 has no vector integer division). An op that
// compares goes through a vector wider than a register (an f64v) a register at a time: GCC 12 compiles a
// comparison or a `mask ? a : b` of a wider one lane by lane (vector_math.h, "Comparisons and selects"), an f64
// maximum to 336 instructions against 72. An op giving bool (a comparison) gives a boolean. Booleans (lanes of 0
// or 1) take the op's truth table, its scalar meaning on each pair of bools, which GCC computes at compile time:
// a few vector and/or/xor.
template <class Operation>
[[gnu::always_inline]] inline boolean apply_to_booleans(boolean x) {
  auto truth = [](int a) -> int { return Operation{}(static_cast<uint8_t>(a)) != 0; };
  const i32v a = x.lanes;
  return boolean{((a ^ 1) & truth(0)) | (a & truth(1))};
}
template <class Operation>
[[gnu::always_inline]] inline boolean apply_to_booleans(boolean x, boolean y) {
  auto truth = [](int a, int b) -> int { return Operation{}(static_cast<uint8_t>(a), static_cast<uint8_t>(b)) != 0; };
  const i32v a = x.lanes, b = y.lanes, not_a = a ^ 1, not_b = b ^ 1;
  return boolean{(not_a & not_b & truth(0, 0)) | (not_a & b & truth(0, 1)) | (a & not_b & truth(1, 0)) |
                 (a & b & truth(1, 1))};
}
// The op on the whole vectors, or on each register of vectors wider than one where the op compares (GCC splits
// the arithmetic of wider vectors by itself, and better than these joins): the values, or the masks (-1 or 0 in
// lanes of the operands' width) of a comparison.
template <class Operation, class V, class... Rest>
[[gnu::always_inline]] inline auto apply_to_registers(V first, Rest... rest) {
  if constexpr (requires { Operation::compares; } && sizeof(V) > vector_math::kRegisterBytes)
    return vector_math::halves::join(
        apply_to_registers<Operation>(vector_math::halves::low(first), vector_math::halves::low(rest)...),
        apply_to_registers<Operation>(vector_math::halves::high(first), vector_math::halves::high(rest)...));
  else
    return Operation{}(first, rest...);
}
// (The loops index the vectors themselves: through a helper taking a lane's index, GCC 12 left them scalar.)
template <class Operation, class V, class... Rest>
[[gnu::always_inline]] inline auto apply(V first, Rest... rest) {
  if constexpr (__is_same(V, boolean)) {
    return apply_to_booleans<Operation>(first, rest...);
  } else if constexpr (scalar::accepts<Operation, V, Rest...>) {
    const auto result = apply_to_registers<Operation>(first, rest...);
    if constexpr (__is_same(decltype(Operation{}(first[0], rest[0]...)), bool))
      return boolean{__builtin_convertvector(result, i32v) & 1};
    else
      return result;
  } else if constexpr (__is_same(decltype(Operation{}(first[0], rest[0]...)), bool)) {
    i32v result;
    for (int lane = 0; lane < lanes; ++lane) result[lane] = Operation{}(first[lane], rest[lane]...);
    return boolean{result};
  } else {
    V result;
    for (int lane = 0; lane < lanes; ++lane) result[lane] = Operation{}(first[lane], rest[lane]...);
    return result;
  }
}

// Ops of meaning `math`: vector_math.h's, each dtype's only where its math is in the prelude (KILN_JIT_FLOAT_MATH
// and KILN_JIT_DOUBLE_MATH, set by the generator for modules that compute none).
#if !defined(KILN_JIT_FLOAT_MATH) || KILN_JIT_FLOAT_MATH
#define KILN_FLOAT_MATH(name) \
  [[gnu::always_inline]] inline f32v name(f32v x) { return vector_math::name(x); }
#else
#define KILN_FLOAT_MATH(name)
#endif
#if !defined(KILN_JIT_DOUBLE_MATH) || KILN_JIT_DOUBLE_MATH
#define KILN_DOUBLE_MATH(name) \
  [[gnu::always_inline]] inline f64v name(f64v x) { return vector_math::name(x); }
#else
#define KILN_DOUBLE_MATH(name)
#endif

// Every op of meaning `scalar` or `math`, named as in the op table: add(a, b), sin(x), ...
#define KILN_JIT_scalar(name)                              \
  template <class... V>                                    \
  [[gnu::always_inline]] inline auto name(V... operands) { \
    return apply<scalar::name>(operands...);               \
  }
#define KILN_JIT_math(name) KILN_FLOAT_MATH(name) KILN_DOUBLE_MATH(name)
#define KILN_JIT_own(name)
#define KILN_OP(name, arity, category, attributes, type_rule, meaning, cost, accuracy) KILN_JIT_##meaning(name)
#include "ir/ops.def"
#undef KILN_OP
#undef KILN_JIT_own
#undef KILN_JIT_math
#undef KILN_JIT_scalar
#undef KILN_DOUBLE_MATH
#undef KILN_FLOAT_MATH

#if !defined(KILN_JIT_FLOAT_MATH) || KILN_JIT_FLOAT_MATH
// exp of x <= 0 (RowKernel::exponent_is_nonpositive): exp's bits without its upper clamp.
[[gnu::always_inline]] inline f32v exp_of_nonpositive(f32v x) { return vector_math::exp_of_nonpositive(x); }
#endif

// A running maximum that passes over NaN elements (RowKernel::maximum_may_skip_nan: a softmax's, whose NaN its sum
// carries to every output): one vmaxps, which gives its second operand where the first is NaN, where `maximum` keeps
// the NaN with two compares and a masked move.
template <class V>
[[gnu::always_inline]] inline V max_skipping_nan(V accumulator, V x) {
  return x > accumulator ? x : accumulator;
}

// maximum(c, x) and minimum(c, x) of an f32 constant c that is neither NaN nor zero (RowKernel::computed): a NaN x
// fails the compare and stays, equal operands are the same bits; a compare and a masked move, or one vmaxps or
// vminps, where `maximum` spends two compares, an and and a masked move on keeping a NaN of its first operand.
template <class V>
[[gnu::always_inline]] inline V maximum_of_number(V number, V x) {
  return x < number ? number : x;
}
template <class V>
[[gnu::always_inline]] inline V minimum_of_number(V number, V x) {
  return number < x ? number : x;
}

// f32 pow is vector_math's, computed in double (vector_math_f64.h), as in the standard kernel (scalar_ops.h).
#if !defined(KILN_JIT_DOUBLE_MATH) || KILN_JIT_DOUBLE_MATH
[[gnu::always_inline]] inline f32v pow(f32v base, f32v exponent) { return vector_math::pow(base, exponent); }
#endif

// x / s for a divisor constant along a row (softmax's sum, layer_norm's deviation), as x * (1 / s) with 1 / s
// computed once per row: two roundings instead of one, as long as 1 / s is a normal number, which
// has_normal_reciprocal checks once per row; zero, infinities, NaN and extreme magnitudes keep the division.
template <class T> [[gnu::always_inline]] inline bool has_normal_reciprocal(T divisor) {
  const T magnitude = divisor < 0 ? -divisor : divisor;
  if constexpr (sizeof(T) == 4) return magnitude >= 0x1p-125f && magnitude <= 0x1p125f;
  else return magnitude >= 0x1p-1021 && magnitude <= 0x1p1021;
}
// has_normal_reciprocal of lanes [0, count), each a row's divisor (rows across lanes): the group of rows divides
// if any of them must.
template <class V> [[gnu::always_inline]] inline bool has_normal_reciprocals(V divisors, int count) {
  bool normal = true;
  for (int lane = 0; lane < count; ++lane) normal = normal && has_normal_reciprocal(divisors[lane]);
  return normal;
}
template <class V>
[[gnu::always_inline]] inline V divide_by_row_value(V x, V divisor, V reciprocal, bool use_reciprocal) {
  return use_reciprocal ? x * reciprocal : x / divisor;
}

template <class V> [[gnu::always_inline]] inline V where(boolean condition, V a, V b) {
  if constexpr (__is_same(V, boolean))
    return boolean{vector_math::select_lanes(condition.lanes, a.lanes, b.lanes)};
  else
    return vector_math::select_lanes(mask_for<V>(condition), a, b);
}

// ---- casts -------------------------------------------------------------------------
// cast<T>(x): x converted to the vector of storage type T, lane by lane by the scalar meaning (scalar_ops.h's
// convert: float to integer truncates and saturates, NaN to 0; to bool, x != 0), which GCC compiles to vector
// conversions and compares (checked in the assembly: no longer than the hand-written masks they replaced). A
// boolean's lanes are 0 and 1 already: converting them is the conversion.
template <class T, class V> [[gnu::always_inline]] inline vec<T> cast(V x) {
  if constexpr (__is_same(V, boolean)) {
    if constexpr (__is_same(T, uint8_t))
      return x;
    else
      return __builtin_convertvector(x.lanes, vec<T>);
  } else if constexpr (__is_same(T, uint8_t)) {
    i32v result;
    for (int lane = 0; lane < lanes; ++lane) result[lane] = scalar::convert<uint8_t>{}(x[lane]);
    return boolean{result};
  } else {
    vec<T> result;
    for (int lane = 0; lane < lanes; ++lane) result[lane] = scalar::convert<T>{}(x[lane]);
    return result;
  }
}

// ---- bf16 and f16 ------------------------------------------------------------------------
// The JIT computes bf16 and f16 values in f32 (compiler/widen_half_precision.h rewrites the graph so, as the
// standard kernels widen them): their lanes are bits (u16v), loaded, moved and stored, widened where an op reads
// them and rounded where a cast writes them, with the standard kernels' arithmetic (core/half_precision_bits.h),
// or an instruction that gives the same bits: AVX512_BF16's rounding (bar f32 subnormals, which it reads as zero)
// and F16C's conversions (bar NaNs, made the standard kernels' ones).
#if defined(__AVX512BF16__) && defined(__AVX512F__) && !defined(__clang__)
#define KILN_JIT_BF16_INSTRUCTIONS 1
#else
#define KILN_JIT_BF16_INSTRUCTIONS 0
#endif
#if defined(__AVX512F__) || defined(__F16C__)
// F16C's conversions: to nearest even, and exact back (a signaling NaN made quiet).
[[gnu::always_inline]] inline u16v f16c_round(f32v x) {
#if defined(__AVX512F__)
  return reinterpret_cast<u16v>(__builtin_ia32_vcvtps2ph512_mask(x, 0, i16v{}, 0xFFFF));
#else
  return reinterpret_cast<u16v>(__builtin_ia32_vcvtps2ph256(x, 0));
#endif
}
[[gnu::always_inline]] inline f32v f16c_widen(u16v x) {
#if defined(__AVX512F__)
  return __builtin_ia32_vcvtph2ps512_mask(reinterpret_cast<i16v>(x), f32v{}, 0xFFFF, 4);
#else
  return __builtin_ia32_vcvtph2ps256(reinterpret_cast<i16v>(x));
#endif
}
#define KILN_JIT_F16C 1
#else
#define KILN_JIT_F16C 0
#endif

[[gnu::always_inline]] inline f32v widen_bf16(u16v x) {
#if defined(__AVX512BW__) && !defined(__clang__)
  // One vpermw: bf16 value i into the high half of lane i, zeros (the masked-off words) in the low halves. A
  // vpmovzxwd and a shift were two instructions on the two vector ports that bf16 kernels are bound by.
  static_assert(sizeof(u16v) == 32, "a bf16 vector is half a zmm register");
  using words = short __attribute__((vector_size(64)));
  using half_register = int __attribute__((vector_size(32)));
  const words positions = {0, 0, 0, 1, 0, 2,  0, 3,  0, 4,  0, 5,  0, 6,  0, 7,
                           0, 8, 0, 9, 0, 10, 0, 11, 0, 12, 0, 13, 0, 14, 0, 15};
  const words source = reinterpret_cast<words>(__builtin_ia32_si512_256si(reinterpret_cast<half_register>(x)));
  return __builtin_bit_cast(f32v, __builtin_ia32_permvarhi512_mask(source, positions, words{}, 0xAAAAAAAAu));
#else
#if defined(__AVX512F__) && !defined(__clang__)
  // One vpmovzxwd: GCC 12 converts the vector in two halves and joins them (a 4-cycle shuffle more per vector).
  const u32v bits = reinterpret_cast<u32v>(__builtin_ia32_pmovzxwd512_mask(reinterpret_cast<i16v>(x), i32v{}, 0xFFFF));
#elif defined(__AVX2__) && !defined(__clang__)
  // The same on AVX2, where GCC 12's two halves, byte shift and insert were four instructions for one.
  const u32v bits = reinterpret_cast<u32v>(__builtin_ia32_pmovzxwd256(reinterpret_cast<i16v>(x)));
#else
  const u32v bits = __builtin_convertvector(x, u32v);
#endif
  return vector_math::from_bits(bits << 16);
#endif
}
[[gnu::always_inline]] inline f32v widen_f16(u16v x) {
#if KILN_JIT_F16C
  // NaN lanes keep their payload, signaling or not, as the standard's do.
  const u32v bits = __builtin_convertvector(x, u32v);
  const u32v nan = ((bits & 0x8000u) << 16) | 0x7F800000u | ((bits & 0x3FFu) << 13);
  return vector_math::select_lanes((bits & 0x7FFFu) > 0x7C00u, vector_math::from_bits(nan), f16c_widen(x));
#else
  u32v bits;
  for (int lane = 0; lane < lanes; ++lane) bits[lane] = half_bits::f32_from_f16(x[lane]);
  return vector_math::from_bits(bits);
#endif
}
[[gnu::always_inline]] inline u16v round_to_bf16(f32v x) {
#if KILN_JIT_BF16_INSTRUCTIONS
  // A vector with an f32 subnormal (rare) takes the arithmetic. Its 9 integer instructions per vector were a third
  // of a bf16 gelu's time.
  const bool subnormal = __builtin_ia32_fpclassps512_mask(x, 0x20, 0xFFFF) != 0;
  if (__builtin_expect(!subnormal, 1)) return reinterpret_cast<u16v>(__builtin_ia32_cvtneps2bf16_v16sf(x));
#elif defined(__AVX2__) && !defined(__AVX512F__) && !defined(__clang__)
  // half_bits::bf16_rounded's arithmetic, NaN found by one unordered compare and the 32-bit lanes narrowed by one
  // unsigned pack of the two halves (every lane is below 2^16 by then): GCC 12 compiled the generic form to 14
  // instructions, masking and packing with a lane fix-up, where these are 10.
  const u32v bits = vector_math::to_bits(x);
  const u32v high = bits >> 16;
  const u32v rounded = (bits + 0x7FFFu + (high & 1u)) >> 16;
  const i32v result = reinterpret_cast<i32v>(vector_math::select_lanes(x != x, high | 0x40u, rounded));
  return reinterpret_cast<u16v>(__builtin_ia32_packusdw128(__builtin_shufflevector(result, result, 0, 1, 2, 3),
                                                           __builtin_shufflevector(result, result, 4, 5, 6, 7)));
#endif
  return __builtin_convertvector(half_bits::bf16_rounded(vector_math::to_bits(x)), u16v);
}
[[gnu::always_inline]] inline u16v round_to_f16(f32v x) {
  const u32v bits = vector_math::to_bits(x);
#if KILN_JIT_F16C
  const u32v nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  const u16v quiet = __builtin_convertvector((bits >> 16) & 0x8000u, u16v) | 0x7E00;
  return vector_math::select_lanes(__builtin_convertvector(nan, i16v), quiet, f16c_round(x));
#else
  u16v result;
  for (int lane = 0; lane < lanes; ++lane) result[lane] = half_bits::f16_from_f32(bits[lane]);
  return result;
#endif
}
// widen(round_to(x)) without leaving f32 lanes: what each op of a fused chain of 16-bit ops does to its result
// before the next op reads it.
[[gnu::always_inline]] inline f32v round_through_bf16(f32v x) {
#if KILN_JIT_BF16_INSTRUCTIONS
  return widen_bf16(round_to_bf16(x));
#else
  return vector_math::from_bits(half_bits::bf16_rounded(vector_math::to_bits(x)) << 16);
#endif
}
[[gnu::always_inline]] inline f32v round_through_f16(f32v x) {
#if KILN_JIT_F16C
  // A NaN: the standard's quiet NaN (round_to_f16's), widened.
  const u32v bits = vector_math::to_bits(x);
  return vector_math::select_lanes((bits & 0x7FFFFFFFu) > 0x7F800000u,
                                   vector_math::from_bits((bits & 0x80000000u) | 0x7FC00000u),
                                   f16c_widen(f16c_round(x)));
#else
  return widen_f16(round_to_f16(x));
#endif
}

// From f64 (a cast): one rounding, through f32 rounded to odd, lane by lane.
[[gnu::always_inline]] inline u16v round_to_bf16(f64v x) {
  u16v result;
  for (int lane = 0; lane < lanes; ++lane) result[lane] = half_bits::bf16_from_f64(x[lane]);
  return result;
}
[[gnu::always_inline]] inline u16v round_to_f16(f64v x) {
  u16v result;
  for (int lane = 0; lane < lanes; ++lane) result[lane] = half_bits::f16_from_f64(x[lane]);
  return result;
}

// ---- horizontal reductions -------------------------------------------------------------
// A tree: each lane combined with the lane lanes / 2 further, then lanes / 4, ... (4 dependent steps for 16
// lanes, not 15, which were most of the time of a row of 10 floats). Floats are summed in that order, a
// reassociation of the lanes' order; integers wrap; max and min give the same values, but for which of two
// NaNs or of 0 and -0 comes out.
template <int shift, class V> [[gnu::always_inline]] inline V lanes_from(V x) {  // lane i + shift at lane i
  constexpr int last = lanes - 1;
  if constexpr (lanes == 16)
    return __builtin_shufflevector(x, x, shift & last, (shift + 1) & last, (shift + 2) & last, (shift + 3) & last,
                                   (shift + 4) & last, (shift + 5) & last, (shift + 6) & last, (shift + 7) & last,
                                   (shift + 8) & last, (shift + 9) & last, (shift + 10) & last, (shift + 11) & last,
                                   (shift + 12) & last, (shift + 13) & last, (shift + 14) & last, (shift + 15) & last);
  else if constexpr (lanes == 8)
    return __builtin_shufflevector(x, x, shift & last, (shift + 1) & last, (shift + 2) & last, (shift + 3) & last,
                                   (shift + 4) & last, (shift + 5) & last, (shift + 6) & last, (shift + 7) & last);
  else
    return __builtin_shufflevector(x, x, shift & last, (shift + 1) & last, (shift + 2) & last, (shift + 3) & last);
}
template <int shift, class V, class Combine> [[gnu::always_inline]] inline V fold_lanes(V x, Combine combine) {
  if constexpr (shift == 0)
    return x;
  else
    return fold_lanes<shift / 2>(combine(x, lanes_from<shift>(x)), combine);
}
template <class V> [[gnu::always_inline]] inline auto reduce_add(V x) {
  return fold_lanes<lanes / 2>(x, [](V a, V b) { return add(a, b); })[0];
}
template <class V> [[gnu::always_inline]] inline auto reduce_mul(V x) {
  return fold_lanes<lanes / 2>(x, [](V a, V b) { return mul(a, b); })[0];
}
template <class V> [[gnu::always_inline]] inline auto reduce_max(V x) {
  return fold_lanes<lanes / 2>(x, [](V a, V b) { return maximum(a, b); })[0];
}
template <class V> [[gnu::always_inline]] inline auto reduce_min(V x) {
  return fold_lanes<lanes / 2>(x, [](V a, V b) { return minimum(a, b); })[0];
}
[[gnu::always_inline]] inline uint8_t reduce_max(boolean x) { return reduce_max(x.lanes) != 0; }
[[gnu::always_inline]] inline uint8_t reduce_min(boolean x) { return reduce_min(x.lanes) != 0; }

// Lane 0 as a scalar (bool: 0 or 1).
template <class V> [[gnu::always_inline]] inline auto first_lane(V value) { return value[0]; }
[[gnu::always_inline]] inline uint8_t first_lane(boolean value) { return static_cast<uint8_t>(value.lanes[0]); }

// The first `count` lanes of `value`, the rest from `fill` (keeps the
// identity of a reduction in lanes past the end of a row).
template <class V> [[gnu::always_inline]] inline V first_lanes(V value, V fill, int count) {
  if (count >= lanes) return value;
  const i32v index = lane_index<int32_t>(0, 1);
  return vector_math::select_lanes(mask_for<V>(boolean{vector_math::less(index, count) & 1}), value, fill);
}
[[gnu::always_inline]] inline boolean first_lanes(boolean value, boolean fill, int count) {
  return boolean{first_lanes(value.lanes, fill.lanes, count)};
}

// ---- take_along_axis read in place (an index map whose gathered axis comes from the indices) -----------------
// Where `index` picks along an axis of `extent` elements (a negative one counts from the end), or -1 for one
// outside [-extent, extent), which is reported to kiln: it raises take_along_axis's ValueError when the kernel
// returns, naming element `position` of the indices, as the standard kernel does.
[[gnu::always_inline]] inline int64_t picked_at(int64_t index, int64_t extent, const kiln_runtime* runtime,
                                                int64_t node, int64_t position) {
  const int64_t at = index < 0 ? index + extent : index;
  if (__builtin_expect(at >= 0 && at < extent, 1)) return at;
  runtime->index_out_of_range(runtime, node, position, index, extent);
  return -1;
}
// The element `index` picks from `row`, its axis's elements `stride` apart, in every lane (0 where it is out of
// range).
template <class T, class I>
[[gnu::always_inline]] inline vec<T> pick(const T* row, I index, int64_t stride, int64_t extent,
                                          const kiln_runtime* runtime, int64_t node, int64_t position) {
  const int64_t at = picked_at(static_cast<int64_t>(index), extent, runtime, node, position);
  return splat<T>(at < 0 ? T{} : row[at * stride]);
}
// Lane l picks with indices[l] from base + l * step; the index of lane l is element position + l * position_step
// of the indices.
template <class T, class V>
inline vec<T> pick_lanes(const T* base, int64_t step, V indices, int64_t stride, int64_t extent, int count,
                         const kiln_runtime* runtime, int64_t node, int64_t position, int64_t position_step) {
  T values[lanes] = {};
  for (int lane = 0; lane < count; ++lane) {
    const int64_t at =
        picked_at(static_cast<int64_t>(indices[lane]), extent, runtime, node, position + lane * position_step);
    if (at >= 0) values[lane] = base[lane * step + at * stride];
  }
  return load<T>(values);
}

}  // namespace kiln::jit
