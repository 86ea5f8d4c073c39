// NVRTC in kiln's CUDA simulator (README.md here). A program is compiled by
// the real NVRTC first, so that whatever it refuses is refused here too, with
// its log; the image it returns (as "PTX" or "cubin") is the source itself,
// marked, which the simulator's driver API compiles for the host when it is
// loaded. The real library is opened at run time (its path is fixed at build
// time), since this file defines the same names.

#include "simulator.h"

#include <dlfcn.h>
#include <nvrtc.h>

#include <cstring>
#include <string>
#include <vector>

struct _nvrtcProgram {
  std::string source, name;
  std::vector<std::string> headers, include_names;
  std::string log, image;  // image: after a successful compile
};

namespace kiln::cuda_simulator {
namespace {

// The real NVRTC's functions that the simulator calls.
struct RealNvrtc {
  std::string error;  // why it could not be opened, if it could not
  decltype(&::nvrtcCreateProgram) create = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy = nullptr;
  decltype(&::nvrtcCompileProgram) compile = nullptr;
  decltype(&::nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) log = nullptr;
  decltype(&::nvrtcGetErrorString) error_string = nullptr;
  decltype(&::nvrtcVersion) version = nullptr;
  decltype(&::nvrtcGetNumSupportedArchs) architecture_count = nullptr;
  decltype(&::nvrtcGetSupportedArchs) architectures = nullptr;
};

template <class Function>
void find(void* library, Function& function, const char* name, std::string& error) {
  function = reinterpret_cast<Function>(dlsym(library, name));
  if (!function && error.empty()) error = std::string("the real NVRTC has no ") + name;
}

const RealNvrtc& real() {
  static const RealNvrtc functions = [] {
    RealNvrtc found;
    void* library = dlopen(KILN_SIMULATOR_NVRTC, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      found.error = std::string("cannot open the real NVRTC (") + KILN_SIMULATOR_NVRTC + "): " + dlerror();
      return found;
    }
    find(library, found.create, "nvrtcCreateProgram", found.error);
    find(library, found.destroy, "nvrtcDestroyProgram", found.error);
    find(library, found.compile, "nvrtcCompileProgram", found.error);
    find(library, found.log_size, "nvrtcGetProgramLogSize", found.error);
    find(library, found.log, "nvrtcGetProgramLog", found.error);
    find(library, found.error_string, "nvrtcGetErrorString", found.error);
    find(library, found.version, "nvrtcVersion", found.error);
    find(library, found.architecture_count, "nvrtcGetNumSupportedArchs", found.error);
    find(library, found.architectures, "nvrtcGetSupportedArchs", found.error);
    return found;
  }();
  return functions;
}

std::vector<const char*> pointers_to(const std::vector<std::string>& texts) {
  std::vector<const char*> pointers;
  for (const std::string& text : texts) pointers.push_back(text.c_str());
  return pointers;
}

// Compiles `program` with the real NVRTC, keeping its log.
nvrtcResult compile_for_real(_nvrtcProgram& program, int option_count, const char* const* options) {
  const RealNvrtc& nvrtc = real();
  if (!nvrtc.error.empty()) {
    program.log = "kiln CUDA simulator: " + nvrtc.error + "\n";
    return NVRTC_ERROR_INTERNAL_ERROR;
  }
  std::vector<const char*> headers = pointers_to(program.headers), names = pointers_to(program.include_names);
  nvrtcProgram real_program = nullptr;
  nvrtcResult status =
      nvrtc.create(&real_program, program.source.c_str(), program.name.empty() ? nullptr : program.name.c_str(),
                   static_cast<int>(headers.size()), headers.data(), names.data());
  if (status != NVRTC_SUCCESS) return status;
  status = nvrtc.compile(real_program, option_count, options);
  std::size_t size = 0;
  if (nvrtc.log_size(real_program, &size) == NVRTC_SUCCESS && size > 0) {
    program.log.resize(size);
    nvrtc.log(real_program, program.log.data());
    program.log.resize(size - 1);  // without the terminating zero
  }
  nvrtc.destroy(&real_program);
  return status;
}

nvrtcResult image_size(nvrtcProgram program, std::size_t* size) {
  if (!program || !size) return NVRTC_ERROR_INVALID_INPUT;
  if (program->image.empty()) return NVRTC_ERROR_INVALID_PROGRAM;
  *size = program->image.size() + 1;
  return NVRTC_SUCCESS;
}

nvrtcResult image(nvrtcProgram program, char* bytes) {
  if (!program || !bytes) return NVRTC_ERROR_INVALID_INPUT;
  if (program->image.empty()) return NVRTC_ERROR_INVALID_PROGRAM;
  std::memcpy(bytes, program->image.c_str(), program->image.size() + 1);
  return NVRTC_SUCCESS;
}

}  // namespace
}  // namespace kiln::cuda_simulator

using namespace kiln::cuda_simulator;

extern "C" {

nvrtcResult nvrtcCreateProgram(nvrtcProgram* program, const char* source, const char* name, int header_count,
                               const char* const* headers, const char* const* include_names) {
  if (!program || !source || header_count < 0 || (header_count > 0 && (!headers || !include_names)))
    return NVRTC_ERROR_INVALID_INPUT;
  auto* created = new _nvrtcProgram();
  created->source = source;
  created->name = name ? name : "";
  for (int i = 0; i < header_count; ++i) {
    created->headers.emplace_back(headers[i]);
    created->include_names.emplace_back(include_names[i]);
  }
  *program = created;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcDestroyProgram(nvrtcProgram* program) {
  if (!program || !*program) return NVRTC_ERROR_INVALID_PROGRAM;
  delete *program;
  *program = nullptr;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcCompileProgram(nvrtcProgram program, int option_count, const char* const* options) {
  if (!program) return NVRTC_ERROR_INVALID_PROGRAM;
  program->image.clear();
  nvrtcResult status = compile_for_real(*program, option_count, options);
  if (status != NVRTC_SUCCESS) return status;
  if (!program->headers.empty()) {  // the host compile would need them as files; kiln gives none
    program->log += "kiln CUDA simulator: programs with headers given by name are not simulated\n";
    return NVRTC_ERROR_INVALID_INPUT;
  }
  program->image = simulated_image_marker + program->source;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram program, std::size_t* size) {
  if (!program || !size) return NVRTC_ERROR_INVALID_INPUT;
  *size = program->log.size() + 1;
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetProgramLog(nvrtcProgram program, char* log) {
  if (!program || !log) return NVRTC_ERROR_INVALID_INPUT;
  std::memcpy(log, program->log.c_str(), program->log.size() + 1);
  return NVRTC_SUCCESS;
}

nvrtcResult nvrtcGetPTXSize(nvrtcProgram program, std::size_t* size) { return image_size(program, size); }
nvrtcResult nvrtcGetPTX(nvrtcProgram program, char* ptx) { return image(program, ptx); }
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram program, std::size_t* size) { return image_size(program, size); }
nvrtcResult nvrtcGetCUBIN(nvrtcProgram program, char* cubin) { return image(program, cubin); }

const char* nvrtcGetErrorString(nvrtcResult result) {
  if (real().error_string) return real().error_string(result);
  return result == NVRTC_SUCCESS ? "NVRTC_SUCCESS" : "NVRTC error (the real NVRTC could not be opened)";
}

nvrtcResult nvrtcVersion(int* major, int* minor) {
  if (!real().version) return NVRTC_ERROR_INTERNAL_ERROR;
  return real().version(major, minor);
}

nvrtcResult nvrtcGetNumSupportedArchs(int* count) {
  if (!real().architecture_count) return NVRTC_ERROR_INTERNAL_ERROR;
  return real().architecture_count(count);
}

nvrtcResult nvrtcGetSupportedArchs(int* architectures) {
  if (!real().architectures) return NVRTC_ERROR_INTERNAL_ERROR;
  return real().architectures(architectures);
}

}  // extern "C"
