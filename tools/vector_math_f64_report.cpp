// vector_math_f64_report: accuracy and speed of src/kernels/cpu/vector_math_f64.h, the
// figures of docs/vector_math.md's "Double precision" section.
//
//   vector_math_f64_report [--values-per-range N]
//
// Accuracy: the largest error, in ULPs of the double result, against glibc's long double
// functions (x86's 64-bit significand) over N random values (default 2^20) in each of a
// few ranges per function. Speed: ns per element on one core, in cache (a 4 MiB
// buffer, evaluated a vector at a time), for kiln's functions and glibc's scalar double ones.

#include "kernels/cpu/vector_math_f64.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

namespace vm = kiln::vector_math;

struct Function {
  const char* name;
  void (*kiln)(const double* in, double* out);  // vm::kLanes values
  double (*glibc)(double);
  long double (*reference)(long double);
  std::vector<std::pair<double, double>> ranges;  // uniform; {0, 0}: every finite double alike
};

// clang-format off
#define KILN_REPORT_FUNCTION(NAME, GLIBC, REFERENCE, ...)                                   \
  Function{#NAME, [](const double* in, double* out) { vm::store(out, vm::NAME(vm::load(in))); }, \
           GLIBC, REFERENCE, __VA_ARGS__}
// clang-format on

std::vector<Function> functions() {
  return {
      KILN_REPORT_FUNCTION(
          exp, [](double x) { return std::exp(x); }, [](long double x) { return expl(x); },
          {{-746, 710}, {-1, 1}, {0, 0}}),
      KILN_REPORT_FUNCTION(
          log, [](double x) { return std::log(x); }, [](long double x) { return logl(x); }, {{0, 4}, {0.5, 2}, {0, 0}}),
      KILN_REPORT_FUNCTION(
          sin, [](double x) { return std::sin(x); }, [](long double x) { return sinl(x); },
          {{-10, 10}, {-5e5, 5e5}, {0, 0}}),
      KILN_REPORT_FUNCTION(
          cos, [](double x) { return std::cos(x); }, [](long double x) { return cosl(x); },
          {{-10, 10}, {-5e5, 5e5}, {0, 0}}),
      KILN_REPORT_FUNCTION(
          tanh, [](double x) { return std::tanh(x); }, [](long double x) { return tanhl(x); },
          {{-25, 25}, {-1, 1}, {0, 0}}),
      KILN_REPORT_FUNCTION(
          erf, [](double x) { return std::erf(x); }, [](long double x) { return erfl(x); },
          {{-7, 7}, {0.5, 2}, {0, 0}}),
      KILN_REPORT_FUNCTION(
          erfc, [](double x) { return std::erfc(x); }, [](long double x) { return erfcl(x); },
          {{-30, 30}, {0.5, 1.5}, {1, 27.5}, {0, 0}}),
      KILN_REPORT_FUNCTION(
          sigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }, [](long double x) { return 1 / (1 + expl(-x)); },
          {{-40, 40}, {-760, -600}, {0, 0}}),
  };
}
#undef KILN_REPORT_FUNCTION

double ulp_error(double got, long double want) {
  const double rounded = static_cast<double>(want);
  if (std::isnan(rounded) || std::isnan(got)) return std::isnan(rounded) && std::isnan(got) ? 0 : HUGE_VAL;
  if (std::isinf(rounded) || std::isinf(got)) return rounded == got ? 0 : HUGE_VAL;
  int exponent = 0;
  std::frexp(rounded, &exponent);
  const long double ulp = std::ldexp(1.0L, std::max(exponent - 1, -1022) - 52);
  return static_cast<double>(std::fabs(static_cast<long double>(got) - want) / ulp);
}

struct Rng {  // splitmix64
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

std::vector<double> values(std::pair<double, double> range, int count, std::uint64_t seed) {
  Rng rng{seed};
  std::vector<double> result;
  while (result.size() < static_cast<std::size_t>(count)) {
    const std::uint64_t bits = rng.next();
    double value;
    if (range.first == range.second) {
      std::memcpy(&value, &bits, sizeof value);
      if (!std::isfinite(value)) continue;
    } else {
      value = range.first + (range.second - range.first) * static_cast<double>(bits >> 11) * 0x1p-53;
    }
    result.push_back(value);
  }
  return result;
}

void report_accuracy(const Function& function, int count) {
  for (const auto& range : function.ranges) {
    const std::vector<double> in = values(range, count - count % vm::kLanes, 17);
    std::vector<double> out(in.size());
    for (std::size_t i = 0; i < in.size(); i += vm::kLanes) function.kiln(in.data() + i, out.data() + i);
    double worst = 0, worst_input = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const double error = ulp_error(out[i], function.reference(in[i]));
      if (!(error <= worst)) {
        worst = error;
        worst_input = in[i];
      }
    }
    const std::string where = range.first == range.second
                                  ? std::string("all finite doubles")
                                  : "[" + std::to_string(range.first) + ", " + std::to_string(range.second) + "]";
    std::printf("%-8s %-30s max %.3f ULP (x = %.17g)\n", function.name, where.c_str(), worst, worst_input);
  }
}

template <class Call>
double ns_per_element(Call call, std::size_t count) {
  std::vector<double> times;
  for (int round = 0; round < 7; ++round) {
    const auto start = std::chrono::steady_clock::now();
    call();
    times.push_back(std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
                    static_cast<double>(count));
  }
  std::sort(times.begin(), times.end());
  return times[3];
}

void report_speed(const Function& function) {
  constexpr std::size_t count = std::size_t{1} << 19;  // 4 MiB of doubles: in L2 and L3
  std::vector<double> in = values(function.ranges.front(), count, 23), out(count);
  if (std::string(function.name) == "log") {
    for (double& value : in) value = std::fabs(value) + 1e-3;
  }
  const double kiln = ns_per_element(
      [&] {
        for (std::size_t i = 0; i < count; i += vm::kLanes) function.kiln(in.data() + i, out.data() + i);
      },
      count);
  const double glibc = ns_per_element(
      [&] {
        for (std::size_t i = 0; i < count; ++i) out[i] = function.glibc(in[i]);
      },
      count);
  std::printf("%-8s kiln %.2f ns per element, glibc %.2f (%.1fx)\n", function.name, kiln, glibc, glibc / kiln);
}

}  // namespace

int main(int argc, char** argv) {
  int count = 1 << 20;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--values-per-range" && i + 1 < argc) {
      count = std::max(vm::kLanes, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--values-per-range N]\n", argv[0]);
      return 2;
    }
  }
  std::printf("accuracy against long double, %d values per range (%s)\n", count,
              vm::kHardwareFma ? "hardware FMA" : "no FMA");
  for (const Function& function : functions()) report_accuracy(function, count);
  std::printf("\nspeed on one core, in cache\n");
  for (const Function& function : functions()) report_speed(function);
}
