#include "resource_report.h"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace kiln::dump {

namespace {

// The number that ends just before `suffix` in `line` ("32" in "32 bytes stack
// frame" for " bytes stack frame"), or -1.
std::int64_t number_before(const std::string& line, std::string_view suffix) {
  const std::size_t end = line.find(suffix);
  if (end == std::string::npos) return -1;
  std::size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(line[begin - 1]))) --begin;
  return begin == end ? -1 : std::stoll(line.substr(begin, end - begin));
}

}  // namespace

std::vector<KernelResources> parse_ptxas_report(const std::string& log) {
  // ptxas's lines, as CUDA 11-13 write them:
  //   ptxas info    : Compiling entry function 'kiln_kernel_0' for 'sm_90'
  //   ptxas         .     32 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
  //   ptxas info    : Used 22 registers, used 1 barriers, 32 bytes cumulative stack size, 33 bytes smem
  constexpr std::string_view entry = "Compiling entry function '";
  std::vector<KernelResources> kernels;
  std::size_t begin = 0;
  while (begin < log.size()) {
    std::size_t end = log.find('\n', begin);
    if (end == std::string::npos) end = log.size();
    const std::string line = log.substr(begin, end - begin);
    begin = end + 1;
    if (!line.starts_with("ptxas")) continue;
    if (const std::size_t name = line.find(entry); name != std::string::npos) {
      const std::size_t name_begin = name + entry.size();
      kernels.emplace_back().function = line.substr(name_begin, line.find('\'', name_begin) - name_begin);
      continue;
    }
    if (kernels.empty()) continue;
    KernelResources& kernel = kernels.back();
    if (const std::int64_t stack = number_before(line, " bytes stack frame"); stack >= 0) {
      kernel.stack_bytes = stack;
      kernel.spill_store_bytes = std::max<std::int64_t>(number_before(line, " bytes spill stores"), 0);
      kernel.spill_load_bytes = std::max<std::int64_t>(number_before(line, " bytes spill loads"), 0);
    }
    if (line.find("Used ") != std::string::npos) {
      kernel.registers = static_cast<int>(std::max<std::int64_t>(number_before(line, " registers"), 0));
      kernel.shared_bytes = std::max<std::int64_t>(number_before(line, " bytes smem"), 0);
    }
  }
  return kernels;
}

std::optional<MultiprocessorLimits> limits_for(int architecture) {
  // The CUDA C++ Programming Guide's table of technical specifications per
  // compute capability: resident threads, blocks and shared memory per SM.
  switch (architecture) {
    case 70:
      return MultiprocessorLimits{.threads = 2048, .blocks = 32, .shared_bytes = 96 * 1024};
    case 75:
      return MultiprocessorLimits{.threads = 1024, .blocks = 16, .shared_bytes = 64 * 1024};
    case 80:
      return MultiprocessorLimits{
          .threads = 2048, .blocks = 32, .shared_bytes = 164 * 1024, .reserved_shared_bytes = 1024};
    case 86:
      return MultiprocessorLimits{
          .threads = 1536, .blocks = 16, .shared_bytes = 100 * 1024, .reserved_shared_bytes = 1024};
    case 89:
      return MultiprocessorLimits{
          .threads = 1536, .blocks = 24, .shared_bytes = 100 * 1024, .reserved_shared_bytes = 1024};
    case 90:
    case 100:
      return MultiprocessorLimits{
          .threads = 2048, .blocks = 32, .shared_bytes = 228 * 1024, .reserved_shared_bytes = 1024};
    default:
      return std::nullopt;
  }
}

Occupancy occupancy(const KernelResources& kernel, int threads_per_block, const MultiprocessorLimits& limits) {
  constexpr int warp_size = 32, register_unit = 256, shared_unit = 128;
  const int warps = (threads_per_block + warp_size - 1) / warp_size;
  const int registers_per_warp = (kernel.registers * warp_size + register_unit - 1) / register_unit * register_unit;
  const std::int64_t shared_per_block =
      (kernel.shared_bytes + shared_unit - 1) / shared_unit * shared_unit + limits.reserved_shared_bytes;
  struct Limit {
    std::int64_t blocks;
    const char* name;
  };
  const Limit candidates[] = {
      {limits.threads / (warps * warp_size), "threads"},
      {limits.blocks, "blocks"},
      {registers_per_warp > 0 ? limits.registers / (registers_per_warp * warps) : limits.blocks, "registers"},
      {shared_per_block > 0 ? limits.shared_bytes / shared_per_block : limits.blocks, "shared memory"},
  };
  // The first of the tightest limits names the reason.
  const Limit* tightest = &candidates[0];
  for (const Limit& candidate : candidates)
    if (candidate.blocks < tightest->blocks) tightest = &candidate;
  Occupancy result;
  result.blocks = static_cast<int>(std::max<std::int64_t>(tightest->blocks, 0));
  result.fraction = static_cast<double>(result.blocks) * warps * warp_size / limits.threads;
  result.limited_by = tightest->name;
  return result;
}

}  // namespace kiln::dump
