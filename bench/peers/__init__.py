"""kiln's peers: the kiln-bench workloads in TensorFlow, JAX, PyTorch and
IREE (JAX's StableHLO export, compiled ahead of time).

`make bench-peers` runs `python -m bench.peers`: kiln-bench first (which
saves its inputs and outputs as .npy files), then one process per framework
on those same inputs, then one side-by-side table. See __main__.py.
"""
