// Tests of the CPU elementwise kernels (unary, binary, select, cast, fill,
// iota) against plain reference loops written here: long double for float
// dtypes, 64-bit integers for integer and bool dtypes. Inputs are random
// (fixed seeds, never zero unless a test is about zero); sizes are odd, and
// large enough to be split across threads; broadcasting covers rank 0,
// zero-size dims, size-1 dims on any axis and ranks up to 8.

#include "kernels/cpu/cpu_kernels.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"

#include <gtest/gtest.h>
#include <kiln/error.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::ir::Op;
using kiln::runtime::Array;
namespace cpu = kiln::kernels::cpu;

constexpr DType all_dtypes[] = {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64};
const std::vector<DType> numeric = {DType::i32, DType::i64, DType::f32, DType::f64};
const std::vector<DType> floats = {DType::f32, DType::f64};
const std::vector<DType> every = {DType::boolean, DType::i32, DType::i64, DType::f32, DType::f64};
const std::vector<DType> bools = {DType::boolean};
const std::vector<DType> integers = {DType::i32, DType::i64};
const std::vector<DType> integers_and_bools = {DType::boolean, DType::i32, DType::i64};

// Same-shape sizes: odd, and 1000003 is split across threads.
const std::vector<Shape> same_shape_cases = {Shape{}, Shape{1}, Shape{7}, Shape{33}, Shape{3, 5, 7}, Shape{1000003},
                                             Shape{0}, Shape{4, 0, 3}};

// Each test runs with 4 threads (more than most CI machines have cores), so
// that large inputs are split in uneven pieces starting in the middle of
// rows, and restores the thread count afterwards (the unit tests share one
// process and one pool).
class FourThreads : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_threads_ = kiln::runtime::thread_count();
    kiln::runtime::set_thread_count(4);
  }
  void TearDown() override { kiln::runtime::set_thread_count(previous_threads_); }

 private:
  int previous_threads_ = 1;
};
class ElementwiseUnary : public FourThreads {};
class ElementwiseBinary : public FourThreads {};
class ElementwiseSelect : public FourThreads {};
class ElementwiseCast : public FourThreads {};
class ElementwiseFill : public FourThreads {};
class ElementwiseIota : public FourThreads {};
class ElementwiseErrors : public FourThreads {};

Array make(DType dtype, const Shape& shape) { return kiln::runtime::allocate_array(dtype, shape); }

std::string describe(std::initializer_list<const Array*> arrays) {
  std::string text;
  for (const Array* array : arrays)
    text += (text.empty() ? "" : ", ") + std::string(kiln::to_string(array->dtype)) + array->shape.to_string();
  return text;
}

long double get(const Array& array, std::int64_t i) {
  return kiln::visit_dtype(array.dtype, [&]<class T>() { return static_cast<long double>(array.data<T>()[i]); });
}
std::int64_t get_int(const Array& array, std::int64_t i) {
  return kiln::visit_dtype(array.dtype, [&]<class T>() { return static_cast<std::int64_t>(array.data<T>()[i]); });
}

// Random values: floats uniform in [low, high] (never 0), integers uniform
// in [low, high] without 0, bools 0/1. `grid`: multiples of 0.5 (floats) or
// integers in [low, high] without 0, so that compares meet equal values.
struct Values {
  double low = -4, high = 4;
  bool grid = false;
};

void fill_random(const Array& array, std::uint32_t seed, Values values) {
  std::mt19937_64 generator(seed);
  kiln::visit_dtype(array.dtype, [&]<class T>() {
    T* data = array.mutable_data<T>();
    std::uniform_real_distribution<double> real(values.low, values.high);
    std::uniform_int_distribution<std::int64_t> integer(static_cast<std::int64_t>(std::ceil(values.low)),
                                                        static_cast<std::int64_t>(std::floor(values.high)));
    const std::int64_t count = array.shape.numel();
    for (std::int64_t i = 0; i < count; ++i) {
      if constexpr (std::is_same_v<T, std::uint8_t>) {
        data[i] = generator() & 1;
      } else if (values.grid || std::is_integral_v<T>) {
        std::int64_t k = 0;
        while (k == 0) k = integer(generator);
        data[i] = std::is_integral_v<T> ? static_cast<T>(k) : static_cast<T>(k * 0.5);
      } else {
        double x = 0;
        while (x == 0) x = real(generator);
        data[i] = static_cast<T>(x);
      }
    }
  });
}

// Units in the last place between two floats of one type (0 for equal
// values, NaN vs NaN included).
template <class T> std::uint64_t ulp_distance(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : ~std::uint64_t{0};
  if (a == b) return 0;
  using Bits = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;
  auto ordered = [](T x) {  // monotonic map of floats to integers
    Bits bits = std::bit_cast<Bits>(x);
    return bits < 0 ? static_cast<long double>(std::numeric_limits<Bits>::min()) - bits : static_cast<long double>(bits);
  };
  return static_cast<std::uint64_t>(std::abs(ordered(a) - ordered(b)));
}

// How close a float result must be: within `ulp` units in the last place of
// the reference rounded to the result type, or within `absolute` of it
// (for functions whose bounds are absolute near zero, like sin near pi).
struct Tolerance {
  std::uint64_t ulp = 0;
  double absolute = 0;
};

// Checks every element of `output` against `expected(i)`: exact for integer
// and bool results, within `tolerance` for floats. Reports the first few
// mismatches.
template <class Expected>
void expect_elements(const Array& output, Expected expected, Tolerance tolerance, const std::string& what) {
  int failures = 0;
  kiln::visit_dtype(output.dtype, [&]<class T>() {
    const T* data = output.data<T>();
    const std::int64_t count = output.shape.numel();
    for (std::int64_t i = 0; i < count && failures < 5; ++i) {
      long double want = expected(i);
      bool ok;
      if constexpr (std::is_floating_point_v<T>) {
        T rounded = static_cast<T>(want);
        ok = ulp_distance(data[i], rounded) <= tolerance.ulp ||
             std::abs(static_cast<long double>(data[i]) - want) <= tolerance.absolute;
      } else {
        ok = static_cast<long double>(data[i]) == want;
      }
      if (!ok) {
        ++failures;
        ADD_FAILURE() << what << ": element " << i << " is " << static_cast<long double>(data[i]) << ", expected "
                      << want;
      }
    }
  });
}

// The flat index into `operand` of output element `i` under NumPy
// broadcasting: unravel, drop the broadcast axes, ravel.
std::int64_t broadcast_index(const Shape& operand, const Shape& output, std::int64_t i) {
  std::int64_t index = 0, stride = 1;
  for (int axis = output.rank() - 1; axis >= 0; --axis) {
    std::int64_t coordinate = i % output[axis];
    i /= output[axis];
    int operand_axis = axis - (output.rank() - operand.rank());
    if (operand_axis < 0) continue;
    if (operand[operand_axis] != 1) index += coordinate * stride;
    stride *= operand[operand_axis];
  }
  return index;
}

Shape broadcast(const Shape& a, const Shape& b) {
  int rank = std::max(a.rank(), b.rank());
  std::vector<std::int64_t> dims(static_cast<std::size_t>(rank));
  for (int axis = 0; axis < rank; ++axis) {
    int axis_a = axis - (rank - a.rank()), axis_b = axis - (rank - b.rank());
    std::int64_t dim_a = axis_a >= 0 ? a[axis_a] : 1, dim_b = axis_b >= 0 ? b[axis_b] : 1;
    dims[static_cast<std::size_t>(axis)] = dim_a == 1 ? dim_b : dim_a;
  }
  return Shape(dims);
}

// Integer results wrap to the dtype's width, like the kernels promise.
std::int64_t wrap(DType dtype, std::uint64_t bits) {
  if (dtype == DType::i32) return static_cast<std::int32_t>(static_cast<std::uint32_t>(bits));
  return static_cast<std::int64_t>(bits);
}

// ---- unary ----------------------------------------------------------------------

struct UnaryCase {
  Op op;
  std::vector<DType> dtypes;
  Values values;
  long double (*real)(long double);          // reference for float dtypes
  std::int64_t (*integer)(std::int64_t, DType);  // reference for integer and bool dtypes
  Tolerance f32_tolerance, f64_tolerance;
};

// Accuracy of the vector_math functions on f32 (vector_math.h: sin, cos,
// exp, log <= 2 ulp; tanh, erf, erfc, sigmoid <= 4 ulp of the exact value; one
// more here because the reference is rounded to float before the ulp
// distance is taken) and of glibc's double functions.
const Tolerance vector_math_2ulp{3, 0};
const Tolerance vector_math_4ulp{5, 0};
const Tolerance exact{0, 0};
const Tolerance libm_f64{2, 0};
// A correctly rounded f64 result may differ by 1 ulp from the long double
// reference rounded to double (two roundings: 64-bit, then 53-bit mantissa).
const Tolerance rounded_twice{1, 0};

// One row per op (clang-format would put each field on a line of its own).
// clang-format off
const std::vector<UnaryCase> unary_cases = {
    {Op::neg, numeric, {-100, 100}, [](long double x) { return -x; },
     [](std::int64_t x, DType d) { return wrap(d, 0 - static_cast<std::uint64_t>(x)); }, exact, exact},
    {Op::abs, numeric, {-100, 100}, [](long double x) { return std::fabs(x); },
     [](std::int64_t x, DType d) { return x < 0 ? wrap(d, 0 - static_cast<std::uint64_t>(x)) : x; }, exact, exact},
    {Op::sign, numeric, {-100, 100}, [](long double x) { return x > 0 ? 1.0L : -1.0L; },
     [](std::int64_t x, DType) { return std::int64_t{x > 0 ? 1 : -1}; }, exact, exact},
    {Op::square, numeric, {-100, 100}, [](long double x) { return x * x; },
     [](std::int64_t x, DType d) { return wrap(d, static_cast<std::uint64_t>(x) * static_cast<std::uint64_t>(x)); },
     exact, rounded_twice},
    {Op::relu, numeric, {-100, 100}, [](long double x) { return x < 0 ? 0.0L : x; },
     [](std::int64_t x, DType) { return x < 0 ? 0 : x; }, exact, exact},
    {Op::floor, numeric, {-100, 100}, [](long double x) { return std::floor(x); },
     [](std::int64_t x, DType) { return x; }, exact, exact},
    {Op::ceil, numeric, {-100, 100}, [](long double x) { return std::ceil(x); },
     [](std::int64_t x, DType) { return x; }, exact, exact},
    {Op::round, numeric, {-100, 100}, [](long double x) { return std::nearbyint(x); },
     [](std::int64_t x, DType) { return x; }, exact, exact},
    {Op::sqrt, floats, {0.01, 100}, [](long double x) { return std::sqrt(x); }, nullptr, exact, rounded_twice},
    {Op::rsqrt, floats, {0.01, 100}, [](long double x) { return 1 / std::sqrt(x); }, nullptr, {1, 0}, {1, 0}},
    {Op::sin, floats, {-10, 10}, [](long double x) { return std::sin(x); }, nullptr, vector_math_2ulp, libm_f64},
    {Op::cos, floats, {-10, 10}, [](long double x) { return std::cos(x); }, nullptr, vector_math_2ulp, libm_f64},
    {Op::exp, floats, {-20, 20}, [](long double x) { return std::exp(x); }, nullptr, vector_math_2ulp, libm_f64},
    {Op::log, floats, {0.01, 100}, [](long double x) { return std::log(x); }, nullptr, vector_math_2ulp, libm_f64},
    {Op::tanh, floats, {-10, 10}, [](long double x) { return std::tanh(x); }, nullptr, vector_math_4ulp, libm_f64},
    {Op::sigmoid, floats, {-20, 20}, [](long double x) { return 1 / (1 + std::exp(-x)); }, nullptr, vector_math_4ulp, libm_f64},
    {Op::erf, floats, {-5, 5}, [](long double x) { return std::erf(x); }, nullptr, vector_math_4ulp, libm_f64},
    // Up to 9, where erfc is 4e-37: relative accuracy in the tail is what erfc is for.
    {Op::erfc, floats, {-3, 9}, [](long double x) { return std::erfc(x); }, nullptr, vector_math_4ulp, vector_math_4ulp},
    // log1p and expm1 over ranges where 1 + x and e^x - 1 cancel, as well as ordinary ones.
    {Op::log1p, floats, {-0.99, 20}, [](long double x) { return std::log1p(x); }, nullptr, vector_math_4ulp, vector_math_4ulp},
    {Op::expm1, floats, {-20, 20}, [](long double x) { return std::expm1(x); }, nullptr, vector_math_4ulp, vector_math_4ulp},
    // Every reduction range: below 1/2, up to tan(3 pi/8) and beyond.
    {Op::atan, floats, {-40, 40}, [](long double x) { return std::atan(x); }, nullptr, vector_math_2ulp, vector_math_2ulp},
    {Op::logical_not, bools, {}, nullptr, [](std::int64_t x, DType) { return std::int64_t{x == 0}; }, exact, exact},
    // ~x = -x - 1 in two's complement; on bools, not.
    {Op::bitwise_not, integers_and_bools, {-1000, 1000}, nullptr,
     [](std::int64_t x, DType d) { return d == DType::boolean ? std::int64_t{x == 0} : -x - 1; }, exact, exact},
};
// clang-format on

TEST_F(ElementwiseUnary, EveryOpAndDtypeMatchesReference) {
  std::uint32_t seed = 1;
  for (const UnaryCase& test : unary_cases) {
    for (DType dtype : test.dtypes) {
      for (const Shape& shape : same_shape_cases) {
        Array input = make(dtype, shape), output = make(dtype, shape);
        fill_random(input, seed++, test.values);
        std::string what = std::string(kiln::ir::name(test.op)) + " " + describe({&input});
        cpu::unary(test.op, input, output);
        if (kiln::is_floating(dtype))
          expect_elements(output, [&](std::int64_t i) { return test.real(get(input, i)); },
                          dtype == DType::f32 ? test.f32_tolerance : test.f64_tolerance, what);
        else
          expect_elements(output, [&](std::int64_t i) { return test.integer(get_int(input, i), dtype); }, exact, what);
      }
    }
  }
}

TEST_F(ElementwiseUnary, IntegerOpsWrapAtTheLimits) {
  for (DType dtype : {DType::i32, DType::i64}) {
    kiln::visit_dtype(dtype, [&]<class T>() {
      if constexpr (std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>) {
        constexpr T low = std::numeric_limits<T>::min(), high = std::numeric_limits<T>::max();
        Array input = make(dtype, Shape{4}), output = make(dtype, Shape{4});
        const T values[] = {low, high, static_cast<T>(low + 1), static_cast<T>(T(1) << (sizeof(T) * 4))};
        std::memcpy(input.mutable_raw(), values, sizeof values);
        cpu::unary(Op::neg, input, output);
        EXPECT_EQ(output.data<T>()[0], low);  // two's complement: -min == min
        EXPECT_EQ(output.data<T>()[1], low + 1);
        cpu::unary(Op::abs, input, output);
        EXPECT_EQ(output.data<T>()[0], low);
        EXPECT_EQ(output.data<T>()[2], high);
        cpu::unary(Op::square, input, output);
        EXPECT_EQ(output.data<T>()[1], 1);  // (2^(n-1) - 1)^2 = 1 mod 2^n
        EXPECT_EQ(output.data<T>()[3], 0);  // (2^(n/2))^2 = 0 mod 2^n
      }
    });
  }
}

TEST_F(ElementwiseUnary, NanAndSignedZero) {
  for (DType dtype : floats) {
    Array input = make(dtype, Shape{3}), output = make(dtype, Shape{3});
    kiln::visit_dtype(dtype, [&]<class T>() {
      if constexpr (std::is_floating_point_v<T>) {
        const T values[] = {std::numeric_limits<T>::quiet_NaN(), T(-0.0), T(0.0)};
        std::memcpy(input.mutable_raw(), values, sizeof values);
        cpu::unary(Op::relu, input, output);
        EXPECT_TRUE(std::isnan(output.data<T>()[0])) << "relu(NaN)";
        EXPECT_EQ(output.data<T>()[2], T(0));
        cpu::unary(Op::sign, input, output);
        EXPECT_TRUE(std::isnan(output.data<T>()[0])) << "sign(NaN)";
        EXPECT_TRUE(output.data<T>()[1] == 0 && std::signbit(output.data<T>()[1])) << "sign(-0) = -0";
        EXPECT_TRUE(output.data<T>()[2] == 0 && !std::signbit(output.data<T>()[2])) << "sign(+0) = +0";
        cpu::unary(Op::sqrt, input, output);
        EXPECT_TRUE(std::isnan(output.data<T>()[0]));
        cpu::unary(Op::rsqrt, input, output);
        EXPECT_EQ(output.data<T>()[2], std::numeric_limits<T>::infinity());
      }
    });
  }
}

// ---- binary ---------------------------------------------------------------------

struct BinaryCase {
  Op op;
  std::vector<DType> dtypes;
  Values a_values, b_values;
  long double (*real)(long double, long double);
  std::int64_t (*integer)(std::int64_t, std::int64_t, DType);
  Tolerance tolerance;  // float results
};

// pow on integers by repeated multiplication: the meaning the kernel's
// squaring must reproduce (negative exponents: see elementwise_binary.cpp).
std::int64_t integer_pow(std::int64_t base, std::int64_t exponent, DType dtype) {
  if (exponent < 0) return base == 1 ? 1 : base == -1 ? (exponent % 2 ? -1 : 1) : 0;
  std::uint64_t result = 1;
  for (std::int64_t i = 0; i < exponent; ++i) result *= static_cast<std::uint64_t>(base);
  return wrap(dtype, result);
}

// The quotient rounded down, and what is left of a: exact in long double for these operands' ranges.
long double floor_quotient(long double a, long double b) { return b == 0 ? a / b : std::floor(a / b); }
long double floor_remainder(long double a, long double b) {
  if (b == 0) return NAN;
  const long double left = a - std::floor(a / b) * b;
  return left == 0 ? std::copysign(0.0L, b) : left;
}
std::int64_t integer_floor_quotient(std::int64_t a, std::int64_t b, DType) {
  return b == 0 ? 0 : static_cast<std::int64_t>(std::floor(static_cast<long double>(a) / b));
}
std::int64_t integer_floor_remainder(std::int64_t a, std::int64_t b, DType dtype) {
  return b == 0 ? 0 : a - integer_floor_quotient(a, b, dtype) * b;
}
std::int64_t integer_truncated_remainder(std::int64_t a, std::int64_t b, DType) {
  return b == 0 ? 0 : a - static_cast<std::int64_t>(std::trunc(static_cast<long double>(a) / b)) * b;
}

// a & b from the binary digits of a and b (two's complement: the digit of 2^k is floor(x / 2^k) mod 2, for
// negative x too), for operands of magnitude below 2^40.
std::int64_t bit_and(std::int64_t a, std::int64_t b, DType) {
  auto digit = [](std::int64_t x, int k) {
    const auto power = static_cast<long double>(std::int64_t{1} << k);
    return static_cast<std::int64_t>(std::floor(x / power)) % 2 != 0;
  };
  std::int64_t result = 0;
  for (int k = 0; k < 40; ++k)
    if (digit(a, k) && digit(b, k)) result += std::int64_t{1} << k;
  return a < 0 && b < 0 ? result - (std::int64_t{1} << 40) : result;  // both negative: every digit above 40 is 1
}
int width(DType dtype) { return dtype == DType::i32 ? 32 : 64; }
// x 2^count wrapped to the dtype; counts outside [0, bits) shift everything out.
std::int64_t shifted_left(std::int64_t x, std::int64_t count, DType dtype) {
  if (count < 0 || count >= width(dtype)) return 0;
  return wrap(dtype, static_cast<std::uint64_t>(x) * (std::uint64_t{1} << count));
}
// floor(x / 2^count); outside [0, bits), the sign.
std::int64_t shifted_right(std::int64_t x, std::int64_t count, DType dtype) {
  if (count < 0 || count >= width(dtype)) return x < 0 ? -1 : 0;
  return static_cast<std::int64_t>(std::floor(static_cast<long double>(x) / std::ldexp(1.0L, static_cast<int>(count))));
}

long double nan_max(long double a, long double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }
long double nan_min(long double a, long double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }

const Values wide{-100, 100};
const Values compare_grid{-3, 3, true};  // few distinct values: equal pairs occur
const std::vector<BinaryCase> binary_cases = {
    {Op::add,
     numeric,
     wide,
     wide,
     [](long double a, long double b) { return a + b; },
     [](std::int64_t a, std::int64_t b, DType d) {
       return wrap(d, static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
     },
     {1, 0}},
    {Op::sub,
     numeric,
     wide,
     wide,
     [](long double a, long double b) { return a - b; },
     [](std::int64_t a, std::int64_t b, DType d) {
       return wrap(d, static_cast<std::uint64_t>(a) - static_cast<std::uint64_t>(b));
     },
     {1, 0}},
    {Op::mul,
     numeric,
     wide,
     wide,
     [](long double a, long double b) { return a * b; },
     [](std::int64_t a, std::int64_t b, DType d) {
       return wrap(d, static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
     },
     {1, 0}},
    {Op::div, floats, wide, wide, [](long double a, long double b) { return a / b; }, nullptr, {1, 0}},
    {Op::copysign, floats, wide, wide, [](long double a, long double b) { return std::copysign(a, b); }, nullptr,
     exact},
    {Op::pow,
     numeric,
     {0.1, 3},
     {-6, 12},
     [](long double a, long double b) { return std::pow(a, b); },
     integer_pow,
     {2, 0}},
    // Python's // and %, C's fmod (random operands are never 0: zero divisors: tests/api/division_test.cpp).
    {Op::floor_divide, numeric, wide, {-9, 9}, floor_quotient, integer_floor_quotient, {1, 0}},
    {Op::remainder, numeric, wide, {-9, 9}, floor_remainder, integer_floor_remainder, {1, 0}},
    {Op::fmod,
     numeric,
     wide,
     {-9, 9},
     [](long double a, long double b) { return std::fmod(a, b); },
     integer_truncated_remainder,
     exact},
    // Bits through arithmetic: x & y from the binary digits, shifts as multiplications and floored divisions by
    // powers of 2 (counts -3 .. 70 reach past both widths).
    {Op::bitwise_and, integers_and_bools, wide, wide, nullptr, bit_and, exact},
    {Op::bitwise_or, integers_and_bools, wide, wide, nullptr,
     [](std::int64_t a, std::int64_t b, DType d) { return a + b - bit_and(a, b, d); }, exact},
    {Op::bitwise_xor, integers_and_bools, wide, wide, nullptr,
     [](std::int64_t a, std::int64_t b, DType d) { return a + b - 2 * bit_and(a, b, d); }, exact},
    {Op::left_shift, integers, {-1000000, 1000000}, {-3, 70}, nullptr, shifted_left, exact},
    {Op::right_shift, integers, {-1000000, 1000000}, {-3, 70}, nullptr, shifted_right, exact},
    {Op::maximum, every, compare_grid, compare_grid, nan_max,
     [](std::int64_t a, std::int64_t b, DType) { return std::max(a, b); }, exact},
    {Op::minimum, every, compare_grid, compare_grid, nan_min,
     [](std::int64_t a, std::int64_t b, DType) { return std::min(a, b); }, exact},
    {Op::eq, every, compare_grid, compare_grid, [](long double a, long double b) -> long double { return a == b; },
     [](std::int64_t a, std::int64_t b, DType) -> std::int64_t { return a == b; }, exact},
    {Op::ne, every, compare_grid, compare_grid, [](long double a, long double b) -> long double { return a != b; },
     [](std::int64_t a, std::int64_t b, DType) -> std::int64_t { return a != b; }, exact},
    {Op::lt, every, compare_grid, compare_grid, [](long double a, long double b) -> long double { return a < b; },
     [](std::int64_t a, std::int64_t b, DType) -> std::int64_t { return a < b; }, exact},
    {Op::le, every, compare_grid, compare_grid, [](long double a, long double b) -> long double { return a <= b; },
     [](std::int64_t a, std::int64_t b, DType) -> std::int64_t { return a <= b; }, exact},
    {Op::gt, every, compare_grid, compare_grid, [](long double a, long double b) -> long double { return a > b; },
     [](std::int64_t a, std::int64_t b, DType) -> std::int64_t { return a > b; }, exact},
    {Op::ge, every, compare_grid, compare_grid, [](long double a, long double b) -> long double { return a >= b; },
     [](std::int64_t a, std::int64_t b, DType) -> std::int64_t { return a >= b; }, exact},
    {Op::logical_and,
     bools,
     {},
     {},
     nullptr,
     [](std::int64_t a, std::int64_t b, DType) -> std::int64_t { return a && b; },
     exact},
    {Op::logical_or,
     bools,
     {},
     {},
     nullptr,
     [](std::int64_t a, std::int64_t b, DType) -> std::int64_t { return a || b; },
     exact},
};

bool has_bool_result(Op op) { return op >= Op::eq && op <= Op::logical_or; }

// Operand shape pairs: same shapes, scalars, size-1 dims on either side and
// any axis, zero-size dims, and large ones split across threads mid-row.
const std::vector<std::pair<Shape, Shape>> binary_shapes = {
    {Shape{}, Shape{}},           {Shape{1}, Shape{1}},          {Shape{7}, Shape{7}},
    {Shape{33}, Shape{33}},       {Shape{1000003}, Shape{1000003}}, {Shape{3, 1}, Shape{1, 4}},
    {Shape{5}, Shape{2, 3, 5}},   {Shape{2, 3, 5}, Shape{5}},    {Shape{}, Shape{33}},
    {Shape{33}, Shape{}},         {Shape{1}, Shape{0}},          {Shape{0}, Shape{1}},
    {Shape{0, 3}, Shape{3}},      {Shape{4, 1, 3}, Shape{1, 0, 1}}, {Shape{1000003}, Shape{1}},
    {Shape{7, 40001}, Shape{7, 1}}, {Shape{40001, 7}, Shape{7}},  {Shape{2, 1, 50001}, Shape{1, 3, 1}},
    {Shape{1, 1, 5, 1}, Shape{1, 3, 1, 1}}, {Shape{2, 1, 3, 1, 2, 3, 1, 2}, Shape{1, 2, 1, 3, 2, 1, 2, 1}},
};

void check_binary(const BinaryCase& test, DType dtype, const Array& a, const Array& b) {
  Shape shape = broadcast(a.shape, b.shape);
  Array output = make(has_bool_result(test.op) ? DType::boolean : dtype, shape);
  cpu::binary(test.op, a, b, output);
  std::string what = std::string(kiln::ir::name(test.op)) + " " + describe({&a, &b});
  auto a_at = [&](std::int64_t i) { return broadcast_index(a.shape, shape, i); };
  auto b_at = [&](std::int64_t i) { return broadcast_index(b.shape, shape, i); };
  if (kiln::is_floating(dtype))
    expect_elements(output, [&](std::int64_t i) { return test.real(get(a, a_at(i)), get(b, b_at(i))); },
                    test.tolerance, what);
  else
    expect_elements(output, [&](std::int64_t i) { return test.integer(get_int(a, a_at(i)), get_int(b, b_at(i)), dtype); },
                    exact, what);
}

TEST_F(ElementwiseBinary, EveryOpAndDtypeMatchesReference) {
  std::uint32_t seed = 1000;
  for (const BinaryCase& test : binary_cases) {
    for (DType dtype : test.dtypes) {
      for (const auto& [a_shape, b_shape] : binary_shapes) {
        Array a = make(dtype, a_shape), b = make(dtype, b_shape);
        fill_random(a, seed++, test.a_values);
        fill_random(b, seed++, test.b_values);
        check_binary(test, dtype, a, b);
      }
    }
  }
}

// Random shapes of ranks 0 to 8 with size-1 dims anywhere on either side.
TEST_F(ElementwiseBinary, RandomBroadcastShapes) {
  std::mt19937 generator(7);
  for (int trial = 0; trial < 200; ++trial) {
    int rank = static_cast<int>(generator() % 9);
    std::vector<std::int64_t> dims(static_cast<std::size_t>(rank)), a_dims, b_dims;
    for (auto& dim : dims) dim = 1 + generator() % 3;
    // Each operand takes a random number of trailing dims, some set to 1.
    int a_rank = static_cast<int>(generator() % (rank + 1)), b_rank = static_cast<int>(generator() % (rank + 1));
    for (int i = rank - a_rank; i < rank; ++i) a_dims.push_back(generator() % 3 == 0 ? 1 : dims[static_cast<std::size_t>(i)]);
    for (int i = rank - b_rank; i < rank; ++i) b_dims.push_back(generator() % 3 == 0 ? 1 : dims[static_cast<std::size_t>(i)]);
    for (DType dtype : {DType::i32, DType::f32}) {
      Array a = make(dtype, Shape(a_dims)), b = make(dtype, Shape(b_dims));
      fill_random(a, generator(), wide);
      fill_random(b, generator(), wide);
      check_binary(binary_cases[0], dtype, a, b);  // add
      check_binary(binary_cases[5], dtype, a, b);  // maximum
    }
  }
}

TEST_F(ElementwiseBinary, ResultDoesNotDependOnThreadCount) {
  Array a = make(DType::f32, Shape{7, 150001}), b = make(DType::f32, Shape{7, 1});
  fill_random(a, 1, wide);
  fill_random(b, 2, wide);
  Array serial = make(DType::f32, a.shape), threaded = make(DType::f32, a.shape);
  kiln::runtime::set_thread_count(1);
  cpu::binary(Op::add, a, b, serial);
  kiln::runtime::set_thread_count(4);
  cpu::binary(Op::add, a, b, threaded);
  EXPECT_EQ(std::memcmp(serial.raw(), threaded.raw(), serial.bytes()), 0);
}

TEST_F(ElementwiseBinary, NanPropagationAndCompares) {
  for (DType dtype : floats) {
    kiln::visit_dtype(dtype, [&]<class T>() {
      if constexpr (std::is_floating_point_v<T>) {
        const T nan = std::numeric_limits<T>::quiet_NaN();
        Array a = make(dtype, Shape{3}), b = make(dtype, Shape{3});
        const T a_values[] = {nan, T(1), nan}, b_values[] = {T(1), nan, nan};
        std::memcpy(a.mutable_raw(), a_values, sizeof a_values);
        std::memcpy(b.mutable_raw(), b_values, sizeof b_values);
        Array out = make(dtype, Shape{3}), flags = make(DType::boolean, Shape{3});
        for (Op op : {Op::maximum, Op::minimum}) {
          cpu::binary(op, a, b, out);
          for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(out.data<T>()[i])) << kiln::ir::name(op) << " " << i;
        }
        for (Op op : {Op::eq, Op::ne, Op::lt, Op::le, Op::gt, Op::ge}) {
          cpu::binary(op, a, b, flags);
          for (int i = 0; i < 3; ++i) EXPECT_EQ(flags.data<std::uint8_t>()[i], op == Op::ne) << kiln::ir::name(op);
        }
      }
    });
  }
}

TEST_F(ElementwiseBinary, IntegerPowAndWraparound) {
  for (DType dtype : {DType::i32, DType::i64}) {
    Array base = make(dtype, Shape{8}), exponent = make(dtype, Shape{8}), out = make(dtype, Shape{8});
    const std::int64_t bases[] = {2, 1, -1, -1, 0, 3, 7, -2}, exponents[] = {-1, -5, -3, -4, -1, 40, 0, 63};
    kiln::visit_dtype(dtype, [&]<class T>() {
      for (int i = 0; i < 8; ++i) {
        base.mutable_data<T>()[i] = static_cast<T>(bases[i]);
        exponent.mutable_data<T>()[i] = static_cast<T>(exponents[i]);
      }
    });
    cpu::binary(Op::pow, base, exponent, out);
    const std::int64_t fixed[] = {0, 1, -1, 1, 0};
    for (int i = 0; i < 5; ++i) EXPECT_EQ(get_int(out, i), fixed[i]) << "pow(" << bases[i] << ", " << exponents[i] << ")";
    for (int i = 5; i < 8; ++i) EXPECT_EQ(get_int(out, i), integer_pow(bases[i], exponents[i], dtype)) << "wraps";
    kiln::visit_dtype(dtype, [&]<class T>() {
      base.mutable_data<T>()[0] = std::numeric_limits<T>::max();
      exponent.mutable_data<T>()[0] = 1;
    });
    cpu::binary(Op::add, base, exponent, out);
    EXPECT_EQ(get_int(out, 0), wrap(dtype, static_cast<std::uint64_t>(get_int(base, 0)) + 1));
  }
}

// ---- select -----------------------------------------------------------------------

TEST_F(ElementwiseSelect, EveryDtypeAndBroadcast) {
  const std::vector<std::array<Shape, 3>> shapes = {
      {Shape{}, Shape{}, Shape{}},          {Shape{7}, Shape{7}, Shape{7}},
      {Shape{1000003}, Shape{1000003}, Shape{1000003}}, {Shape{33}, Shape{}, Shape{33}},
      {Shape{}, Shape{33}, Shape{1}},       {Shape{3, 1}, Shape{1, 4}, Shape{4}},
      {Shape{4}, Shape{3, 1}, Shape{3, 1}}, {Shape{7, 40001}, Shape{7, 1}, Shape{40001}},
      {Shape{1}, Shape{0}, Shape{1}},       {Shape{2, 1, 3, 1, 2, 1, 1, 2}, Shape{1, 2, 1, 3, 1, 1, 2, 1}, Shape{2}},
  };
  std::uint32_t seed = 5000;
  for (DType dtype : all_dtypes) {
    for (const auto& shape_triple : shapes) {
      // Named copies, not structured bindings: Clang before 16 cannot capture those in the lambda below.
      const Shape c_shape = shape_triple[0], a_shape = shape_triple[1], b_shape = shape_triple[2];
      Array condition = make(DType::boolean, c_shape), a = make(dtype, a_shape), b = make(dtype, b_shape);
      fill_random(condition, seed++, {});
      fill_random(a, seed++, wide);
      fill_random(b, seed++, wide);
      Shape shape = broadcast(broadcast(c_shape, a_shape), b_shape);
      Array output = make(dtype, shape);
      cpu::select(condition, a, b, output);
      expect_elements(output,
                      [&](std::int64_t i) {
                        return get(condition, broadcast_index(c_shape, shape, i)) != 0
                                   ? get(a, broadcast_index(a_shape, shape, i))
                                   : get(b, broadcast_index(b_shape, shape, i));
                      },
                      exact, "where " + describe({&condition, &a, &b}));
    }
  }
}

// ---- cast -------------------------------------------------------------------------

// The documented cast semantics, from long double: to bool is != 0; float
// to integer truncates toward zero, saturates out of range, NaN gives 0;
// integer to integer wraps.
long double cast_reference(long double x, DType from, DType to) {
  if (to == DType::boolean) return x != 0;
  if (kiln::is_floating(to)) return x;  // rounding is checked by the 0-ulp comparison
  if (kiln::is_floating(from)) {
    if (std::isnan(x)) return 0;
    long double limit = to == DType::i32 ? 2147483648.0L : 9223372036854775808.0L;
    if (x >= limit) return limit - 1;
    if (x < -limit) return -limit;
    return std::trunc(x);
  }
  return static_cast<long double>(wrap(to, static_cast<std::uint64_t>(static_cast<std::int64_t>(x))));
}

TEST_F(ElementwiseCast, EveryPairMatchesReference) {
  std::uint32_t seed = 9000;
  for (DType from : all_dtypes) {
    for (DType to : all_dtypes) {
      for (const Shape& shape : same_shape_cases) {
        Array input = make(from, shape), output = make(to, shape);
        fill_random(input, seed++, {-3e9, 3e9});  // beyond i32 for wider types
        cpu::cast(input, output);
        expect_elements(output, [&](std::int64_t i) { return cast_reference(get(input, i), from, to); }, exact,
                        "cast " + describe({&input}) + " to " + std::string(kiln::to_string(to)));
      }
    }
  }
}

TEST_F(ElementwiseCast, FloatToIntegerEdgeCases) {
  const double values[] = {NAN, INFINITY, -INFINITY, 3e9, -3e9, 1e19, -1e19, 2.75, -2.75, -2147483648.0, 2147483520.0,
                           -0.0, 0.5};
  constexpr int count = sizeof values / sizeof values[0];
  for (DType from : floats) {
    for (DType to : {DType::i32, DType::i64, DType::boolean}) {
      Array input = make(from, Shape{count}), output = make(to, Shape{count});
      kiln::visit_dtype(from, [&]<class T>() {
        for (int i = 0; i < count; ++i) input.mutable_data<T>()[i] = static_cast<T>(values[i]);
      });
      cpu::cast(input, output);
      expect_elements(output, [&](std::int64_t i) { return cast_reference(get(input, i), from, to); }, exact,
                      "cast edge values " + describe({&input}) + " to " + std::string(kiln::to_string(to)));
    }
  }
}

// ---- fill and iota ----------------------------------------------------------------

TEST_F(ElementwiseFill, EveryDtype) {
  for (DType dtype : all_dtypes) {
    for (const Shape& shape : same_shape_cases) {
      kiln::ir::Attributes attributes;
      attributes.float_value = -2.5;
      attributes.int_value = -7;
      Array output = make(dtype, shape);
      cpu::fill(attributes, output);
      long double want = dtype == DType::boolean ? 1 : kiln::is_floating(dtype) ? -2.5L : -7;
      expect_elements(output, [&](std::int64_t) { return want; }, exact, "fill " + describe({&output}));
    }
  }
}

TEST_F(ElementwiseIota, EveryAxisAndDtype) {
  const std::vector<Shape> shapes = {Shape{1}, Shape{7}, Shape{3, 4, 5}, Shape{1000003}, Shape{2, 500001},
                                     Shape{500001, 2}, Shape{2, 0, 3}, Shape{1, 1, 1, 1, 1, 1, 1, 9}};
  for (DType dtype : numeric) {
    for (const Shape& shape : shapes) {
      for (int axis = 0; axis < shape.rank(); ++axis) {
        Array output = make(dtype, shape);
        cpu::iota(axis, output);
        auto strides = shape.strides();
        expect_elements(output,
                        [&](std::int64_t i) {
                          return static_cast<long double>(i / strides[static_cast<std::size_t>(axis)] % shape[axis]);
                        },
                        exact, "iota axis " + std::to_string(axis) + " " + describe({&output}));
      }
    }
  }
}

// ---- errors -------------------------------------------------------------------------

// The type rules keep these from reaching the kernels; if one does anyway,
// it is an InternalError, never a crash or a silent wrong result.
TEST_F(ElementwiseErrors, RejectWhatTheTypeRulesReject) {
  Array flags = make(DType::boolean, Shape{3}), ints = make(DType::i32, Shape{3});
  Array three = make(DType::f32, Shape{3}), four = make(DType::f32, Shape{4});
  EXPECT_THROW(cpu::unary(Op::sin, ints, ints), kiln::InternalError);
  EXPECT_THROW(cpu::unary(Op::neg, flags, flags), kiln::InternalError);
  EXPECT_THROW(cpu::unary(Op::neg, three, four), kiln::InternalError);
  EXPECT_THROW(cpu::binary(Op::div, ints, ints, ints), kiln::InternalError);
  EXPECT_THROW(cpu::binary(Op::add, flags, flags, flags), kiln::InternalError);
  EXPECT_THROW(cpu::binary(Op::logical_and, three, three, flags), kiln::InternalError);
  EXPECT_THROW(cpu::binary(Op::add, three, ints, three), kiln::InternalError);
  EXPECT_THROW(cpu::binary(Op::add, three, four, four), kiln::InternalError);  // [3] does not broadcast to [4]
  EXPECT_THROW(cpu::binary(Op::lt, three, three, three), kiln::InternalError);  // compare results are bool
  EXPECT_THROW(cpu::select(ints, three, three, three), kiln::InternalError);
  EXPECT_THROW(cpu::iota(0, flags), kiln::InternalError);
  EXPECT_THROW(cpu::iota(1, ints), kiln::InternalError);
}

}  // namespace
