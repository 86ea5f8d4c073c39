"""What every peer shares: the manifest kiln-bench writes, timing, and the
command line and result file of a peer process.

A peer module defines a `Peer` (its name, version, thread setup, how to turn
a NumPy array into its tensors and back, how to wait for its work, its two
modes, and the workload bodies) and calls `main(peer)`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

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
    modes: dict[str, Mode]              # "standard" and "jit"
    bodies: dict[str, Callable]         # workload name -> body over framework tensors


def time_calls(call: Callable[[], Any], wait: Callable[[Any], None], runs: int, warmup: int = 2):
    """First call (trace/compile) time, then `warmup` more calls, then the
    median, min and max of `runs` timed calls, each waited for."""
    start = time.perf_counter()
    outputs = call()
    wait(outputs)
    first_ms = (time.perf_counter() - start) * 1e3
    for _ in range(warmup):
        wait(call())
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        wait(call())
        times.append((time.perf_counter() - start) * 1e3)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
            "first_call_ms": first_ms}, outputs


def as_list(outputs) -> list:
    return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]


def run_workload(peer: Peer, workload: dict, data: Path, runs: int) -> dict:
    body = peer.bodies[workload["name"]]
    inputs = [peer.from_numpy(np.load(data / name)) for name in workload["files"]["inputs"]]
    kiln_jit = [np.load(data / name) for name in workload["files"]["jit"]]
    kiln_standard = [np.load(data / name) for name in workload["files"]["standard"]]
    result = {}
    for mode_name, mode in peer.modes.items():
        try:
            function = mode.wrap(body)
            timing, outputs = time_calls(lambda: function(*inputs), peer.wait, runs)
            outputs = [peer.to_numpy(output) for output in as_list(outputs)]
            timing["difference_to_kiln_jit"] = checks.relative_difference(outputs, kiln_jit)
            timing["difference_to_kiln_standard"] = checks.relative_difference(outputs, kiln_standard)
            if all(output.size == 1 for output in outputs):
                timing["values"] = [float(output.reshape(())) for output in outputs]
            result[mode_name] = timing
        except Exception as error:  # a failing workload is reported, never hidden
            result[mode_name] = {"error": f"{type(error).__name__}: {error}".strip()[:500]}
            traceback.print_exc()
        print(f"{peer.system} {workload['id']} {mode_name}: "
              f"{result[mode_name].get('median_ms', result[mode_name].get('error'))}", flush=True)
    return result


def main(make_peer: Callable[[], Peer]) -> None:
    parser = argparse.ArgumentParser(description="Runs kiln-bench's workloads in one framework.")
    parser.add_argument("--manifest", type=Path, required=True, help="kiln-bench's --json output")
    parser.add_argument("--data", type=Path, required=True, help="kiln-bench's --save-inputs directory")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, required=True, help="the result file (JSON)")
    arguments = parser.parse_args()

    manifest = json.loads(arguments.manifest.read_text())
    report: dict[str, Any] = {"workloads": {}}
    try:
        peer = make_peer()
        report.update(system=peer.system, label=peer.label, version=peer.version(),
                      threads=peer.set_threads(arguments.threads),
                      modes={name: mode.label for name, mode in peer.modes.items()})
    except Exception as error:  # ImportError above all: the framework is not installed
        report["error"] = f"{type(error).__name__}: {error}"
        arguments.out.write_text(json.dumps(report, indent=1))
        print(report["error"], file=sys.stderr)
        sys.exit(0)
    for workload in manifest["workloads"]:
        if "files" not in workload or workload["name"] not in peer.bodies:
            continue
        report["workloads"][workload["id"]] = run_workload(peer, workload, arguments.data, arguments.runs)
        arguments.out.write_text(json.dumps(report, indent=1))
    arguments.out.write_text(json.dumps(report, indent=1))


def thread_environment(threads: int) -> dict[str, str]:
    """Environment for a peer process: every OpenMP/MKL/BLAS/TF pool sized to
    `threads` (the processes also run on `threads` CPUs only, see __main__)."""
    environment = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
                 "TF_NUM_INTEROP_THREADS", "KILN_NUM_THREADS"):
        environment[name] = str(threads)
    environment.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return environment
