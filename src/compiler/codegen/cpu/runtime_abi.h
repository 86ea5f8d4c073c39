#pragma once
// The C ABI between kiln and the modules its CPU JIT generates. A module
// receives this table with every call and holds no threads, allocators or
// BLAS of its own: parallel loops run on kiln's thread pool, scratch memory
// comes from kiln's allocator (so memory statistics count it), and the GEMM
// is kiln's. This header is part of every generated translation unit.

#include <stddef.h>
#include <stdint.h>

extern "C" {

// Bumped whenever the table or the entry-point signature changes; it is part
// of the cache key, so stale modules are never loaded.
#define KILN_JIT_ABI_VERSION 9

// Called on each finished block of a GEMM's output (see gemm.h).
typedef void (*kiln_gemm_epilogue)(void* context, const float* tile, int64_t ld, int64_t row_begin, int64_t row_end,
                                   int64_t column_begin, int64_t column_end, int64_t block);

// Called on rows [row_begin, row_end) of an attention kernel's first product (numbered across the batch): maps
// `scores` (the product's f32 sums) to `probabilities` (of the problem's type), both holding just these rows, `ld`
// elements apart; `scratch` is the calling thread's row_scratch_bytes (see kernels/cpu/attention.h).
typedef void (*kiln_attention_rows)(void* context, int64_t row_begin, int64_t row_end, const float* scores,
                                    void* probabilities, int64_t ld, void* scratch);

// out[i] = rows(op(a[i]) op(b[i])) op(c[i]) for i < batch: op(a) is m x k, op(b) k x n, op(c) n x d, each stored
// densely (transposed: as its transpose), items *_batch_stride elements apart (0: shared by every item); all f32,
// or all bf16 where bf16 is set.
struct kiln_attention_problem {
  int64_t batch, m, n, k, d;
  int bf16;
  const void* a;
  int64_t a_batch_stride;
  int transpose_a;
  const void* b;
  int64_t b_batch_stride;
  int transpose_b;
  const void* c;
  int64_t c_batch_stride;
  int transpose_c;
  void* out;
  int64_t row_scratch_bytes;  // what the row function needs for itself (its row caches), 64-byte aligned
};

// A GEMM's left operand gathered from memory while the GEMM packs it, never written out (kernels/cpu/gemm.h,
// GatheredRows): row r has coordinates i over `extents` (row-major), and its columns are the parts side by side;
// part p's column j of row r is source[offset + sum over t of i[t] * strides[t] + j] when lower[t] <= i[t] <
// upper[t] for every t, and 0 otherwise (where a convolution's window falls on the padding).
#define KILN_GATHER_MAX_AXES 6
struct kiln_gathered_part {
  const float* source;
  int64_t offset, width;
  int64_t strides[KILN_GATHER_MAX_AXES], lower[KILN_GATHER_MAX_AXES], upper[KILN_GATHER_MAX_AXES];
};
struct kiln_gathered_rows {
  int axes;
  int64_t extents[KILN_GATHER_MAX_AXES];
  int part_count;
  const struct kiln_gathered_part* parts;
};

struct kiln_runtime {
  int abi_version;
  int thread_count;
  // Runs body(context, begin, end) over contiguous pieces of [0, count).
  void (*parallel_for)(int64_t count, int64_t grain, void (*body)(void*, int64_t, int64_t), void* context);
  // Scratch memory, 64-byte aligned.
  void* (*allocate)(size_t bytes);
  void (*deallocate)(void* pointer);
  // Number of output blocks sgemm will pass to an epilogue.
  int64_t (*sgemm_block_count)(int64_t m, int64_t n, int64_t k);
  // C = op(A) op(B), row-major f32; c may be null when only the epilogue is wanted. kiln's own loops, or
  // OpenBLAS for large deep products (kernels/cpu/gemm.h, sgemm_or_openblas).
  void (*sgemm)(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, int transpose_a, const float* b,
                int64_t ldb, int transpose_b, float* c, int64_t ldc, kiln_gemm_epilogue epilogue,
                void* epilogue_context);
  // The same with A gathered (kiln's own loops: OpenBLAS needs A in memory); transposed, A's gathered rows number
  // k and op(A) = A^T.
  void (*sgemm_gathered)(int64_t m, int64_t n, int64_t k, const struct kiln_gathered_rows* a, int transpose_a,
                         const float* b, int64_t ldb, int transpose_b, float* c, int64_t ldc,
                         kiln_gemm_epilogue epilogue, void* epilogue_context);
  // Both products of an attention kernel, with its generated row code between them.
  void (*attention)(const struct kiln_attention_problem* problem, kiln_attention_rows rows, void* context);
  // A take_along_axis computed in a kernel found `index` outside [-extent, extent) at element `position` of the
  // indices of node `node`: kiln raises its ValueError once the kernel returns (the lowest position reported
  // wins, as the standard kernel's scan in order would find it). Any thread may call it.
  void (*index_out_of_range)(const struct kiln_runtime* runtime, int64_t node, int64_t position, int64_t index,
                             int64_t extent);
  void* call_state;  // kiln's, for index_out_of_range: what this call has found
  // bf16 x bf16 products (their bits) in AMX tiles, summed in f32 (kernels/cpu/gemm_bf16.h): no C, each block to
  // the epilogue only. Generated where the CPU has AMX-BF16 alone.
  int64_t (*gemm_bf16_block_count)(int64_t m, int64_t n);
  void (*gemm_bf16)(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t lda, int transpose_a,
                    const uint16_t* b, int64_t ldb, int transpose_b, kiln_gemm_epilogue epilogue,
                    void* epilogue_context);
  // A compiled loop's driver runs kernel `kernel` of its step that has no generated code (a library kernel, an
  // assembled concat's copies, a loop or branch of the step's own) through kiln: `buffers` are the kernel node's
  // operands (null for a concat's operand already in place), then its results (a control node's in order, null for
  // one nothing reads). Nonzero when it failed: the driver returns at once, and kiln raises the error.
  int (*host_kernel)(const struct kiln_runtime* runtime, int64_t kernel, void* const* buffers);
  void* host_context;  // kiln's, for host_kernel: the loop running
  // Which iteration of a compiled loop the kernels run for (0 outside loops). A row kernel walks its rows backward
  // on odd iterations: each thread then starts on the rows its cache still holds from the iteration before (a
  // matrix-vector product re-reading a matrix larger than the cache: 13% faster), and no row's result depends on
  // the order rows are visited.
  int64_t step;
  // Nonzero once a kernel of this call has reported an index out of range: a loop's driver stops there rather than
  // run on with the values such a kernel left (a while_loop might never end), and kiln raises the error.
  int (*failed)(const struct kiln_runtime* runtime);
};

// Every generated kernel is an entry point of this type: `buffers` holds the
// kernel's inputs, then its outputs, in the order of the `fused` plan.
typedef void (*kiln_kernel_entry)(const struct kiln_runtime* runtime, void* const* buffers);

}  // extern "C"
