"""IREE: ahead-of-time compiled modules of JAX's StableHLO export, on the CPU.

Each workload's body is jax_peer's own (the same JAX function that jax.jit
runs); its StableHLO export (`jax.jit(body).lower(...).as_text()`, at the
inputs' shapes) is compiled by iree-compile for the llvm-cpu backend with
COMPILE_FLAGS (the host's CPU features, and data tiling: packed matmul
operands, which took the 2048x2048 seed from 3.5x to 1.05x jax.jit's time in
a trial run), loaded into IREE's runtime on the local-task driver, and called
on inputs already in the device's buffers. IREE has one mode, the compiled
module: one column. Its first call times the export, the compilation and
loading, and one run.

A workload that JAX cannot export, or iree-compile cannot compile, is reported
with the first error (iree-compile's, with the StableHLO op it points at); its
cell says `error` and the other workloads still run. CPU only: `--device
cuda` reports the peer as not available.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, Callable

import numpy as np

from bench.peers import common

BACKEND = "llvm-cpu"
DRIVER = "local-task"  # IREE's multithreaded CPU driver
# Issue #43's flags, and reassociated float reductions: IREE 3.13 keeps them in order by default, so a whole
# tensor summed to a scalar is one sequential f32 chain whose error grows with its length (2026-12-05, without
# the flag: seed-1024 1.4e-4, seed-2048 6.2e-4 and block-train's loss 2.0e-4 off, each failing the 1e-4 check;
# with it: 6.7e-7, 1.5e-5, 2.2e-6, and seed-2048 faster). kiln, XLA and Inductor reassociate their reductions
# (tree and blocked sums); this gives IREE the same freedom, as the others get theirs.
COMPILE_FLAGS = [
    "--iree-llvmcpu-target-cpu=host",
    "--iree-opt-data-tiling",
    "--iree-llvmcpu-reassociate-fp-reductions=true",
]


def compiler_error(text: str) -> str:
    """The first error of iree-compile's diagnostics (a CompilerToolError's
    text, which also holds the notes and the command line), with the source
    line it points at (a StableHLO op of the export), shortened: the target's
    description (every CPU feature) is left out. Without an `error:` line,
    the diagnostics on one line."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if "error:" not in line:
            continue
        message = line.split("error:", 1)[1].strip().split(" #hal.executable.target<")[0].rstrip(":")
        source = next((following.strip() for following in lines[index + 1:index + 3] if following.strip()), "")
        if source and not source.startswith(("<stdin>", "^")):
            message += f" at `{source[:240]}`"
        return message
    # No `error:` line (e.g. iree-compile refused its arguments): the diagnostics, without the command line.
    diagnostics = text.split("Diagnostics:", 1)[-1].split("Invoked with:", 1)[0]
    return " ".join(line.strip() for line in diagnostics.splitlines() if line.strip())


class CompileError(RuntimeError):
    """iree-compile rejected a workload's StableHLO."""


def make_peer(device: str = "cpu") -> common.Peer:
    if device != "cpu":
        raise RuntimeError(f"the IREE peer runs on the CPU only ({BACKEND}); asked for {device}")
    import iree.compiler
    import iree.runtime
    import jax

    from bench.peers import jax_peer

    # JAX's bodies, so that IREE compiles exactly what jax.jit compiles.
    bodies = jax_peer.make_peer("cpu").bodies
    runtime: dict[str, Any] = {}  # the Config (driver and device), made once the thread count is set

    def set_threads(threads: int) -> str:
        # The task system's worker count; a flag, read when the driver is created.
        iree.runtime.flags.parse_flags(f"--task_topology_group_count={threads}")
        runtime["config"] = iree.runtime.Config(DRIVER)
        return f"{DRIVER} driver, {threads} workers (--task_topology_group_count), {threads} CPUs (affinity)"

    def config():
        if "config" not in runtime:
            runtime["config"] = iree.runtime.Config(DRIVER)
        return runtime["config"]

    def from_numpy(array: np.ndarray):
        return iree.runtime.asdevicearray(config().device, np.ascontiguousarray(array))

    def to_numpy(output) -> np.ndarray:
        return np.asarray(output.to_host() if hasattr(output, "to_host") else output)

    def compile_module(body: Callable, arguments: tuple) -> Callable:
        """body's StableHLO at the shapes of `arguments`, compiled and loaded: its entry point."""
        shapes = [jax.ShapeDtypeStruct(tuple(argument.shape), np.dtype(argument.dtype)) for argument in arguments]
        stablehlo = jax.jit(body).lower(*shapes).as_text()
        try:
            vmfb = iree.compiler.compile_str(stablehlo, target_backends=[BACKEND], input_type="stablehlo",
                                             extra_args=COMPILE_FLAGS)
        except iree.compiler.CompilerToolError as error:
            raise CompileError(f"iree-compile failed: {compiler_error(str(error))}") from None
        context = iree.runtime.SystemContext(config=config())
        module = iree.runtime.VmModule.copy_buffer(context.instance, vmfb)
        context.add_vm_module(module)
        return context.modules[module.name]["main"]

    def ahead_of_time(body: Callable) -> Callable:
        compiled: list[Callable] = []

        def call(*arguments):
            if not compiled:  # the first call: export, compile and load (timed as the first call)
                compiled.append(compile_module(body, arguments))
            return compiled[0](*arguments)
        return call

    return common.Peer(
        system="iree",
        label="IREE",
        version=lambda: (f"iree-base-compiler {metadata.version('iree-base-compiler')}, "
                         f"iree-base-runtime {metadata.version('iree-base-runtime')} "
                         f"(StableHLO from jax {jax.__version__})"),
        set_threads=set_threads,
        from_numpy=from_numpy,
        to_numpy=to_numpy,
        # Calls return when their outputs are computed: an exported function waits for its own work
        # (IREE's default execution model).
        wait=lambda outputs: None,
        device=f"{DRIVER} ({BACKEND}, {' '.join(COMPILE_FLAGS)})",
        modes={"jit": common.Mode(f"iree-compile --iree-hal-target-backends={BACKEND} " + " ".join(COMPILE_FLAGS),
                                  ahead_of_time)},
        bodies=bodies,
    )


if __name__ == "__main__":
    common.main(make_peer)
