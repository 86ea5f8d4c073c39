#include "kernels/cuda/blas_lt.h"

#include "runtime/log.h"

#include <kiln/error.h>

#include <cublasLt.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <compare>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln::kernels::cuda {
namespace {

using std::int64_t;

constexpr std::size_t workspace_bytes = std::size_t{32} << 20;  // what cuBLAS itself uses on Hopper
// Tuning: the heuristic's first `candidates` algorithms, in its order of preference, race cuBLAS's own
// choice on the problem (see Race); all of the first `always_tried`, then more while the GPU time spent
// stays under the budget (XLA's autotuner weighs up to 128 cuBLASLt algorithms). A candidate and the
// baseline it is compared with take 8 runs: on a TF32 8192^3 product, ~3 ms a run, all 32 fit; an f32
// one, ~22 ms, gets about 6. The fastest candidate's rematches take 24 runs more.
constexpr int candidates = 32;
constexpr int always_tried = 4;
constexpr float tuning_budget_ms = 1000;
constexpr double tuning_flops = double(1 << 30);  // smaller products take the heuristic's first choice
constexpr int timed_runs = 3;

void check_lt(cublasStatus_t status, const char* call) { runtime::cuda::check(status, call, "matmul"); }

bool autotune_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("KILN_CUDA_GEMM_AUTOTUNE");
    return !(value && std::string(value) == "0");
  }();
  return enabled;
}

// Per GPU: the cuBLASLt handle and its workspace (outside kiln's allocator,
// like cuBLAS's own workspace: it lives as long as the process).
struct LtDevice {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

// Guards the handles and the plans below (shared by every GPU's thread).
std::mutex state_mutex;

LtDevice& lt_device(runtime::cuda::DeviceContext& context) {
  static std::map<int, LtDevice> devices;
  LtDevice& device = devices[context.index];
  if (!device.handle) {
    check_lt(cublasLtCreate(&device.handle), "cublasLtCreate");
    runtime::cuda::check(cudaMalloc(&device.workspace, workspace_bytes), "cudaMalloc", "matmul");
  }
  return device;
}

// The descriptors of one problem and the algorithm chosen for it.
struct Plan {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, result = nullptr;
  cublasLtMatmulAlgo_t algorithm{};
  // False when cuBLASLt offered no algorithm or its choice returned an error:
  // cublasGemmEx takes the problem. Atomic: plans are shared by every thread.
  std::atomic<bool> usable = false;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (result) cublasLtMatrixLayoutDestroy(result);
    if (second) cublasLtMatrixLayoutDestroy(second);
    if (first) cublasLtMatrixLayoutDestroy(first);
    if (operation) cublasLtMatmulDescDestroy(operation);
  }
};

// The alignment in bytes (a power of two, at most 256) of every matrix of a
// batch: of `pointer` and of each step of `stride` elements of `element_size`.
// cuBLASLt's heuristic assumes 256-byte aligned operands unless told less,
// and an algorithm that relies on more alignment than an operand has faults
// on a misaligned address, which ends the CUDA context; kiln's views (batch
// items, slices, arena temporaries) can be aligned to as little as 4 bytes.
std::uint32_t alignment_of(const void* pointer, int64_t stride, std::size_t element_size) {
  std::uint64_t bits = reinterpret_cast<std::uintptr_t>(pointer) | 256u;
  if (stride != 0) bits |= static_cast<std::uint64_t>(stride) * element_size;
  return static_cast<std::uint32_t>(bits & (~bits + 1));  // the lowest set bit
}

struct Alignments {
  std::uint32_t a = 256, b = 256, c = 256, bias = 256;
  auto operator<=>(const Alignments&) const = default;
};

Alignments alignments_of(const GemmProblem& p, const void* a, const void* b, const void* c) {
  const std::size_t size = size_of(p.dtype), operand_size = size_of(p.operands);
  const bool batched = p.batch > 1;
  return {alignment_of(a, batched ? p.stride_a : 0, operand_size),
          alignment_of(b, batched ? p.stride_b : 0, operand_size), alignment_of(c, batched ? p.stride_c : 0, size),
          p.bias ? alignment_of(p.bias, 0, size) : 256u};
}

// The library's name of a dtype kiln multiplies in: f32, f64, bf16 or f16.
cudaDataType data_type(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return CUDA_R_64F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

// How the sums are computed: in f64 for f64, on the TF32 tensor cores for f32 operands while allowed, else in f32
// (bf16 and f16 operands on their own tensor cores, summed in f32).
cublasComputeType_t compute_type(const GemmProblem& p) {
  if (p.dtype == DType::f64) return CUBLAS_COMPUTE_64F;
  return p.tf32 && p.operands == DType::f32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// The bias pointer itself is not part of the key (it is set on the plan
// before each call), its alignment is.
using Key = std::tuple<int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, bool,
                       int, Alignments>;

Key key_of(int device, const GemmProblem& p, const Alignments& alignments) {
  return {device,
          p.transpose_a,
          p.transpose_b,
          p.m,
          p.n,
          p.k,
          p.batch,
          p.stride_a,
          p.stride_b,
          p.stride_c,
          static_cast<int>(p.dtype),
          static_cast<int>(p.operands),
          p.tf32,
          static_cast<int>(p.epilogue),
          alignments};
}

cublasLtEpilogue_t lt_epilogue(GemmEpilogue epilogue) {
  switch (epilogue) {
    case GemmEpilogue::none: return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::bias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::relu: return CUBLASLT_EPILOGUE_RELU;
    case GemmEpilogue::bias_relu: return CUBLASLT_EPILOGUE_RELU_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

void set_bias(const cublasLtMatmulDesc_t operation, const void* bias) {
  check_lt(cublasLtMatmulDescSetAttribute(operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
           "cublasLtMatmulDescSetAttribute");
}

cublasLtMatrixLayout_t layout(cudaDataType type, int64_t rows, int64_t columns, int64_t leading, int64_t batch,
                              int64_t stride) {
  cublasLtMatrixLayout_t result = nullptr;
  check_lt(cublasLtMatrixLayoutCreate(&result, type, static_cast<std::uint64_t>(rows),
                                      static_cast<std::uint64_t>(columns), leading),
           "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    const std::int32_t count = static_cast<std::int32_t>(batch);
    check_lt(cublasLtMatrixLayoutSetAttribute(result, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
             "cublasLtMatrixLayoutSetAttribute");
    check_lt(cublasLtMatrixLayoutSetAttribute(result, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                              sizeof stride),
             "cublasLtMatrixLayoutSetAttribute");
  }
  return result;
}

cublasStatus_t run(runtime::cuda::DeviceContext& context, LtDevice& device, const Plan& plan,
                   const cublasLtMatmulAlgo_t& algorithm, DType dtype, const void* a, const void* b, void* c) {
  const float alpha32 = 1, beta32 = 0;
  const double alpha64 = 1, beta64 = 0;
  const void* alpha = dtype == DType::f32 ? static_cast<const void*>(&alpha32) : &alpha64;
  const void* beta = dtype == DType::f32 ? static_cast<const void*>(&beta32) : &beta64;
  // Column-major C^T = op(B)^T op(A)^T: B is the first operand.
  return cublasLtMatmul(device.handle, plan.operation, alpha, b, plan.first, a, plan.second, beta, c, plan.result, c,
                        plan.result, &algorithm, device.workspace, workspace_bytes, context.stream);
}

// Times runs of one way of computing a product on the stream: `call` (which
// returns whether it ran) once to warm up, then `timed_runs` times between
// two events. Waits for the stream.
class GemmTimer {
 public:
  explicit GemmTimer(runtime::cuda::DeviceContext& context) : context_(context) {}

  // Milliseconds for the timed runs, or nothing when a run failed.
  template <class Call>
  std::optional<float> time(Call call) {
    if (!call()) return std::nullopt;
    runtime::cuda::check(cudaEventRecord(start_.get(), context_.stream), "cudaEventRecord", "matmul");
    bool ran = true;
    for (int r = 0; r < timed_runs; ++r) ran = ran && call();
    runtime::cuda::check(cudaEventRecord(stop_.get(), context_.stream), "cudaEventRecord", "matmul");
    runtime::cuda::check(cudaEventSynchronize(stop_.get()), "cudaEventSynchronize", "matmul");
    float elapsed = 0;
    runtime::cuda::check(cudaEventElapsedTime(&elapsed, start_.get(), stop_.get()), "cudaEventElapsedTime", "matmul");
    spent_ms_ += elapsed * (timed_runs + 1) / timed_runs;  // the warm-up run too
    if (!ran) return std::nullopt;
    return elapsed;
  }
  float spent_ms() const { return spent_ms_; }

 private:
  // Destroyed however the timer goes (a failed check throws).
  using OwnedEvent = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, decltype(&cudaEventDestroy)>;
  static OwnedEvent create_event() {
    cudaEvent_t event = nullptr;
    runtime::cuda::check(cudaEventCreate(&event), "cudaEventCreate", "matmul");
    return OwnedEvent(event, &cudaEventDestroy);
  }

  runtime::cuda::DeviceContext& context_;
  OwnedEvent start_ = create_event(), stop_ = create_event();
  float spent_ms_ = 0;
};

// The way of computing a product that a race chose: cuBLAS's own choice
// (cublasGemmEx) or one of the heuristic's candidates.
constexpr int cublas_choice = -1;

// Races the heuristic's candidates (`found`) on this problem's buffers
// against a baseline, `baseline`: cuBLAS's own choice, or, when it cannot
// run or the problem has an epilogue (cublasGemmEx applies none), the
// heuristic's first candidate. Returns the way that computes the product
// (cublas_choice or an index into `found`).
//
// Each candidate is timed between two timings of the baseline and compared
// with their mean. A GPU's clock drifts as it heats during the race (a TF32
// product is power bound): with each candidate timed once in turn, as
// before, the first ones ran at a higher clock than the last, and on an H200
// the race kept a candidate that ran at 86% of cublasGemmEx's rate in steady
// use. The fastest candidate then meets the baseline `rematches` more times,
// the same way, and replaces it only when faster by `margin` over all their
// meetings: one short timing is too noisy to leave cuBLAS's choice for a
// candidate that is not really faster, and a fixed margin large enough to
// cover that noise would keep cuBLAS's choice where XLA's autotuner (which
// races the same candidates) takes a faster one.
class Race {
 public:
  Race(runtime::cuda::DeviceContext& context, LtDevice& device, const Plan& plan, const GemmProblem& problem,
       const std::vector<cublasLtMatmulHeuristicResult_t>& found, const void* a, const void* b, void* c)
      : context_(context),
        device_(device),
        plan_(plan),
        problem_(problem),
        found_(found),
        a_(a),
        b_(b),
        c_(c),
        timer_(context) {}

  int choose(int baseline) {
    before_ = time(baseline);
    if (!before_) return baseline == cublas_choice ? choose(0) : cublas_choice;  // cuBLAS's choice refused it
    int fastest = baseline;
    double fastest_ratio = 1;
    for (int i = 0; i < static_cast<int>(found_.size()); ++i) {
      if (i == baseline) continue;
      if (i >= always_tried && timer_.spent_ms() >= tuning_budget_ms) break;
      std::optional<double> ratio = meet(i, baseline);  // nothing when cuBLASLt refuses to run it
      if (!before_) break;
      if (ratio && *ratio < fastest_ratio) {
        fastest = i;
        fastest_ratio = *ratio;
      }
      if (log_) report_ += " #" + std::to_string(i) + " " + (ratio ? format_number(*ratio) + "x" : "refused");
    }
    int chosen = baseline;
    if (fastest != baseline) {
      double total = fastest_ratio;
      int meetings = 1;
      for (; meetings <= rematches && before_; ++meetings) {
        std::optional<double> ratio = meet(fastest, baseline);
        if (!ratio) break;
        total += *ratio;
      }
      const double mean = total / meetings;
      if (mean < 1 - margin) chosen = fastest;
      if (log_) report_ += "; #" + std::to_string(fastest) + " over " + std::to_string(meetings) + " meetings " +
                           format_number(mean) + "x";
    }
    if (log_) {
      runtime::log(LogLevel::debug, "matmul tuning " + describe(problem_) + ", time over " + name(baseline) +
                                        "'s:" + report_ + "; chosen: " + name(chosen) + ", after " +
                                        format_number(timer_.spent_ms()) + " ms of GPU time");
    }
    return chosen;
  }

 private:
  static constexpr double margin = 0.005;
  static constexpr int rematches = 3;

  // Times `way` and then the baseline: `way`'s time over the mean of the
  // baseline's before and after it, or nothing when `way` did not run.
  // Leaves before_ empty when the baseline did not run.
  std::optional<double> meet(int way, int baseline) {
    std::optional<float> elapsed = time(way);
    std::optional<float> after = time(baseline);
    std::optional<float> before = before_;
    before_ = after;
    if (!elapsed || !after) return std::nullopt;
    return *elapsed / ((*before + *after) / 2);
  }

  std::optional<float> time(int way) {
    return timer_.time([&] {
      if (way == cublas_choice) return cublas_matmul(context_, problem_, a_, b_, c_) == CUBLAS_STATUS_SUCCESS;
      return kiln::kernels::cuda::run(context_, device_, plan_, found_[static_cast<std::size_t>(way)].algo,
                                      problem_.dtype, a_, b_, c_) == CUBLAS_STATUS_SUCCESS;
    });
  }

  static std::string name(int way) {
    return way == cublas_choice ? "cuBLAS's own choice" : "candidate #" + std::to_string(way);
  }
  static std::string format_number(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3f", value);
    return text;
  }
  static std::string describe(const GemmProblem& p) {
    return "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
           (p.batch > 1 ? " batch=" + std::to_string(p.batch) : "") +
           (p.operands != p.dtype   ? " " + std::string(to_string(p.operands))
            : p.dtype == DType::f64 ? " f64"
            : p.tf32                ? " tf32"
                                    : " f32") +
           (p.epilogue == GemmEpilogue::none ? "" : " with an epilogue");
  }

  runtime::cuda::DeviceContext& context_;
  LtDevice& device_;
  const Plan& plan_;
  const GemmProblem& problem_;
  const std::vector<cublasLtMatmulHeuristicResult_t>& found_;
  const void* a_;
  const void* b_;
  void* c_;
  GemmTimer timer_;
  const bool log_ = runtime::log_enabled(LogLevel::debug);
  std::string report_;
  std::optional<float> before_;  // the baseline's last time
};

std::unique_ptr<Plan> make_plan(runtime::cuda::DeviceContext& context, LtDevice& device, const GemmProblem& p,
                                const Alignments& alignments, const void* a, const void* b, void* c) {
  auto plan = std::make_unique<Plan>();
  const cudaDataType type = data_type(p.dtype), operand_type = data_type(p.operands);
  check_lt(cublasLtMatmulDescCreate(&plan->operation, compute_type(p), type), "cublasLtMatmulDescCreate");
  const cublasOperation_t first_operation = p.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t second_operation = p.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_TRANSA, &first_operation,
                                          sizeof first_operation),
           "cublasLtMatmulDescSetAttribute");
  check_lt(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_TRANSB, &second_operation,
                                          sizeof second_operation),
           "cublasLtMatmulDescSetAttribute");
  if (p.epilogue != GemmEpilogue::none) {
    // In the column-major view the bias runs along the rows of C^T [n, m]:
    // one value per row-major column j, as kiln's product + bias[j].
    const cublasLtEpilogue_t epilogue = lt_epilogue(p.epilogue);
    check_lt(cublasLtMatmulDescSetAttribute(plan->operation, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
             "cublasLtMatmulDescSetAttribute");
    if (has_bias(p.epilogue)) set_bias(plan->operation, p.bias);
  }
  // Layouts as stored (before the transposes): row-major [r, c] is column-major [c, r].
  plan->first = p.transpose_b ? layout(operand_type, p.k, p.n, p.k, p.batch, p.stride_b)    // B stored [n, k]
                              : layout(operand_type, p.n, p.k, p.n, p.batch, p.stride_b);   // B stored [k, n]
  plan->second = p.transpose_a ? layout(operand_type, p.m, p.k, p.m, p.batch, p.stride_a)   // A stored [k, m]
                               : layout(operand_type, p.k, p.m, p.k, p.batch, p.stride_a);  // A stored [m, k]
  plan->result = layout(type, p.n, p.m, p.n, p.batch, p.stride_c);

  cublasLtMatmulPreference_t preference = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
  std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>, decltype(&cublasLtMatmulPreferenceDestroy)>
      owned_preference(preference, &cublasLtMatmulPreferenceDestroy);  // destroyed however this returns
  const std::uint64_t workspace = workspace_bytes;
  check_lt(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                sizeof workspace),
           "cublasLtMatmulPreferenceSetAttribute");
  // Only algorithms that work at the operands' alignment (cuBLASLt's A is kiln's B: the operands swap).
  for (const auto& [attribute, alignment] :
       {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignments.b},
        std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignments.a},
        std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignments.c},
        std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignments.c}})
    check_lt(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &alignment, sizeof alignment),
             "cublasLtMatmulPreferenceSetAttribute");
  std::vector<cublasLtMatmulHeuristicResult_t> found(candidates);
  int count = 0;
  cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(device.handle, plan->operation, plan->first, plan->second, plan->result,
                                     plan->result, preference, candidates, found.data(), &count);
  if (status != CUBLAS_STATUS_SUCCESS || count == 0) return plan;  // not usable: cublasGemmEx takes it
  found.resize(static_cast<std::size_t>(count));
  std::erase_if(found, [](const cublasLtMatmulHeuristicResult_t& result) {
    return result.state != CUBLAS_STATUS_SUCCESS || result.workspaceSize > workspace_bytes;
  });
  if (found.empty()) return plan;
  const double flops = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k) *
                       static_cast<double>(p.batch);
  int chosen = 0;
  if (autotune_enabled() && flops >= tuning_flops) {
    chosen =
        Race(context, device, *plan, p, found, a, b, c).choose(p.epilogue == GemmEpilogue::none ? cublas_choice : 0);
    if (chosen == cublas_choice) return plan;  // not usable: cublasGemmEx takes it
  }
  plan->algorithm = found[static_cast<std::size_t>(chosen)].algo;
  plan->usable = true;
  return plan;
}

}  // namespace

cublasStatus_t cublas_matmul(runtime::cuda::DeviceContext& context, const GemmProblem& p, const void* a, const void* b,
                             void* c) {
  const bool f32 = p.dtype == DType::f32;
  const cudaDataType type = data_type(p.dtype), operand_type = data_type(p.operands);
  const cublasComputeType_t compute = compute_type(p);
  const float alpha32 = 1, beta32 = 0;
  const double alpha64 = 1, beta64 = 0;
  const void* alpha = f32 ? static_cast<const void*>(&alpha32) : &alpha64;
  const void* beta = f32 ? static_cast<const void*>(&beta32) : &beta64;
  const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
  const int lda = static_cast<int>(p.transpose_a ? p.m : p.k), ldb = static_cast<int>(p.transpose_b ? p.k : p.n);
  const cublasOperation_t operation_a = p.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t operation_b = p.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasHandle_t handle = runtime::cuda::cublas_handle(context);
  // Column-major view: C^T [n x m] = op(B)^T [n x k] * op(A)^T [k x m].
  if (p.batch == 1)
    return cublasGemmEx(handle, operation_b, operation_a, n, m, k, alpha, b, operand_type, ldb, a, operand_type, lda,
                        beta, c, type, n, compute, CUBLAS_GEMM_DEFAULT);
  return cublasGemmStridedBatchedEx(handle, operation_b, operation_a, n, m, k, alpha, b, operand_type, ldb, p.stride_b,
                                    a, operand_type, lda, p.stride_a, beta, c, type, n, p.stride_c,
                                    static_cast<int>(p.batch), compute, CUBLAS_GEMM_DEFAULT);
}

bool lt_matmul(runtime::cuda::DeviceContext& context, const GemmProblem& problem, const void* a, const void* b,
               void* c) {
  if (problem.dtype != DType::f32 && problem.dtype != DType::f64) return false;
  if (problem.operands != problem.dtype && (problem.dtype != DType::f32 || !is_half_precision(problem.operands)))
    return false;
  if (problem.epilogue != GemmEpilogue::none) {
    if (problem.dtype != DType::f32 || problem.batch != 1) return false;
    // cuBLASLt has no alignment preference for the bias, and its epilogues
    // read it in 16-byte pieces: a bias at a smaller alignment is left to the
    // standard kernels (kiln's buffers and arena slots are 64-byte aligned).
    if (has_bias(problem.epilogue) && (!problem.bias || reinterpret_cast<std::uintptr_t>(problem.bias) % 16 != 0))
      return false;
  }
  if (problem.batch > INT_MAX) return false;
  // A broadcast operand (batch stride 0) is left to cublasGemmStridedBatchedEx.
  if (problem.batch > 1 && (problem.stride_a == 0 || problem.stride_b == 0)) return false;
  static std::map<Key, std::unique_ptr<Plan>> plans;  // kept for the process, like loaded modules
  runtime::cuda::DeviceGuard guard(context.index);
  std::unique_lock lock(state_mutex);
  LtDevice& device = lt_device(context);
  const Alignments alignments = alignments_of(problem, a, b, c);
  Key key = key_of(context.index, problem, alignments);
  auto found = plans.find(key);
  if (found == plans.end())
    found = plans.emplace(key, make_plan(context, device, problem, alignments, a, b, c)).first;
  Plan& plan = *found->second;
  lock.unlock();  // plans are never removed once made; the caller's cublas_mutex serializes their use
  if (!plan.usable) return false;
  if (has_bias(problem.epilogue)) set_bias(plan.operation, problem.bias);
  cublasStatus_t status = run(context, device, plan, plan.algorithm, problem.dtype, a, b, c);
  if (status == CUBLAS_STATUS_SUCCESS) return true;
  // Refused before running (a status, not a fault of the running kernel):
  // say so once, and leave this problem to cublasGemmEx from now on.
  plan.usable = false;
  runtime::warn("matmul: cuBLASLt refused its chosen algorithm (" + std::string(cublasGetStatusString(status)) +
               "); cuBLAS's cublasGemmEx computes this product instead");
  return false;
}

}  // namespace kiln::kernels::cuda
