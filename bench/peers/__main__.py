"""Runs kiln-bench and its peers on the same workloads, inputs and thread
count, in one run, and prints one side-by-side table.

    python -m bench.peers --kiln-bench build/tools/kiln-bench --out build/bench-peers --threads 2

1. kiln-bench runs the suite, writes kiln.json and saves every workload's
   inputs and outputs as .npy files under OUT/data/;
2. each peer (TensorFlow, JAX, PyTorch) runs in its own process on those
   inputs, times its two modes (warm-up, median of runs, waiting with the
   framework's own synchronization) and compares its outputs with kiln's;
3. report.py prints the table and the agreement checks, and writes
   results.json, table.md and report.txt; scripts/bench-chart draws chart.png.

Every process runs on the same `threads` CPUs (sched_setaffinity) with every
pool sized to `threads`. A peer that is not installed is reported as such.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from bench.peers import common, report

REPOSITORY = Path(__file__).resolve().parents[2]


def limit_cpus(threads: int) -> list[int]:
    """Runs this process and its children on `threads` CPUs (all allowed ones
    if there are fewer)."""
    allowed = sorted(os.sched_getaffinity(0))
    chosen = allowed[:threads]
    os.sched_setaffinity(0, chosen)
    if len(allowed) < threads:
        print(f"bench-peers: only {len(allowed)} CPUs available for {threads} threads", file=sys.stderr)
    return chosen


def kiln_revision() -> str:
    """The commit kiln-bench was built from, '+changes' if the tree had uncommitted edits."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPOSITORY, capture_output=True,
                                text=True, check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPOSITORY,
                                 capture_output=True, text=True, check=True).stdout.strip()
        return commit + ("+changes" if changed else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages: how quiet the machine was."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"


def run_logged(command: list[str], log: Path, environment: dict[str, str], echo: bool) -> int:
    """Runs `command`, writing its output to `log` (and to stdout if `echo`)."""
    with open(log, "w") as file:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env=environment, cwd=REPOSITORY)
        assert process.stdout
        for line in process.stdout:
            file.write(line)
            if echo:
                print(line, end="", flush=True)
        return process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kiln-bench", type=Path, default=REPOSITORY / "build/tools/kiln-bench")
    parser.add_argument("--out", type=Path, default=REPOSITORY / "build/bench-peers")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--big", action="store_true", help="add seed-8192 (slow on a small CPU)")
    parser.add_argument("--workloads", nargs="*", default=[], help="kiln-bench workload ids (default: the suite)")
    parser.add_argument("--peers", default=",".join(report.PEERS), help="comma-separated subset of "
                        + ",".join(report.PEERS))
    parser.add_argument("--reuse-kiln", action="store_true", help="keep OUT/kiln.json and OUT/data from a "
                        "previous run (for working on the peers; the table is then not from one run)")
    parser.add_argument("--chart", type=Path, help="PNG to draw (default OUT/chart.png)")
    arguments = parser.parse_args()

    out = arguments.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    cpus = limit_cpus(arguments.threads)
    environment = common.thread_environment(arguments.threads)
    environment["PYTHONPATH"] = str(REPOSITORY) + os.pathsep + environment.get("PYTHONPATH", "")
    print(f"bench-peers: {arguments.threads} threads on CPUs {cpus}; results in {out}", flush=True)
    load_before = load_average()

    if not arguments.reuse_kiln:
        for stale in ["kiln.json"] + [f"{system}.json" for system in report.PEERS]:
            (out / stale).unlink(missing_ok=True)
        command = [str(arguments.kiln_bench.resolve()), *(arguments.workloads or ["all"]),
                   "--threads", str(arguments.threads), "--runs", str(arguments.runs),
                   "--json", str(out / "kiln.json"), "--save-inputs", str(out / "data")]
        if arguments.big:
            command.append("--big")
        print("bench-peers: " + " ".join(command), flush=True)
        status = run_logged(command, out / "kiln-bench.txt", environment, echo=True)
        if status != 0 or not (out / "kiln.json").exists():
            print(f"bench-peers: kiln-bench failed (exit {status}); see {out / 'kiln-bench.txt'}", file=sys.stderr)
            return 1

    for system in arguments.peers.split(","):
        if system not in report.PEERS:
            parser.error(f"unknown peer {system}")
        (out / f"{system}.json").unlink(missing_ok=True)
        command = [sys.executable, "-m", f"bench.peers.{system}_peer", "--manifest", str(out / "kiln.json"),
                   "--data", str(out / "data"), "--threads", str(arguments.threads), "--runs", str(arguments.runs),
                   "--out", str(out / f"{system}.json")]
        print(f"\nbench-peers: {system} (log: {out / (system + '.log')})", flush=True)
        status = run_logged(command, out / f"{system}.log", environment, echo=False)
        if status != 0:
            print(f"bench-peers: {system} exited with {status}", flush=True)
            result = out / f"{system}.json"
            partial = json.loads(result.read_text()) if result.exists() else {"system": system}
            partial["crashed"] = f"crashed (exit {status}), see {system}.log"
            result.write_text(json.dumps(partial, indent=1))

    print(flush=True)
    combined = report.combine(out, Path(sys.prefix) / "peers-install.txt")
    combined["load_average"] = {"before": load_before, "after": load_average()}
    combined["kiln_revision"] = kiln_revision()
    (out / "results.json").write_text(json.dumps(combined, indent=1))
    (out / "table.md").write_text(report.markdown(combined))
    report.print_report(combined)
    with open(out / "report.txt", "w") as file:
        report.print_report(combined, file)

    chart = arguments.chart or out / "chart.png"
    chart_status = subprocess.call([sys.executable, str(REPOSITORY / "scripts/bench-chart"), str(out / "results.json"),
                                    "-o", str(chart)])
    print(f"\nbench-peers: table {out / 'table.md'}, report {out / 'report.txt'}, "
          f"chart {chart if chart_status == 0 else '(failed)'}")
    return 1 if report.failures(combined) else 0


if __name__ == "__main__":
    sys.exit(main())
