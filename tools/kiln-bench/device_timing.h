#pragma once
// kiln-bench on a GPU: how device work is timed, and the GPU's floors
// (device-to-device copy bandwidth, cuBLAS alone), measured in the same run
// as the workloads.
//
// A GPU runs a call's kernels asynchronously: the host queues them and
// returns. Waiting after every call would add the launch and wake-up latency
// of an idle GPU (10-20 us) to each one, which is 10% of a 0.15 ms kernel,
// and no application that keeps a GPU busy pays it. So a timed run queues
// `batch` calls back to back and then waits once; its per-call time is the
// elapsed time over `batch`. That is the GPU's time per call whenever the host
// queues faster than the GPU runs, and the host's time per call otherwise
// (small, overhead-bound workloads), as a training loop would see either. The
// peers (bench/peers) time their calls the same way, with the same batch.

#include "measure.h"

#include <kiln/kiln.h>

#include <functional>
#include <string>

namespace kiln::bench {

// Before its timed runs, every device measurement (kiln's and, through the
// manifest's "settle_ms", the peers') runs its call for this long. A GPU's
// clock falls from its boost as sustained work heats it, and a TF32 product
// is power bound: on an H200, cuBLAS alone on the TF32 seed took 2.76 to
// 2.94 ms, and torch.compile's call (the same GEMM and one more kernel)
// 2.77, depending on what ran just before each ~60 ms measurement. Measured
// after a settle, each system runs at the clock that sustained use sees.
inline constexpr double settle_ms = 500;

// `warmup` calls, then whole batches for `settle_ms`, then `runs` timed runs
// of `batch` calls each, queued back to back with one
// kiln::synchronize(device) at the end of each run.
Timing time_device_calls(Device device, const std::function<void()>& call, int runs, int batch, int warmup = 2);

// Calls per timed run for a call that takes `single_call_ms` when waited
// for alone: enough to keep each run near 5 ms, between 1 and 200.
int batch_for(double single_call_ms);

// The time of one call waited for alone (after one untimed call).
double single_call_ms(Device device, const std::function<void()>& call);

// time_device_calls in batches of batch_for(single_call_ms(device, call)).
Timing time_device_calls(Device device, const std::function<void()>& call, int runs);

// Device-to-device copy bandwidth of `device` in bytes/s (read + write
// counted) for a footprint of `footprint_bytes` (half source, half
// destination): cudaMemcpyAsync on kiln's stream, timed as above. Throws
// DeviceError when `device` is not a CUDA device kiln can use.
double device_copy_bandwidth(Device device, double footprint_bytes, int runs);

// cuBLAS alone on C = A B (row-major, on the tensors' GPU), timed as above.
// f32 operands as kiln's matmul multiplies them (cublasGemmEx, TF32 tensor
// cores while kiln::config::allow_tf32 is true); bf16 or f16 operands as a
// user of the library multiplies them: their tensor cores, f32 sums, C in
// the operands' type (kiln's own call writes f32 sums that its epilogue
// rounds: twice the bytes of C, counted against kiln).
Timing time_cublas_gemm(const Tensor& a, const Tensor& b, int runs, int batch);

// "NVIDIA H200 (sm_90, 132 SMs, 141 GB)", or the CPU model for the CPU.
std::string device_description(Device device);

}  // namespace kiln::bench
