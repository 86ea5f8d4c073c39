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
# The other workloads: elementwise maps (gelu, Adam) differ by a few ulp of
# their transcendental/sqrt implementations (~1e-6 of the largest value);
# softmax and layernorm add 4096-term row sums (~sqrt(4096) * u ~ 4e-6);
# attention adds 64- and 512-term dot products and a 512-term row sum.
TOLERANCE = {
    "seed": 1e-4,
    "gelu": 1e-5,
    "softmax": 1e-5,
    "layernorm": 1e-5,
    "adam": 1e-5,
    "attention": 1e-4,
}


def relative_difference(outputs: list[np.ndarray], references: list[np.ndarray]) -> float:
    if len(outputs) != len(references):
        return float("inf")
    worst = 0.0
    for output, reference in zip(outputs, references):
        output = np.asarray(output, dtype=np.float64)
        reference = np.asarray(reference, dtype=np.float64)
        if output.shape != reference.shape:
            return float("inf")
        scale = max(float(np.max(np.abs(reference))), 1e-30)
        worst = max(worst, float(np.max(np.abs(output - reference))) / scale)
    return worst


def seed_float64(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """The seed function in float64 on the f32 inputs, and the share of the
    sum that the sin term contributes (what a lost sin would change)."""
    z = x.astype(np.float64) @ y.astype(np.float64)
    total = float(np.sum(np.maximum(z + np.sin(z), 0)))
    without_sin = float(np.sum(np.maximum(z, 0)))
    return {"value": total, "sin_share": abs(total - without_sin) / abs(total)}
