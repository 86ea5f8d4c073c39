#include "compiler/codegen/cuda/nvrtc_build.h"

#include "compiler/cache/module_cache.h"
#include "compiler/cache/sha256.h"
#include "runtime/log.h"

#include <kiln/error.h>

#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <memory>

namespace kiln::compiler::cuda {
namespace {

// The first lines of a long NVRTC log (a broken prelude can report hundreds).
std::string first_lines(const std::string& log, int count) {
  std::size_t end = 0;
  for (int line = 0; line < count; ++line) {
    end = log.find('\n', end);
    if (end == std::string::npos) return log;
    ++end;
  }
  return end >= log.size() ? log : log.substr(0, end) + "...";
}

std::vector<int> supported_architectures() {
  int count = 0;
  if (nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0) return {};
  std::vector<int> architectures(static_cast<std::size_t>(count));
  if (nvrtcGetSupportedArchs(architectures.data()) != NVRTC_SUCCESS) return {};
  return architectures;
}

// One NVRTC compile: the image, and NVRTC's log (warnings, and ptxas's report
// when `extra_options` ask for it).
struct NvrtcOutput {
  std::string image;
  std::string log;
};

NvrtcOutput run_nvrtc(const std::string& source, const std::string& target, const std::string& name,
                      const std::vector<std::string>& extra_options) {
  const bool is_ptx = target.starts_with("compute_");
  auto fail = [&](const std::string& detail) { return CompileError(name, detail, std::string()); };
  nvrtcProgram program = nullptr;
  if (nvrtcResult status = nvrtcCreateProgram(&program, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
      status != NVRTC_SUCCESS)
    throw fail(std::string("nvrtcCreateProgram: ") + nvrtcGetErrorString(status));
  std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> owner(&program, [](nvrtcProgram* p) { nvrtcDestroyProgram(p); });
  std::vector<std::string> options = nvrtc_options();
  options.push_back("--gpu-architecture=" + target);
  options.insert(options.end(), extra_options.begin(), extra_options.end());
  std::vector<const char*> arguments;
  for (const std::string& option : options) arguments.push_back(option.c_str());
  auto start = std::chrono::steady_clock::now();
  nvrtcResult status = nvrtcCompileProgram(program, static_cast<int>(arguments.size()), arguments.data());
  std::size_t log_size = 0;
  std::string log;
  if (nvrtcGetProgramLogSize(program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    nvrtcGetProgramLog(program, log.data());
    log.resize(log_size - 1);
  }
  if (status != NVRTC_SUCCESS)
    throw fail("NVRTC could not compile the generated CUDA for " + target + " (" + nvrtcGetErrorString(status) +
               "):\n" + first_lines(log, 40));
  std::size_t size = 0;
  std::string image;
  if (is_ptx) {
    nvrtcGetPTXSize(program, &size);
    image.resize(size);
    status = nvrtcGetPTX(program, image.data());
  } else {
    nvrtcGetCUBINSize(program, &size);
    image.resize(size);
    status = nvrtcGetCUBIN(program, image.data());
  }
  if (status != NVRTC_SUCCESS || image.empty())
    throw fail(std::string("NVRTC produced no ") + (is_ptx ? "PTX" : "cubin") + ": " + nvrtcGetErrorString(status));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  runtime::log(LogLevel::info, "NVRTC compiled " + name + " for " + target + " in " + std::to_string(seconds) + " s");
  return {std::move(image), std::move(log)};
}

}  // namespace

std::string nvrtc_compile(const std::string& source, const std::string& target, const std::string& name) {
  return run_nvrtc(source, target, name, {}).image;
}

std::string nvrtc_warnings(const std::string& source, const std::string& target, const std::string& name) {
  return run_nvrtc(source, target, name, {}).log;
}

std::string nvrtc_resource_report(const std::string& source, const std::string& target, const std::string& name) {
  return run_nvrtc(source, target, name, {"--ptxas-options=-v"}).log;
}

std::string nvrtc_target(int major, int minor) {
  int wanted = major * 10 + minor;
  std::vector<int> known = supported_architectures();
  if (std::find(known.begin(), known.end(), wanted) != known.end()) return "sm_" + std::to_string(wanted);
  int best = -1;
  for (int architecture : known)
    if (architecture <= wanted) best = std::max(best, architecture);
  if (best < 0)
    throw CompileError("kiln::function",
                       "NVRTC " + nvrtc_version() + " cannot compile for compute capability " + std::to_string(major) +
                           "." + std::to_string(minor),
                       std::string());
  return "compute_" + std::to_string(best);
}

std::vector<std::string> nvrtc_options() { return {"--std=c++20", "--fmad=false"}; }

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

ModuleImage compile_module(const std::string& source, const std::string& target, const std::string& name) {
  ModuleImage image;
  image.target = target;
  image.is_ptx = target.starts_with("compute_");
  Sha256 hash;
  auto field = [&](const std::string& text) {
    std::string length = std::to_string(text.size()) + ":";
    hash.update(length.data(), length.size());
    hash.update(text.data(), text.size());
  };
  field("kiln-cuda-module-1");
  field(source);
  for (const std::string& option : nvrtc_options()) field(option);
  field("nvrtc " + nvrtc_version());
  field(target);
#if defined(KILN_CUDA_SIMULATOR)
  field("kiln CUDA simulator");  // its images are marked source, never a GPU build's cubins
#endif
  CachedImage cached =
      get_or_build_image(hash.finish(), name, [&] { return nvrtc_compile(source, target, name); });
  image.bytes = std::move(cached.bytes);
  image.from_disk_cache = cached.from_disk_cache;
  return image;
}

}  // namespace kiln::compiler::cuda
