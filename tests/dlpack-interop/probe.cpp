// A live DLPack exchange with NumPy, PyTorch and JAX: the kiln side, driven by probe.py through ctypes (which
// says how to build and run it).
#include <kiln/dlpack.h>
#include <kiln/kiln.h>

#include <cstring>

namespace {
const void* last_data = nullptr;
}

extern "C" {
// A kiln tensor f32[rows, 3] (random normal, seed 1) as a DLManagedTensorVersioned*; its values into `values`.
void* probe_export(int rows, float* values) {
  kiln::Tensor t = kiln::random::normal({rows, 3}, {.seed = 1});
  std::memcpy(values, t.data(), sizeof(float) * rows * 3);
  last_data = t.data();
  return kiln::to_dlpack(t);
}
const void* probe_last_data() { return last_data; }
// The same tensor through DLPack 0.x's unversioned struct (a copy: see kiln/dlpack.h).
void* probe_export_unversioned(int rows, float* values) {
  kiln::Tensor t = kiln::random::normal({rows, 3}, {.seed = 1});
  std::memcpy(values, t.data(), sizeof(float) * rows * 3);
  last_data = t.data();
  return kiln::to_dlpack_unversioned(t);
}
double probe_consume_unversioned(void* managed, const void** data) {
  kiln::Tensor t = kiln::from_dlpack(static_cast<DLManagedTensor*>(managed));
  *data = t.data();
  return kiln::reduce_sum(kiln::cast(t, kiln::DType::f64) * 2).item<double>();
}
// Takes `managed` (a producer's DLManagedTensorVersioned*) as a kiln tensor, computes sum(x * 2) in kiln (JIT), and
// drops it (the producer's deleter runs). `data` receives the kiln tensor's data pointer.
double probe_consume(void* managed, const void** data) {
  kiln::Tensor t = kiln::from_dlpack(static_cast<DLManagedTensorVersioned*>(managed));
  *data = t.data();
  auto f = kiln::function([](kiln::Tensor x) { return kiln::reduce_sum(kiln::cast(x, kiln::DType::f64) * 2); },
                          {.jit_compile = true});
  return f(t).item<double>();
}
}
