"""Tests of bench/peers without JAX, PyTorch, TensorFlow or a GPU: the batch
timing, the matmul-precision hook, and the GPU report and its done-when checks,
on a hand-made GPU run (write_fake_run: kiln.json as `kiln-bench --device
cuda` writes it, small .npy inputs and NumPy outputs).

    python3 -m unittest bench.peers.test_peers          (from the repository root; ~1 s)

write_fake_run also serves to try a real peer on the GPU code path without a GPU:

    python3 -c "from bench.peers.test_peers import write_fake_run; write_fake_run('/tmp/fake-gpu')"
    .venv-peers/bin/python -m bench.peers.torch_peer --manifest /tmp/fake-gpu/kiln.json \\
        --data /tmp/fake-gpu/data --threads 2 --runs 3 --out /tmp/fake-gpu/torch.json
    python3 -m bench.peers.report /tmp/fake-gpu
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import tempfile
import unittest
import unittest.mock
from pathlib import Path

import numpy as np

from bench.peers import __main__ as peers_main
from bench.peers import checks, common, iree_peer, report

# ---- NumPy versions of the workloads (the references of the fake run) ---------------------


def seed(x, y):
    z = x.astype(np.float64) @ y.astype(np.float64)
    return np.array(np.sum(np.maximum(z + np.sin(z), 0)), dtype=np.float32)


def gelu(x):
    return (0.5 * x * (1 + np.tanh(0.7978845608 * (x + 0.044715 * x**3)))).astype(np.float32)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def layernorm(x, gamma, beta):
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return ((x - mean) / np.sqrt(variance + 1e-5) * gamma + beta).astype(np.float32)


def adam(parameter, gradient, m, v):
    learning_rate, beta1, beta2, epsilon = 1e-3, 0.9, 0.999, 1e-8
    new_m = beta1 * m + (1 - beta1) * gradient
    new_v = beta2 * v + (1 - beta2) * gradient * gradient
    step = (new_m / (1 - beta1**10)) / (np.sqrt(new_v / (1 - beta2**10)) + epsilon)
    return [(parameter - learning_rate * step).astype(np.float32), new_m.astype(np.float32),
            new_v.astype(np.float32)]


BODIES = {"seed": seed, "gelu": gelu, "softmax": softmax, "layernorm": layernorm, "adam": adam}

# The GPU suite's ids, names and fields, at small sizes: (id, name, input shapes, batch, tf32).
FAKE_SUITE = [
    ("seed-256", "seed", [(32, 32), (32, 32)], 8, False),
    ("seed-8192", "seed", [(64, 64), (64, 64)], 2, False),
    ("seed-8192-tf32", "seed", [(64, 64), (64, 64)], 3, True),
    ("gelu", "gelu", [(16, 64)], 4, None),
    ("softmax", "softmax", [(16, 64)], 4, None),
    ("layernorm", "layernorm", [(16, 64), (64,), (64,)], 4, None),
    ("adam", "adam", [(1000,)] * 4, 2, None),
]

# kiln's times of the fake run (ms per call): jit, standard, floor figures. The
# checks they give: gelu 1.1x PASS, softmax 1.3x FAIL, layernorm 1.197x PASS,
# adam 1.16x FAIL, seed-8192 1.02x cuBLAS PASS; seed-8192-tf32 and seed-256
# depend on the peers' times (FAKE_PEER_TIMES).
FAKE_KILN_TIMES = {
    "seed-256": dict(jit_ms=0.010, standard_ms=0.030, blas_ms=0.008),
    "seed-8192": dict(jit_ms=25.5, standard_ms=30.0, blas_ms=25.0),
    "seed-8192-tf32": dict(jit_ms=3.0, standard_ms=4.0, blas_ms=2.8),
    "gelu": dict(jit_ms=0.1452, standard_ms=0.5, memory_floor_ms=0.132),
    "softmax": dict(jit_ms=0.1716, standard_ms=0.6, memory_floor_ms=0.132),
    "layernorm": dict(jit_ms=0.1580, standard_ms=0.9, memory_floor_ms=0.132),
    "adam": dict(jit_ms=0.4593, standard_ms=1.5, memory_floor_ms=0.396),
}
# Peer per-call times: seed-8192-tf32 kiln 3.0 vs jax.jit 3.2 -> PASS; seed-256
# kiln 0.010 vs the fastest peer (torch.compile 0.009) -> FAIL.
FAKE_PEER_TIMES = {
    "jax": {"seed-256": (0.020, 0.012), "seed-8192-tf32": (3.5, 3.2)},
    "torch": {"seed-256": (0.015, 0.009), "seed-8192-tf32": (3.1, 3.3)},
}


def write_fake_run(directory: str | Path, device: str = "cuda:0", seed_value: int = 1) -> Path:
    """kiln.json and data/ as `kiln-bench --device cuda --json --save-inputs`
    would write them, at small sizes, outputs from NumPy."""
    out = Path(directory)
    (out / "data").mkdir(parents=True, exist_ok=True)
    random = np.random.default_rng(seed_value)
    workloads = []
    for workload_id, name, shapes, batch, tf32 in FAKE_SUITE:
        (out / "data" / workload_id).mkdir(exist_ok=True)
        inputs = [random.standard_normal(shape).astype(np.float32) for shape in shapes]
        if name == "adam":
            inputs[3] = np.abs(inputs[3])  # v >= 0
        outputs = BODIES[name](*inputs)
        outputs = outputs if isinstance(outputs, list) else [outputs]
        files = {"inputs": [], "standard": [], "jit": []}
        for kind, arrays in (("inputs", inputs), ("standard", outputs), ("jit", outputs)):
            for index, array in enumerate(arrays):
                relative = f"{workload_id}/{'input' if kind == 'inputs' else kind}{index}.npy"
                np.save(out / "data" / relative, array)
                files[kind].append(relative)
        times = FAKE_KILN_TIMES[workload_id]
        memory_floor = times.get("memory_floor_ms", 0.001)
        entry = {"id": workload_id, "name": name, "shape": "x".join(map(str, shapes[0])), "batch": batch,
                 "standard_ms": times["standard_ms"], "jit_ms": times["jit_ms"],
                 "floor_ms": max(memory_floor, times.get("blas_ms", 0)),
                 "jit_note": "", "jit_vs_standard_difference": 0,
                 "bytes": memory_floor * 4.0e9 * 1e-3, "flops": 0, "memory_floor_ms": memory_floor,
                 "copy_bandwidth_gbs": 4000.0, "cold_first_call_ms": 250.0, "files": files}
        if tf32 is not None:
            entry["tf32"] = tf32
        if "blas_ms" in times:
            entry.update(blas_ms=times["blas_ms"], compute_floor_ms=times["blas_ms"], kiln_matmuls_ms=times["blas_ms"])
        workloads.append(entry)
    manifest = {"tool": "kiln-bench", "date": "2026-12-01T00:00:00Z", "cpu": "fake host CPU", "cores": 16,
                "threads": 16, "runs": 10, "blas": "OpenBLAS (fake)", "device": device, "workloads": workloads}
    if device.startswith("cuda"):
        manifest["gpu"] = "NVIDIA H200 (fake)"
    (out / "kiln.json").write_text(json.dumps(manifest, indent=1))
    return out


def write_fake_peer(out: Path, system: str, label: str, timed_out_after: str | None = None,
                    differences: dict[str, float] | None = None, errors: dict[str, str] | None = None) -> None:
    """A peer's result file with FAKE_PEER_TIMES (else kiln's times) in the
    peer's modes (report.MODES), kiln's differences 0 but for `differences`
    (workload id -> difference), and `errors` (workload id -> error) instead
    of times; with `timed_out_after`, only the workloads before it, as a
    killed peer leaves it."""
    manifest = json.loads((out / "kiln.json").read_text())
    modes = report.MODES[system]
    result = {"system": system, "label": label, "version": f"{system} 0.0 (fake)", "threads": "fake",
              "device": "cuda:0 (fake)", "modes": {mode: mode for mode in modes}, "workloads": {}}
    for workload in manifest["workloads"]:
        if workload["id"] == timed_out_after:
            result["timed_out"] = "timed out after 150 s, see torch.log"
            break
        times = dict(zip(("standard", "jit"), FAKE_PEER_TIMES.get(system, {}).get(
            workload["id"], (workload["standard_ms"], workload["jit_ms"]))))
        difference = (differences or {}).get(workload["id"], 0.0)
        result["workloads"][workload["id"]] = {
            mode: {"error": (errors or {})[workload["id"]]} if workload["id"] in (errors or {}) else
            {"median_ms": times[mode], "min_ms": times[mode], "max_ms": times[mode], "first_call_ms": 1000.0,
             "batch": workload.get("batch", 1), "difference_to_kiln_jit": difference,
             "difference_to_kiln_standard": difference}
            for mode in modes}
    (out / f"{system}.json").write_text(json.dumps(result, indent=1))


# ---- tests ----------------------------------------------------------------------------------


class Clock:
    """A fake device: calls are queued; wait() runs them, 1 ms each."""

    def __init__(self):
        self.queued = 0
        self.calls = 0
        self.waits = 0
        self.now = 0.0

    def call(self):
        self.queued += 1
        self.calls += 1
        return self.calls

    def wait(self, outputs):
        self.waits += 1
        self.now += self.queued * 1e-3
        self.queued = 0

    def perf_counter(self):
        return self.now


class TimeCallsTest(unittest.TestCase):
    def measure(self, runs: int, batch: int, settle_ms: float = 0):
        clock = Clock()
        real = common.time.perf_counter
        common.time.perf_counter = clock.perf_counter
        try:
            timing, outputs = common.time_calls(clock.call, clock.wait, runs, batch, settle_ms=settle_ms)
        finally:
            common.time.perf_counter = real
        return clock, timing, outputs

    def test_batches_of_calls_with_one_wait_each(self):
        clock, timing, outputs = self.measure(runs=5, batch=4)
        self.assertEqual(outputs, 1)  # the first call's outputs are what gets compared
        self.assertEqual(clock.calls, 1 + 2 + 4 + 5 * 4)  # first, warm-up, one untimed batch, the runs
        self.assertEqual(clock.waits, 1 + 2 + 1 + 5)
        self.assertAlmostEqual(timing["median_ms"], 1.0)  # per call: run time / batch
        self.assertAlmostEqual(timing["first_call_ms"], 1.0)
        self.assertEqual(timing["batch"], 4)

    def test_untimed_batches_until_the_settle_time_has_passed(self):
        clock, timing, _ = self.measure(runs=5, batch=4, settle_ms=10)
        # 1 ms a call: after the warm-up, three untimed batches (12 ms) are the first to pass 10 ms
        self.assertEqual(clock.calls, 1 + 2 + 3 * 4 + 5 * 4)
        self.assertAlmostEqual(timing["median_ms"], 1.0)
        clock, _, _ = self.measure(runs=3, batch=1, settle_ms=2.5)
        self.assertEqual(clock.calls, 1 + 2 + 3 + 3)

    def test_batch_one_waits_for_every_call(self):
        clock, timing, _ = self.measure(runs=3, batch=1)
        self.assertEqual(clock.calls, 1 + 2 + 3)
        self.assertEqual(clock.waits, clock.calls)
        self.assertAlmostEqual(timing["median_ms"], 1.0)


def numpy_peer(precisions: list) -> common.Peer:
    """A peer made of the NumPy references: records the precision asked for."""

    @contextlib.contextmanager
    def precision(tf32):
        precisions.append(tf32)
        yield

    return common.Peer(system="numpy", label="NumPy", version=lambda: "numpy", set_threads=lambda threads: "",
                       from_numpy=lambda array: array, to_numpy=np.asarray, wait=lambda outputs: None,
                       modes={"standard": common.Mode("call", lambda body: body),
                              "jit": common.Mode("call again", lambda body: body)},
                       bodies=BODIES, precision=precision)


def printed(combined: dict) -> str:
    """What report.print_report writes for `combined`."""
    text = io.StringIO()
    report.print_report(combined, text)
    return text.getvalue()


def table_heading(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("workload"))


class RunWorkloadTest(unittest.TestCase):
    def test_gpu_manifest_batch_and_precision(self):
        with tempfile.TemporaryDirectory() as directory:
            out = write_fake_run(directory)
            manifest = json.loads((out / "kiln.json").read_text())
            for workload in manifest["workloads"]:
                precisions: list = []
                with contextlib.redirect_stdout(io.StringIO()):
                    result = common.run_workload(numpy_peer(precisions), workload, out / "data", runs=2)
                self.assertEqual(precisions, [workload.get("tf32")] * 2, workload["id"])
                for mode in ("standard", "jit"):
                    self.assertNotIn("error", result[mode], workload["id"])
                    self.assertEqual(result[mode]["batch"], workload["batch"])
                    self.assertLessEqual(result[mode]["difference_to_kiln_jit"], 1e-6, workload["id"])
                    self.assertEqual("tf32" in result[mode], "tf32" in workload)

    def test_a_failing_mode_is_reported(self):
        with tempfile.TemporaryDirectory() as directory:
            out = write_fake_run(directory)
            workload = json.loads((out / "kiln.json").read_text())["workloads"][3]
            peer = numpy_peer([])
            peer.modes["jit"] = common.Mode("broken", lambda body: lambda *inputs: 1 / 0)
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                result = common.run_workload(peer, workload, out / "data", runs=2)
            self.assertIn("median_ms", result["standard"])
            self.assertIn("ZeroDivisionError", result["jit"]["error"])


def bf16_values(array: np.ndarray) -> np.ndarray:
    """float32 values rounded to bf16 (to nearest even, as a framework's cast), kept as float32."""
    bits = np.asarray(array, dtype=np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


class Bf16WorkloadTest(unittest.TestCase):
    def test_a_bf16_workload_casts_its_inputs_and_outputs(self):
        with tempfile.TemporaryDirectory() as directory:
            out = write_fake_run(directory)
            workload = json.loads((out / "kiln.json").read_text())["workloads"][3]  # gelu
            workload = dict(workload, dtype="bf16")
            casts = []
            peer = numpy_peer([])
            peer.to_bf16 = lambda array: casts.append("in") or bf16_values(array)
            peer.to_f32 = lambda array: casts.append("out") or np.asarray(array, dtype=np.float32)
            with contextlib.redirect_stdout(io.StringIO()):
                result = common.run_workload(peer, workload, out / "data", runs=2)
            self.assertIn("in", casts)
            self.assertIn("out", casts)
            for mode in ("standard", "jit"):
                # kiln's outputs (here NumPy's f32) against the peer's on bf16 inputs: within bf16's tolerance.
                difference = result[mode]["difference_to_kiln_jit"]
                self.assertGreater(difference, 0)
                self.assertLessEqual(difference, checks.tolerance("gelu", None, "bf16"))

    def test_only_the_inputs_marked_bf16_are_cast(self):
        # adam-bf16: a bf16 parameter and gradient, f32 moments (the manifest's "bf16_inputs").
        with tempfile.TemporaryDirectory() as directory:
            out = write_fake_run(directory)
            workload = next(w for w in json.loads((out / "kiln.json").read_text())["workloads"] if w["name"] == "adam")
            workload = dict(workload, dtype="bf16", bf16_inputs=[True, True, False, False])
            cast = []
            peer = numpy_peer([])
            peer.to_bf16 = lambda array: cast.append(array.shape) or bf16_values(array)
            peer.to_f32 = lambda array: np.asarray(array, dtype=np.float32)
            with contextlib.redirect_stdout(io.StringIO()):
                common.run_workload(peer, workload, out / "data", runs=2)
            self.assertEqual(len(cast), 2)

    def test_a_peer_without_bf16_says_so(self):
        with tempfile.TemporaryDirectory() as directory:
            out = write_fake_run(directory)
            workload = dict(json.loads((out / "kiln.json").read_text())["workloads"][0], dtype="bf16")
            result = common.run_workload(numpy_peer([]), workload, out / "data", runs=2)
            for mode in ("standard", "jit"):
                self.assertIn("runs no bf16", result[mode]["error"])

    def test_tf32_tolerance(self):
        # TF32 products (GPU workloads with "tf32": true) against other systems' TF32: 2e-2, full f32 as before.
        for name in ("seed", "attention", "block", "block_train", "mlp_train", "stem", "conv"):
            self.assertEqual(checks.tolerance(name, True), 2e-2)
        self.assertEqual(checks.tolerance("block", False), checks.TOLERANCE["block"])
        self.assertEqual(checks.tolerance("pool", True), checks.TOLERANCE["pool"])

    def test_bf16_tolerance(self):
        self.assertEqual(checks.tolerance("seed", None, "bf16"), 2.0 ** -6)
        self.assertEqual(checks.tolerance("seed", None), checks.TOLERANCE["seed"])


class GpuReportTest(unittest.TestCase):
    def combined(self, directory: str, torch_timed_out_after: str | None = None) -> dict:
        out = write_fake_run(directory)
        write_fake_peer(out, "jax", "JAX")
        write_fake_peer(out, "torch", "torch", timed_out_after=torch_timed_out_after)
        (out / "tensorflow.json").write_text(json.dumps(
            {"workloads": {}, "error": "not installed (ModuleNotFoundError: No module named 'tensorflow')"}))
        return report.combine(out, None)

    def test_done_when_checks(self):
        with tempfile.TemporaryDirectory() as directory:
            verdicts = {check["id"]: check["verdict"] for check in self.combined(directory)["done_when"]}
        self.assertEqual(verdicts, {"gelu": "PASS", "softmax": "FAIL", "layernorm": "PASS", "adam": "FAIL",
                                    "seed-8192": "PASS", "seed-8192-tf32": "PASS", "seed-256": "FAIL",
                                    # not in the fake run
                                    "seed-8192-bf16": "NOT CHECKED", "gelu-bf16": "NOT CHECKED",
                                    "softmax-bf16": "NOT CHECKED", "layernorm-bf16": "NOT CHECKED",
                                    "attention": "NOT CHECKED", "block": "NOT CHECKED", "stem": "NOT CHECKED",
                                    "conv": "NOT CHECKED", "pool": "NOT CHECKED", "depthwise": "NOT CHECKED",
                                    "mlp-train": "NOT CHECKED", "block-train": "NOT CHECKED"})

    def test_table_last_with_the_gpu_columns(self):
        with tempfile.TemporaryDirectory() as directory:
            combined = self.combined(directory)
            text = printed(combined)
            markdown = report.markdown(combined)
        lines = text.splitlines()
        heading = table_heading(text)
        for column in ("kiln std", "kiln JIT", "JAX op-by-op", "jax.jit", "torch eager", "torch.compile",
                       "floor", "JIT/floor", "JIT/cuBLAS"):
            self.assertIn(column, heading)
        self.assertNotIn("TF", heading)  # asked for but not installed: listed, no columns
        self.assertIn("tensorflow: NOT AVAILABLE: not installed", text)
        self.assertTrue(lines[-1].strip().startswith(("PASS", "FAIL", "NOT CHECKED")))
        self.assertIn("done-when (this run): 4 PASS, 3 FAIL", text)
        self.assertIn("| seed-8192-tf32 | 64x64 tf32 |", markdown)

    def test_timed_out_peer(self):
        with tempfile.TemporaryDirectory() as directory:
            combined = self.combined(directory, torch_timed_out_after="gelu")
            text = printed(combined)
        row = next(line for line in text.splitlines() if line.startswith("adam "))
        self.assertIn("timed out", row)
        self.assertEqual(report.failures(combined), [])
        checks_by_id = {check["id"]: check for check in combined["done_when"]}
        self.assertEqual(checks_by_id["seed-256"]["verdict"], "FAIL")  # torch's seed-256 finished before

    def test_a_workload_kiln_bench_failed_is_a_failure(self):
        with tempfile.TemporaryDirectory() as directory:
            out = write_fake_run(directory)
            manifest = json.loads((out / "kiln.json").read_text())
            manifest["workloads"] = [w for w in manifest["workloads"] if w["id"] != "adam"]
            manifest["failed_workloads"] = [{"id": "adam", "error": "kiln::DeviceError: cudaMalloc: out of memory"}]
            (out / "kiln.json").write_text(json.dumps(manifest))
            combined = report.combine(out, None)
        checks_by_id = {check["id"]: check for check in combined["done_when"]}
        self.assertEqual(checks_by_id["adam"]["verdict"], "FAIL")
        self.assertIn("out of memory", checks_by_id["adam"]["detail"])
        self.assertIn("adam: kiln-bench failed: kiln::DeviceError: cudaMalloc: out of memory", report.failures(combined))

    def test_missing_jit_and_peer_times_are_not_checked(self):
        with tempfile.TemporaryDirectory() as directory:
            out = write_fake_run(directory)
            manifest = json.loads((out / "kiln.json").read_text())
            manifest["workloads"][3].update(jit_ms=None, jit_note="fell back: no CUDA JIT for tanh")
            manifest["workloads"][4].update(jit_ms=None, jit_note="WRONG: differs from the standard executor")
            (out / "kiln.json").write_text(json.dumps(manifest))
            combined = report.combine(out, None)  # no peer ran at all
            report.print_report(combined, io.StringIO())
        verdicts = {check["id"]: check["verdict"] for check in combined["done_when"]}
        self.assertEqual(verdicts["gelu"], "NOT CHECKED")
        self.assertEqual(verdicts["softmax"], "FAIL")
        self.assertEqual(verdicts["seed-8192-tf32"], "NOT CHECKED")
        self.assertEqual(verdicts["seed-256"], "NOT CHECKED")

    def test_tf32_tolerance(self):
        self.assertEqual(checks.tolerance("seed", True), checks.TOLERANCE_TF32["seed"])
        self.assertEqual(checks.tolerance("seed", False), checks.TOLERANCE["seed"])
        self.assertEqual(checks.tolerance("gelu", True), checks.TOLERANCE["gelu"])

    def test_cpu_run_keeps_its_report(self):
        with tempfile.TemporaryDirectory() as directory:
            out = write_fake_run(directory, device="cpu")
            manifest = json.loads((out / "kiln.json").read_text())
            del manifest["device"]  # as older kiln-bench files
            for workload in manifest["workloads"]:
                del workload["batch"]
                workload.pop("tf32", None)
            (out / "kiln.json").write_text(json.dumps(manifest))
            combined = report.combine(out, None)
            text = printed(combined)
        self.assertNotIn("done_when", combined)
        self.assertTrue(text.startswith("kiln vs peers, "))
        self.assertIn("TF function", text)


def write_fake_cpu_run(directory: str | Path) -> Path:
    """write_fake_run as `kiln-bench --json --save-inputs` writes it on the CPU: no device, batch or tf32."""
    out = write_fake_run(directory, device="cpu")
    manifest = json.loads((out / "kiln.json").read_text())
    del manifest["device"]
    for workload in manifest["workloads"]:
        del workload["batch"]
        workload.pop("tf32", None)
    (out / "kiln.json").write_text(json.dumps(manifest))
    return out


# iree-compile's diagnostics as a CompilerToolError gives them (shortened: the target's features, the notes).
IREE_ERROR = """Error invoking IREE compiler tool iree-compile
Error code: 1
Diagnostics:
<stdin>:43:11: error: One or more operations with large vector sizes (32768 bytes) were found:

    %32 = stablehlo.dot_general %28, %11, contracting_dims = [0] x [0] : (tensor<256x1024xf32>, tensor<256x1024xf32>) -> tensor<1024x1024xf32>
          ^
<stdin>:2:3: note: called from
<stdin>:43:11: error: failed to run translation of source executable to target executable for backend #hal.executable.target<"llvm-cpu", "embedded-elf-x86_64", {cpu = "znver3", cpu_features = "+avx2,+fma"}>

Invoked with:
 iree-compile - --iree-input-type=stablehlo --iree-hal-target-backends=llvm-cpu
"""


class IreeTest(unittest.TestCase):
    """IREE, one column (its compiled modules), in the CPU report."""

    def combined(self, directory: str) -> dict:
        out = write_fake_cpu_run(directory)
        write_fake_peer(out, "jax", "JAX")
        write_fake_peer(out, "torch", "torch")
        (out / "tensorflow.json").write_text(json.dumps(
            {"workloads": {}, "error": "not installed (ModuleNotFoundError: No module named 'tensorflow')"}))
        # As IREE 3.13's first trial: the seed's sum 6.6e-4 off, a workload it could not compile.
        write_fake_peer(out, "iree", "IREE", differences={"seed-256": 6.6e-4},
                        errors={"adam": "CompileError: iree-compile failed: One or more operations with large "
                                        "vector sizes (32768 bytes) were found"})
        return report.combine(out, None)

    def test_one_column_checked_like_the_others(self):
        with tempfile.TemporaryDirectory() as directory:
            combined = self.combined(directory)
            text = printed(combined)
            markdown = report.markdown(combined)
        self.assertEqual([system["key"] for system in combined["systems"] if system["system"] == "iree"], ["iree-jit"])
        lines = text.splitlines()
        heading = table_heading(text)
        self.assertTrue(heading.rstrip().endswith("torch.compile           IREE"), heading)
        self.assertEqual(markdown.splitlines()[0].count("|"), 4 + 2 + 2 * 3 + 1)  # kiln 2, 3 peers x 2, IREE 1
        self.assertTrue(next(line for line in lines if line.startswith("adam ")).rstrip().endswith("error"))
        self.assertIn("adam iree-jit: CompileError: iree-compile failed: One or more operations", text)
        # a miss is reported, never hidden: the agreement line, the failures, the exit status
        agreement = next(line for line in lines if line.strip().startswith("seed-256") and "tolerance" in line)
        self.assertIn("IREE 6.6e-04 FAIL", agreement)
        self.assertIn("seed-256: iree-jit differs from kiln's JIT by 0.00066 (tolerance 0.0001)",
                      report.failures(combined))
        self.assertEqual(len(report.failures(combined)), 1)
        self.assertIn("  iree 0.0 (fake): fake", lines)  # one versions line per peer
        self.assertEqual(sum(line.startswith("  jax 0.0 (fake)") for line in lines), 1)
        self.assertIn("tensorflow: NOT AVAILABLE: not installed", text)

    def test_not_installed(self):
        with tempfile.TemporaryDirectory() as directory:
            out = write_fake_cpu_run(directory)
            (out / "iree.json").write_text(json.dumps(
                {"workloads": {}, "error": "not installed (ModuleNotFoundError: No module named 'iree')"}))
            status = Path(directory) / "peers-install.txt"
            status.write_text("iree\tfailed\tERROR: No matching distribution found for iree-base-compiler\n")
            combined = report.combine(out, status)
            text = printed(combined)
        row = next(line for line in text.splitlines() if line.startswith("gelu "))
        self.assertTrue(row.rstrip().endswith("not installed"))
        self.assertIn("iree: NOT AVAILABLE: not installed (pip install iree failed: ERROR: No matching distribution",
                      text)
        self.assertEqual(report.failures(combined), [])

    def test_compiler_error_is_its_first_error_and_op(self):
        self.assertEqual(iree_peer.compiler_error(IREE_ERROR),
                         "One or more operations with large vector sizes (32768 bytes) were found at "
                         "`%32 = stablehlo.dot_general %28, %11, contracting_dims = [0] x [0] : "
                         "(tensor<256x1024xf32>, tensor<256x1024xf32>) -> tensor<1024x1024xf32>`")
        target_only = IREE_ERROR.split("\n")[8]
        self.assertEqual(iree_peer.compiler_error(target_only), "failed to run translation of source executable "
                         "to target executable for backend")
        self.assertEqual(iree_peer.compiler_error("Error invoking IREE compiler tool iree-compile\nDiagnostics:\n"
                                                  "iree-compile: Unknown command line argument '--x'.\n\n"
                                                  "Invoked with:\n iree-compile -\n"),
                         "iree-compile: Unknown command line argument '--x'.")

    def test_cpu_only(self):
        with self.assertRaisesRegex(RuntimeError, "CPU only"):
            iree_peer.make_peer("cuda")

    @unittest.skipUnless(importlib.util.find_spec("iree") and importlib.util.find_spec("jax"),
                         "needs iree-base-compiler, iree-base-runtime and jax (.venv-peers)")
    def test_compiles_runs_and_reports_a_compiler_error(self):
        with tempfile.TemporaryDirectory() as directory:
            out = write_fake_cpu_run(directory)
            workloads = {w["id"]: w for w in json.loads((out / "kiln.json").read_text())["workloads"]}
            peer = iree_peer.make_peer("cpu")
            self.assertEqual(tuple(peer.modes), report.MODES["iree"])
            peer.set_threads(1)
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                for workload_id in ("seed-256", "layernorm", "adam"):
                    result = common.run_workload(peer, workloads[workload_id], out / "data", runs=2)
                    self.assertLessEqual(result["jit"]["difference_to_kiln_jit"],
                                         checks.tolerance(workloads[workload_id]["name"]), workload_id)
                with unittest.mock.patch.object(iree_peer, "COMPILE_FLAGS", ["--no-such-iree-flag"]):
                    result = common.run_workload(peer, workloads["gelu"], out / "data", runs=2)
        self.assertRegex(result["jit"]["error"], r"^CompileError: iree-compile failed: .*no-such-iree-flag")
        self.assertNotIn("\n", result["jit"]["error"])
        self.assertNotIn("Invoked with", result["jit"]["error"])


class TimeLimitTest(unittest.TestCase):
    def test_defaults_and_overrides(self):
        self.assertEqual(peers_main.parse_time_limits(None, "cpu"),
                         {"tensorflow": None, "jax": None, "torch": None, "iree": None})
        self.assertEqual(peers_main.parse_time_limits(None, "cuda"), {**peers_main.GPU_TIME_LIMITS, "iree": None})
        self.assertEqual(peers_main.parse_time_limits("torch=200,jax=0", "cuda"),
                         {"tensorflow": 120.0, "jax": None, "torch": 200.0, "iree": None})
        self.assertEqual(peers_main.parse_time_limits("60", "cpu"),
                         {"tensorflow": 60.0, "jax": 60.0, "torch": 60.0, "iree": 60.0})

    def test_a_deadline_is_shared_in_proportion_to_the_limits(self):
        limits = {"jax": 120.0, "torch": 150.0, "tensorflow": None}
        # 290 s left, 20 kept for the report: jax gets 120/270 of 270.
        self.assertAlmostEqual(peers_main.share_of_deadline(290, "jax", ["jax", "torch"], limits), 120.0)
        self.assertAlmostEqual(peers_main.share_of_deadline(200, "jax", ["jax", "torch"], limits), 80.0)
        self.assertAlmostEqual(peers_main.share_of_deadline(1000, "torch", ["torch"], limits), 150.0)  # its own
        # A share too short to import a framework in: 0, the peer is skipped.
        self.assertEqual(peers_main.share_of_deadline(34, "torch", ["torch"], limits), 0.0)
        self.assertAlmostEqual(peers_main.share_of_deadline(36, "torch", ["torch"], limits), 16.0)
        self.assertAlmostEqual(peers_main.share_of_deadline(140, "tensorflow", ["tensorflow"], limits), 120.0)

    def test_a_peer_past_its_limit_is_killed(self):
        with tempfile.TemporaryDirectory() as directory:
            log = Path(directory) / "log"
            status = peers_main.run_logged(["sh", "-c", "echo started; sleep 30"], log, {"PATH": "/usr/bin:/bin"},
                                           echo=False, time_limit=0.5)
            self.assertIsNone(status)
            self.assertIn("started", log.read_text())
            self.assertEqual(peers_main.run_logged(["true"], log, {"PATH": "/usr/bin:/bin"}, echo=False,
                                                   time_limit=5), 0)


# kiln-bench's stand-in for a whole run: copies a fake run's kiln.json and data/ to
# where --json and --save-inputs say, as `kiln-bench --device cuda` would write them.
FAKE_KILN_BENCH = """#!/usr/bin/env python3
import shutil, sys
arguments = sys.argv[1:]
shutil.copy(sys.argv[0] + ".json", arguments[arguments.index("--json") + 1])
shutil.copytree(sys.argv[0] + ".data", arguments[arguments.index("--save-inputs") + 1], dirs_exist_ok=True)
"""


class WholeRunTest(unittest.TestCase):
    def test_peers_without_time_are_skipped_and_the_data_is_discarded(self):
        with tempfile.TemporaryDirectory() as directory:
            fake = write_fake_run(Path(directory) / "fake")
            bench = Path(directory) / "kiln-bench"
            bench.write_text(FAKE_KILN_BENCH)
            bench.chmod(0o755)
            (fake / "kiln.json").rename(str(bench) + ".json")
            (fake / "data").rename(str(bench) + ".data")
            out = Path(directory) / "out"
            arguments = ["bench.peers", "--device", "cuda", "--kiln-bench", str(bench), "--out", str(out),
                         "--peers", "jax,torch", "--discard-data", "--deadline", "30"]
            with unittest.mock.patch("sys.argv", arguments), contextlib.redirect_stdout(io.StringIO()) as stdout, \
                    contextlib.redirect_stderr(io.StringIO()):
                status = peers_main.main()
            self.assertFalse((out / "data").exists())
            results = json.loads((out / "results.json").read_text())
            written_report = (out / "report.txt").read_text()
        self.assertIn("jax skipped: too little of the deadline left", stdout.getvalue())
        self.assertIn("torch skipped", stdout.getvalue())
        self.assertIn("not run: too little of the deadline left", written_report)
        self.assertIn("NOT CHECKED seed-256", stdout.getvalue())  # the report, last on stdout
        self.assertEqual(report.failures(results), [])
        self.assertEqual(status, 0)


if __name__ == "__main__":
    unittest.main()
