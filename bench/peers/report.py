"""One side-by-side report from kiln-bench's JSON and the peers' result files:
the table of times with their ratios to kiln's JIT, the agreement checks,
the first calls, and where kiln loses. Also writes results.json (for
scripts/bench-chart) and table.md (for the README).

A GPU run (kiln.json from `kiln-bench --device cuda`) gets its own layout:
the details first, then the table of per-call times with each workload's
floor, and last the done-when checks (DONE_WHEN) computed from that run.

    python -m bench.peers.report OUT_DIR
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bench.peers import checks

PEERS = ("tensorflow", "jax", "torch", "iree")
# Each peer's modes, one column each: a standard mode (op by op) and a compiled one;
# IREE only compiles (ahead of time).
MODES = {"tensorflow": ("standard", "jit"), "jax": ("standard", "jit"), "torch": ("standard", "jit"),
         "iree": ("jit",)}
# Column headings per (system, mode).
HEADINGS = {
    ("kiln", "standard"): "kiln std", ("kiln", "jit"): "kiln JIT",
    ("tensorflow", "standard"): "TF function", ("tensorflow", "jit"): "TF XLA",
    ("jax", "standard"): "JAX op-by-op", ("jax", "jit"): "jax.jit",
    ("torch", "standard"): "torch eager", ("torch", "jit"): "torch.compile",
    ("iree", "jit"): "IREE",
}


def load_peer(out: Path, system: str, install_status: dict[str, str]) -> dict[str, Any]:
    path = out / f"{system}.json"
    if not path.exists():
        return {"system": system, "error": "not run", "workloads": {}}
    try:
        peer = json.loads(path.read_text())
    except ValueError as error:
        return {"system": system, "error": f"unreadable result file: {error}", "workloads": {}}
    peer.setdefault("system", system)
    peer.setdefault("workloads", {})
    if "error" in peer and system in install_status:
        peer["error"] = f"not installed ({install_status[system]}); {peer['error']}"
    return peer


def read_install_status(path: Path | None) -> dict[str, str]:
    """Lines 'system<TAB>ok|failed<TAB>detail' written by scripts/bench-peers-venv."""
    status = {}
    if path and path.exists():
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) >= 3 and parts[1] != "ok":
                status[parts[0]] = f"pip install {parts[0]} failed: {parts[2]}"
    return status


def combine(out: Path, install_status_path: Path | None = None) -> dict[str, Any]:
    kiln = json.loads((out / "kiln.json").read_text())
    install_status = read_install_status(install_status_path)
    peers = [load_peer(out, system, install_status) for system in PEERS]
    device = kiln.get("device", "cpu")

    systems = [{"key": "kiln-standard", "system": "kiln", "mode": "standard", "label": "kiln::function",
                "heading": HEADINGS["kiln", "standard"], "version": "kiln (this tree)"},
               {"key": "kiln-jit", "system": "kiln", "mode": "jit", "label": "kiln::function(jit_compile)",
                "heading": HEADINGS["kiln", "jit"], "version": "kiln (this tree)"}]
    for peer in peers:
        for mode in MODES[peer["system"]]:
            systems.append({"key": f"{peer['system']}-{mode}", "system": peer["system"], "mode": mode,
                            "label": peer.get("modes", {}).get(mode, mode), "version": peer.get("version"),
                            "heading": HEADINGS[peer["system"], mode], "threads": peer.get("threads"),
                            "device": peer.get("device"), "error": peer.get("error"),
                            "ran": peer.get("error") != "not run"})

    rows = []
    for workload in kiln["workloads"]:
        row = {"id": workload["id"], "name": workload["name"], "shape": workload["shape"],
               "floor_ms": workload["floor_ms"], "times": {}, "notes": {}, "first_call_ms": {}, "differences": {},
               "values": {}, "batch": workload.get("batch", 1), "tf32": workload.get("tf32"),
               "dtype": workload.get("dtype")}
        for key in ("memory_floor_ms", "compute_floor_ms", "blas_ms", "copy_bandwidth_gbs", "bytes", "flops",
                    "jit_peak_temporary_bytes", "standard_peak_temporary_bytes"):
            if workload.get(key) is not None:
                row[key] = workload[key]
        row["times"]["kiln-standard"] = workload["standard_ms"]
        row["times"]["kiln-jit"] = workload["jit_ms"]
        row["differences"]["kiln-standard"] = workload.get("jit_vs_standard_difference")
        if workload.get("jit_note"):
            row["notes"]["kiln-jit"] = workload["jit_note"]
        row["first_call_ms"]["kiln-jit"] = workload.get("cold_first_call_ms")
        for peer in peers:
            for mode in MODES[peer["system"]]:
                key = f"{peer['system']}-{mode}"
                measured = peer["workloads"].get(workload["id"], {}).get(mode)
                if peer.get("error"):
                    row["notes"][key] = peer["error"]
                elif measured is None and peer.get("timed_out"):
                    row["notes"][key] = peer["timed_out"]
                elif measured is None:
                    row["notes"][key] = "not run" + (f" ({peer['crashed']})" if peer.get("crashed") else "")
                elif "error" in measured:
                    row["notes"][key] = measured["error"]
                else:
                    row["times"][key] = measured["median_ms"]
                    row["first_call_ms"][key] = measured["first_call_ms"]
                    row["differences"][key] = measured["difference_to_kiln_jit"]
                    if "values" in measured:
                        row["values"][key] = measured["values"][0]
        rows.append(row)

    combined = {"date": kiln.get("date", "?"), "cpu": kiln.get("cpu", "?"), "cores": kiln.get("cores", "?"),
                "threads": kiln.get("threads", "?"), "runs": kiln.get("runs", "?"), "blas": kiln.get("blas", "?"),
                "device": device, "systems": systems, "rows": rows}
    if kiln.get("gpu"):
        combined["gpu"] = kiln["gpu"]
    combined["kiln_failures"] = {failure["id"]: failure["error"] for failure in kiln.get("failed_workloads", [])}
    combined["seed_checks"] = seed_checks(out, kiln, rows)
    if is_gpu(combined):
        combined["done_when"] = done_when(combined)
    return combined


def peer_systems(systems: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each peer's first column: one per peer, whatever its number of modes."""
    first = {}
    for system in systems:
        if system["system"] != "kiln":
            first.setdefault(system["system"], system)
    return list(first.values())


def is_gpu(combined: dict[str, Any]) -> bool:
    return str(combined.get("device", "cpu")).startswith("cuda")


def seed_checks(out: Path, kiln: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For the seed workloads up to 2048: kiln's and each peer's value against
    a float64 evaluation of the same inputs, and how much the sin term weighs."""
    results = []
    for workload, row in zip(kiln["workloads"], rows):
        if workload["name"] != "seed" or "files" not in workload or int(workload["shape"].split("x")[0]) > 2048:
            continue
        if not all((out / "data" / name).exists() for name in workload["files"]["inputs"]):
            continue
        x, y = (np.load(out / "data" / name) for name in workload["files"]["inputs"])
        reference = checks.seed_float64(x, y)
        values = dict(row["values"])
        values["kiln-standard"] = float(np.load(out / "data" / workload["files"]["standard"][0]))
        values["kiln-jit"] = float(np.load(out / "data" / workload["files"]["jit"][0]))
        results.append({"id": workload["id"], "float64": reference["value"], "sin_share": reference["sin_share"],
                        "values": values,
                        "errors": {key: abs(value - reference["value"]) / abs(reference["value"])
                                   for key, value in values.items()}})
    return results


def tolerance(row: dict[str, Any]) -> float:
    return checks.tolerance(row["name"], row.get("tf32"), row.get("dtype"))


def failures(combined: dict[str, Any]) -> list[str]:
    found = [f"{workload}: kiln-bench failed: {error}" for workload, error in combined.get("kiln_failures", {}).items()]
    for row in combined["rows"]:
        for key, difference in row["differences"].items():
            if difference is None or not math.isfinite(difference) or difference > tolerance(row):
                found.append(f"{row['id']}: {key} differs from kiln's JIT by {difference} "
                             f"(tolerance {tolerance(row):g})")
    return found


def cell(row: dict[str, Any], key: str) -> str:
    time = row["times"].get(key)
    if time is None:
        note = row["notes"].get(key, "n/a")
        if note.startswith("not installed"):
            return "not installed"
        if note.startswith("timed out"):
            return "timed out"
        if "fell back" in note:
            return "fell back"
        return "WRONG" if note.startswith("WRONG") else "error"
    jit = row["times"].get("kiln-jit")
    text = f"{time:.2f}" if time >= 0.01 else milliseconds(time)  # a call of microseconds: its digits
    if key == "kiln-jit" or not jit:
        return text
    return f"{text} ({time / jit:.2f})"


def say_notes(notes: list[tuple[str, str, str]], say) -> None:
    """(workload, system key, note) lines, under a heading, if any."""
    if notes:
        say()
        say("notes:")
        for workload, key, note in notes:
            say(f"  {workload} {key}: {note}")


def say_agreement(combined: dict[str, Any], systems: list[dict[str, Any]], say, id_width: int) -> None:
    """Per workload, each system's difference from kiln's JIT and its verdict."""
    for row in combined["rows"]:
        parts = []
        for system in systems:
            difference = row["differences"].get(system["key"])
            if difference is None:
                continue
            verdict = "ok" if math.isfinite(difference) and difference <= tolerance(row) else "FAIL"
            parts.append(f"{system['heading']} {difference:.1e} {verdict}")
        say(f"  {row['id']:<{id_width}} (tolerance {tolerance(row):.0e}): " + (", ".join(parts) or "nothing to compare"))


def say_first_calls_losses_and_failures(combined: dict[str, Any], say, id_width: int) -> None:
    """The report's common tail: first-call times, where kiln loses, and any
    outputs that disagree."""
    say()
    say("first call (trace + compile + run) in ms; kiln: cold, empty caches:")
    for row in combined["rows"]:
        parts = [f"{HEADINGS[tuple(key.split('-', 1))]} {value:.0f}" for key, value in row["first_call_ms"].items()
                 if value is not None and key.endswith("jit")]
        say(f"  {row['id']:<{id_width}} " + ", ".join(parts))
    temporaries = [row for row in combined["rows"] if row.get("jit_peak_temporary_bytes") is not None]
    if temporaries:
        say()
        say("kiln's peak temporary memory in MiB (allocator bytes beyond inputs and outputs during one call), "
            "JIT / standard executor:")
        for row in temporaries:
            standard = row.get("standard_peak_temporary_bytes")
            say(f"  {row['id']:<{id_width}} {row['jit_peak_temporary_bytes'] / 2**20:.1f} / "
                + (f"{standard / 2**20:.1f}" if standard is not None else "n/a"))
    say()
    say("where kiln loses (a peer faster than kiln's JIT, or the JIT slower than kiln's standard executor):")
    for line in losses(combined):
        say("  " + line)
    failed = failures(combined)
    if failed:
        say()
        say("AGREEMENT FAILURES:")
        for line in failed:
            say("  " + line)


def print_report(combined: dict[str, Any], file=None) -> None:
    file = file or sys.stdout  # looked up now, so that a redirected stdout is honoured
    if is_gpu(combined):
        print_gpu_report(combined, file)
        return
    systems = combined["systems"]
    say = lambda text="": print(text, file=file)  # noqa: E731
    say(f"kiln vs peers, {combined['date']}: {combined['cpu']}, {combined['cores']} cores, "
        f"{combined['threads']} threads for every system, median of {combined['runs']} runs after warm-up, "
        f"same inputs")
    if isinstance(combined.get("load_average"), dict):
        say(f"load average (1, 5, 15 min) before the run: {combined['load_average']['before']}, "
            f"after: {combined['load_average']['after']}")
    say("time in ms; (ratio) = time / kiln JIT time: above 1 kiln's JIT is faster, below 1 kiln loses")
    blas_name = "oneMKL" if str(combined.get("blas", "")).startswith("oneMKL") else "OpenBLAS"
    say("floor (kiln-bench): max(bytes that must move / copy bandwidth at the same footprint, "
        f"matmul flops / best {blas_name} sgemm rate in the run)")
    say()
    shape_width = max([12] + [len(row["shape"]) for row in combined["rows"]])
    widths = [10, shape_width, 8] + [max(14, len(s["heading"]) + 1) for s in systems]
    heading = ["workload", "shape", "floor"] + [s["heading"] for s in systems]
    say(" ".join(text.rjust(width) if i > 1 else text.ljust(width) for i, (text, width) in
                 enumerate(zip(heading, widths))))
    for row in combined["rows"]:
        cells = [row["id"], row["shape"], f"{row['floor_ms']:.2f}"] + [cell(row, s["key"]) for s in systems]
        say(" ".join(text.rjust(width) if i > 1 else text.ljust(width) for i, (text, width) in
                     enumerate(zip(cells, widths))))
    say()
    say("versions and threads:")
    say(f"  kiln {combined.get('kiln_revision', '(this tree)')}: {combined['blas']}")
    for system in peer_systems(systems):
        if system.get("error"):
            say(f"  {system['system']}: NOT AVAILABLE: {system['error']}")
        else:
            say(f"  {system['version']}: {system['threads']}")
    notes = [(row["id"], key, note) for row in combined["rows"] for key, note in row["notes"].items()
             if not note.startswith("not installed")]
    say_notes(notes, say)

    say()
    say("agreement with kiln's JIT on the same inputs (max |a - b| / max |kiln JIT|, per output):")
    say_agreement(combined, systems, say, 10)
    for check in combined["seed_checks"]:
        say(f"  {check['id']}: float64 value {check['float64']:.9g}; the sin term is {check['sin_share']:.1e} of it;"
            f" relative error of each f32 result:")
        say("    " + ", ".join(f"{HEADINGS.get(tuple(key.split('-', 1)), key)} {error:.1e}"
                               for key, error in check["errors"].items()))
    tf_check = next((c for c in combined["seed_checks"] if c["id"] == "seed-1024"), None)
    if tf_check:
        row = next(r for r in combined["rows"] if r["id"] == "seed-1024")
        kiln_value = tf_check["values"]["kiln-jit"]
        for key in ("tensorflow-standard", "tensorflow-jit"):
            if key in tf_check["values"]:
                difference = abs(kiln_value - tf_check["values"][key]) / abs(tf_check["values"][key])
                verdict = "PASS" if difference <= tolerance(row) else "FAIL"
                say(f"  seed-1024 kiln JIT {kiln_value:.9g} vs {HEADINGS['tensorflow', key.split('-')[1]]} "
                    f"{tf_check['values'][key]:.9g}: relative difference {difference:.1e} "
                    f"(tolerance {tolerance(row):.0e}): {verdict}")
            else:
                say(f"  seed-1024 vs {key}: NOT CHECKED ({row['notes'].get(key, 'no value')})")

    say_first_calls_losses_and_failures(combined, say, 10)


def losses(combined: dict[str, Any]) -> list[str]:
    lines = []
    for row in combined["rows"]:
        jit = row["times"].get("kiln-jit")
        if jit is None:
            lines.append(f"{row['id']}: no JIT time ({row['notes'].get('kiln-jit', '')})")
            continue
        faster = [(time, key) for key, time in row["times"].items()
                  if time is not None and not key.startswith("kiln") and time < jit]
        standard = row["times"].get("kiln-standard")
        parts = []
        if standard is not None and standard < jit:
            parts.append(f"JIT slower than kiln standard ({jit:.2f} vs {standard:.2f} ms)")
        if faster:
            parts.append("faster: " + ", ".join(f"{HEADINGS[tuple(key.split('-', 1))]} {jit / time:.2f}x"
                                                 for time, key in sorted(faster)))
        if parts:
            floor = f" (kiln JIT {jit / row['floor_ms']:.2f}x its floor)" if row.get("floor_ms") else ""
            lines.append(f"{row['id']}: " + "; ".join(parts) + floor)
    return lines or ["nowhere in this run"]


def markdown(combined: dict[str, Any]) -> str:
    if is_gpu(combined):
        headings, table = gpu_table(combined)
        return "\n".join(["| " + " | ".join(headings) + " |", "|---|---|" + "---:|" * (len(headings) - 2)]
                         + ["| " + " | ".join(cells) + " |" for cells in table]) + "\n"
    systems = combined["systems"]
    lines = ["| workload | shape | floor ms | " + " | ".join(s["heading"] for s in systems) + " |",
             "|---|---|---:|" + "---:|" * len(systems)]
    for row in combined["rows"]:
        lines.append(f"| {row['id']} | {row['shape']} | {row['floor_ms']:.2f} | " +
                     " | ".join(cell(row, s["key"]) for s in systems) + " |")
    return "\n".join(lines) + "\n"


# ---- the GPU run --------------------------------------------------------------------------

def milliseconds(value: float | None) -> str:
    """A time in ms with about three significant digits (GPU calls take
    microseconds to tens of milliseconds)."""
    if value is None:
        return "-"
    for limit, decimals in ((100, 1), (10, 2), (1, 3), (0.1, 4)):
        if value >= limit:
            return f"{value:.{decimals}f}"
    return f"{value:.5f}"


def ratio(numerator: float | None, denominator: float | None) -> str:
    return f"{numerator / denominator:.2f}x" if numerator is not None and denominator else "-"


def gpu_systems(combined: dict[str, Any]) -> list[dict[str, Any]]:
    """The table's columns: kiln's two, then each peer that was asked for and is installed."""
    return [system for system in combined["systems"]
            if system["system"] == "kiln"
            or (system.get("ran", True) and not str(system.get("error") or "").startswith("not installed"))]


def gpu_cell(row: dict[str, Any], key: str) -> str:
    time = row["times"].get(key)
    if time is None:
        return cell(row, key)  # the reason: not installed, timed out, error, ...
    jit = row["times"].get("kiln-jit")
    if key == "kiln-jit" or key == "kiln-standard" or not jit:
        return milliseconds(time)
    return f"{milliseconds(time)} ({time / jit:.2f})"


def gpu_table(combined: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    systems = gpu_systems(combined)
    headings = (["workload", "shape", "batch"] + [system["heading"] for system in systems]
                + ["floor", "JIT/floor", "JIT/cuBLAS"])
    table = []
    for row in combined["rows"]:
        jit = row["times"].get("kiln-jit")
        precision = "" if row.get("tf32") is None else (" tf32" if row["tf32"] else " fp32")
        table.append([row["id"], row["shape"] + precision, str(row.get("batch", 1))]
                     + [gpu_cell(row, system["key"]) for system in systems]
                     + [milliseconds(row.get("floor_ms")), ratio(jit, row.get("floor_ms")),
                        ratio(jit, row.get("blas_ms"))])
    return headings, table


def print_gpu_report(combined: dict[str, Any], file=sys.stdout) -> None:
    """Details first, then the table and the done-when checks, so that the
    tail of the output (what scripts/gpu-check shows) holds the results."""
    say = lambda text="": print(text, file=file)  # noqa: E731
    systems = combined["systems"]
    say(f"kiln vs peers on the GPU, {combined['date']}: {combined.get('gpu', '?')} ({combined['device']}); "
        f"host {combined['cpu']}, {combined['threads']} host threads; same inputs for every system")
    if isinstance(combined.get("load_average"), dict):
        say(f"load average (1, 5, 15 min) before the run: {combined['load_average']['before']}, "
            f"after: {combined['load_average']['after']}")
    say()
    say("versions and devices:")
    say(f"  kiln {combined.get('kiln_revision', '(this tree)')}: {combined['device']}")
    for system in peer_systems(systems):
        if system.get("error") == "not run":
            continue
        if system.get("error"):
            say(f"  {system['system']}: NOT AVAILABLE: {system['error']}")
        else:
            say(f"  {system['version']}: {system.get('device') or '?'}; {system['threads']}")
    peer_errors = {system["key"]: system.get("error") for system in systems}  # said once above
    notes = [(row["id"], key, note) for row in combined["rows"] for key, note in row["notes"].items()
             if not note.startswith("not installed") and note != "not run" and note != peer_errors.get(key)]
    say_notes(notes, say)

    say()
    say("agreement with kiln's JIT on the same inputs (max |a - b| / max |kiln JIT|, per output; "
        "TF32 tolerances on TF32 workloads):")
    say_agreement(combined, systems, say, 15)
    for check in combined["seed_checks"]:
        say(f"  {check['id']}: float64 value {check['float64']:.9g}; relative error of each f32 result: "
            + ", ".join(f"{HEADINGS.get(tuple(key.split('-', 1)), key)} {error:.1e}"
                        for key, error in check["errors"].items()))

    say_first_calls_losses_and_failures(combined, say, 15)

    say()
    say(f"time per call in ms: the median of {combined['runs']} runs, each `batch` calls queued back to back "
        f"and one device synchronize, / batch (kiln-bench's measure; every system uses kiln's batch)")
    say("(ratio) = time / kiln JIT time: above 1 kiln's JIT is faster; floor: max(bytes / device-to-device copy "
        "bandwidth, matmul flops / cuBLAS's rate on the same shapes and precision); cuBLAS: the matmul alone")
    headings, table = gpu_table(combined)
    widths = [max(len(text) for text in column) for column in zip(headings, *table)]
    for cells in [headings] + table:
        say("  ".join(text.ljust(width) if i < 2 else text.rjust(width)
                      for i, (text, width) in enumerate(zip(cells, widths))))
    checks_done = combined.get("done_when") or done_when(combined)
    say()
    counts = {verdict: sum(1 for check in checks_done if check["verdict"] == verdict)
              for verdict in ("PASS", "FAIL", "NOT CHECKED")}
    say("done-when (this run): " + ", ".join(f"{count} {verdict}" for verdict, count in counts.items() if count))
    for check in checks_done:
        say(f"  {check['verdict']:<11} {check['id']:<15} {check['target']}: {check['detail']}")


# The GPU targets, each checked on one run's figures: workload id -> (what,
# how it is checked). "memory floor" = bytes / the device-to-device copy
# bandwidth at the workload's footprint; "cuBLAS" = cuBLAS alone on the matmul.
DONE_WHEN = {
    "gelu": "JIT <= 1.2x memory floor",
    "softmax": "JIT <= 1.2x memory floor",
    "layernorm": "JIT <= 1.2x memory floor",
    "adam": "JIT <= 1.15x memory floor",
    "seed-8192": "JIT <= 1.03x cuBLAS sgemm alone (fp32)",
    "seed-8192-tf32": "JIT faster than jax.jit",
    "seed-256": "JIT <= the fastest peer mode",
    "seed-8192-bf16": "JIT <= 1.05x cuBLAS's bf16 GEMM alone, faster than jax.jit and torch.compile",
    "gelu-bf16": "JIT <= 1.15x memory floor",
    "softmax-bf16": "JIT <= 1.15x memory floor",
    "layernorm-bf16": "JIT <= 1.15x memory floor",
    "attention": "JIT <= 0.6 ms (TF32), faster than jax.jit and torch.compile",
    # The model workloads (scripts/gpu-check with KILN_GPU_CHECK_WORKLOADS naming them): issue 43's "every GPU
    # workload faster than jax.jit and torch.compile", issue 39's training steps.
    **{workload: "JIT faster than jax.jit and torch.compile"
       for workload in ("block", "stem", "conv", "pool", "depthwise", "mlp-train", "block-train")},
}
ATTENTION_LIMIT_MS = 0.6
FLOOR_LIMITS = {"gelu": 1.2, "softmax": 1.2, "layernorm": 1.2, "adam": 1.15,
                "gelu-bf16": 1.15, "softmax-bf16": 1.15, "layernorm-bf16": 1.15}


def done_when(combined: dict[str, Any]) -> list[dict[str, Any]]:
    """The DONE_WHEN checks: PASS, FAIL, or NOT CHECKED (with why), with the figures."""
    rows = {row["id"]: row for row in combined["rows"]}
    results = []
    for workload, target in DONE_WHEN.items():
        row = rows.get(workload)
        check = {"id": workload, "target": target}
        if row is None and workload in combined.get("kiln_failures", {}):
            check.update(verdict="FAIL", detail=f"kiln-bench failed: {combined['kiln_failures'][workload]}")
        elif row is None:
            check.update(verdict="NOT CHECKED", detail="not in this run")
        elif row["times"].get("kiln-jit") is None:
            note = row["notes"].get("kiln-jit") or "n/a"
            check.update(verdict="FAIL" if note.startswith("WRONG") else "NOT CHECKED", detail=f"no JIT time ({note})")
        elif workload in FLOOR_LIMITS:
            check.update(floor_check(row, FLOOR_LIMITS[workload]))
        elif workload == "seed-8192":
            check.update(cublas_check(row, 1.03))
        elif workload == "seed-8192-tf32":
            check.update(peer_check(row, ["jax-jit"], strictly=True))
        elif workload == "attention":
            jit = row["times"]["kiln-jit"]
            within = {"verdict": "PASS" if jit <= ATTENTION_LIMIT_MS else "FAIL",
                      "detail": f"JIT {milliseconds(jit)} ms (limit {ATTENTION_LIMIT_MS} ms)"}
            check.update(all_of(within, peer_check(row, ["jax-jit", "torch-jit"], strictly=True)))
        elif workload == "seed-8192-bf16":
            check.update(all_of(cublas_check(row, 1.05), peer_check(row, ["jax-jit", "torch-jit"], strictly=True)))
        elif DONE_WHEN[workload] == "JIT faster than jax.jit and torch.compile":
            check.update(peer_check(row, ["jax-jit", "torch-jit"], strictly=True))
        else:
            peers = [system["key"] for system in combined["systems"] if system["system"] != "kiln" and system["ran"]]
            check.update(peer_check(row, peers, strictly=False))
        results.append(check)
    return results


def floor_check(row: dict[str, Any], limit: float) -> dict[str, Any]:
    jit, floor = row["times"]["kiln-jit"], row.get("memory_floor_ms")
    if not floor:
        return {"verdict": "NOT CHECKED", "detail": "no memory floor in kiln.json"}
    how = ""
    if row.get("bytes") and row.get("copy_bandwidth_gbs"):
        how = f" = {row['bytes'] / 1e6:.0f} MB / {row['copy_bandwidth_gbs']:.0f} GB/s"
    return {"verdict": "PASS" if jit <= limit * floor else "FAIL", "ratio": jit / floor, "limit": limit,
            "detail": f"JIT {milliseconds(jit)} ms = {jit / floor:.3f}x the memory floor {milliseconds(floor)} ms"
                      f"{how} (limit {limit}x)"}


def cublas_check(row: dict[str, Any], limit: float) -> dict[str, Any]:
    jit, blas = row["times"]["kiln-jit"], row.get("blas_ms")
    if row.get("tf32"):
        return {"verdict": "NOT CHECKED", "detail": "this run's seed-8192 allowed TF32; the target is full f32"}
    if not blas:
        return {"verdict": "NOT CHECKED", "detail": "no cuBLAS time (blas_ms) in kiln.json"}
    return {"verdict": "PASS" if jit <= limit * blas else "FAIL", "ratio": jit / blas, "limit": limit,
            "detail": f"JIT {milliseconds(jit)} ms = {jit / blas:.3f}x cuBLAS alone {milliseconds(blas)} ms "
                      f"(limit {limit}x)"}


def all_of(*checks: dict[str, Any]) -> dict[str, Any]:
    """One verdict for several checks: FAIL if one fails, else NOT CHECKED if one was not, else PASS."""
    verdicts = [check["verdict"] for check in checks]
    verdict = "FAIL" if "FAIL" in verdicts else "NOT CHECKED" if "NOT CHECKED" in verdicts else "PASS"
    return {"verdict": verdict, "detail": "; ".join(check["detail"] for check in checks)}


def peer_check(row: dict[str, Any], keys: list[str], strictly: bool) -> dict[str, Any]:
    """kiln's JIT against the fastest of the peer modes `keys` (< if `strictly`, else <=)."""
    jit = row["times"]["kiln-jit"]
    timed = sorted((row["times"][key], key) for key in keys if row["times"].get(key) is not None)
    if not timed:
        reasons = {}  # why, once per reason: the keys it applies to
        for key in keys:
            reasons.setdefault(row["notes"].get(key, "no time")[:160], []).append(key)
        why = "; ".join(f"{', '.join(names)}: {reason}" for reason, names in reasons.items()) or "no peer ran"
        return {"verdict": "NOT CHECKED", "detail": f"no peer time ({why})"}
    best, key = timed[0]
    passed = jit < best if strictly else jit <= best
    return {"verdict": "PASS" if passed else "FAIL", "ratio": jit / best,
            "detail": f"JIT {milliseconds(jit)} ms vs {HEADINGS[tuple(key.split('-', 1))]} {milliseconds(best)} ms "
                      f"({jit / best:.3f}x)"}


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("build/bench-peers")
    install_status = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(sys.prefix) / "peers-install.txt"
    # (a missing file is fine: the system Python on the GPU machine has none)
    combined = combine(out, install_status)
    previous = out / "results.json"
    if previous.exists():  # keep the provenance of the run that produced the files
        earlier = json.loads(previous.read_text())
        for key in ("load_average", "kiln_revision"):
            if key in earlier:
                combined[key] = earlier[key]
    previous.write_text(json.dumps(combined, indent=1))
    (out / "table.md").write_text(markdown(combined))
    print_report(combined)
    with open(out / "report.txt", "w") as file:
        print_report(combined, file)
    return 1 if failures(combined) else 0


if __name__ == "__main__":
    sys.exit(main())
