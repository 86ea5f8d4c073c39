// vector_math_report: measures the accuracy and the speed of kiln's vector math
// (src/kernels/cpu/vector_math.h) against double-precision std:: functions, scalar
// float std:: functions and, on AVX-512 builds, glibc's libmvec 16-lane variants.
// The numbers go into docs/vector_math.md.
//
// Build (g++ >= 12 or clang++ >= 14; libmvec only with glibc and AVX-512):
//   g++ -std=c++20 -O3 -march=native -mprefer-vector-width=512 -Wall -Wextra -Werror
//       -I src tools/vector_math_report.cpp -o vector_math_report -lmvec -lm -pthread
// Run:
//   vector_math_report [--values-per-range N] [--exhaustive] [--no-speed] [--no-accuracy]
//                      [--only FUNCTION] [--ghz NOMINAL_CLOCK]
// --exhaustive additionally checks every float in an interval per function (see
// exhaustive_limit): about 2^31 values each, a few minutes per function on one core.
// The throughput table gives ns per element and cycles per vector of kLanes floats at
// the nominal clock (--ghz, default 2.1); the actual clock under vector FMA load is
// measured too (a dependent FMA chain) and printed, so cycles at it can be derived.

#include "kernels/cpu/vector_math.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace vm = kiln::vector_math;

#if defined(__AVX512F__) && defined(__GLIBC__) && !defined(KILN_REPORT_NO_LIBMVEC)
// glibc's libmvec AVX-512 entry points: what GCC calls for `#pragma omp simd` loops
// over sinf & co under -O3 -ffast-math -fopenmp-simd -march=native. Declared here
// directly so this file needs no -ffast-math.
extern "C" {
vm::f32v _ZGVeN16v_sinf(vm::f32v);
vm::f32v _ZGVeN16v_cosf(vm::f32v);
vm::f32v _ZGVeN16v_expf(vm::f32v);
vm::f32v _ZGVeN16v_logf(vm::f32v);
vm::f32v _ZGVeN16v_tanhf(vm::f32v);
vm::f32v _ZGVeN16v_erff(vm::f32v);
vm::f32v _ZGVeN16v_erfcf(vm::f32v);
}
#define KILN_REPORT_HAVE_LIBMVEC 1
#endif

namespace {

// kLanes lanes, pointer in, pointer out: vectors never cross a call that is not
// inlined (passing them by value where the registers are narrower than another build's
// draws -Wpsabi warnings).
using VectorFunction = void (*)(const float* in, float* out);
using ScalarFloatFunction = float (*)(float);
using ReferenceFunction = double (*)(double);

double reference_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

float std_sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

#ifdef KILN_REPORT_HAVE_LIBMVEC
// clang-format off
#define KILN_REPORT_LIBMVEC(CALL) [](const float* in, float* out) { const vm::f32v x = vm::load(in); vm::store(out, CALL); }
// clang-format on
#endif

struct Function {
  const char* name;
  VectorFunction vector;
  ScalarFloatFunction scalar_kiln;  // the scalar overload (used for single elements)
  ScalarFloatFunction scalar_std;
  ReferenceFunction reference;
  VectorFunction libmvec;  // null where none
  double ulp_bound;        // the contract in vector_math.h
};

std::vector<Function> functions() {
  // clang-format off
  auto v_sin = [](const float* in, float* out) { vm::store(out, vm::sin(vm::load(in))); };
  auto v_cos = [](const float* in, float* out) { vm::store(out, vm::cos(vm::load(in))); };
  auto v_exp = [](const float* in, float* out) { vm::store(out, vm::exp(vm::load(in))); };
  auto v_log = [](const float* in, float* out) { vm::store(out, vm::log(vm::load(in))); };
  auto v_tanh = [](const float* in, float* out) { vm::store(out, vm::tanh(vm::load(in))); };
  auto v_erf = [](const float* in, float* out) { vm::store(out, vm::erf(vm::load(in))); };
  auto v_erfc = [](const float* in, float* out) { vm::store(out, vm::erfc(vm::load(in))); };
  auto v_sigmoid = [](const float* in, float* out) { vm::store(out, vm::sigmoid(vm::load(in))); };
  // clang-format on
  auto k_sin = [](float x) { return vm::sin(x); };
  auto k_cos = [](float x) { return vm::cos(x); };
  auto k_exp = [](float x) { return vm::exp(x); };
  auto k_log = [](float x) { return vm::log(x); };
  auto k_tanh = [](float x) { return vm::tanh(x); };
  auto k_erf = [](float x) { return vm::erf(x); };
  auto k_erfc = [](float x) { return vm::erfc(x); };
  auto k_sigmoid = [](float x) { return vm::sigmoid(x); };
  auto s_sin = [](float x) { return std::sin(x); };
  auto s_cos = [](float x) { return std::cos(x); };
  auto s_exp = [](float x) { return std::exp(x); };
  auto s_log = [](float x) { return std::log(x); };
  auto s_tanh = [](float x) { return std::tanh(x); };
  auto s_erf = [](float x) { return std::erf(x); };
  auto s_erfc = [](float x) { return std::erfc(x); };
  auto r_sin = [](double x) { return std::sin(x); };
  auto r_cos = [](double x) { return std::cos(x); };
  auto r_exp = [](double x) { return std::exp(x); };
  auto r_log = [](double x) { return std::log(x); };
  auto r_tanh = [](double x) { return std::tanh(x); };
  auto r_erf = [](double x) { return std::erf(x); };
  auto r_erfc = [](double x) { return std::erfc(x); };
#ifdef KILN_REPORT_HAVE_LIBMVEC
  const VectorFunction m_sin = KILN_REPORT_LIBMVEC(_ZGVeN16v_sinf(x));
  const VectorFunction m_cos = KILN_REPORT_LIBMVEC(_ZGVeN16v_cosf(x));
  const VectorFunction m_exp = KILN_REPORT_LIBMVEC(_ZGVeN16v_expf(x));
  const VectorFunction m_log = KILN_REPORT_LIBMVEC(_ZGVeN16v_logf(x));
  const VectorFunction m_tanh = KILN_REPORT_LIBMVEC(_ZGVeN16v_tanhf(x));
  const VectorFunction m_erf = KILN_REPORT_LIBMVEC(_ZGVeN16v_erff(x));
  const VectorFunction m_erfc = KILN_REPORT_LIBMVEC(_ZGVeN16v_erfcf(x));
  // What GCC makes of 1 / (1 + expf(-x)) in a loop under -ffast-math.
  const VectorFunction m_sigmoid = KILN_REPORT_LIBMVEC(1.0f / (1.0f + _ZGVeN16v_expf(-x)));
#else
  const VectorFunction m_sin = nullptr, m_cos = nullptr, m_exp = nullptr, m_log = nullptr, m_tanh = nullptr,
                       m_erf = nullptr, m_erfc = nullptr, m_sigmoid = nullptr;
#endif
  return {
      {"sin", v_sin, k_sin, s_sin, r_sin, m_sin, 2},
      {"cos", v_cos, k_cos, s_cos, r_cos, m_cos, 2},
      {"exp", v_exp, k_exp, s_exp, r_exp, m_exp, 2},
      {"log", v_log, k_log, s_log, r_log, m_log, 2},
      {"tanh", v_tanh, k_tanh, s_tanh, r_tanh, m_tanh, 4},
      {"erf", v_erf, k_erf, s_erf, r_erf, m_erf, 4},
      {"erfc", v_erfc, k_erfc, s_erfc, r_erfc, m_erfc, 4},
      {"sigmoid", v_sigmoid, k_sigmoid, std_sigmoid, reference_sigmoid, m_sigmoid, 4},
  };
}

// Error of `got` in units of the last place of the float nearest to `want`
// (ULP = 2^(e-23) for want in [2^e, 2^(e+1)), 2^-149 in the denormal range).
// Infinite when NaN-ness, or an infinite expectation, does not match.
double ulp_error(float got, double want) {
  if (std::isnan(want) || std::isnan(got)) {
    return std::isnan(want) && std::isnan(got) ? 0.0 : std::numeric_limits<double>::infinity();
  }
  if (std::isinf(static_cast<float>(want)) || std::isinf(got)) {
    return static_cast<float>(want) == got ? 0.0 : std::numeric_limits<double>::infinity();
  }
  // ULP from the exponent field of the double (cheaper than frexp / ldexp, which
  // matters for the exhaustive sweeps).
  std::uint64_t bits;
  std::memcpy(&bits, &want, sizeof bits);
  const int exponent = std::max(static_cast<int>((bits >> 52) & 0x7ff) - 1023, -126);
  const std::uint64_t ulp_bits = static_cast<std::uint64_t>(exponent - 23 + 1023) << 52;
  double ulp;
  std::memcpy(&ulp, &ulp_bits, sizeof ulp);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

// Accumulates the worst error of one function over a set of inputs.
struct Worst {
  double ulp = 0;
  float input = 0;
  float got = 0;
  double want = 0;
  double max_absolute = 0;  // largest |got - want| where |want| < 2^-20
  std::uint64_t count = 0;
  void merge(const Worst& other) {
    if (other.ulp > ulp) {
      ulp = other.ulp;
      input = other.input;
      got = other.got;
      want = other.want;
    }
    max_absolute = std::max(max_absolute, other.max_absolute);
    count += other.count;
  }
};

void check_block(const Function& function, const float* inputs, int count, Worst& worst, bool libmvec) {
  float x[vm::kLanes] = {}, y[vm::kLanes];
  std::memcpy(x, inputs, sizeof(float) * static_cast<std::size_t>(count));
  (libmvec ? function.libmvec : function.vector)(x, y);
  for (int lane = 0; lane < count; ++lane) {
    const double want = function.reference(static_cast<double>(inputs[lane]));
    const double error = ulp_error(y[lane], want);
    if (error > worst.ulp || std::isnan(error)) {
      worst.ulp = std::isnan(error) ? std::numeric_limits<double>::infinity() : error;
      worst.input = inputs[lane];
      worst.got = y[lane];
      worst.want = want;
    }
    if (std::fabs(want) < 0x1p-20) {
      worst.max_absolute = std::max(worst.max_absolute, std::fabs(y[lane] - want));
    }
  }
  worst.count += static_cast<std::uint64_t>(count);
}

struct Rng {  // splitmix64: deterministic and fast
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1p-53; }
};

// A set of random inputs: uniform in [low, high], or (low > high) every finite float
// bit pattern with equal probability (log-uniform across the float range, both signs,
// denormals included).
struct Range {
  const char* label;
  double low, high;
  float draw(Rng& rng) const {
    if (low > high) {
      for (;;) {
        const auto bits = static_cast<std::uint32_t>(rng.next());
        if ((bits & 0x7f800000u) != 0x7f800000u) {
          float value;
          std::memcpy(&value, &bits, sizeof value);
          return value;
        }
      }
    }
    return static_cast<float>(low + (high - low) * rng.uniform());
  }
};

constexpr double kAllFloats = 1;  // marker: low > high means "all finite floats"

std::vector<Range> ranges_for(const std::string& name) {
  const Range all{"all finite floats", kAllFloats, 0};
  if (name == "sin" || name == "cos") {
    return {{"[-pi, pi]", -3.14159265358979, 3.14159265358979},
            {"[-100, 100]", -100, 100},
            {"[-1e5, 1e5]", -1e5, 1e5},
            all};
  }
  if (name == "exp") return {{"[-1, 1]", -1, 1}, {"[-104, 89]", -104, 89}, all};
  if (name == "log") return {{"(0, 2]", 0, 2}, {"[0, 1e6]", 0, 1e6}, all};
  if (name == "tanh") return {{"[-1, 1]", -1, 1}, {"[-10, 10]", -10, 10}, all};
  if (name == "erf") return {{"[-1, 1]", -1, 1}, {"[-5, 5]", -5, 5}, all};
  if (name == "erfc") return {{"[-1, 1]", -1, 1}, {"[1, 10.1]", 1, 10.1}, {"[-12, 12]", -12, 12}, all};
  return {{"[-20, 20]", -20, 20}, {"[-110, 90]", -110, 90}, all};  // sigmoid
}

unsigned thread_count() { return std::max(1u, std::thread::hardware_concurrency()); }

Worst sweep_random(const Function& function, const Range& range, std::uint64_t values, bool libmvec) {
  const unsigned threads = thread_count();
  std::vector<Worst> worst(threads);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      Rng rng{0x5eed0000u + t * 7919u + std::hash<std::string>{}(range.label)};
      float block[vm::kLanes];
      for (std::uint64_t done = t * vm::kLanes; done < values; done += threads * vm::kLanes) {
        for (float& value : block) value = range.draw(rng);
        check_block(function, block, vm::kLanes, worst[t], libmvec);
      }
    });
  }
  for (auto& thread : pool) thread.join();
  Worst total;
  for (const auto& w : worst) total.merge(w);
  return total;
}

// Every float whose bit pattern lies in [first, last] (inclusive), both signs when
// `both_signs`.
Worst sweep_bits(const Function& function, std::uint32_t first, std::uint32_t last, bool both_signs) {
  const unsigned threads = thread_count();
  std::vector<Worst> worst(threads);
  std::vector<std::thread> pool;
  const std::uint64_t total = static_cast<std::uint64_t>(last) - first + 1;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const std::uint64_t begin = first + total * t / threads;
      const std::uint64_t end = first + total * (t + 1) / threads;
      float block[vm::kLanes];
      for (std::uint64_t bits = begin; bits < end; bits += vm::kLanes) {
        const int count = static_cast<int>(std::min<std::uint64_t>(vm::kLanes, end - bits));
        for (int sign = 0; sign < (both_signs ? 2 : 1); ++sign) {
          for (int lane = 0; lane < count; ++lane) {
            const auto pattern =
                static_cast<std::uint32_t>(bits + static_cast<std::uint64_t>(lane)) | (sign ? 0x80000000u : 0u);
            std::memcpy(&block[lane], &pattern, sizeof(float));
          }
          check_block(function, block, count, worst[t], false);
        }
      }
    });
  }
  for (auto& thread : pool) thread.join();
  Worst result;
  for (const auto& w : worst) result.merge(w);
  return result;
}

std::uint32_t bits_of(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

void print_worst(const char* name, const char* what, const Worst& worst, double seconds) {
  std::printf("  %-8s %-34s max %8.3f ulp at x=%-15.9g (got %.9g, want %.9g)", name, what, worst.ulp,
              static_cast<double>(worst.input), static_cast<double>(worst.got), worst.want);
  if (worst.max_absolute > 0) std::printf("  max abs err near 0: %.3g", worst.max_absolute);
  std::printf("  [%llu values, %.1f s]\n", static_cast<unsigned long long>(worst.count), seconds);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The interval swept exhaustively: sin / cos on [-1e5, 1e5] (fast path and the start of
// the slow one); exp and sigmoid up to their clamps; tanh, erf and erfc past saturation
// (erfc's underflow); log on every positive float.
float exhaustive_limit(const std::string& name) {
  if (name == "sin" || name == "cos") return 1e5f;
  if (name == "exp" || name == "sigmoid") return 104.0f;
  if (name == "tanh") return 10.0f;
  if (name == "erf") return 4.0f;
  if (name == "erfc") return 10.1f;
  return std::numeric_limits<float>::max();  // log
}

int report_accuracy(std::uint64_t values_per_range, bool exhaustive, const std::string& only) {
  int failures = 0;
  std::printf(
      "Accuracy: max error in ULP of the float result, against double std:: "
      "(%llu random values per range)\n",
      static_cast<unsigned long long>(values_per_range));
  for (const Function& function : functions()) {
    if (!only.empty() && only != function.name) continue;
    Worst overall;
    for (const Range& range : ranges_for(function.name)) {
      auto start = std::chrono::steady_clock::now();
      const Worst worst = sweep_random(function, range, values_per_range, false);
      print_worst(function.name, range.label, worst, seconds_since(start));
      overall.merge(worst);
      if (function.libmvec) {
        start = std::chrono::steady_clock::now();
        const Worst libmvec = sweep_random(function, range, values_per_range, true);
        std::string label = std::string("libmvec ") + range.label;
        print_worst(function.name, label.c_str(), libmvec, seconds_since(start));
      }
    }
    if (exhaustive) {
      // Every float where the function is not saturated or clamped (outside, results
      // are exact constants, covered by the random sweep over all floats and the tests).
      const float limit = exhaustive_limit(function.name);
      const auto start = std::chrono::steady_clock::now();
      const bool positive_only = std::string(function.name) == "log";
      const Worst worst = sweep_bits(function, 0, bits_of(limit), !positive_only);
      char label[64];
      std::snprintf(label, sizeof label, "every float in [%s%g, %g]", positive_only ? "" : "-",
                    static_cast<double>(positive_only ? 0.0f : limit), static_cast<double>(limit));
      print_worst(function.name, label, worst, seconds_since(start));
      overall.merge(worst);
    }
    const bool ok = overall.ulp <= function.ulp_bound;
    std::printf("  %-8s overall max %.3f ulp (bound %.0f): %s\n", function.name, overall.ulp, function.ulp_bound,
                ok ? "ok" : "FAIL");
    failures += ok ? 0 : 1;
  }
  return failures;
}

// ---- throughput --------------------------------------------------------------------

// Times the bodies in turn, repetition after repetition, so that all of them see the
// same machine load (this machine is shared), and returns each one's median.
std::vector<double> interleaved_median_ns(std::size_t elements, int repetitions,
                                          const std::vector<std::function<void()>>& bodies) {
  std::vector<std::vector<double>> times(bodies.size());
  for (const auto& body : bodies) body();  // warm up (page faults, caches, frequency)
  for (int rep = 0; rep < repetitions; ++rep) {
    for (std::size_t b = 0; b < bodies.size(); ++b) {
      const auto start = std::chrono::steady_clock::now();
      bodies[b]();
      times[b].push_back(seconds_since(start) * 1e9 / static_cast<double>(elements));
    }
  }
  std::vector<double> medians;
  for (auto& t : times) {
    std::sort(t.begin(), t.end());
    medians.push_back(t[t.size() / 2]);
  }
  return medians;
}

// The kiln loops are written out per function (lambdas, not function pointers) so the
// compiler inlines the math into the loop, as kernels and generated code do.
template <typename F>
void run_inline(F function, const float* in, float* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + vm::kLanes <= n; i += vm::kLanes) function(in + i, out + i);
  if (i < n) {
    float tail_in[vm::kLanes] = {}, tail_out[vm::kLanes];
    std::memcpy(tail_in, in + i, sizeof(float) * (n - i));
    function(tail_in, tail_out);
    std::memcpy(out + i, tail_out, sizeof(float) * (n - i));
  }
}

// clang-format off
#define KILN_REPORT_RUN(NAME) \
  if (name == #NAME) run_inline([](const float* x, float* y) { vm::store(y, vm::NAME(vm::load(x))); }, in, out, n)
// clang-format on

#ifdef KILN_REPORT_HAVE_LIBMVEC
// As GCC's `#pragma omp simd` loops call libmvec: one call per 16 elements.
// clang-format off
#define KILN_REPORT_RUN_LIBMVEC(NAME, CALL) \
  if (name == #NAME) run_inline([](const float* in, float* out) { const vm::f32v x = vm::load(in); vm::store(out, CALL); }, in, out, n)
// clang-format on
void run_libmvec(const std::string& name, const float* in, float* out, std::size_t n) {
  KILN_REPORT_RUN_LIBMVEC(sin, _ZGVeN16v_sinf(x));
  KILN_REPORT_RUN_LIBMVEC(cos, _ZGVeN16v_cosf(x));
  KILN_REPORT_RUN_LIBMVEC(exp, _ZGVeN16v_expf(x));
  KILN_REPORT_RUN_LIBMVEC(log, _ZGVeN16v_logf(x));
  KILN_REPORT_RUN_LIBMVEC(tanh, _ZGVeN16v_tanhf(x));
  KILN_REPORT_RUN_LIBMVEC(erf, _ZGVeN16v_erff(x));
  KILN_REPORT_RUN_LIBMVEC(erfc, _ZGVeN16v_erfcf(x));
  KILN_REPORT_RUN_LIBMVEC(sigmoid, 1.0f / (1.0f + _ZGVeN16v_expf(-x)));
}
#else
void run_libmvec(const std::string&, const float*, float*, std::size_t) {}
#endif

void run_kiln(const std::string& name, const float* in, float* out, std::size_t n) {
  KILN_REPORT_RUN(sin);
  KILN_REPORT_RUN(cos);
  KILN_REPORT_RUN(exp);
  KILN_REPORT_RUN(log);
  KILN_REPORT_RUN(tanh);
  KILN_REPORT_RUN(erf);
  KILN_REPORT_RUN(erfc);
  KILN_REPORT_RUN(sigmoid);
}

// The clock while running vector FMAs: a dependent chain of vfmadd (4 cycles each on
// the cores this was written for; elsewhere a rough figure), median of short runs.
double measured_clock_ghz() {
  std::vector<double> ghz;
  for (int rep = 0; rep < 301; ++rep) {
    vm::f32v a = vm::broadcast(1.0f);
    const vm::f32v b = vm::broadcast(0.999f), c = vm::broadcast(1e-3f);
    const int steps = 20000;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) {
      a = vm::fma(a, b, c);
#if defined(__x86_64__) || defined(__i386__)
      asm volatile("" : "+v"(a));
#else  // the chain goes through memory (a rough figure)
      asm volatile("" : "+m"(a));
#endif
    }
    ghz.push_back(steps * 4.0 / seconds_since(start) / 1e9);
  }
  std::sort(ghz.begin(), ghz.end());
  return ghz[ghz.size() / 2];
}

void report_speed(const std::string& only, double nominal_ghz) {
  std::printf(
      "\nThroughput, one thread, ns per element (median of repetitions, the columns timed in turn); "
      "input uniform in the function's typical range\n"
      "c/vec: cycles per vector of %d floats at the nominal %.2f GHz (ns per element x %d x GHz); "
      "measured clock under vector FMA load: %.2f GHz\n",
      vm::kLanes, nominal_ghz, vm::kLanes, measured_clock_ghz());
  std::printf("  %-8s %10s %12s %12s %9s %9s %12s %12s %10s\n", "function", "elements", "kiln vector", "libmvec",
              "kiln c/vec", "mvec c/vec", "kiln scalar", "std:: float", "copy");
  for (const std::size_t n : {std::size_t{16} << 10, std::size_t{16} << 20}) {
    std::vector<float> in(n), out(n);
    const int repetitions = n > 100000 ? 9 : 301;
    for (const Function& function : functions()) {
      const std::string name = function.name;
      if (!only.empty() && only != name) continue;
      Rng rng{42};
      const double low = name == "log" ? 1e-3 : (name == "exp" ? -80 : -10);
      const double high = name == "log" ? 1e3 : (name == "exp" ? 80 : 10);
      for (auto& value : in) value = static_cast<float>(low + (high - low) * rng.uniform());
      const float* x = in.data();
      float* y = out.data();
      std::vector<std::function<void()>> bodies = {
          [&] { run_kiln(name, x, y, n); },
          [&] { run_libmvec(name, x, y, n); },
          [&] {
            for (std::size_t i = 0; i < n; ++i) y[i] = function.scalar_kiln(x[i]);
          },
          [&] {
            for (std::size_t i = 0; i < n; ++i) y[i] = function.scalar_std(x[i]);
          },
          [&] { std::memcpy(y, x, n * sizeof(float)); },
      };
      for (auto& body : bodies) {
        body = [body, y] {
          body();
          asm volatile("" ::"r"(y) : "memory");  // keep the stores
        };
      }
      const std::vector<double> ns = interleaved_median_ns(n, repetitions, bodies);
      const double kiln = ns[0], kiln_scalar = ns[2], scalar = ns[3], copy = ns[4];
      const double libmvec = function.libmvec ? ns[1] : std::numeric_limits<double>::quiet_NaN();
      std::printf("  %-8s %10zu %12.3f %12.3f %9.2f %9.2f %12.3f %12.3f %10.3f\n", function.name, n, kiln, libmvec,
                  kiln * vm::kLanes * nominal_ghz, libmvec * vm::kLanes * nominal_ghz, kiln_scalar, scalar, copy);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress is visible when redirected
  std::uint64_t values_per_range = std::uint64_t{1} << 24;
  bool exhaustive = false, speed = true, accuracy = true;
  std::string only;
  double nominal_ghz = 2.1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--values-per-range" && i + 1 < argc) {
      values_per_range = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--exhaustive") {
      exhaustive = true;
    } else if (arg == "--no-speed") {
      speed = false;
    } else if (arg == "--no-accuracy") {
      accuracy = false;
    } else if (arg == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (arg == "--ghz" && i + 1 < argc) {
      nominal_ghz = std::strtod(argv[++i], nullptr);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--values-per-range N] [--exhaustive] [--no-speed] "
                   "[--no-accuracy] [--only FUNCTION] [--ghz NOMINAL_CLOCK]\n",
                   argv[0]);
      return 2;
    }
  }
  std::printf(
      "kiln vector_math report: %u threads for accuracy sweeps, hardware FMA: %s, "
      "AVX-512: %s, libmvec: %s\n",
      thread_count(), vm::kHardwareFma ? "yes" : "no",
#ifdef __AVX512F__
      "yes",
#else
      "no",
#endif
#ifdef KILN_REPORT_HAVE_LIBMVEC
      "yes"
#else
      "no"
#endif
  );
  int failures = 0;
  if (accuracy) failures = report_accuracy(values_per_range, exhaustive, only);
  if (speed) report_speed(only, nominal_ghz);
  return failures == 0 ? 0 : 1;
}
