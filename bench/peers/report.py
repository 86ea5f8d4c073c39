"""One side-by-side report from kiln-bench's JSON and the peers' result files:
the table of times with their ratios to kiln's JIT, the agreement checks,
the first calls, and where kiln loses. Also writes results.json (for
scripts/bench-chart) and table.md (for the README).

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

PEERS = ("tensorflow", "jax", "torch")
# Column headings per (system, mode).
HEADINGS = {
    ("kiln", "standard"): "kiln std", ("kiln", "jit"): "kiln JIT",
    ("tensorflow", "standard"): "TF function", ("tensorflow", "jit"): "TF XLA",
    ("jax", "standard"): "JAX op-by-op", ("jax", "jit"): "jax.jit",
    ("torch", "standard"): "torch eager", ("torch", "jit"): "torch.compile",
}


def load_peer(out: Path, system: str, install_status: dict[str, str]) -> dict[str, Any]:
    path = out / f"{system}.json"
    if not path.exists():
        return {"system": system, "error": "not run", "workloads": {}}
    peer = json.loads(path.read_text())
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

    systems = [{"key": "kiln-standard", "system": "kiln", "mode": "standard", "label": "kiln::function",
                "heading": HEADINGS["kiln", "standard"], "version": "kiln (this tree)"},
               {"key": "kiln-jit", "system": "kiln", "mode": "jit", "label": "kiln::function(jit_compile)",
                "heading": HEADINGS["kiln", "jit"], "version": "kiln (this tree)"}]
    for peer in peers:
        for mode in ("standard", "jit"):
            systems.append({"key": f"{peer['system']}-{mode}", "system": peer["system"], "mode": mode,
                            "label": peer.get("modes", {}).get(mode, mode), "version": peer.get("version"),
                            "heading": HEADINGS[peer["system"], mode], "threads": peer.get("threads"),
                            "error": peer.get("error")})

    rows = []
    for workload in kiln["workloads"]:
        row = {"id": workload["id"], "name": workload["name"], "shape": workload["shape"],
               "floor_ms": workload["floor_ms"], "times": {}, "notes": {}, "first_call_ms": {}, "differences": {},
               "values": {}}
        row["times"]["kiln-standard"] = workload["standard_ms"]
        row["times"]["kiln-jit"] = workload["jit_ms"]
        row["differences"]["kiln-standard"] = workload.get("jit_vs_standard_difference")
        if workload.get("jit_note"):
            row["notes"]["kiln-jit"] = workload["jit_note"]
        row["first_call_ms"]["kiln-jit"] = workload.get("cold_first_call_ms")
        for peer in peers:
            for mode in ("standard", "jit"):
                key = f"{peer['system']}-{mode}"
                measured = peer["workloads"].get(workload["id"], {}).get(mode)
                if peer.get("error"):
                    row["notes"][key] = peer["error"]
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

    combined = {"date": kiln["date"], "cpu": kiln["cpu"], "cores": kiln["cores"], "threads": kiln["threads"],
                "runs": kiln["runs"], "blas": kiln["blas"], "systems": systems, "rows": rows}
    combined["seed_checks"] = seed_checks(out, kiln, rows)
    return combined


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
    return checks.TOLERANCE[row["name"]]


def failures(combined: dict[str, Any]) -> list[str]:
    found = []
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
        if "fell back" in note:
            return "fell back"
        return "WRONG" if note.startswith("WRONG") else "error"
    jit = row["times"].get("kiln-jit")
    if key == "kiln-jit" or not jit:
        return f"{time:.2f}"
    return f"{time:.2f} ({time / jit:.2f})"


def print_report(combined: dict[str, Any], file=sys.stdout) -> None:
    systems = combined["systems"]
    say = lambda text="": print(text, file=file)  # noqa: E731
    say(f"kiln vs peers, {combined['date']}: {combined['cpu']}, {combined['cores']} cores, "
        f"{combined['threads']} threads for every system, median of {combined['runs']} runs after warm-up, "
        f"same inputs")
    if isinstance(combined.get("load_average"), dict):
        say(f"load average (1, 5, 15 min) before the run: {combined['load_average']['before']}, "
            f"after: {combined['load_average']['after']}")
    say("time in ms; (ratio) = time / kiln JIT time: above 1 kiln's JIT is faster, below 1 kiln loses")
    say("floor (kiln-bench): max(bytes that must move / copy bandwidth at the same footprint, "
        "matmul flops / best OpenBLAS sgemm rate in the run)")
    say()
    widths = [10, 12, 8] + [max(14, len(s["heading"]) + 1) for s in systems]
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
    for system in systems[2::2]:
        if system.get("error"):
            say(f"  {system['system']}: NOT AVAILABLE: {system['error']}")
        else:
            say(f"  {system['version']}: {system['threads']}")
    notes = [(row["id"], key, note) for row in combined["rows"] for key, note in row["notes"].items()
             if not note.startswith("not installed")]
    if notes:
        say()
        say("notes:")
        for workload, key, note in notes:
            say(f"  {workload} {key}: {note}")

    say()
    say("agreement with kiln's JIT on the same inputs (max |a - b| / max |kiln JIT|, per output):")
    for row in combined["rows"]:
        parts = []
        for system in systems:
            difference = row["differences"].get(system["key"])
            if difference is None:
                continue
            verdict = "ok" if math.isfinite(difference) and difference <= tolerance(row) else "FAIL"
            parts.append(f"{system['heading']} {difference:.1e} {verdict}")
        say(f"  {row['id']:<10} (tolerance {tolerance(row):.0e}): " + ", ".join(parts))
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

    say()
    say("first call (trace + compile + run) in ms; kiln: cold, empty caches:")
    for row in combined["rows"]:
        parts = [f"{HEADINGS[tuple(key.split('-', 1))]} {value:.0f}" for key, value in row["first_call_ms"].items()
                 if value is not None and key.endswith("jit")]
        say(f"  {row['id']:<10} " + ", ".join(parts))

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
            lines.append(f"{row['id']}: " + "; ".join(parts) + f" (kiln JIT {jit / row['floor_ms']:.2f}x its floor)")
    return lines or ["nowhere in this run"]


def markdown(combined: dict[str, Any]) -> str:
    systems = combined["systems"]
    lines = ["| workload | shape | floor ms | " + " | ".join(s["heading"] for s in systems) + " |",
             "|---|---|---:|" + "---:|" * len(systems)]
    for row in combined["rows"]:
        lines.append(f"| {row['id']} | {row['shape']} | {row['floor_ms']:.2f} | " +
                     " | ".join(cell(row, s["key"]) for s in systems) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("build/bench-peers")
    install_status = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(sys.prefix) / "peers-install.txt"
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
