#pragma once
// The workloads of kiln-bench. Each has inputs, one body traced twice (as a
// standard and as a JIT function), and what it must compute and move, from
// which its floors follow. The peers (bench/peers/) run the same bodies in
// TensorFlow, JAX and PyTorch on the inputs kiln-bench saves, so a body
// changed here must be changed there too.

#include "measure.h"

#include <kiln/kiln.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::bench {

using Call = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct Workload {
  std::string id;                // unique in a run, e.g. "seed-1024", "gelu"
  std::string name;              // the body: seed, gelu, gelu_erf, softmax, layernorm, adam, attention, block, conv
  std::string shape;             // human-readable size, e.g. "1024x1024"
  std::vector<Tensor> inputs;
  Call standard;                 // kiln::function(body)
  Call jit;                      // kiln::function(body, {.jit_compile = true})
  std::function<Call()> fresh_jit;  // a new JIT function each call (for first-call timings)
  std::function<std::string(Stage)> standard_ir;  // the standard function's IR for these inputs
  std::function<std::string(Stage)> jit_ir;       // the JIT function's IR for these inputs
  std::function<FunctionStatistics()> standard_statistics;
  std::function<FunctionStatistics()> jit_statistics;
  double flops = 0;              // useful floating-point work of the matmuls (2mnk each)
  double bytes = 0;              // inputs read once + outputs written once
  // Workloads with matmuls: OpenBLAS doing the same matmul work alone on the
  // same inputs (the compute floor), and kiln's standard matmuls alone.
  std::function<Timing(int runs)> blas_alone;
  std::function<void()> kiln_matmuls_alone;
  double matmul_output_bytes = 0;  // the largest matmul result, which a fused kernel need not write
  Device device = Device::cpu();   // where the inputs live and the calls run
  // On a GPU, the matmul precision the workload runs with (kiln::config::allow_tf32
  // for its duration, and the peers' setting): seed-N is full f32, seed-N-tf32
  // TF32. Empty on the CPU, which has no TF32.
  std::optional<bool> tf32;
  // On the CPU, calls timed back to back as one run, each run's time over this giving a call's (a call of a
  // microsecond or so, where one clock reading would be a good part of it): the peers time the same (the
  // manifest's batch).
  int calls_per_run = 1;
};

struct WorkloadOptions {
  std::int64_t elements = 16 << 20;          // Adam
  std::int64_t rows = 4096, columns = 4096;  // gelu, gelu-erf, softmax and layernorm
  // attention: Q, K, V f32[batch, heads, sequence, head_size]
  std::int64_t batch = 4, heads = 16, sequence = 512, head_size = 64;
  // block: a transformer block on `tokens` rows `width` wide, `block_heads` heads, an MLP 4x as wide
  std::int64_t tokens = 1024, width = 512, block_heads = 8;
  // conv: a 3x3 convolution of `images` NHWC images of image_size^2 pixels, image_channels in and out
  std::int64_t images = 8, image_size = 56, image_channels = 64;
  // mlp-train: an MLP of 3 layers `mlp_width` wide on `mlp_batch` examples (its training step)
  std::int64_t mlp_batch = 256, mlp_width = 1024;
  // rnn: a GRU over `rnn_steps` inputs of `rnn_hidden` features, `rnn_batch` sequences (its state as wide)
  std::int64_t rnn_steps = 512, rnn_batch = 64, rnn_hidden = 512;
  // rnn-train: the rnn's GRU over `rnn_train_steps` inputs (its batch and width), trained on its states' mean square
  std::int64_t rnn_train_steps = 128;
  // cnn-train: conv (3 -> cnn_channels), pool, conv (-> 2 cnn_channels), mean, dense on cnn_batch RGB images of
  // cnn_image_size^2 pixels
  std::int64_t cnn_batch = 64, cnn_image_size = 32, cnn_channels = 32;
  // solver: conjugate gradients on a `solver_size`^2 symmetric positive definite system
  std::int64_t solver_size = 2048;
  // decode: a transformer MLP (decode_width -> 4 x decode_width -> decode_width, gelu) on decode_rows tokens
  std::int64_t decode_rows = 4, decode_width = 2048;
  // attention-decode: one query per head (`heads`, head_size) of decode_batch sequences against decode_keys keys
  std::int64_t decode_batch = 8, decode_keys = 2048;
  Device device = Device::cpu();
  DType dtype = DType::f32;  // of the float inputs of seed, gelu, softmax, layernorm and block (their -bf16 ids)
};

// The sizes of the suite on `device`: the ones above on the CPU; on a GPU,
// which streams 20-50x faster, 8192 x 8192 matrices and 64M-element vectors,
// large enough that a launch's fixed costs are a few percent of a call.
WorkloadOptions options_for(Device device);

// The suite's workload ids on `device`, in order. On the CPU: seed-256,
// -1024, -2048 (`big` adds seed-8192), gelu, gelu-erf, softmax, layernorm,
// adam, attention, block, stem, conv, pool, depthwise, mlp-train, block-train, rnn, rnn-train, cnn-train, solver,
// decode, attention-decode,
// call, and in bf16
// seed-2048-bf16, gelu-bf16, softmax-bf16, layernorm-bf16, block-bf16.
// On a GPU: seed-256, seed-8192 (full f32), seed-8192-tf32, gelu, gelu-erf, softmax, layernorm, adam, attention
// (4x16x2048x64, TF32).
std::vector<std::string> suite_ids(bool big, Device device = Device::cpu());
// The composites a user may spell by hand, each named one before its spelling with primitives (`kiln-bench family`):
// xent (sparse_softmax_cross_entropy) and xent-hand (reduce_max, exp, reduce_sum, log, take_along_axis),
// layernorm and layernorm-hand, softmax0 (softmax over the first axis) and softmax0-hand, logsumexp
// (reduce_logsumexp) and logsumexp-hand. Not in the suite: the peers run the named ones already.
std::vector<std::string> family_ids();
// Builds a workload from its id: seed-<N> (the article's function on two
// N x N matrices; seed-<N>-tf32 on a GPU with TF32 matmuls), gelu (the tanh
// form), gelu-erf (the exact form), softmax, layernorm, adam, attention or
// block (a pre-norm transformer block: layer_norm, attention with the heads
// split and merged by reshapes and transposes, an MLP with gelu, residuals) or
// stem (relu(conv2d(x, 7x7 filters, stride 2, same) + bias) on 3-channel NHWC images, CPU only) or
// conv (relu(conv2d(x, 3x3 filters, same) + bias) on NHWC images, CPU only) or
// pool (a 3x3 max_pool2d, stride 2, same padding, on NHWC images, CPU only) or
// depthwise (relu(depthwise conv2d(x, 3x3 filters, same) + bias) on NHWC images, CPU only) or
// mlp-train (an MLP classifier's training step: loss, value_and_grad over its 6 parameters, Adam; CPU only) or
// block-train (block's training step: the mean square of its output, value_and_grad over its 12 weights, Adam;
// CPU only) or cnn-train (an image classifier's training step: conv, pool, conv, global mean, dense, softmax
// cross-entropy, value_and_grad over its 6 parameters, Adam; CPU only). Training steps take the parameters and Adam's
// moments and return the loss and the new ones. rnn (a GRU layer stepped through its input with scan: the last state
// and every step's; CPU only) or solver (conjugate gradients with while_loop until the residual is 1e-5 of b's: the
// solution and the iterations; CPU only) or decode (a transformer's MLP on a few tokens, decode_rows, as when decoding
// a batch of sequences: x w1 + b1, gelu, then w2 and b2; the weights' bytes are the floor; CPU only) or
// attention-decode (attention's body with one query per head against 2048 keys and values, as a decoder's step reads
// its cache; CPU only). call: x + 1 on 16 floats, a call whose work is nothing: what a compiled function costs a call
// (signature lookup, buffers, the kernel's launch), beside PyTorch's per-op overhead. seed-<N>-bf16, gelu-bf16,
// gelu-erf-bf16, softmax-bf16, layernorm-bf16 and block-bf16 (CPU only): the same with bf16 inputs (and results).
Workload make_workload(const std::string& id, const WorkloadOptions& options);

// `kiln-bench loop-compile`: what a scan's first call costs (trace and compile with empty caches, then the call) at
// 10 and at 10,000 steps of one body, the best of `runs` fresh functions each, printed as a table; returns the exit
// status. A loop compiles once whatever its trip count: only the run should grow.
int report_loop_compile_times(int runs);

}  // namespace kiln::bench
