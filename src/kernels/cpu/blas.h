#pragma once
// The BLAS that kiln's float matmuls call, loaded at first use with dlopen, so
// that kiln links and runs without one until a float matmul is asked for:
//   KILN_BLAS set        that library (a path or a file name the dynamic
//                        loader finds), which must export cblas_sgemm and
//                        cblas_dgemm; a DeviceError names it if it does not.
//   else, on Intel CPUs  Intel's oneMKL (libmkl_rt.so.3, .so.2) where the
//                        dynamic loader finds it: its sgemm measured 1.08-1.24x
//                        OpenBLAS's rate here (docs/design-notes.md, "BLAS").
//   else                 OpenBLAS (libopenblas.so.0), which the project
//                        installs.
// (The names below say OpenBLAS where the code is OpenBLAS's; blas::name()
// says which library was loaded.)
//
// Before loading, kiln fills in two OpenBLAS environment variables that the
// user has not set (a user's own setting always wins):
//   OPENBLAS_CORETYPE        Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) does not
//                            know CPUs newer than its release (Sapphire and
//                            Emerald Rapids) and falls back to its SSE3
//                            "Prescott" kernels, ~7x slower. kiln picks the
//                            kernel set from the CPU's features instead:
//                            AVX-512 (F, BW, DQ, VL) -> SkylakeX, AVX2 + FMA ->
//                            Haswell. (Cooperlake measured the same as SkylakeX
//                            for sgemm/dgemm, Haswell half of it.)
//   OPENBLAS_THREAD_TIMEOUT  OpenBLAS's idle threads spin (sched_yield) for
//                            2^N TSC ticks after each call before sleeping;
//                            the default N = 28 (~0.13 s here) burns a whole
//                            core after every call, taken from kiln's own pool
//                            and from everything else on the machine. kiln
//                            sets N = 16 (~30 us: back-to-back calls still
//                            find the threads awake; no measurable wake-up
//                            cost). OpenBLAS clamps N to [4, 30].
// For oneMKL, which runs its threads with Intel's OpenMP runtime:
//   KMP_BLOCKTIME            how long (ms) idle OpenMP threads spin before
//                            sleeping; the default 200 ms takes a core from
//                            kiln's pool after every GEMM. kiln sets 1.
// The BLAS's thread count follows runtime::thread_count() (KILN_NUM_THREADS):
// OPENBLAS_NUM_THREADS and MKL_NUM_THREADS, if unset, are set to it before
// loading so that the BLAS starts no more threads than kiln uses, and
// sync_thread_count() keeps the two equal afterwards. These variables are
// set once, during static initialization (see blas.cpp).
// The measurements behind these choices: tools/reduction_bandwidth.cpp and
// the notes in blas.cpp.

#include <string>

namespace kiln::kernels::cpu::blas {

// CBLAS enumeration values (cblas.h); the C ABI passes them as int.
inline constexpr int row_major = 101;
inline constexpr int no_transpose = 111;
inline constexpr int transpose = 112;

// cblas_sgemm / cblas_dgemm: C = alpha * op(A) op(B) + beta * C.
using SgemmFunction = void (*)(int layout, int transpose_a, int transpose_b, int m, int n, int k, float alpha,
                               const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);
using DgemmFunction = void (*)(int layout, int transpose_a, int transpose_b, int m, int n, int k, double alpha,
                               const double* a, int lda, const double* b, int ldb, double beta, double* c, int ldc);

// The GEMM entry points that kernels call and that JIT-generated code
// receives as arguments (generated code never loads OpenBLAS itself).
struct Functions {
  SgemmFunction sgemm = nullptr;
  DgemmFunction dgemm = nullptr;
  // oneMKL runs a narrow product of a transposed left operand (op(A) = A^T, n <= 64) slowly on one thread: an
  // attention backward's dV = P^T dO, 8 heads of 1024 x 64 x 1024 from two threads, 8.6 ms against OpenBLAS's 6.2;
  // computed as C^T = B^T A and moved into C, 6.3 ms (matmul.cpp).
  bool narrow_transposed_left_slow = false;
};

// Loads the BLAS on the first call (thread-safe; later calls cost one atomic
// load) and returns its entry points. Throws kiln::DeviceError naming `op`
// and the package to install (or the KILN_BLAS library) if none can be
// loaded; a later call tries again.
const Functions& functions(const char* op = "matmul");

// Makes the BLAS's thread count equal runtime::thread_count() (a cheap check
// when it already does), unless a SingleThreadedScope is alive. Kernels call
// it before each multithreaded GEMM, so runtime::set_thread_count is followed.
void sync_thread_count();

// While any scope is alive, the BLAS runs single-threaded: for callers that
// run many GEMMs at once from runtime::parallel_for (a batch, JIT tiles).
// Its count is process-wide, so a GEMM that another thread starts
// meanwhile also runs single-threaded (slower, never wrong). The last scope
// to end restores runtime::thread_count().
class SingleThreadedScope {
 public:
  SingleThreadedScope();
  ~SingleThreadedScope();
  SingleThreadedScope(const SingleThreadedScope&) = delete;
  SingleThreadedScope& operator=(const SingleThreadedScope&) = delete;
};

// "OpenBLAS" or "oneMKL": which library functions() calls. Loads it.
std::string name();

// The name of the library functions() would load were KILN_BLAS `chosen` (null: unset), without making it the
// process's BLAS; throws as functions() does. For tests.
std::string probe_library(const char* chosen, const char* op = "matmul");

// The kernel set OpenBLAS runs ("SkylakeX", "Haswell", "Prescott", ...), or
// oneMKL's version; loads the BLAS. For benchmark headers.
std::string core_name();

// One line for benchmark headers: the library's build configuration (or
// version), its core, its thread count, and the environment variables kiln
// sets for it, with who set them, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH ... |
// core SkylakeX | 2 threads | OPENBLAS_CORETYPE=SkylakeX (set by kiln) |
// OPENBLAS_THREAD_TIMEOUT=16 (set by kiln)". Loads the BLAS.
std::string describe();

}  // namespace kiln::kernels::cpu::blas
