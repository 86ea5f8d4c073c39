// CPU kernels: binary elementwise ops and where(), with NumPy broadcasting.
//
// Broadcasting is planned once per call and walked as runs of plain loops
// (elementwise_loops.h); each op is a small function object applied in
// those loops, which GCC vectorizes for every dtype.
//
// Integer arithmetic wraps modulo 2^bits (computed in unsigned types, never
// undefined behaviour). Float maximum/minimum propagate NaN (NumPy's
// maximum/minimum, TF's tf.maximum). Compares and logical ops produce bool:
// one byte holding 0 or 1.

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/division.h"
#include "kernels/cpu/elementwise_loops.h"
#include "kernels/cpu/shifts.h"
#include "kernels/cpu/vector_math_f64.h"

#include <kiln/error.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

namespace kiln::kernels::cpu {
namespace {

using ir::Op;
using runtime::Array;
using Bool = std::uint8_t;
namespace vm = kiln::vector_math;

template <class T> using Unsigned = std::make_unsigned_t<T>;
template <class T> inline constexpr bool is_bool_v = std::is_same_v<T, Bool>;

// ---- the ops ------------------------------------------------------------------

struct Add {
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<Unsigned<T>>(a) + static_cast<Unsigned<T>>(b));
    else return a + b;
  }
};
struct Subtract {
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<Unsigned<T>>(a) - static_cast<Unsigned<T>>(b));
    else return a - b;
  }
};
struct Multiply {
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return static_cast<T>(static_cast<Unsigned<T>>(a) * static_cast<Unsigned<T>>(b));
    else return a * b;
  }
};
struct Divide {
  template <class T> T operator()(T a, T b) const { return a / b; }  // floats only
};

// Integer pow follows XLA and TF (NumPy raises instead): exponentiation by
// squaring, wrapping on overflow like the other integer ops; a negative
// exponent gives the truncated value of 1 / base^-exponent, which is 0
// except for base 1 (1) and base -1 (-1 for odd exponents, 1 for even);
// 0 to a negative power gives 0. f64 pow is std::pow; f32 pow is
// vector_math's (power_f32).
struct Power {
  template <class T> T operator()(T base, T exponent) const {
    if constexpr (std::is_floating_point_v<T>) {
      return std::pow(base, exponent);
    } else {
      if (exponent < 0) {
        if (base == 1) return 1;
        if (base == -1) return (exponent & 1) ? T(-1) : T(1);
        return 0;
      }
      using U = Unsigned<T>;
      U result = 1, factor = static_cast<U>(base);
      for (U remaining = static_cast<U>(exponent); remaining != 0; remaining >>= 1) {
        if (remaining & 1) result *= factor;
        factor *= factor;
      }
      return static_cast<T>(result);
    }
  }
};

// NaN in either operand gives NaN (the first one if both are NaN).
struct Maximum {
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return (a > b || a != a) ? a : b;
    else return a > b ? a : b;
  }
};
struct Minimum {
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) return (a < b || a != a) ? a : b;
    else return a < b ? a : b;
  }
};

// Comparisons are IEEE: every compare with NaN is false, except ne.
struct Equal {
  template <class T> Bool operator()(T a, T b) const { return a == b; }
};
struct NotEqual {
  template <class T> Bool operator()(T a, T b) const { return a != b; }
};
struct Less {
  template <class T> Bool operator()(T a, T b) const { return a < b; }
};
struct LessEqual {
  template <class T> Bool operator()(T a, T b) const { return a <= b; }
};
struct Greater {
  template <class T> Bool operator()(T a, T b) const { return a > b; }
};
struct GreaterEqual {
  template <class T> Bool operator()(T a, T b) const { return a >= b; }
};
struct LogicalAnd {
  Bool operator()(Bool a, Bool b) const { return (a != 0) & (b != 0); }
};
struct LogicalOr {
  Bool operator()(Bool a, Bool b) const { return (a != 0) | (b != 0); }
};

// ---- checks -------------------------------------------------------------------

[[noreturn]] void internal_error(std::string_view op, const std::string& detail) {
  throw InternalError(std::string(op), detail + " (the type rules should have rejected this)", std::string());
}

// True if `operand` broadcasts to `output` under NumPy rules (dims aligned
// at the right, each equal or 1) -- the walk relies on it.
bool broadcasts_to(const Shape& operand, const Shape& output) {
  if (operand.rank() > output.rank()) return false;
  for (int axis = 0; axis < operand.rank(); ++axis) {
    std::int64_t dim = operand[axis];
    if (dim != 1 && dim != output[axis + output.rank() - operand.rank()]) return false;
  }
  return true;
}

void check_operand(std::string_view op, const Array& operand, const Array& output) {
  if (!broadcasts_to(operand.shape, output.shape))
    internal_error(op, "operand " + operand.shape.to_string() + " does not broadcast to " + output.shape.to_string());
}

// ---- the loops ----------------------------------------------------------------

// out = a op b with a and b broadcast to output.shape: `row(x, y, out_row,
// length)` computes one run of `length` outputs, x and y being RunOperands
// (contiguous, or one value repeated).
template <class In, class Out, class Row>
void broadcast_binary_rows(const Array& a, const Array& b, const Array& output, std::int64_t grain, Row row_function) {
  std::int64_t count = output.shape.numel();
  if (count == 0) return;
  const auto walk = elementwise::plan_walk<2>(output.shape, {&a.shape, &b.shape});
  const In* a_data = a.data<In>();
  const In* b_data = b.data<In>();
  Out* out = output.mutable_data<Out>();
  const std::int64_t a_row_stride = walk.row_stride(0), b_row_stride = walk.row_stride(1);
  auto run_walk = [&]<bool ContiguousA, bool ContiguousB>() {
    elementwise::parallel_walk(walk, count, grain,
                               [&](const std::array<std::int64_t, 2>& offsets, std::int64_t start, std::int64_t length,
                                   std::int64_t rows) {
                                 const In* a_row = a_data + offsets[0];
                                 const In* b_row = b_data + offsets[1];
                                 Out* out_row = out + start;
                                 for (std::int64_t row = 0; row < rows; ++row) {
                                   row_function(elementwise::RunOperand<In, ContiguousA>(a_row),
                                                elementwise::RunOperand<In, ContiguousB>(b_row), out_row, length);
                                   a_row += a_row_stride;
                                   b_row += b_row_stride;
                                   out_row += length;
                                 }
                               });
  };
  // At least one operand advances along the rows (see inner_contiguous).
  if (!walk.inner_contiguous(1)) run_walk.template operator()<true, false>();
  else if (!walk.inner_contiguous(0)) run_walk.template operator()<false, true>();
  else run_walk.template operator()<true, true>();
}

// out = function(a, b) element by element.
template <class In, class Out, class Function>
void broadcast_binary(const Array& a, const Array& b, const Array& output, std::int64_t grain, Function function) {
  broadcast_binary_rows<In, Out>(a, b, output, grain,
                                 [&](const auto& x, const auto& y, Out* out_row, std::int64_t length) {
                                   for (std::int64_t i = 0; i < length; ++i) out_row[i] = function(x[i], y[i]);
                                 });
}

// f32 pow through vector_math's pow, a vector at a time (the tail through a
// partial vector), as the JIT's generated code computes it.
void power_f32(const Array& a, const Array& b, const Array& output) {
  broadcast_binary_rows<float, float>(
      a, b, output, elementwise::costly_grain, [](const auto& x, const auto& y, float* out_row, std::int64_t length) {
        constexpr int lanes = vm::kLanes;
        for (std::int64_t start = 0; start < length; start += lanes) {
          const int count = static_cast<int>(std::min<std::int64_t>(lanes, length - start));
          float bases[lanes] = {}, exponents[lanes] = {};
          for (int i = 0; i < count; ++i) {
            bases[i] = x[start + i];
            exponents[i] = y[start + i];
          }
          vm::store_partial(out_row + start, vm::pow(vm::load(bases), vm::load(exponents)), count);
        }
      });
}

// Runs `op` on operands of storage type T; returns false if T is not a
// dtype `op` accepts.
template <class T> bool binary_typed(Op op, const Array& a, const Array& b, const Array& output) {
  constexpr auto cheap = elementwise::cheap_grain, costly = elementwise::costly_grain;
  constexpr bool is_bool = is_bool_v<T>;
  constexpr bool is_float = std::is_floating_point_v<T>;
  auto check_arithmetic_output = [&] {
    if (output.dtype != a.dtype) internal_error(ir::name(op), "output dtype differs from the operands'");
  };
  auto arithmetic = [&](auto function, std::int64_t grain) {
    check_arithmetic_output();
    broadcast_binary<T, T>(a, b, output, grain, function);
    return true;
  };
  auto predicate = [&](auto function) {
    if (output.dtype != DType::boolean) internal_error(ir::name(op), "output must be bool");
    broadcast_binary<T, Bool>(a, b, output, cheap, function);
    return true;
  };
  switch (op) {
    case Op::add: if constexpr (!is_bool) return arithmetic(Add{}, cheap); break;
    case Op::sub: if constexpr (!is_bool) return arithmetic(Subtract{}, cheap); break;
    case Op::mul: if constexpr (!is_bool) return arithmetic(Multiply{}, cheap); break;
    case Op::div: if constexpr (is_float) return arithmetic(Divide{}, cheap); break;
    case Op::pow:
      if constexpr (std::is_same_v<T, float>) {
        check_arithmetic_output();
        power_f32(a, b, output);
        return true;
      } else if constexpr (!is_bool) {
        return arithmetic(Power{}, is_float ? costly : cheap);
      }
      break;
    // Python's // and %, C's fmod (division.h). Integer division does not vectorize, and float fmod is a loop in
    // libm: costly either way.
    case Op::floor_divide:
      if constexpr (!is_bool) return arithmetic([](T x, T y) { return division::floor_divide(x, y); }, costly);
      break;
    case Op::remainder:
      if constexpr (!is_bool) return arithmetic([](T x, T y) { return division::remainder(x, y); }, costly);
      break;
    case Op::fmod:
      if constexpr (!is_bool) return arithmetic([](T x, T y) { return division::fmod(x, y); }, costly);
      break;
    // Bits of integers; on bools (bytes 0 and 1) logical and, or and not-equal. Shift counts: shifts.h.
    case Op::bitwise_and:
      if constexpr (!is_float) return arithmetic([](T x, T y) { return static_cast<T>(x & y); }, cheap);
      break;
    case Op::bitwise_or:
      if constexpr (!is_float) return arithmetic([](T x, T y) { return static_cast<T>(x | y); }, cheap);
      break;
    case Op::bitwise_xor:
      if constexpr (!is_float) return arithmetic([](T x, T y) { return static_cast<T>(x ^ y); }, cheap);
      break;
    case Op::left_shift:
      if constexpr (!is_float && !is_bool) return arithmetic([](T x, T y) { return shifts::left_shift(x, y); }, cheap);
      break;
    case Op::right_shift:
      if constexpr (!is_float && !is_bool) return arithmetic([](T x, T y) { return shifts::right_shift(x, y); }, cheap);
      break;
    case Op::maximum: return arithmetic(Maximum{}, cheap);
    case Op::minimum: return arithmetic(Minimum{}, cheap);
    case Op::eq: return predicate(Equal{});
    case Op::ne: return predicate(NotEqual{});
    case Op::lt: return predicate(Less{});
    case Op::le: return predicate(LessEqual{});
    case Op::gt: return predicate(Greater{});
    case Op::ge: return predicate(GreaterEqual{});
    case Op::logical_and: if constexpr (is_bool) return predicate(LogicalAnd{}); break;
    case Op::logical_or: if constexpr (is_bool) return predicate(LogicalOr{}); break;
    default: break;
  }
  return false;
}

}  // namespace

void binary(Op op, const Array& a, const Array& b, const Array& output) {
  if (a.dtype != b.dtype) internal_error(ir::name(op), "operands have different dtypes");
  check_operand(ir::name(op), a, output);
  check_operand(ir::name(op), b, output);
  bool done = visit_dtype(a.dtype, [&]<class T>() { return binary_typed<T>(op, a, b, output); });
  if (!done) internal_error(ir::name(op), "has no CPU kernel for " + std::string(to_string(a.dtype)));
}

void select(const Array& condition, const Array& a, const Array& b, const Array& output) {
  if (condition.dtype != DType::boolean) internal_error("where", "condition must be bool");
  if (a.dtype != b.dtype || a.dtype != output.dtype) internal_error("where", "branches and output differ in dtype");
  check_operand("where", condition, output);
  check_operand("where", a, output);
  check_operand("where", b, output);
  std::int64_t count = output.shape.numel();
  if (count == 0) return;
  const auto walk = elementwise::plan_walk<3>(output.shape, {&condition.shape, &a.shape, &b.shape});
  visit_dtype(output.dtype, [&]<class T>() {
    const Bool* condition_data = condition.data<Bool>();
    const T* a_data = a.data<T>();
    const T* b_data = b.data<T>();
    T* out = output.mutable_data<T>();
    const std::int64_t c_row_stride = walk.row_stride(0), a_row_stride = walk.row_stride(1),
                       b_row_stride = walk.row_stride(2);
    elementwise::visit_flags(
        [&]<bool ContiguousCondition, bool ContiguousA, bool ContiguousB>() {
          elementwise::parallel_walk(walk, count, elementwise::cheap_grain,
                                     [&](const std::array<std::int64_t, 3>& offsets, std::int64_t start,
                                         std::int64_t length, std::int64_t rows) {
                                       const Bool* c_row = condition_data + offsets[0];
                                       const T* a_row = a_data + offsets[1];
                                       const T* b_row = b_data + offsets[2];
                                       T* out_row = out + start;
                                       for (std::int64_t row = 0; row < rows; ++row) {
                                         const elementwise::RunOperand<Bool, ContiguousCondition> c(c_row);
                                         const elementwise::RunOperand<T, ContiguousA> x(a_row);
                                         const elementwise::RunOperand<T, ContiguousB> y(b_row);
                                         for (std::int64_t i = 0; i < length; ++i) out_row[i] = c[i] != 0 ? x[i] : y[i];
                                         c_row += c_row_stride;
                                         a_row += a_row_stride;
                                         b_row += b_row_stride;
                                         out_row += length;
                                       }
                                     });
        },
        walk.inner_contiguous(0), walk.inner_contiguous(1), walk.inner_contiguous(2));
  });
}

}  // namespace kiln::kernels::cpu
