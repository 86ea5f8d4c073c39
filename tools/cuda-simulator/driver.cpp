// The driver API of kiln's CUDA simulator (README.md here), as much as the
// JIT uses: cuModuleLoadData, cuModuleGetFunction, cuLaunchKernel and
// cuGetErrorString, found through cudaGetDriverEntryPoint as on a GPU.
//
// A module image is what the simulator's NVRTC (nvrtc.cpp) returns: the CUDA
// source, marked. Loading it compiles the source with the host C++ compiler
// after emulated_device.h, with a small entry point appended per kernel that
// copies the launch's arguments; the shared object is then loaded with
// dlopen. Launching queues the kernel's grid on the stream.

#include "simulator.h"

#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

extern const char* const kiln_simulated_device_header;  // emulated_device.h, embedded at build time

struct CUmod_st;

struct CUfunc_st {
  CUmod_st* module = nullptr;  // for its run and release entry points
  std::string name;
  int launch_bound = 0;  // from __launch_bounds__, 0 if none
  void* (*bind)(void** parameters) = nullptr;
};

struct CUmod_st {
  void* library = nullptr;
  void (*run)(void* bound, kiln_simulated_dim3 grid, kiln_simulated_dim3 block) = nullptr;
  void (*release)(void* bound) = nullptr;
  std::map<std::string, std::unique_ptr<CUfunc_st>> functions;
};

namespace kiln::cuda_simulator {
namespace {

struct KernelDeclaration {
  std::string name;       // as declared
  std::string qualified;  // with its namespaces
  int launch_bound = 0;
};

bool identifier_character(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Reads the identifier (qualified names included when `qualified`) at `at`.
std::string read_identifier(const std::string& text, std::size_t& at, bool qualified = false) {
  std::size_t start = at;
  while (at < text.size() && (identifier_character(text[at]) || (qualified && text[at] == ':'))) ++at;
  return text.substr(start, at - start);
}

void skip_space(const std::string& text, std::size_t& at) {
  while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at]))) ++at;
}

// Whether the text before `at` ends with `extern "C"` (spaces aside).
bool after_extern_c(const std::string& text, std::size_t at) {
  std::size_t end = text.find_last_not_of(" \t\n", at == 0 ? 0 : at - 1);
  constexpr std::string_view marker = "extern \"C\"";
  return end != std::string::npos && end + 1 >= marker.size() &&
         text.compare(end + 1 - marker.size(), marker.size(), marker) == 0;
}

// The declaration after `__global__` at `at`: its launch bound and name.
KernelDeclaration read_kernel(const std::string& text, std::size_t at) {
  KernelDeclaration kernel;
  while (at < text.size()) {
    skip_space(text, at);
    std::string word = read_identifier(text, at);
    if (word.empty()) break;
    skip_space(text, at);
    if (word == "__launch_bounds__" && at < text.size() && text[at] == '(') {
      kernel.launch_bound = std::atoi(text.c_str() + at + 1);
      at = text.find(')', at);
      if (at == std::string::npos) break;
      ++at;
      continue;
    }
    if (at < text.size() && text[at] == '(') {
      kernel.name = word;
      break;
    }
  }
  return kernel;
}

// The extern "C" kernels of a module's source, with the namespaces they are
// declared in (the appended entry points refer to them from the global one).
std::vector<KernelDeclaration> kernels_of(const std::string& text) {
  std::vector<KernelDeclaration> kernels;
  std::vector<std::string> scopes;  // per open brace: its namespace's name, or "" for any other
  std::string pending_namespace;
  bool namespace_pending = false;
  for (std::size_t at = 0; at < text.size();) {
    const char c = text[at];
    if (text.compare(at, 2, "//") == 0) {
      at = text.find('\n', at);
      continue;
    }
    if (text.compare(at, 2, "/*") == 0) {
      at = text.find("*/", at);
      at = at == std::string::npos ? at : at + 2;
      continue;
    }
    if (c == '"' || c == '\'') {  // a literal: to its unescaped end
      for (++at; at < text.size() && text[at] != c; ++at)
        if (text[at] == '\\') ++at;
      ++at;
      continue;
    }
    if (c == '{') {
      scopes.push_back(namespace_pending ? pending_namespace : std::string());
      namespace_pending = false;
      ++at;
      continue;
    }
    if (c == '}') {
      if (!scopes.empty()) scopes.pop_back();
      ++at;
      continue;
    }
    if (c == ';' || c == '=') namespace_pending = false;  // a namespace alias, not a scope
    if (!identifier_character(c)) {
      ++at;
      continue;
    }
    const std::size_t start = at;
    std::string word = read_identifier(text, at);
    if (word == "namespace") {
      skip_space(text, at);
      pending_namespace = read_identifier(text, at, true);
      namespace_pending = true;
    } else if (word == "__global__" && after_extern_c(text, start)) {
      KernelDeclaration kernel = read_kernel(text, at);
      if (kernel.name.empty()) continue;
      for (const std::string& scope : scopes)
        if (!scope.empty()) kernel.qualified += "::" + scope;
      kernel.qualified += "::" + kernel.name;
      kernels.push_back(std::move(kernel));
    }
  }
  return kernels;
}

std::string entry_points(const std::vector<KernelDeclaration>& kernels) {
  const std::string exported = "extern \"C\" __attribute__((visibility(\"default\"))) ";
  std::string text = "\n// ---- appended by kiln's CUDA simulator: entry points of the launches ----\n";
  text += exported + "void kiln_simulated_run(void* bound, kiln_simulated_dim3 grid, kiln_simulated_dim3 block) {\n" +
          "  kiln_simulated_device::run_grid(*static_cast<std::function<void()>*>(bound), grid, block);\n}\n";
  text +=
      exported + "void kiln_simulated_release(void* bound) { delete static_cast<std::function<void()>*>(bound); }\n";
  for (const KernelDeclaration& kernel : kernels)
    text += exported + "void* kiln_simulated_bind_" + kernel.name +
            "(void** parameters) {\n  return kiln_simulated_device::bind_kernel(&" + kernel.qualified +
            ", parameters);\n}\n";
  return text;
}

// In an ASan build the modules' kernels are checked too.
#if defined(__SANITIZE_ADDRESS__)
constexpr const char* sanitize_flags = "-fsanitize=address -fno-omit-frame-pointer ";
#else
constexpr const char* sanitize_flags = "";
#endif

// Compiles `source` into a shared object in a fresh temporary folder and
// loads it; null (with the compiler's output on stderr) if that fails.
void* build_and_load(const std::string& source) {
  std::string folder_template = (std::filesystem::temp_directory_path() / "kiln-cuda-simulator-XXXXXX").string();
  if (!mkdtemp(folder_template.data())) return nullptr;
  const std::filesystem::path folder = folder_template;
  const std::filesystem::path source_path = folder / "module.cpp", library_path = folder / "module.so",
                              log_path = folder / "compiler.log";
  std::ofstream(source_path) << source;
  // -ffp-contract=off: NVRTC's --fmad=false, as kiln asks. -fno-gnu-unique
  // keeps inline statics of the standard headers from pinning the library.
  const std::string command = std::string(KILN_SIMULATOR_CXX) + " -std=c++20 -O1 -ffp-contract=off -fno-gnu-unique " +
                              sanitize_flags + "-fvisibility=hidden -fPIC -shared -w -o '" + library_path.string() +
                              "' '" + source_path.string() + "' > '" + log_path.string() + "' 2>&1";
  void* library = nullptr;
  if (std::system(command.c_str()) == 0) {
    library = dlopen(library_path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) std::fprintf(stderr, "kiln CUDA simulator: dlopen: %s\n", dlerror());
  } else {
    std::ifstream log(log_path);
    std::stringstream text;
    text << log.rdbuf();
    std::fprintf(stderr, "kiln CUDA simulator: the host compiler refused a module:\n%s\n", text.str().c_str());
  }
  std::error_code ignored;
  std::filesystem::remove_all(folder, ignored);
  return library;
}

std::mutex modules_mutex;  // loading is not under the runtime's lock: a compile takes a while

CUresult load_data(CUmodule* module, const void* image) {
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  const std::string text = static_cast<const char*>(image);
  if (!text.starts_with(simulated_image_marker)) return CUDA_ERROR_INVALID_IMAGE;  // a real cubin or PTX
  const std::string source = text.substr(std::strlen(simulated_image_marker));
  std::vector<KernelDeclaration> kernels = kernels_of(source);
  std::lock_guard lock(modules_mutex);
  void* library = build_and_load(std::string(kiln_simulated_device_header) + "\n" + source + entry_points(kernels));
  if (!library) return CUDA_ERROR_INVALID_IMAGE;
  auto loaded = std::make_unique<CUmod_st>();
  loaded->library = library;
  loaded->run = reinterpret_cast<decltype(loaded->run)>(dlsym(library, "kiln_simulated_run"));
  loaded->release = reinterpret_cast<decltype(loaded->release)>(dlsym(library, "kiln_simulated_release"));
  for (const KernelDeclaration& kernel : kernels) {
    auto function = std::make_unique<CUfunc_st>();
    function->module = loaded.get();
    function->name = kernel.name;
    function->launch_bound = kernel.launch_bound;
    function->bind =
        reinterpret_cast<decltype(function->bind)>(dlsym(library, ("kiln_simulated_bind_" + kernel.name).c_str()));
    if (!function->bind || !loaded->run || !loaded->release) return CUDA_ERROR_INVALID_IMAGE;
    loaded->functions[kernel.name] = std::move(function);
  }
  // Modules stay loaded for the process (kiln never unloads one), kept here.
  static auto* modules = new std::vector<std::unique_ptr<CUmod_st>>();
  *module = loaded.get();
  modules->push_back(std::move(loaded));
  return CUDA_SUCCESS;
}

CUresult get_function(CUfunction* function, CUmodule module, const char* name) {
  if (!function || !module || !name) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(modules_mutex);
  auto found = module->functions.find(name);
  if (found == module->functions.end()) return CUDA_ERROR_NOT_FOUND;
  *function = found->second.get();
  return CUDA_SUCCESS;
}

CUresult launch_kernel(CUfunction function, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                       unsigned block_y, unsigned block_z, unsigned shared_bytes, CUstream stream, void** parameters,
                       void** extra) {
  if (!function) return CUDA_ERROR_INVALID_HANDLE;
  if (extra) return CUDA_ERROR_NOT_SUPPORTED;  // kiln passes its arguments through `parameters`
  if (check_launch_shape(grid_x, grid_y, grid_z, block_x, block_y, block_z) != cudaSuccess)
    return CUDA_ERROR_INVALID_VALUE;
  const unsigned threads = block_x * block_y * block_z;
  // A launch over the kernel's __launch_bounds__ fails on a GPU.
  if (function->launch_bound > 0 && threads > static_cast<unsigned>(function->launch_bound))
    return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
  if (shared_bytes > 48 * 1024) return CUDA_ERROR_INVALID_VALUE;  // dynamic shared memory past the default limit
  void* bound = function->bind(parameters);
  if (!bound) return CUDA_ERROR_INVALID_VALUE;
  CUmod_st* module = function->module;
  const kiln_simulated_dim3 grid{grid_x, grid_y, grid_z}, block{block_x, block_y, block_z};
  enqueue(reinterpret_cast<cudaStream_t>(stream), [module, bound, grid, block] {
    module->run(bound, grid, block);
    module->release(bound);
  });
  return CUDA_SUCCESS;
}

CUresult get_error_string(CUresult error, const char** text) {
  if (!text) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS:
      *text = "no error";
      break;
    case CUDA_ERROR_INVALID_VALUE:
      *text = "invalid argument";
      break;
    case CUDA_ERROR_INVALID_IMAGE:
      *text = "device kernel image is invalid";
      break;
    case CUDA_ERROR_INVALID_HANDLE:
      *text = "invalid resource handle";
      break;
    case CUDA_ERROR_NOT_FOUND:
      *text = "named symbol not found";
      break;
    case CUDA_ERROR_NOT_SUPPORTED:
      *text = "operation not supported";
      break;
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
      *text = "too many resources requested for launch";
      break;
    default:
      *text = nullptr;
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

}  // namespace

void* driver_entry_point(const char* symbol) {
  const std::string name = symbol;
  if (name == "cuModuleLoadData") return reinterpret_cast<void*>(&load_data);
  if (name == "cuModuleGetFunction") return reinterpret_cast<void*>(&get_function);
  if (name == "cuLaunchKernel") return reinterpret_cast<void*>(&launch_kernel);
  if (name == "cuGetErrorString") return reinterpret_cast<void*>(&get_error_string);
  return nullptr;
}

}  // namespace kiln::cuda_simulator
