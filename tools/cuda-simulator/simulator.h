#pragma once
// What the parts of kiln's CUDA simulator share (tools/cuda-simulator/
// README.md): the stream queues and the table of device allocations, owned by
// runtime.cpp. Nothing outside the simulator includes this file.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>

// Grid and block sizes across the C interface of kiln_simulator_enqueue_grid
// and of JIT modules' entry points: token for token emulated_device.h's
// definition (which must stand alone), so the program has one type.
struct kiln_simulated_dim3 {
  unsigned x = 1, y = 1, z = 1;
};

namespace kiln::cuda_simulator {

// Queues `work` on `stream` (nullptr: the default stream of the current
// device). Work runs in the order it was queued, on the host thread that
// waits for it: at cudaStreamSynchronize, at cudaEventSynchronize of a later
// event, at cudaDeviceSynchronize, a synchronous copy or cudaFree. So a host
// that reads a result without waiting for it reads a stale value, as it may
// from a GPU.
void enqueue(cudaStream_t stream, std::function<void()> work);

// Whether [pointer, pointer + bytes) lies inside one live device allocation
// (bytes 0: whether pointer does).
bool is_device_memory(const void* pointer, std::size_t bytes);

// cudaErrorInvalidConfiguration for a grid or block the current device
// cannot run (an empty grid included), else cudaSuccess.
cudaError_t check_launch_shape(unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x, unsigned block_y,
                               unsigned block_z);

// The first line of a module image from the simulator's NVRTC; the CUDA
// source follows.
inline constexpr const char* simulated_image_marker = "// kiln CUDA simulator: module source\n";

// The driver API function `symbol` (cuModuleLoadData, ...), or null.
void* driver_entry_point(const char* symbol);

// Kept for cudaGetLastError / cudaPeekAtLastError, per host thread.
void set_last_error(cudaError_t error);

}  // namespace kiln::cuda_simulator
