#pragma once
// The driver of the JIT's attention kernels (fusion kind `attention`): for every batch item,
//   out = rows(op(A) * op(B)) * op(C)
// where `rows` is generated code that maps whole rows of the first product (the scores) to rows of the same
// width (softmax(scores / sqrt(d)) in attention; any row-wise fusion in general). The first product is computed
// kMr rows at a time into a strip that stays in L1/L2, passed to `rows`, and multiplied into the output at
// once, so the scores -- batch x m x n floats, 64 MiB for 4 x 16 heads of 512 x 512 -- are never written to
// memory. The standard executor keeps running the two matmuls through OpenBLAS with a kernel between them.
//
// Work: units of a batch item's row strips, claimed by the threads one after another; a thread packs the
// item's op(B) and op(C) once per item it works on (they stay in its L2), or once in all when every item shares
// them. Every output element is summed in one fixed order whatever the thread count (K blocks of at most 256
// in order, fused multiply-adds in order), so results are bitwise reproducible; they differ from OpenBLAS's by
// rounding only.

#include <atomic>
#include <cstdint>

namespace kiln::kernels::cpu {

// Items of at most this many rows (a decoder's step: a query per head, or two) are matrix-vector products, the keys
// and values read in place once for both rows, each row's sums those it would have alone (attention.cpp). With 3 and 4
// rows the microkernel's strips were as fast or faster (registers run out for the rows' sums of a value row).
inline constexpr std::int64_t kAttentionFewRows = 2;

struct AttentionProblem {
  std::int64_t batch = 0;     // independent items
  std::int64_t m = 0, n = 0;  // the first product is m x n (scores)
  std::int64_t k = 0;         // its contraction
  std::int64_t d = 0;         // the output is m x d
  // The operands, the probabilities and the output in bf16 (bit patterns), else f32. In bf16 both products run in
  // AMX tiles (needs has_amx_bf16(), gemm_bf16.h) with the same packing and order of sums as gemm_bf16, so the
  // scores' sums, and the output rounded once, are those of the standard executor's two bf16 matmuls.
  bool bf16 = false;
  // op(A): m x k, stored m x k (lda = k), or k x m when transposed (lda = m). Items batch_stride elements apart
  // (0: one matrix shared by every item).
  const void* a = nullptr;
  std::int64_t a_batch_stride = 0;
  bool transpose_a = false;
  // op(B): k x n, stored k x n, or n x k when transposed.
  const void* b = nullptr;
  std::int64_t b_batch_stride = 0;
  bool transpose_b = false;
  // op(C): n x d, stored n x d, or d x n when transposed.
  const void* c = nullptr;
  std::int64_t c_batch_stride = 0;
  bool transpose_c = false;
  void* out = nullptr;  // batch x m x d, dense
  // Scratch the row function needs for itself (the generated code's row caches): each thread has its own,
  // 64-byte aligned, passed to every call, so the rows need no allocation of their own.
  std::int64_t row_scratch_bytes = 0;
};

// Maps rows [row_begin, row_end) of the scores -- numbered across the batch (item * m + row) -- to the same
// rows of `probabilities`. The scores are the f32 sums of the first product (a bf16 product's not yet rounded);
// the probabilities are of the problem's type (f32 or bf16). Both have `ld` elements per row and hold only these
// rows (row row_begin first); `scratch` is the calling thread's row_scratch_bytes. Called from several threads at
// once, on disjoint rows.
using AttentionRows = void (*)(void* context, std::int64_t row_begin, std::int64_t row_end, const float* scores,
                               void* probabilities, std::int64_t ld, void* scratch);

// Scratch one thread needs for a problem with these n, k, d (kiln's allocator provides it): the fusion pass
// keeps it bounded.
std::int64_t attention_scratch_bytes(std::int64_t n, std::int64_t k, std::int64_t d);

// Multithreaded through runtime::parallel_pieces. Preconditions (not checked): sizes >= 0, out does not overlap
// the operands.
void attention(const AttentionProblem& problem, AttentionRows rows, void* context);
// attention() of a bf16 problem (attention_bf16.cpp).
void attention_bf16(const AttentionProblem& problem, AttentionRows rows, void* context);

// The drivers' work: units of a batch item's row strips, claimed by the threads one after another (a thread packs
// an item's op(B) and op(C) once per unit). pieces() threads take part.
class StripUnits {
 public:
  struct Unit {
    std::int64_t item = 0, strip_begin = 0, strip_end = 0;
  };
  StripUnits(std::int64_t batch, std::int64_t strips);
  int pieces() const { return pieces_; }
  bool next(Unit& unit);  // the next unclaimed unit, or false when none is left

 private:
  std::int64_t strips_, groups_ = 1, units_ = 0;
  int pieces_ = 1;
  std::atomic<std::int64_t> next_{0};
};

}  // namespace kiln::kernels::cpu
