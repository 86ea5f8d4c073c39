// elementwise_bandwidth: how close the CPU elementwise kernels come to the
// memory-bandwidth floor (see BENCHMARKING.md).
//
// For 16M f32 elements (64 MiB per operand) it times the standard kernels
// (unary neg/exp/tanh/sin/sigmoid, add, add with a broadcast column
// [4096,4096]+[4096,1] and row [4096,4096]+[4096], where) and, in the same
// run, a streaming copy moving the same number of bytes, once with plain
// stores and once with non-temporal stores. Each op's floor is
//   floor = (bytes read + bytes written) / best copy bandwidth
// at the op's footprint, and the table shows time / floor. Every time is the
// median of the timed runs after warm-up; results are checked before timing.
//
// Also shown: a unary op and the copies in the op-by-op pattern of the
// standard executor (each call reads the previous call's output), which is
// where non-temporal stores lose: the next op must fetch their output from
// DRAM instead of the L3.
//
// Usage: elementwise_bandwidth [runs]   (default 15; threads: KILN_NUM_THREADS)

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
int timed_runs = 15;

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median time of `body` over timed_runs calls after 3 warm-up calls.
double median_seconds(const std::function<void()>& body) {
  for (int i = 0; i < 3; ++i) body();
  std::vector<double> times;
  for (int i = 0; i < timed_runs; ++i) {
    double start = seconds_now();
    body();
    times.push_back(seconds_now() - start);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Copies `bytes` bytes on all threads: 64-byte vectors, plain or streaming stores.
void copy(const void* source, void* destination, std::int64_t bytes, bool non_temporal) {
  const auto* in = static_cast<const char*>(source);
  auto* out = static_cast<char*>(destination);
  std::int64_t lines = bytes / 64;
  kiln::runtime::parallel_for(lines, 4096, [&](std::int64_t begin, std::int64_t end) {
    if (non_temporal) {
      for (std::int64_t i = begin; i < end; ++i)
        _mm512_stream_si512(reinterpret_cast<__m512i*>(out + i * 64), _mm512_load_si512(in + i * 64));
      _mm_sfence();
    } else {
      for (std::int64_t i = begin; i < end; ++i)
        _mm512_store_si512(reinterpret_cast<__m512i*>(out + i * 64), _mm512_load_si512(in + i * 64));
    }
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


// Best copy bandwidth (bytes read + written per second) moving `bytes` in
// total, plain and non-temporal, cached per footprint.
struct CopyFloor {
  double plain = 0, non_temporal = 0;
  double best() const { return std::max(plain, non_temporal); }
};
std::map<std::int64_t, CopyFloor> copy_floors;

const CopyFloor& copy_floor(std::int64_t bytes_moved) {
  auto found = copy_floors.find(bytes_moved);
  if (found != copy_floors.end()) return found->second;
  std::int64_t half = bytes_moved / 2 / 64 * 64;
  auto source = kiln::runtime::allocate(kiln::Device::cpu(), static_cast<std::size_t>(half));
  auto destination = kiln::runtime::allocate(kiln::Device::cpu(), static_cast<std::size_t>(half));
  std::fill_n(static_cast<char*>(source->data()), half, 1);
  std::fill_n(static_cast<char*>(destination->data()), half, 2);
  CopyFloor floor;
  floor.plain = 2.0 * half / median_seconds([&] { copy(source->data(), destination->data(), half, false); });
  floor.non_temporal = 2.0 * half / median_seconds([&] { copy(source->data(), destination->data(), half, true); });
  return copy_floors.emplace(bytes_moved, floor).first->second;
}

struct Row {
  std::string name;
  double bytes;  // read + written
  double seconds;
};

// Times `body` after measuring (once per footprint) the copy floor of the
// same number of bytes, so both come from the same stretch of the run.
Row measure(const std::string& name, double bytes, const std::function<void()>& body) {
  copy_floor(static_cast<std::int64_t>(bytes));
  return {name, bytes, median_seconds(body)};
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "elementwise_bandwidth: wrong result: %s\n", what.c_str());
  std::exit(1);
}

// Checks every 997th element of a float result against `expected`.
void check(const std::string& name, const Array& output, const std::function<double(std::int64_t)>& expected,
           double tolerance) {
  const float* out = output.data<float>();
  for (std::int64_t i = 0; i < output.shape.numel(); i += 997) {
    double want = expected(i);
    if (!(std::abs(out[i] - want) <= tolerance * std::max(1.0, std::abs(want))))
      fail(name + " element " + std::to_string(i) + ": " + std::to_string(out[i]) + " vs " + std::to_string(want));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) timed_runs = std::max(1, std::atoi(argv[1]));
  const Shape matrix{rows, columns};
  Array x = random_array(DType::f32, matrix, 1);
  Array y = random_array(DType::f32, matrix, 2);
  Array column = random_array(DType::f32, Shape{rows, 1}, 3);
  Array row = random_array(DType::f32, Shape{columns}, 4);
  Array condition = random_array(DType::boolean, matrix, 5);
  Array out = kiln::runtime::allocate_array(DType::f32, matrix);
  Array out2 = kiln::runtime::allocate_array(DType::f32, matrix);
  const float* xs = x.data<float>();
  const float* ys = y.data<float>();
  const double f32_bytes = 4.0 * elements;

  std::vector<Row> table;
  auto unary = [&](Op op, double (*reference)(double), double tolerance) {
    std::string name(kiln::ir::name(op));
    cpu::unary(op, x, out);
    check(name, out, [&](std::int64_t i) { return reference(xs[i]); }, tolerance);
    table.push_back(measure(name, 2 * f32_bytes, [&] { cpu::unary(op, x, out); }));
  };
  unary(Op::neg, [](double v) { return -v; }, 0);
  unary(Op::exp, [](double v) { return std::exp(v); }, 1e-6);
  unary(Op::tanh, [](double v) { return std::tanh(v); }, 1e-6);
  unary(Op::sin, [](double v) { return std::sin(v); }, 1e-6);
  unary(Op::sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }, 1e-6);

  cpu::binary(Op::add, x, y, out);
  check("add", out, [&](std::int64_t i) { return double(xs[i]) + ys[i]; }, 1e-7);
  table.push_back(measure("add", 3 * f32_bytes, [&] { cpu::binary(Op::add, x, y, out); }));

  cpu::binary(Op::add, x, column, out);
  check("add [4096,1]", out, [&](std::int64_t i) { return double(xs[i]) + column.data<float>()[i / columns]; }, 1e-7);
  table.push_back(measure("add [4096,4096]+[4096,1]", 2 * f32_bytes + 4.0 * rows,
                          [&] { cpu::binary(Op::add, x, column, out); }));

  cpu::binary(Op::add, x, row, out);
  check("add [4096]", out, [&](std::int64_t i) { return double(xs[i]) + row.data<float>()[i % columns]; }, 1e-7);
  table.push_back(measure("add [4096,4096]+[4096]", 2 * f32_bytes + 4.0 * columns,
                          [&] { cpu::binary(Op::add, x, row, out); }));

  cpu::select(condition, x, y, out);
  check("where", out, [&](std::int64_t i) { return condition.data<std::uint8_t>()[i] ? xs[i] : ys[i]; }, 0);
  table.push_back(measure("where", 3 * f32_bytes + 1.0 * elements, [&] { cpu::select(condition, x, y, out); }));

  // The op-by-op pattern: each call reads what the previous one wrote.
  int parity = 0;
  table.push_back(measure("neg, chained (out -> out2 -> out)", 2 * f32_bytes, [&] {
    if (parity++ & 1) cpu::unary(Op::neg, out2, out);
    else cpu::unary(Op::neg, out, out2);
  }));
  std::vector<Row> chained_copies;
  for (bool non_temporal : {false, true}) {
    chained_copies.push_back({non_temporal ? "copy NT, chained" : "copy plain, chained", 2 * f32_bytes,
                              median_seconds([&] {
                                if (parity++ & 1) copy(out2.raw(), out.mutable_raw(), out.bytes(), non_temporal);
                                else copy(out.raw(), out2.mutable_raw(), out.bytes(), non_temporal);
                              })});
  }

  std::printf("elementwise_bandwidth: f32, %lld elements (64 MiB per operand), %d threads, median of %d runs\n\n",
              static_cast<long long>(elements), kiln::runtime::thread_count(), timed_runs);
  std::printf("%-36s %9s %9s %8s %8s %8s %7s\n", "op", "MiB moved", "time ms", "GB/s", "copy GB/s", "NT GB/s",
              "/floor");
  for (const Row& entry : table) {
    const CopyFloor& floor = copy_floor(static_cast<std::int64_t>(entry.bytes));
    double floor_seconds = entry.bytes / floor.best();
    std::printf("%-36s %9.0f %9.3f %8.1f %8.1f %8.1f %7.2f\n", entry.name.c_str(), entry.bytes / (1 << 20),
                entry.seconds * 1e3, entry.bytes / entry.seconds / 1e9, floor.plain / 1e9, floor.non_temporal / 1e9,
                entry.seconds / floor_seconds);
  }
  std::printf("\nop-by-op pattern, copies of 64 MiB (each reads the previous one's output):\n");
  for (const Row& entry : chained_copies)
    std::printf("%-36s %9.0f %9.3f %8.1f\n", entry.name.c_str(), entry.bytes / (1 << 20), entry.seconds * 1e3,
                entry.bytes / entry.seconds / 1e9);
  return 0;
}
