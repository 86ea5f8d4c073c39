// The CUDA runtime API of kiln's CUDA simulator (README.md here): devices
// whose memory is host memory, streams whose work waits in a queue until the
// host waits for it, events, and the checks a GPU makes of a launch.
//
// One lock guards everything, and queued work runs under it: the simulator
// runs one thing at a time, which the per-translation-unit state of the
// emulated device (emulated_device.h) needs.

#include "simulator.h"

#include <cuda_runtime_api.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

// The opaque types of cuda_runtime_api.h, defined here.
struct CUstream_st {
  int device = 0;
  std::deque<std::function<void()>> work;
};

namespace kiln::cuda_simulator {
namespace {

struct EventState {
  int device = 0;
  CUstream_st* stream = nullptr;
  std::uint64_t generation = 0;  // of the latest record; a completion of an older one does not count
  bool recorded = false, completed = false;
  std::chrono::steady_clock::time_point time;
};

}  // namespace
}  // namespace kiln::cuda_simulator

struct CUevent_st {
  std::shared_ptr<kiln::cuda_simulator::EventState> state = std::make_shared<kiln::cuda_simulator::EventState>();
};

namespace kiln::cuda_simulator {
namespace {

constexpr std::size_t allocation_alignment = 256;  // as cudaMalloc's

struct Allocation {
  std::size_t bytes = 0;    // as asked for: a copy past them is a bug even where a GPU would not fault
  std::size_t rounded = 0;  // what counts against the device's memory
  int device = 0;
};

struct Device {
  cudaDeviceProp properties{};
  std::size_t allocated = 0;
  std::unique_ptr<CUstream_st> default_stream = std::make_unique<CUstream_st>();
};

struct Simulator {
  std::recursive_mutex mutex;
  std::vector<std::unique_ptr<Device>> devices;
  std::map<std::uintptr_t, Allocation> allocations;  // by start address
  std::vector<CUstream_st*> streams;                 // those created, for device-wide waits
};

std::size_t environment_number(const char* name, std::size_t fallback) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  return static_cast<std::size_t>(std::strtoull(text, nullptr, 10));
}

// An H200's figures, except for the memory: the host's, as much as
// KILN_CUDA_SIMULATOR_MEMORY allows (4 GiB unless set).
cudaDeviceProp simulated_properties(int index) {
  cudaDeviceProp properties{};
  std::snprintf(properties.name, sizeof properties.name, "kiln CUDA simulator (host memory; H200 figures) #%d", index);
  properties.totalGlobalMem = environment_number("KILN_CUDA_SIMULATOR_MEMORY", std::size_t{4} << 30);
  properties.sharedMemPerBlock = 48 * 1024;
  properties.sharedMemPerBlockOptin = 227 * 1024;
  properties.sharedMemPerMultiprocessor = 228 * 1024;
  properties.regsPerBlock = 65536;
  properties.regsPerMultiprocessor = 65536;
  properties.warpSize = 32;
  properties.memPitch = std::size_t{1} << 31;
  properties.maxThreadsPerBlock = 1024;
  properties.maxThreadsDim[0] = 1024;
  properties.maxThreadsDim[1] = 1024;
  properties.maxThreadsDim[2] = 64;
  properties.maxGridSize[0] = 2147483647;
  properties.maxGridSize[1] = 65535;
  properties.maxGridSize[2] = 65535;
  properties.totalConstMem = 64 * 1024;
  properties.major = 9;
  properties.minor = 0;
  properties.textureAlignment = 512;
  properties.multiProcessorCount = 132;
  properties.maxThreadsPerMultiProcessor = 2048;
  properties.maxBlocksPerMultiProcessor = 32;
  properties.l2CacheSize = 50 * 1024 * 1024;
  properties.memoryBusWidth = 6144;
  properties.unifiedAddressing = 1;
  properties.concurrentKernels = 1;
  properties.asyncEngineCount = 2;
  properties.pciDeviceID = index;
  return properties;
}

Simulator& simulator() {
  static Simulator* instance = [] {
    auto* created = new Simulator();
    // KILN_CUDA_SIMULATOR_DEVICES devices (1 unless set; 0 acts as a machine without a GPU).
    const auto count = static_cast<int>(environment_number("KILN_CUDA_SIMULATOR_DEVICES", 1));
    for (int index = 0; index < count; ++index) {
      auto device = std::make_unique<Device>();
      device->properties = simulated_properties(index);
      device->default_stream->device = index;
      created->devices.push_back(std::move(device));
    }
    return created;
  }();
  return *instance;
}

thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

cudaError_t result(cudaError_t error) {
  if (error != cudaSuccess) last_error = error;
  return error;
}

int device_count() { return static_cast<int>(simulator().devices.size()); }

CUstream_st* stream_or_default(cudaStream_t stream) {
  if (stream) return stream;
  return simulator().devices[static_cast<std::size_t>(current_device)]->default_stream.get();
}

// Runs `stream`'s queued work in order until `done` holds or the queue is empty.
template <class Done>
void run_queued(CUstream_st* stream, Done done) {
  while (!stream->work.empty() && !done()) {
    std::function<void()> work = std::move(stream->work.front());
    stream->work.pop_front();
    work();
  }
}

void run_all(CUstream_st* stream) {
  run_queued(stream, [] { return false; });
}

// Everything queued on `device`'s streams (every device's when device < 0).
void run_device(int device) {
  Simulator& state = simulator();
  for (auto& each : state.devices)
    if (device < 0 || each->default_stream->device == device) run_all(each->default_stream.get());
  for (CUstream_st* stream : state.streams)
    if (device < 0 || stream->device == device) run_all(stream);
}

// The allocation that holds [pointer, pointer + bytes), or null.
const Allocation* allocation_of(const void* pointer, std::size_t bytes) {
  auto address = reinterpret_cast<std::uintptr_t>(pointer);
  auto& allocations = simulator().allocations;
  auto found = allocations.upper_bound(address);
  if (found == allocations.begin()) return nullptr;
  --found;
  const std::uintptr_t end = found->first + found->second.bytes;
  if (address < found->first || address > end || (bytes > 0 && (address == end || bytes > end - address)))
    return nullptr;
  return &found->second;
}

struct ErrorText {
  cudaError_t error;
  const char* name;
  const char* text;
};

constexpr ErrorText error_texts[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
};

const ErrorText* error_text(cudaError_t error) {
  for (const ErrorText& entry : error_texts)
    if (entry.error == error) return &entry;
  return nullptr;
}

cudaError_t look_up_entry_point(const char* symbol, void** function, cudaDriverEntryPointQueryResult* found) {
  if (!symbol || !function) return result(cudaErrorInvalidValue);
  *function = driver_entry_point(symbol);
  if (found) *found = *function ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return *function ? cudaSuccess : result(cudaErrorSymbolNotFound);
}

}  // namespace

void enqueue(cudaStream_t stream, std::function<void()> work) {
  std::lock_guard lock(simulator().mutex);
  stream_or_default(stream)->work.push_back(std::move(work));
}

bool is_device_memory(const void* pointer, std::size_t bytes) {
  std::lock_guard lock(simulator().mutex);
  return allocation_of(pointer, bytes) != nullptr;
}

void set_last_error(cudaError_t error) { result(error); }

}  // namespace kiln::cuda_simulator

using namespace kiln::cuda_simulator;

extern "C" {

// ---- devices ----------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return result(cudaErrorInvalidValue);
  std::lock_guard lock(simulator().mutex);
  *count = device_count();
  return *count == 0 ? result(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return result(cudaErrorInvalidValue);
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  std::lock_guard lock(simulator().mutex);
  if (device < 0 || device >= device_count()) return result(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  std::lock_guard lock(simulator().mutex);
  if (!properties) return result(cudaErrorInvalidValue);
  if (device < 0 || device >= device_count()) return result(cudaErrorInvalidDevice);
  *properties = simulator().devices[static_cast<std::size_t>(device)]->properties;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  std::lock_guard lock(simulator().mutex);
  run_device(current_device);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  std::lock_guard lock(simulator().mutex);
  if (!free || !total) return result(cudaErrorInvalidValue);
  const Device& device = *simulator().devices[static_cast<std::size_t>(current_device)];
  *total = device.properties.totalGlobalMem;
  *free = *total - device.allocated;
  return cudaSuccess;
}

// ---- errors -------------------------------------------------------------------------------

cudaError_t cudaGetLastError() {
  cudaError_t error = last_error;
  last_error = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError() { return last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  const ErrorText* entry = error_text(error);
  return entry ? entry->name : "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  const ErrorText* entry = error_text(error);
  return entry ? entry->text : "unrecognized error code";
}

// ---- memory ---------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** pointer, std::size_t bytes) {
  if (!pointer) return result(cudaErrorInvalidValue);
  std::lock_guard lock(simulator().mutex);
  if (device_count() == 0) return result(cudaErrorNoDevice);
  *pointer = nullptr;
  if (bytes == 0) return cudaSuccess;
  Device& device = *simulator().devices[static_cast<std::size_t>(current_device)];
  const std::size_t rounded = (bytes + allocation_alignment - 1) / allocation_alignment * allocation_alignment;
  if (rounded > device.properties.totalGlobalMem - device.allocated) return result(cudaErrorMemoryAllocation);
  void* data = std::aligned_alloc(allocation_alignment, rounded);
  if (!data) return result(cudaErrorMemoryAllocation);
  // A GPU's fresh memory holds whatever was there: all-ones bytes (NaN as a
  // float) make a read of memory nothing wrote show in results.
  std::memset(data, 0xff, rounded);
#if defined(__SANITIZE_ADDRESS__)
  // Past what was asked for: an access there is reported, though a GPU would not fault.
  ASAN_POISON_MEMORY_REGION(static_cast<char*>(data) + bytes, rounded - bytes);
#endif
  device.allocated += rounded;
  simulator().allocations[reinterpret_cast<std::uintptr_t>(data)] = Allocation{bytes, rounded, current_device};
  *pointer = data;
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  if (!pointer) return cudaSuccess;
  std::lock_guard lock(simulator().mutex);
  auto found = simulator().allocations.find(reinterpret_cast<std::uintptr_t>(pointer));
  if (found == simulator().allocations.end()) return result(cudaErrorInvalidDevicePointer);
  run_device(-1);  // cudaFree waits for the device
  simulator().devices[static_cast<std::size_t>(found->second.device)]->allocated -= found->second.rounded;
#if defined(__SANITIZE_ADDRESS__)
  ASAN_UNPOISON_MEMORY_REGION(pointer, found->second.rounded);
#endif
  simulator().allocations.erase(found);
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  std::lock_guard lock(simulator().mutex);
  if (!destination || !source) return result(cudaErrorInvalidValue);
  const bool from_device = allocation_of(source, bytes) != nullptr;
  const bool to_device = allocation_of(destination, bytes) != nullptr;
  bool valid = false;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      valid = to_device;
      break;
    case cudaMemcpyDeviceToHost:
      valid = from_device;
      break;
    case cudaMemcpyDeviceToDevice:
      valid = from_device && to_device;
      break;
    case cudaMemcpyHostToHost:
    case cudaMemcpyDefault:
      valid = true;
      break;
    default:
      return result(cudaErrorInvalidMemcpyDirection);
  }
  if (!valid) return result(cudaErrorInvalidValue);
  if (!from_device) {
    // From pageable host memory the call returns once the data are staged,
    // so the caller may change or free the source right away.
    auto staged =
        std::make_shared<std::vector<char>>(static_cast<const char*>(source), static_cast<const char*>(source) + bytes);
    stream_or_default(stream)->work.push_back(
        [destination, staged] { std::memcpy(destination, staged->data(), staged->size()); });
  } else {
    stream_or_default(stream)->work.push_back(
        [destination, source, bytes] { std::memmove(destination, source, bytes); });
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* destination, const void* source, std::size_t bytes, cudaMemcpyKind kind) {
  std::lock_guard lock(simulator().mutex);
  cudaError_t status = cudaMemcpyAsync(destination, source, bytes, kind, nullptr);
  if (status == cudaSuccess) run_device(current_device);  // a synchronous copy waits for the work before it
  return status;
}

cudaError_t cudaMemcpyPeerAsync(void* destination, int destination_device, const void* source, int source_device,
                                std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  std::lock_guard lock(simulator().mutex);
  const Allocation* to = allocation_of(destination, bytes);
  const Allocation* from = allocation_of(source, bytes);
  if (!to || !from || to->device != destination_device || from->device != source_device)
    return result(cudaErrorInvalidValue);
  stream_or_default(stream)->work.push_back([destination, source, bytes] { std::memmove(destination, source, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* destination, int value, std::size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  std::lock_guard lock(simulator().mutex);
  if (!allocation_of(destination, bytes)) return result(cudaErrorInvalidValue);
  stream_or_default(stream)->work.push_back([destination, value, bytes] { std::memset(destination, value, bytes); });
  return cudaSuccess;
}

// ---- streams ---------------------------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  if (!stream) return result(cudaErrorInvalidValue);
  std::lock_guard lock(simulator().mutex);
  if (device_count() == 0) return result(cudaErrorNoDevice);
  auto* created = new CUstream_st();
  created->device = current_device;
  simulator().streams.push_back(created);
  *stream = created;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard lock(simulator().mutex);
  auto& streams = simulator().streams;
  auto found = std::find(streams.begin(), streams.end(), stream);
  if (found == streams.end()) return result(cudaErrorInvalidResourceHandle);
  run_all(stream);  // queued work still runs, as on a GPU
  streams.erase(found);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::lock_guard lock(simulator().mutex);
  run_all(stream_or_default(stream));
  return cudaSuccess;
}

// ---- events ----------------------------------------------------------------------------------

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  if (!event) return result(cudaErrorInvalidValue);
  *event = new CUevent_st();
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) { return cudaEventCreate(event); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return result(cudaErrorInvalidResourceHandle);
  delete event;  // a queued record keeps the state alive
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event) return result(cudaErrorInvalidResourceHandle);
  std::lock_guard lock(simulator().mutex);
  std::shared_ptr<EventState> state = event->state;
  CUstream_st* target = stream_or_default(stream);
  state->stream = target;
  state->device = target->device;
  state->recorded = true;
  state->completed = false;
  const std::uint64_t generation = ++state->generation;
  target->work.push_back([state, generation] {
    if (state->generation != generation) return;
    state->completed = true;
    state->time = std::chrono::steady_clock::now();
  });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return result(cudaErrorInvalidResourceHandle);
  std::lock_guard lock(simulator().mutex);
  std::shared_ptr<EventState> state = event->state;
  if (state->recorded) run_queued(state->stream, [&] { return state->completed; });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return result(cudaErrorInvalidResourceHandle);
  std::lock_guard lock(simulator().mutex);
  return !event->state->recorded || event->state->completed ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start, cudaEvent_t end) {
  if (!milliseconds || !start || !end) return result(cudaErrorInvalidResourceHandle);
  std::lock_guard lock(simulator().mutex);
  const EventState &from = *start->state, &to = *end->state;
  if (!from.recorded || !to.recorded) return result(cudaErrorInvalidResourceHandle);
  if (!from.completed || !to.completed) return result(cudaErrorNotReady);
  *milliseconds = std::chrono::duration<float, std::milli>(to.time - from.time).count();
  return cudaSuccess;
}

// ---- the driver API's entry points (driver.cpp) ----------------------------------------------

cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** function, unsigned long long,
                                    cudaDriverEntryPointQueryResult* found) {
  return look_up_entry_point(symbol, function, found);
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function, unsigned int, unsigned long long,
                                             cudaDriverEntryPointQueryResult* found) {
  return look_up_entry_point(symbol, function, found);
}

// ---- launches of the standard kernels (emulated_device.h's simulated_launch) --------------------

int kiln_simulator_enqueue_grid(void* stream, kiln_simulated_dim3 grid, kiln_simulated_dim3 block, void (*run)(void*),
                                void* work, void (*release)(void*)) {
  std::lock_guard lock(simulator().mutex);
  const cudaError_t status = check_launch_shape(grid.x, grid.y, grid.z, block.x, block.y, block.z);
  if (status != cudaSuccess) {
    release(work);
    return result(status);
  }
  stream_or_default(static_cast<cudaStream_t>(stream))->work.push_back([run, work, release] {
    run(work);
    release(work);
  });
  return cudaSuccess;
}

}  // extern "C"

namespace kiln::cuda_simulator {

cudaError_t check_launch_shape(unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x, unsigned block_y,
                               unsigned block_z) {
  const cudaDeviceProp& properties = simulator().devices[static_cast<std::size_t>(current_device)]->properties;
  const std::uint64_t threads = std::uint64_t{block_x} * block_y * block_z;
  if (grid_x == 0 || grid_y == 0 || grid_z == 0 || threads == 0) return cudaErrorInvalidConfiguration;
  if (threads > static_cast<std::uint64_t>(properties.maxThreadsPerBlock)) return cudaErrorInvalidConfiguration;
  if (block_x > static_cast<unsigned>(properties.maxThreadsDim[0]) ||
      block_y > static_cast<unsigned>(properties.maxThreadsDim[1]) ||
      block_z > static_cast<unsigned>(properties.maxThreadsDim[2]))
    return cudaErrorInvalidConfiguration;
  if (grid_x > static_cast<unsigned>(properties.maxGridSize[0]) ||
      grid_y > static_cast<unsigned>(properties.maxGridSize[1]) ||
      grid_z > static_cast<unsigned>(properties.maxGridSize[2]))
    return cudaErrorInvalidConfiguration;
  return cudaSuccess;
}

}  // namespace kiln::cuda_simulator
