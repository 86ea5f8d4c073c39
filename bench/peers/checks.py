"""Agreement between systems on the same inputs, and the tolerances.

The measure is kiln-bench's: per output, max |a - b| / max |b|, and the
worst over the outputs. Each system is compared with kiln's JIT output (and
its standard output); the seed workloads are also compared with a float64
evaluation of the same inputs, which tells who is closer to the truth.
"""

from __future__ import annotations

import numpy as np

# Why 1e-4 for the seed function, sum(relu(z + sin z)), z = x @ y, x and y
# N(0, 1) of size n = 1024:
#  - each z is a 1024-term f32 dot product, z ~ N(0, 1024), |z| ~ 30. Another
#    summation order (OpenBLAS, Eigen, oneDNN, XLA's own GEMM) changes it by
#    about u * sqrt(1024) * |z| ~ 6e-8 * 32 * 32 ~ 6e-5 absolute (u = 2^-24),
#    ~2e-6 relative; sin(z) moves by as much. These differences have random
#    signs, so over the ~5e5 positive terms they add up to ~sqrt(5e5) * 1e-4
#    ~ 0.07, against a sum of ~1e6 * 12.8 ~ 1.3e7: ~5e-9 relative.
#  - the reduction of 1e6 f32 terms of size ~30 dominates. All terms are >= 0,
#    so there is no cancellation and the relative error is that of the
#    summation order alone: pairwise/tree sums (Eigen, XLA, NumPy) are bounded
#    by log2(1e6) * u ~ 1.2e-6; blocked sums with sequential chains of length
#    L have random-walk errors ~ sqrt(L) * u, at most ~6e-5 for one chain of
#    all 1e6 terms (the worst-case bound, 1e6 * u = 0.06, needs every rounding
#    to go the same way, which round-to-nearest on random data does not do).
#  - so honest implementations agree to ~1e-6 and at worst ~6e-5: 1e-4 passes
#    them all, while the smallest plausible bug, losing the sin term (whose
#    share of the sum is ~1e-3, measured in the report), fails it tenfold.
# The other workloads: elementwise maps (gelu in both forms, Adam) differ by a few ulp of
# their transcendental/sqrt implementations (~1e-6 of the largest value);
# softmax and layernorm add 4096-term row sums (~sqrt(4096) * u ~ 4e-6);
# attention adds 64- and 512-term dot products and a 512-term row sum; the
# transformer block chains 512- and 2048-term products, 1024-term softmax rows
# and two 512-term layer norms, each feeding the next: like attention's, 1e-4.
# conv's outputs are 576-term dot products of unit-variance terms (filters scaled by
# 1/sqrt(576)), with a bias, through relu: as attention's products, 1e-4.
TOLERANCE = {
    "seed": 1e-4,
    "gelu": 1e-5,
    "gelu_erf": 1e-5,
    "softmax": 1e-5,
    "layernorm": 1e-5,
    "adam": 1e-5,
    "attention": 1e-4,
    "block": 1e-4,
    "stem": 1e-4,  # 147-term dot products of unit-variance terms, as conv's
    "conv": 1e-4,
    "pool": 0.0,  # a maximum of the input's elements: exact
    "add_one": 0.0,  # x + 1 in f32, correctly rounded everywhere (the `call` workload)
    "depthwise": 1e-5,  # 9-term sums of unit-variance terms, a bias, relu: ~1e-7 apart
    # Training steps: the loss, the updated parameters and Adam's moments. The gradients are products and sums
    # of 256 to 1024 terms (mlp) or the block's chains, as attention's and block's outputs; 1e-4 too. A wrong
    # gradient moves the first moments by O(1) of their size (their inputs are of the gradients' size).
    "mlp_train": 1e-4,
    "block_train": 1e-4,
    # rnn: 512 GRU steps, each of 512-term products through sigmoid and tanh, which contract: the states stay
    # ~1e-6 apart step after step, as the block's outputs; 1e-4.
    "rnn": 1e-4,
    # decode: 2048- and 8192-term products of terms scaled to unit variance, gelu between: as block's.
    "decode": 1e-4,
    # rnn_train: its gradients sum 128 steps' chains of those states back through the GRU, as block_train's chains.
    "rnn_train": 1e-4,
    # cnn_train: its filter gradients sum 288-term windows over 16k (second layer) or 64k (first) positions and the
    # pool's maxima choose among the first layer's outputs; a wrong window or tap moves them by O(1); 1e-4 as mlp's.
    "cnn_train": 1e-4,
    # solver: conjugate gradients stop when the residual crosses 1e-5 of b's; a system whose rounding takes it there
    # one iteration sooner or later (the count is an output) differs by 1 in ~55 iterations and by ~1e-4 in x. A
    # wrong step is off by O(1) in both.
    "solver": 2e-2,
}


# TF32 (kiln-bench --device cuda, workloads with "tf32": true): a matmul's
# inputs keep 10 of their 23 mantissa bits, u = 2^-11 ~ 4.9e-4 when rounded,
# twice that when truncated (cuBLAS's tensor cores truncate; other kernels
# round, or split into 3 TF32 terms). At n = 8192, z ~ N(0, 8192), |z| ~ 90:
#  - two implementations that round the inputs alike differ only in the f32
#    accumulation order, as above (~1e-6);
#  - one that truncates vs one that rounds shrinks every product by ~2 * 3.5e-4
#    on average, a bias, not noise: z, and the sum of relu(z + sin z) with it,
#    move by ~7e-4 relative; sin(z) of z moved by ~0.06 adds random noise;
#  - vs a full f32 implementation (a framework ignoring the TF32 switch) the
#    same ~1e-3.
# That estimate is ~1e-3; up to ~1e-2 is expected in practice (not yet
# measured here). 2e-2 leaves room for it and still fails a wrong matmul (a
# transposed or missing operand changes the sum by O(1)); it cannot see a lost
# sin term, which the full-f32 seeds check. Only matmuls use TF32.
TOLERANCE_TF32 = {
    "seed": 2e-2,
    "attention": 2e-2,
    # The model workloads on a GPU (kiln-bench --device cuda with the names given): products of the same depths in
    # chains (the block's, its gradients', the MLP's), or a convolution's 147 or 576 terms (cuDNN's implicit GEMM
    # for the peers, cuBLAS for kiln), all in TF32: the same estimate as the seed's.
    **{name: 2e-2 for name in ("block", "block_train", "mlp_train", "stem", "conv")},
}


# bf16 workloads: each system rounds to bf16 where its own ops end (PyTorch eager at every op, compilers where
# they choose), so results differ by a few units of bf16's rounding (2^-8): four of them.
TOLERANCE_BF16 = 2.0 ** -6


def tolerance(name: str, tf32: bool | None = None, dtype: str | None = None) -> float:
    """The largest relative difference accepted between two systems' outputs
    of workload `name`, run with TF32 matmuls if `tf32`, in `dtype` ("bf16"
    for kiln-bench's -bf16 workloads; None: f32)."""
    if dtype == "bf16":
        return max(TOLERANCE_BF16, TOLERANCE[name])
    if tf32:
        return TOLERANCE_TF32.get(name, TOLERANCE[name])
    return TOLERANCE[name]


def relative_difference(outputs: list[np.ndarray], references: list[np.ndarray]) -> float:
    if len(outputs) != len(references):
        return float("inf")
    worst = 0.0
    for output, reference in zip(outputs, references):
        output, reference = np.asarray(output), np.asarray(reference)
        if output.shape != reference.shape:
            return float("inf")
        largest_difference, largest_reference = 0.0, 0.0
        # In float64, a slice at a time: the GPU suite's outputs are 64M
        # elements, and whole-array float64 temporaries took seconds each.
        flat_output, flat_reference = output.reshape(-1), reference.reshape(-1)
        for start in range(0, max(flat_output.size, 1), CHUNK):
            piece = flat_reference[start:start + CHUNK].astype(np.float64)
            difference = np.abs(flat_output[start:start + CHUNK].astype(np.float64) - piece)
            if difference.size:
                largest = float(np.max(difference))  # NaN if either side has one: never agreement
                largest_difference = max(largest_difference, largest if largest == largest else float("inf"))
                largest_reference = max(largest_reference, float(np.max(np.abs(piece))))
        worst = max(worst, largest_difference / max(largest_reference, 1e-30))
    return worst


CHUNK = 1 << 20


def seed_float64(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """The seed function in float64 on the f32 inputs, and the share of the
    sum that the sin term contributes (what a lost sin would change)."""
    z = x.astype(np.float64) @ y.astype(np.float64)
    total = float(np.sum(np.maximum(z + np.sin(z), 0)))
    without_sin = float(np.sum(np.maximum(z, 0)))
    return {"value": total, "sin_share": abs(total - without_sin) / abs(total)}
