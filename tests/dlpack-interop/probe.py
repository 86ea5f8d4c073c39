# A live DLPack exchange between kiln (probe.so, built from probe.cpp against a shared libkiln) and NumPy,
# PyTorch and JAX, through the capsules each asks for or gives (DLPack 1.0's versioned struct, or 0.x's). Not part
# of `make test` (it needs the three libraries); run by hand after a -DBUILD_SHARED_LIBS=ON build and install
# into PREFIX, with the peers' environment (make peers-venv):
#   c++ -std=c++20 -O2 -fPIC -shared tests/dlpack-interop/probe.cpp -IPREFIX/include -LPREFIX/lib -lkiln \
#       -Wl,-rpath,PREFIX/lib -o probe.so
#   .venv-peers/bin/python tests/dlpack-interop/probe.py ./probe.so
# Prints one line per check and exits 1 if any failed.
import ctypes, sys
import numpy as np
import torch
import jax, jax.numpy as jnp

lib = ctypes.CDLL(sys.argv[1])
lib.probe_export.restype = ctypes.c_void_p
lib.probe_export.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
lib.probe_last_data.restype = ctypes.c_void_p
lib.probe_export_unversioned.restype = ctypes.c_void_p
lib.probe_export_unversioned.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
lib.probe_consume_unversioned.restype = ctypes.c_double
lib.probe_consume_unversioned.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
lib.probe_consume.restype = ctypes.c_double
lib.probe_consume.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
api = ctypes.pythonapi
api.PyCapsule_New.restype = ctypes.py_object
api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
api.PyCapsule_GetPointer.restype = ctypes.c_void_p
api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_GetName.restype = ctypes.c_char_p
api.PyCapsule_GetName.argtypes = [ctypes.py_object]

failures = 0
def check(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what)
    failures += 0 if ok else 1

class KilnTensor:
    """A kiln tensor offered through the DLPack protocol."""
    def __init__(self, rows):
        self.rows = rows
        self.expected = np.zeros((rows, 3), np.float32)
        self.data = None
    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        values = self.expected.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        if max_version is not None and max_version[0] >= 1:  # DLPack 1.0: kiln's own memory, read-only
            managed = lib.probe_export(self.rows, values)
            self.data = lib.probe_last_data()
            return api.PyCapsule_New(managed, b"dltensor_versioned", None)
        self.versioned = False  # the consumer asked for DLPack 0.x: a copy
        return api.PyCapsule_New(lib.probe_export_unversioned(self.rows, values), b"dltensor", None)
    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU

# kiln -> NumPy, PyTorch, JAX
k = KilnTensor(5); a = np.from_dlpack(k)
check(np.array_equal(a, k.expected), "NumPy reads kiln's values")
check(a.ctypes.data == k.data, "NumPy shares kiln's memory (zero copy)")
check(not a.flags.writeable, "NumPy sees kiln's tensor read-only")
del a
k = KilnTensor(7); t = torch.from_dlpack(k)
check(torch.equal(t, torch.from_numpy(k.expected)), "PyTorch reads kiln's values")
check(t.data_ptr() == k.data, "PyTorch shares kiln's memory (zero copy)")
del t
k = KilnTensor(9); j = jnp.from_dlpack(k)
check(np.array_equal(np.asarray(j), k.expected), "JAX reads kiln's values (DLPack 0.x struct, a copy)")
del j

# NumPy, PyTorch, JAX -> kiln
def give(capsule_owner, expected, name, shares):
    capsule = capsule_owner.__dlpack__(max_version=(1, 0))
    kind = api.PyCapsule_GetName(capsule)  # what the producer gave: 1.0's versioned struct, or 0.x's
    pointer = api.PyCapsule_GetPointer(capsule, kind)
    data = ctypes.c_void_p()
    consume = lib.probe_consume if kind == b"dltensor_versioned" else lib.probe_consume_unversioned
    total = consume(pointer, ctypes.byref(data))
    api.PyCapsule_SetName(capsule, b"used_" + kind)  # consumed: the capsule must not delete it
    name = f"{name} ({kind.decode()})"
    check(abs(total - expected) <= 1e-9 * max(1.0, abs(expected)), f"kiln computes on {name}'s tensor ({total:.6f} vs {expected:.6f})")
    if shares is not None:
        check(data.value == shares, f"kiln reads {name}'s memory in place")

x = torch.randn(33, 17, dtype=torch.float32)
give(x, float((x.double() * 2).sum()), "PyTorch", x.data_ptr())
check(torch.isfinite(x).all().item(), "the PyTorch tensor is still usable after kiln released it")
n = np.random.default_rng(1).standard_normal((12, 5)).astype(np.float32)
give(n, float((n.astype(np.float64) * 2).sum()), "NumPy", n.ctypes.data if n.ctypes.data % 64 == 0 else None)
g = jax.random.normal(jax.random.key(0), (8, 8), dtype=jnp.float32)
give(g, float((np.asarray(g).astype(np.float64) * 2).sum()), "JAX", None)
# Consumers of DLPack 0.x capsules (unversioned) into kiln.
x = torch.randn(6, 4, dtype=torch.float32)
capsule = x.__dlpack__()  # no max_version: PyTorch's unversioned capsule
pointer = api.PyCapsule_GetPointer(capsule, b"dltensor")
data = ctypes.c_void_p()
total = lib.probe_consume_unversioned(pointer, ctypes.byref(data))
api.PyCapsule_SetName(capsule, b"used_dltensor")
check(abs(total - float((x.double() * 2).sum())) < 1e-9 * max(1, abs(total)), "kiln computes on PyTorch's DLPack 0.x tensor")
check(data.value == x.data_ptr(), "kiln reads PyTorch's DLPack 0.x memory in place")
print("numpy", np.__version__, "torch", torch.__version__, "jax", jax.__version__)
sys.exit(1 if failures else 0)
