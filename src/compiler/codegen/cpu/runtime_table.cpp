#include "compiler/codegen/cpu/runtime_table.h"

#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_bf16.h"
#include "runtime/allocator.h"
#include "runtime/parallel.h"

#include <algorithm>
#include <new>
#include <utility>
#include <vector>

namespace kiln::compiler::cpu {
namespace {

void parallel_for(int64_t count, int64_t grain, void (*body)(void*, int64_t, int64_t), void* context) {
  runtime::parallel_for(count, grain, runtime::RangeFunction(body, context));
}

// Scratch memory through kiln's allocator, so memory statistics see it. A
// header before the block remembers its sizes.
struct ScratchHeader {
  std::size_t bytes;
  std::size_t capacity;
};
constexpr std::size_t header_size = 64;

void* allocate(size_t bytes) {
  std::size_t capacity = 0;
  void* block = runtime::allocator_for(Device::cpu()).allocate(bytes + header_size, &capacity);
  if (!block) throw std::bad_alloc();
  *static_cast<ScratchHeader*>(block) = {bytes + header_size, capacity};
  return static_cast<char*>(block) + header_size;
}

void deallocate(void* pointer) {
  if (!pointer) return;
  void* block = static_cast<char*>(pointer) - header_size;
  ScratchHeader header = *static_cast<ScratchHeader*>(block);
  runtime::allocator_for(Device::cpu()).deallocate(block, header.bytes, header.capacity);
}

int64_t sgemm_block_count(int64_t m, int64_t n, int64_t k) { return kernels::cpu::plan_sgemm(m, n, k).block_count; }

void sgemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, int transpose_a, const float* b, int64_t ldb,
           int transpose_b, float* c, int64_t ldc, kiln_gemm_epilogue epilogue, void* epilogue_context) {
  kernels::cpu::GemmEpilogue hook;
  hook.function = epilogue;
  hook.context = epilogue_context;
  kernels::cpu::sgemm_or_openblas(m, n, k, a, lda, transpose_a != 0, b, ldb, transpose_b != 0, c, ldc, hook);
}

int64_t gemm_bf16_block_count(int64_t m, int64_t n) { return kernels::cpu::gemm_bf16_block_count(m, n); }

void gemm_bf16(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, int transpose_a, const uint16_t* b,
               int64_t ldb, int transpose_b, kiln_gemm_epilogue epilogue, void* epilogue_context) {
  kernels::cpu::gemm_bf16(m, n, k, a, lda, transpose_a != 0, b, ldb, transpose_b != 0, nullptr, 0,
                          {epilogue, epilogue_context});
}

static_assert(KILN_GATHER_MAX_AXES == kernels::cpu::kGatherMaxAxes);

void sgemm_gathered(int64_t m, int64_t n, int64_t k, const kiln_gathered_rows* a, int transpose_a, const float* b,
                    int64_t ldb, int transpose_b, float* c, int64_t ldc, kiln_gemm_epilogue epilogue,
                    void* epilogue_context) {
  std::vector<kernels::cpu::GatheredPart> parts(static_cast<std::size_t>(a->part_count));
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const kiln_gathered_part& from = a->parts[p];
    kernels::cpu::GatheredPart& part = parts[p];
    part.source = from.source;
    part.offset = from.offset;
    part.width = from.width;
    std::copy_n(from.strides, KILN_GATHER_MAX_AXES, part.strides);
    std::copy_n(from.lower, KILN_GATHER_MAX_AXES, part.lower);
    std::copy_n(from.upper, KILN_GATHER_MAX_AXES, part.upper);
  }
  kernels::cpu::GatheredRows rows;
  rows.axes = a->axes;
  std::copy_n(a->extents, KILN_GATHER_MAX_AXES, rows.extents);
  rows.part_count = a->part_count;
  rows.parts = parts.data();
  if (transpose_a)
    kernels::cpu::sgemm_gathered_transposed(m, n, k, rows, b, ldb, transpose_b != 0, c, ldc,
                                            {epilogue, epilogue_context});
  else
    kernels::cpu::sgemm_gathered(m, n, k, rows, b, ldb, transpose_b != 0, c, ldc, {epilogue, epilogue_context});
}

void attention(const kiln_attention_problem* problem, kiln_attention_rows rows, void* context) {
  kernels::cpu::AttentionProblem unpacked;
  unpacked.batch = problem->batch;
  unpacked.m = problem->m;
  unpacked.n = problem->n;
  unpacked.k = problem->k;
  unpacked.d = problem->d;
  unpacked.bf16 = problem->bf16 != 0;
  unpacked.a = problem->a;
  unpacked.a_batch_stride = problem->a_batch_stride;
  unpacked.transpose_a = problem->transpose_a != 0;
  unpacked.b = problem->b;
  unpacked.b_batch_stride = problem->b_batch_stride;
  unpacked.transpose_b = problem->transpose_b != 0;
  unpacked.c = problem->c;
  unpacked.c_batch_stride = problem->c_batch_stride;
  unpacked.transpose_c = problem->transpose_c != 0;
  unpacked.out = problem->out;
  unpacked.row_scratch_bytes = problem->row_scratch_bytes;
  kernels::cpu::attention(unpacked, rows, context);
}

void index_out_of_range(const kiln_runtime* runtime, int64_t node, int64_t position, int64_t index, int64_t extent) {
  static_cast<CallState*>(runtime->call_state)->report({node, position, index, extent});
}

int failed(const kiln_runtime* runtime) { return static_cast<const CallState*>(runtime->call_state)->reported(); }

}  // namespace

void CallState::report(const IndexOutOfRange& found) {
  const std::lock_guard lock(mutex_);
  reported_.store(true, std::memory_order_relaxed);
  if (!first_ || found.node < first_->node || (found.node == first_->node && found.position < first_->position))
    first_ = found;
}

std::optional<IndexOutOfRange> CallState::take() {
  const std::lock_guard lock(mutex_);
  reported_.store(false, std::memory_order_relaxed);
  return std::exchange(first_, std::nullopt);
}

kiln_runtime runtime_table(CallState& state) {
  // A copy per call: the thread count may change between calls, and calls
  // come from many threads at once.
  static const kiln_runtime table = [] {
    kiln_runtime runtime{};
    runtime.abi_version = KILN_JIT_ABI_VERSION;
    runtime.parallel_for = parallel_for;
    runtime.allocate = allocate;
    runtime.deallocate = deallocate;
    runtime.sgemm_block_count = sgemm_block_count;
    runtime.sgemm = sgemm;
    runtime.sgemm_gathered = sgemm_gathered;
    runtime.attention = attention;
    runtime.index_out_of_range = index_out_of_range;
    runtime.gemm_bf16_block_count = gemm_bf16_block_count;
    runtime.gemm_bf16 = gemm_bf16;
    runtime.failed = failed;
    return runtime;
  }();
  kiln_runtime for_this_call = table;
  for_this_call.thread_count = runtime::thread_count();
  for_this_call.call_state = &state;
  return for_this_call;
}

}  // namespace kiln::compiler::cpu
