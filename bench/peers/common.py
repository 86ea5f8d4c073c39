"""What every peer shares: the manifest kiln-bench writes, timing, and the
command line and result file of a peer process.

A peer module defines `make_peer(device)`, which returns a `Peer` (its name,
version, thread setup, how to turn a NumPy array into its tensors on the
device and back, how to wait for its work, how to set the matmul precision,
its modes, and the workload bodies), and calls `main(make_peer)`.

Devices: "cpu" (the default) or "cuda" (the first GPU). A CUDA manifest (from
`kiln-bench --device cuda`) gives each workload a `batch` (the timed unit:
`batch` back-to-back calls, then one wait) and, for matmuls, `tf32` (whether
TF32 is allowed); a peer times and computes the same way (time_calls,
Peer.precision).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, ContextManager

import numpy as np

from bench.peers import checks


@dataclasses.dataclass
class Mode:
    label: str                          # e.g. "tf.function(jit_compile=True)"
    wrap: Callable[[Callable], Callable]  # body -> what is called


@dataclasses.dataclass
class Peer:
    system: str                         # "tensorflow", "jax", "torch"
    label: str                          # column heading, e.g. "TF"
    version: Callable[[], str]
    set_threads: Callable[[int], str]   # applies the thread count, returns what was set
    from_numpy: Callable[[np.ndarray], Any]
    to_numpy: Callable[[Any], np.ndarray]
    wait: Callable[[Any], None]         # returns when the outputs are computed
    modes: dict[str, Mode]              # "standard" and "jit" (IREE: "jit" alone), as report.MODES
    bodies: dict[str, Callable]         # workload name -> body over framework tensors
    device: str = "cpu"                 # where the tensors live, in words
    # tf32 (True: TF32 allowed in f32 matmuls, False: full f32, None: the
    # manifest does not say, leave the framework's default) -> a context that
    # every call of a workload, compilation included, runs in.
    precision: Callable[[bool | None], ContextManager] = lambda tf32: contextlib.nullcontext()
    # Called before each workload: forget what earlier workloads compiled.
    start_workload: Callable[[], None] = lambda: None
    # The framework's casts to bf16 and back to f32, for kiln-bench's -bf16 workloads (the manifest's "dtype":
    # "bf16"; their .npy files hold the bf16 values as f32, exactly). None: this peer runs no bf16.
    to_bf16: Callable[[Any], Any] | None = None
    to_f32: Callable[[Any], Any] | None = None


def time_calls(call: Callable[[], Any], wait: Callable[[Any], None], runs: int, batch: int = 1, warmup: int = 2,
               settle_ms: float = 0):
    """kiln-bench's measure. The first call (trace/compile + run) is timed
    alone; then `warmup` calls, each waited for, and, if `batch` > 1, one
    untimed batch; then more untimed batches until `settle_ms` have passed
    since the warm-up (a GPU's clock settles under sustained work; kiln-bench
    gives the time in its manifest); then `runs` timed runs of `batch`
    back-to-back calls and one wait after the last (a device runs its queue
    in order). A run's per-call time is its time / `batch`: the median, min
    and max of those. With `batch` 1 every call is timed and waited for on
    its own."""
    start = time.perf_counter()
    outputs = call()
    wait(outputs)
    first_ms = (time.perf_counter() - start) * 1e3
    for _ in range(warmup):
        wait(call())
    settle_start = time.perf_counter()
    if batch > 1:
        wait(batch_of(call, batch))
    while (time.perf_counter() - settle_start) * 1e3 < settle_ms:
        wait(batch_of(call, batch))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        wait(batch_of(call, batch))
        times.append((time.perf_counter() - start) * 1e3 / batch)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
            "first_call_ms": first_ms, "batch": batch, "runs": runs}, outputs


def batch_of(call: Callable[[], Any], batch: int) -> Any:
    """Calls `call` `batch` times back to back; the last call's outputs."""
    for _ in range(batch - 1):
        call()
    return call()


def as_list(outputs) -> list:
    return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]


def run_workload(peer: Peer, workload: dict, data: Path, runs: int, settle_ms: float = 0) -> dict:
    body = peer.bodies[workload["name"]]
    batch = max(1, int(workload.get("batch") or 1))  # absent in CPU manifests: one call per timed run
    tf32 = workload.get("tf32")                      # absent in CPU manifests: the framework's default
    result = {}
    bf16 = workload.get("dtype") == "bf16"
    if bf16 and (peer.to_bf16 is None or peer.to_f32 is None):
        return {mode_name: {"error": f"{peer.system} runs no bf16 here"} for mode_name in peer.modes}
    try:
        peer.start_workload()
        inputs = [peer.from_numpy(np.load(data / name)) for name in workload["files"]["inputs"]]
        if bf16:
            # Which inputs are bf16 (adam-bf16's moments are f32); older manifests: all of them.
            marks = workload.get("bf16_inputs") or [True] * len(inputs)
            inputs = [peer.to_bf16(value) if mark else value for value, mark in zip(inputs, marks)]
        kiln_jit = [np.load(data / name) for name in workload["files"]["jit"]]
        kiln_standard = [np.load(data / name) for name in workload["files"]["standard"]]
    except Exception as error:  # e.g. a missing file, or no memory left on the device
        traceback.print_exc()
        message = f"{type(error).__name__}: {error}".strip()[:500]
        return {mode_name: {"error": message} for mode_name in peer.modes}
    for mode_name, mode in peer.modes.items():
        try:
            with peer.precision(tf32):
                function = mode.wrap(body)
                timing, outputs = time_calls(lambda: function(*inputs), peer.wait, runs, batch, settle_ms=settle_ms)
            outputs = [peer.to_numpy(peer.to_f32(output) if bf16 else output) for output in as_list(outputs)]
            timing["difference_to_kiln_jit"] = checks.relative_difference(outputs, kiln_jit)
            timing["difference_to_kiln_standard"] = checks.relative_difference(outputs, kiln_standard)
            if tf32 is not None:
                timing["tf32"] = bool(tf32)
            if all(output.size == 1 for output in outputs):
                timing["values"] = [float(output.reshape(())) for output in outputs]
            result[mode_name] = timing
        except Exception as error:  # a failing workload is reported, never hidden
            result[mode_name] = {"error": f"{type(error).__name__}: {error}".strip()[:500]}
            traceback.print_exc()
        print(f"{peer.system} {workload['id']} {mode_name}: "
              f"{result[mode_name].get('median_ms', result[mode_name].get('error'))}"
              + (f" (per call, batches of {batch})" if batch > 1 and "median_ms" in result[mode_name] else ""),
              flush=True)
    return result


def main(make_peer: Callable[[str], Peer]) -> None:
    parser = argparse.ArgumentParser(description="Runs kiln-bench's workloads in one framework.")
    parser.add_argument("--manifest", type=Path, required=True, help="kiln-bench's --json output")
    parser.add_argument("--data", type=Path, required=True, help="kiln-bench's --save-inputs directory")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the framework runs (cuda: its first GPU)")
    parser.add_argument("--out", type=Path, required=True, help="the result file (JSON)")
    arguments = parser.parse_args()

    manifest = json.loads(arguments.manifest.read_text())
    report: dict[str, Any] = {"workloads": {}, "device_requested": arguments.device}
    try:
        peer = make_peer(arguments.device)
        report.update(system=peer.system, label=peer.label, version=peer.version(),
                      threads=peer.set_threads(arguments.threads), device=peer.device,
                      modes={name: mode.label for name, mode in peer.modes.items()})
    except ImportError as error:  # the framework is not installed
        report["error"] = f"not installed ({type(error).__name__}: {error})"
        write_result(arguments.out, report)
        print(report["error"], file=sys.stderr)
        sys.exit(0)
    except Exception as error:  # e.g. installed without support for the device
        report["error"] = f"{type(error).__name__}: {error}".strip()[:500]
        write_result(arguments.out, report)
        print(report["error"], file=sys.stderr)
        sys.exit(0)
    write_result(arguments.out, report)  # what a peer killed at its time limit leaves
    for workload in manifest["workloads"]:
        if "files" not in workload or workload["name"] not in peer.bodies:
            continue
        report["workloads"][workload["id"]] = run_workload(peer, workload, arguments.data, arguments.runs,
                                                           manifest.get("settle_ms", 0))
        write_result(arguments.out, report)
    write_result(arguments.out, report)


def write_result(path: Path, report: dict[str, Any]) -> None:
    """Replaces the result file whole (a peer killed at its time limit leaves
    the last complete one)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(report, indent=1))
    os.replace(partial, path)


def thread_environment(threads: int) -> dict[str, str]:
    """Environment for a peer process: every OpenMP/MKL/BLAS/TF pool sized to
    `threads` (on the CPU the processes also run on `threads` CPUs only, see
    __main__)."""
    environment = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
                 "TF_NUM_INTEROP_THREADS", "KILN_NUM_THREADS"):
        environment[name] = str(threads)
    environment.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return environment
