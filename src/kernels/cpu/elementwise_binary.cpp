// CPU kernels: binary elementwise ops and where(), with NumPy broadcasting.
//
// Broadcasting is planned once per call and walked as runs of plain loops
// (elementwise_loops.h); each op is its scalar meaning (kernels/scalar_ops.h,
// found through the op table by scalar_dispatch.h) applied in those loops,
// which GCC vectorizes for every dtype. Compares and logical ops produce bool:
// one byte holding 0 or 1.

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/elementwise_loops.h"
#include "kernels/cpu/vector_math_f64.h"
#include "kernels/scalar_dispatch.h"

#include <kiln/error.h>

#include <algorithm>
#include <string>
#include <type_traits>

namespace kiln::kernels::cpu {
namespace {

using ir::Op;
using runtime::Array;
using Bool = std::uint8_t;
namespace vm = kiln::vector_math;

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
  // Integer division does not vectorize, and float fmod and pow are loops or calls in libm: costly.
  const std::int64_t grain = elementwise::grain_for(ir::flops_per_element(op));
  return visit_scalar_op<2>(op, [&](auto function) {
    using Function = decltype(function);
    if constexpr (std::is_same_v<Function, scalar::pow> && std::is_same_v<T, float>) {
      // f32 pow: vector_math's, as the JIT's generated code computes it (scalar_ops.h).
      if (output.dtype != a.dtype) internal_error(ir::name(op), "output dtype differs from the operands'");
      power_f32(a, b, output);
      return true;
    } else if constexpr (!accepts<Function, T, T>) {
      return false;
    } else if constexpr (std::is_same_v<decltype(function(T{}, T{})), bool>) {
      if (output.dtype != DType::boolean) internal_error(ir::name(op), "output must be bool");
      broadcast_binary<T, Bool>(a, b, output, grain, function);
      return true;
    } else {
      if (output.dtype != a.dtype) internal_error(ir::name(op), "output dtype differs from the operands'");
      broadcast_binary<T, T>(a, b, output, grain, function);
      return true;
    }
  });
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
