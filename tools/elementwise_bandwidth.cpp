// elementwise_bandwidth: how close the CPU elementwise kernels come to the
// memory-bandwidth floor (see BENCHMARKING.md).
//
// For 16M f32 elements (64 MiB per operand) it times the standard kernels
// (unary neg/exp/tanh/sin/sigmoid/relu/sign/abs/round, add, maximum, mul, lt,
// add with a broadcast column [4096,4096]+[4096,1] and row
// [4096,4096]+[4096], where) against a
// streaming copy moving the same number of bytes, once with plain stores and
// once with non-temporal stores. Each op's floor is
//   floor = (bytes read + bytes written) / best copy bandwidth
// at the op's footprint. The machine is shared and noisy, so the op and both
// copies are timed in turn, round after round (after warm-up rounds), and the
// table shows medians over the rounds: times, and time / floor computed
// within each round. Results are checked before timing.
//
// The "chained" rows run in the op-by-op pattern of the standard executor:
// each call reads the previous call's output (out -> out2 -> out ...), and
// so do their copies (each timed call reads what the same kind of call
// wrote). That is where non-temporal stores lose: the next op fetches
// their output from DRAM instead of the L3.
//
// Usage: elementwise_bandwidth [rounds]   (default 15; threads: KILN_NUM_THREADS)

#include "kernels/cpu/cpu_kernels.h"
#include "runtime/buffer.h"
#include "runtime/parallel.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

using kiln::DType;
using kiln::Shape;
using kiln::ir::Op;
using kiln::runtime::Array;
namespace cpu = kiln::kernels::cpu;

constexpr std::int64_t rows = 4096, columns = 4096, elements = rows * columns;  // 16M
constexpr int warm_up_rounds = 3;
int timed_rounds = 15;

double seconds(const std::function<void()>& body) {
  auto start = std::chrono::steady_clock::now();
  body();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Copies `bytes` (a multiple of 64) on all threads, one 64-byte line at a
// time, with plain or streaming (non-temporal) stores: AVX-512 where the
// build targets it, SSE2 otherwise.
void copy(const void* source, void* destination, std::int64_t bytes, bool non_temporal) {
  const auto* in = static_cast<const char*>(source);
  auto* out = static_cast<char*>(destination);
  kiln::runtime::parallel_for(bytes / 64, 4096, [&](std::int64_t begin, std::int64_t end) {
#if defined(__AVX512F__)
    if (non_temporal) {
      for (std::int64_t i = begin; i < end; ++i)
        _mm512_stream_si512(reinterpret_cast<__m512i*>(out + i * 64), _mm512_load_si512(in + i * 64));
    } else {
      for (std::int64_t i = begin; i < end; ++i)
        _mm512_store_si512(reinterpret_cast<__m512i*>(out + i * 64), _mm512_load_si512(in + i * 64));
    }
#else
    for (std::int64_t i = begin * 4; i < end * 4; ++i) {
      __m128i value = _mm_load_si128(reinterpret_cast<const __m128i*>(in) + i);
      if (non_temporal) _mm_stream_si128(reinterpret_cast<__m128i*>(out) + i, value);
      else _mm_store_si128(reinterpret_cast<__m128i*>(out) + i, value);
    }
#endif
    if (non_temporal) _mm_sfence();
  });
}

Array random_array(DType dtype, const Shape& shape, unsigned seed) {
  Array array = kiln::runtime::allocate_array(dtype, shape);
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(0.5f, 2.0f);
  std::int64_t count = shape.numel();
  if (dtype == DType::boolean) {
    for (std::int64_t i = 0; i < count; ++i) array.mutable_data<std::uint8_t>()[i] = generator() & 1;
  } else {
    for (std::int64_t i = 0; i < count; ++i)
      array.mutable_data<float>()[i] = (generator() & 1 ? 1.0f : -1.0f) * uniform(generator);
  }
  return array;
}

struct Row {
  std::string name;
  double bytes;  // read + written by the op
  double op_seconds, plain_copy_seconds, non_temporal_copy_seconds;  // medians
  double ratio;                                                      // median of op time / floor
};

// Times `op` against the two copies, in turn, round after round. `copy_step`
// runs one copy (the argument says non-temporal) of `copy_bytes` bytes.
// `chained`: each timed call is preceded by an untimed call of the same
// kind, so that it reads an output written the way it writes its own.
Row measure(const std::string& name, double bytes, double copy_bytes, const std::function<void()>& op,
            const std::function<void(bool)>& copy_step, bool chained = false) {
  for (int round = 0; round < warm_up_rounds; ++round) {
    copy_step(false);
    copy_step(true);
    op();
  }
  auto timed = [&](const std::function<void()>& body) {
    if (chained) body();
    return seconds(body);
  };
  std::vector<double> op_times, plain_times, non_temporal_times, ratios;
  for (int round = 0; round < timed_rounds; ++round) {
    plain_times.push_back(timed([&] { copy_step(false); }));
    non_temporal_times.push_back(timed([&] { copy_step(true); }));
    op_times.push_back(timed(op));
    double floor = std::min(plain_times.back(), non_temporal_times.back()) * bytes / copy_bytes;
    ratios.push_back(op_times.back() / floor);
  }
  return {name, bytes, median(op_times), median(plain_times), median(non_temporal_times), median(ratios)};
}

// A copy source and destination per footprint, reused by every op of that footprint.
struct CopyBuffers {
  std::shared_ptr<kiln::runtime::Buffer> source, destination;
  std::int64_t bytes = 0;  // copied: half the bytes moved
};
std::map<std::int64_t, CopyBuffers> copy_buffers;

const CopyBuffers& copy_buffers_for(double bytes_moved) {
  auto key = static_cast<std::int64_t>(bytes_moved);
  auto found = copy_buffers.find(key);
  if (found != copy_buffers.end()) return found->second;
  CopyBuffers buffers;
  buffers.bytes = key / 2 / 64 * 64;
  buffers.source = kiln::runtime::allocate(kiln::Device::cpu(), static_cast<std::size_t>(buffers.bytes));
  buffers.destination = kiln::runtime::allocate(kiln::Device::cpu(), static_cast<std::size_t>(buffers.bytes));
  std::fill_n(static_cast<char*>(buffers.source->data()), buffers.bytes, 1);
  std::fill_n(static_cast<char*>(buffers.destination->data()), buffers.bytes, 2);
  return copy_buffers.emplace(key, std::move(buffers)).first->second;
}

// An op that reads its inputs and writes one output: the copy floor moves
// the same bytes between two buffers of its own.
Row measure_op(const std::string& name, double bytes, const std::function<void()>& op) {
  const CopyBuffers& buffers = copy_buffers_for(bytes);
  return measure(name, bytes, 2.0 * buffers.bytes, op, [&](bool non_temporal) {
    copy(buffers.source->data(), buffers.destination->data(), buffers.bytes, non_temporal);
  });
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "elementwise_bandwidth: wrong result: %s\n", what.c_str());
  std::exit(1);
}

// Checks every 997th element of a float result against `expected`.
void check(const std::string& name, const Array& output, const std::function<double(std::int64_t)>& expected,
           double tolerance) {
  for (std::int64_t i = 0; i < output.shape.numel(); i += 997) {
    double got = output.dtype == DType::boolean ? output.data<std::uint8_t>()[i] : output.data<float>()[i];
    double want = expected(i);
    if (!(std::abs(got - want) <= tolerance * std::max(1.0, std::abs(want))))
      fail(name + " element " + std::to_string(i) + ": " + std::to_string(got) + " vs " + std::to_string(want));
  }
}

void print(const Row& row) {
  std::printf("%-34s %9.0f %9.3f %8.1f %9.1f %8.1f %7.2f\n", row.name.c_str(), row.bytes / (1 << 20),
              row.op_seconds * 1e3, row.bytes / row.op_seconds / 1e9, row.bytes / row.plain_copy_seconds / 1e9,
              row.bytes / row.non_temporal_copy_seconds / 1e9, row.ratio);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) timed_rounds = std::max(1, std::atoi(argv[1]));
  const Shape matrix{rows, columns};
  Array x = random_array(DType::f32, matrix, 1);
  Array y = random_array(DType::f32, matrix, 2);
  Array column = random_array(DType::f32, Shape{rows, 1}, 3);
  Array row = random_array(DType::f32, Shape{columns}, 4);
  Array condition = random_array(DType::boolean, matrix, 5);
  Array out = kiln::runtime::allocate_array(DType::f32, matrix);
  Array out2 = kiln::runtime::allocate_array(DType::f32, matrix);
  Array flags = kiln::runtime::allocate_array(DType::boolean, matrix);
  const float* xs = x.data<float>();
  const float* ys = y.data<float>();
  const double f32_bytes = 4.0 * elements;

  std::printf("elementwise_bandwidth: f32, %lld elements (64 MiB per operand), %d threads, median of %d rounds\n\n",
              static_cast<long long>(elements), kiln::runtime::thread_count(), timed_rounds);
  std::printf("%-34s %9s %9s %8s %9s %8s %7s\n", "op", "MiB moved", "time ms", "GB/s", "copy GB/s", "NT GB/s",
              "/floor");

  auto unary = [&](Op op, double (*reference)(double), double tolerance) {
    std::string name(kiln::ir::name(op));
    cpu::unary(op, x, out);
    check(name, out, [&](std::int64_t i) { return reference(xs[i]); }, tolerance);
    print(measure_op(name, 2 * f32_bytes, [&] { cpu::unary(op, x, out); }));
  };
  unary(Op::neg, [](double v) { return -v; }, 0);
  unary(Op::exp, [](double v) { return std::exp(v); }, 1e-6);
  unary(Op::tanh, [](double v) { return std::tanh(v); }, 1e-6);
  unary(Op::sin, [](double v) { return std::sin(v); }, 1e-6);
  unary(Op::sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }, 1e-6);
  // Ops whose loops are their scalar meaning (kernels/scalar_ops.h), which GCC must vectorize to stay at the floor.
  unary(Op::relu, [](double v) { return v <= 0 ? 0.0 : v; }, 0);
  unary(Op::sign, [](double v) { return v > 0 ? 1.0 : v < 0 ? -1.0 : v; }, 0);
  unary(Op::abs, [](double v) { return std::fabs(v); }, 0);
  unary(Op::round, [](double v) { return std::nearbyint(v); }, 0);

  auto binary = [&](Op op, DType result, double (*reference)(double, double)) {
    std::string name(kiln::ir::name(op));
    Array& output = result == DType::boolean ? flags : out;
    cpu::binary(op, x, y, output);
    check(name, output, [&](std::int64_t i) { return reference(xs[i], ys[i]); }, 1e-7);
    const double bytes = (result == DType::boolean ? 2.25 : 3.0) * f32_bytes;  // a bool is a quarter of a float
    print(measure_op(name, bytes, [&] { cpu::binary(op, x, y, output); }));
  };
  binary(Op::maximum, DType::f32, [](double a, double b) { return a > b ? a : b; });
  binary(Op::mul, DType::f32, [](double a, double b) { return a * b; });
  binary(Op::lt, DType::boolean, [](double a, double b) { return a < b ? 1.0 : 0.0; });

  cpu::binary(Op::add, x, y, out);
  check("add", out, [&](std::int64_t i) { return double(xs[i]) + ys[i]; }, 1e-7);
  print(measure_op("add", 3 * f32_bytes, [&] { cpu::binary(Op::add, x, y, out); }));

  cpu::binary(Op::add, x, column, out);
  check("add [4096,1]", out, [&](std::int64_t i) { return double(xs[i]) + column.data<float>()[i / columns]; }, 1e-7);
  print(measure_op("add [4096,4096]+[4096,1]", 2 * f32_bytes + 4.0 * rows,
                   [&] { cpu::binary(Op::add, x, column, out); }));

  cpu::binary(Op::add, x, row, out);
  check("add [4096]", out, [&](std::int64_t i) { return double(xs[i]) + row.data<float>()[i % columns]; }, 1e-7);
  print(measure_op("add [4096,4096]+[4096]", 2 * f32_bytes + 4.0 * columns,
                   [&] { cpu::binary(Op::add, x, row, out); }));

  cpu::select(condition, x, y, out);
  check("where", out, [&](std::int64_t i) { return condition.data<std::uint8_t>()[i] ? xs[i] : ys[i]; }, 0);
  print(measure_op("where", 3 * f32_bytes + 1.0 * elements, [&] { cpu::select(condition, x, y, out); }));

  // The op-by-op pattern: each call reads what the previous one wrote, and
  // so does each copy.
  cpu::unary(Op::neg, x, out);
  int parity = 0;
  auto chained_copy = [&](bool non_temporal) {
    if (parity++ & 1) copy(out2.raw(), out.mutable_raw(), static_cast<std::int64_t>(out.bytes()), non_temporal);
    else copy(out.raw(), out2.mutable_raw(), static_cast<std::int64_t>(out.bytes()), non_temporal);
  };
  for (Op op : {Op::neg, Op::exp}) {
    print(measure(std::string(kiln::ir::name(op)) + ", chained", 2 * f32_bytes, 2 * f32_bytes,
                  [&] {
                    if (parity++ & 1) cpu::unary(op, out2, out);
                    else cpu::unary(op, out, out2);
                    // exp of exp overflows to inf after a few calls: same cost, no traps.
                  },
                  chained_copy, /*chained=*/true));
  }
  std::printf("\n/floor: median over rounds of op time / best copy time of the same round, scaled to the\n"
              "op's bytes. copy / NT: plain and non-temporal stores.\n");
  return 0;
}
