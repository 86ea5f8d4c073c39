#include "resource_report.h"

#include <algorithm>
#include <regex>

namespace kiln::dump {

std::vector<KernelResources> parse_ptxas_report(const std::string& log) {
  // ptxas's lines, as CUDA 11-13 write them:
  //   ptxas info    : Compiling entry function 'kiln_kernel_0' for 'sm_90'
  //   ptxas         .     32 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
  //   ptxas info    : Used 22 registers, used 1 barriers, 32 bytes cumulative stack size, 33 bytes smem
  static const std::regex entry(R"(Compiling entry function '([^']+)')");
  static const std::regex frame(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex registers(R"(Used (\d+) registers)");
  static const std::regex shared(R"((\d+) bytes smem)");
  std::vector<KernelResources> kernels;
  std::size_t begin = 0;
  while (begin < log.size()) {
    std::size_t end = log.find('\n', begin);
    if (end == std::string::npos) end = log.size();
    const std::string line = log.substr(begin, end - begin);
    begin = end + 1;
    if (!line.starts_with("ptxas")) continue;
    std::smatch match;
    if (std::regex_search(line, match, entry)) {
      kernels.push_back({.function = match[1]});
      continue;
    }
    if (kernels.empty()) continue;
    KernelResources& kernel = kernels.back();
    if (std::regex_search(line, match, frame)) {
      kernel.stack_bytes = std::stoll(match[1]);
      kernel.spill_store_bytes = std::stoll(match[2]);
      kernel.spill_load_bytes = std::stoll(match[3]);
    }
    if (std::regex_search(line, match, registers)) kernel.registers = std::stoi(match[1]);
    if (line.find("Used ") != std::string::npos && std::regex_search(line, match, shared))
      kernel.shared_bytes = std::stoll(match[1]);
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
