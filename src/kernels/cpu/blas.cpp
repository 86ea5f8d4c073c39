#include "kernels/cpu/blas.h"

#include "runtime/parallel.h"

#include <kiln/error.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

// Measurements behind the environment defaults (2-core Emerald Rapids VM,
// OpenBLAS 0.3.21 pthreads, 2026-11-30; shared machine, so best-of-N):
//   OPENBLAS_CORETYPE, sgemm 2048, 2 threads, best of 12:
//     unset (OpenBLAS detects "Prescott") 29 GFLOP/s, Haswell 83,
//     SkylakeX 309, Cooperlake 302 (1 thread: 157 / 154; dgemm: 152 / 141).
//   OPENBLAS_THREAD_TIMEOUT, CPU time burnt in the 100 ms after one sgemm:
//     unset (28) 100 ms on a quiet machine (29-52 ms on a busy one), 20:
//     0.1-0.5 ms, 16 / 12 / 4: 0-0.9 ms; latency of a 128^3 / 256^3 sgemm
//     after 0.3 ms idle: 38-45 / 150-160 us for every setting (no measurable
//     wake-up cost). A row reduction right after a GEMM was not measurably
//     slower with 28 (the spinning threads yield), so the gain is the core
//     the spinning leaves to everything else.
//   KMP_BLOCKTIME (oneMKL 2026.2, 2026-12-06), CPU time burnt in the 100 ms
//     after a 256^3 sgemm: 200 (Intel's default) 100 ms, 1: 1.0-1.1 ms,
//     0: 0-0.1 ms; the next 256^3 sgemm after 0.3 s idle took 350-525 us
//     whichever (its wake-up is slow in any case).

namespace kiln::kernels::cpu::blas {
namespace {

using SetThreadsFunction = void (*)(int);
using GetThreadsFunction = int (*)();
using NameFunction = char* (*)();

using VersionFunction = void (*)(char* buffer, int length);

struct Library {
  std::string name;  // "OpenBLAS", "oneMKL"
  std::string file;  // what dlopen loaded
  Functions functions;
  SetThreadsFunction set_num_threads = nullptr;
  GetThreadsFunction get_num_threads = nullptr;
  NameFunction get_corename = nullptr;    // OpenBLAS
  NameFunction get_config = nullptr;      // OpenBLAS
  VersionFunction get_version = nullptr;  // oneMKL
  std::string notes;  // the environment kiln set for it: "OPENBLAS_CORETYPE=SkylakeX (set by kiln) | ..."
};

std::atomic<const Library*> loaded{nullptr};
std::mutex load_mutex;

// The thread count OpenBLAS was last given, and how many single-threaded
// scopes are alive.
std::mutex count_mutex;
int current_threads = 0;
int single_threaded_scopes = 0;

void apply_thread_count(const Library& library, int threads) {
  if (threads == current_threads || !library.set_num_threads) return;
  library.set_num_threads(threads);
  current_threads = threads;
}

// Emerald Rapids and every other AVX-512 CPU run OpenBLAS's SkylakeX
// kernels; AVX2 CPUs its Haswell ones. nullptr: leave the choice to OpenBLAS.
const char* coretype_for_this_cpu() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

constexpr const char* default_thread_timeout = "16";

// Sets `name` to `value` unless the user has set it; returns a note for
// describe().
std::string default_environment(const char* name, const char* value) {
  if (const char* user = std::getenv(name)) return std::string(name) + "=" + user + " (user)";
  if (!value) return std::string(name) + " unset";
  setenv(name, value, 0);
  return std::string(name) + "=" + value + " (set by kiln)";
}

// OpenBLAS reads its environment when it is loaded, on the first matmul. The
// defaults are set here, during static initialization, while the process is
// still single-threaded: setenv while another thread reads the environment
// (getenv, or posix_spawn starting the JIT's compiler) is a data race
// (ThreadSanitizer found one when the first matmul and a JIT compile ran at
// once).
// oneMKL's OpenMP threads spin this many milliseconds after a GEMM before sleeping (Intel's default: 200).
constexpr const char* default_block_time = "1";

struct BlasEnvironment {
  std::string openblas_notes, mkl_notes;
  BlasEnvironment() {
    openblas_notes = default_environment("OPENBLAS_CORETYPE", coretype_for_this_cpu()) + " | " +
                     default_environment("OPENBLAS_THREAD_TIMEOUT", default_thread_timeout);
    mkl_notes = default_environment("KMP_BLOCKTIME", default_block_time);
    // The BLAS starts its threads when loaded: no more than kiln will use (the pool's default, KILN_NUM_THREADS or
    // every core; its count follows runtime::thread_count() afterwards in any case).
    const char* kiln_threads = std::getenv("KILN_NUM_THREADS");
    const std::string threads =
        kiln_threads ? kiln_threads : std::to_string(std::max(1u, std::thread::hardware_concurrency()));
    if (!std::getenv("OPENBLAS_NUM_THREADS")) setenv("OPENBLAS_NUM_THREADS", threads.c_str(), 0);
    if (!std::getenv("MKL_NUM_THREADS")) setenv("MKL_NUM_THREADS", threads.c_str(), 0);
  }
};
const BlasEnvironment blas_environment;

template <class Pointer>
Pointer symbol(void* handle, const char* name) {
  return reinterpret_cast<Pointer>(dlsym(handle, name));
}

bool is_intel_cpu() {
  __builtin_cpu_init();
  return __builtin_cpu_is("intel");
}

// The library's entry points from `handle`, or null where it lacks cblas_sgemm or cblas_dgemm.
Library* library_from(void* handle, const std::string& file) {
  auto* library = new Library();  // the process's BLAS lives until exit: JIT code holds its pointers
  library->file = file;
  library->functions.sgemm = symbol<SgemmFunction>(handle, "cblas_sgemm");
  library->functions.dgemm = symbol<DgemmFunction>(handle, "cblas_dgemm");
  if (!library->functions.sgemm || !library->functions.dgemm) {
    delete library;  // the handle stays open: unloading a BLAS that started threads is not safe
    return nullptr;
  }
  library->get_version = symbol<VersionFunction>(handle, "MKL_Get_Version_String");
  if (library->get_version) {
    library->name = "oneMKL";
    library->functions.narrow_transposed_left_slow = true;
    library->set_num_threads = symbol<SetThreadsFunction>(handle, "MKL_Set_Num_Threads");
    library->get_num_threads = symbol<GetThreadsFunction>(handle, "MKL_Get_Max_Threads");
    library->notes = blas_environment.mkl_notes;
  } else {
    library->name = "OpenBLAS";
    library->set_num_threads = symbol<SetThreadsFunction>(handle, "openblas_set_num_threads");
    library->get_num_threads = symbol<GetThreadsFunction>(handle, "openblas_get_num_threads");
    library->get_corename = symbol<NameFunction>(handle, "openblas_get_corename");
    library->get_config = symbol<NameFunction>(handle, "openblas_get_config");
    library->notes = blas_environment.openblas_notes;
  }
  return library;
}

Library* open_library(const std::string& file) {
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  return handle ? library_from(handle, file) : nullptr;
}

// `file`'s library, which must load: else a DeviceError naming `op`, `missing` followed by dlerror's reason in
// brackets, or `not_blas`.
Library* open_required(const std::string& file, const char* op, const std::string& missing,
                       const std::string& not_blas) {
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* reason = dlerror();
    throw DeviceError(op, missing + " (" + (reason ? reason : "dlopen failed") + ")", std::string());
  }
  if (Library* library = library_from(handle, file)) return library;
  throw DeviceError(op, not_blas, std::string());
}

// The library `chosen` names (KILN_BLAS's value; null or empty: unset), else oneMKL on an Intel CPU where the loader
// finds it, else OpenBLAS.
Library* open_blas(const char* chosen, const char* op) {
  if (chosen && *chosen)
    return open_required(chosen, op, std::string("KILN_BLAS=") + chosen + " cannot be loaded",
                         std::string("KILN_BLAS=") + chosen + " has no cblas_sgemm/cblas_dgemm");
  if (is_intel_cpu())
    for (const char* mkl : {"libmkl_rt.so.3", "libmkl_rt.so.2"})
      if (Library* library = open_library(mkl)) return library;
  return open_required("libopenblas.so.0", op, "OpenBLAS (libopenblas.so.0) not found; install libopenblas0-pthread",
                       "libopenblas.so.0 has no cblas_sgemm/cblas_dgemm; install libopenblas0-pthread");
}

const Library& load(const char* op) {
  if (const Library* library = loaded.load(std::memory_order_acquire)) return *library;
  std::lock_guard lock(load_mutex);
  if (const Library* library = loaded.load(std::memory_order_relaxed)) return *library;
  Library* library = open_blas(std::getenv("KILN_BLAS"), op);
  {
    std::lock_guard count_lock(count_mutex);
    apply_thread_count(*library, runtime::thread_count());
  }
  loaded.store(library, std::memory_order_release);
  return *library;
}

}  // namespace

const Functions& functions(const char* op) { return load(op).functions; }

void sync_thread_count() {
  const Library& library = load("matmul");
  int threads = runtime::thread_count();
  std::lock_guard lock(count_mutex);
  if (single_threaded_scopes == 0) apply_thread_count(library, threads);
}

SingleThreadedScope::SingleThreadedScope() {
  const Library& library = load("matmul");
  std::lock_guard lock(count_mutex);
  if (single_threaded_scopes++ == 0) apply_thread_count(library, 1);
}

SingleThreadedScope::~SingleThreadedScope() {
  const Library& library = load("matmul");
  std::lock_guard lock(count_mutex);
  if (--single_threaded_scopes == 0) apply_thread_count(library, runtime::thread_count());
}

std::string name() { return load("matmul").name; }

std::string probe_library(const char* chosen, const char* op) {
  // The entry points are dropped, the library stays loaded: unloading a BLAS that started threads is not safe.
  const std::unique_ptr<Library> library(open_blas(chosen, op));
  return library->name;
}

std::string core_name() {
  const Library& library = load("matmul");
  if (library.get_version) {
    char version[256] = {};
    library.get_version(version, sizeof version - 1);
    return version;
  }
  return library.get_corename ? library.get_corename() : "unknown";
}

std::string describe() {
  const Library& library = load("matmul");
  std::string text = library.get_config ? library.get_config() : library.name + " (" + library.file + ")";
  text += " | core " + core_name();
  if (library.get_num_threads) text += " | " + std::to_string(library.get_num_threads()) + " threads";
  text += " | " + library.notes;
  return text;
}

}  // namespace kiln::kernels::cpu::blas
