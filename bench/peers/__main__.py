"""Runs kiln-bench and its peers on the same workloads, inputs and thread
count, in one run, and prints one side-by-side table.

    python -m bench.peers --kiln-bench build/tools/kiln-bench --out build/bench-peers --threads 2
    python3 -m bench.peers --device cuda --kiln-bench build-gpu/tools/kiln-bench --out OUT --peers jax,torch

1. kiln-bench runs the suite, writes kiln.json and saves every workload's
   inputs and outputs as .npy files under OUT/data/;
2. each peer (TensorFlow, JAX, PyTorch, IREE) runs in its own process on
   those inputs, times its modes -- op by op and compiled; IREE compiled
   only -- (warm-up, median of runs, waiting with the framework's own
   synchronization) and compares its outputs with kiln's;
3. report.py prints the table and the agreement checks, and writes
   results.json, table.md and report.txt; scripts/bench-chart draws chart.png.

On the CPU every process runs on the same `threads` CPUs (sched_setaffinity)
with every pool sized to `threads`. With `--device cuda` kiln-bench runs its
GPU suite and each peer runs on the first GPU (JAX and PyTorch by default);
the host threads matter less there, so nothing is pinned and `threads`
defaults to every CPU. The GPU report ends with the table and the done-when
checks (report.py).

A peer that is not installed is reported as such. A peer process that runs
past its time limit (--time-limit; on cuda 120 s for JAX and TensorFlow, 150 s
for PyTorch, none on the CPU) is killed with its process group; the workloads
it finished are kept and the rest are reported as timed out.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.peers import common, report

REPOSITORY = Path(__file__).resolve().parents[2]
# Seconds a peer process may take on the GPU (a cold torch.compile of the suite
# is the slow part), so that the run fits in scripts/gpu-check's budget.
GPU_TIME_LIMITS = {"tensorflow": 120.0, "jax": 120.0, "torch": 150.0}


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


REPORT_SECONDS = 20  # kept from a --deadline for the report after the last peer
SHORTEST_PEER_SECONDS = 15  # a peer given less would not get past importing its framework


def share_of_deadline(left: float, system: str, waiting: list[str], limits: dict[str, float | None]) -> float:
    """`system`'s time limit when `left` seconds remain for it and the peers
    after it (`waiting`, itself first): a share in proportion to their own
    limits (equal shares for peers without one), never above its own. 0 when
    that share is too short to be worth starting (the peer is then skipped)."""
    weights = {peer: limits.get(peer) or 120.0 for peer in waiting}
    share = (left - REPORT_SECONDS) * weights[system] / sum(weights.values())
    own = limits.get(system)
    share = min(share, own) if own else share
    return share if share >= SHORTEST_PEER_SECONDS else 0.0


def parse_time_limits(text: str | None, device: str) -> dict[str, float | None]:
    """--time-limit: SECONDS for every peer, or SYSTEM=SECONDS,...; 0 = none.
    Systems not named keep the default (GPU_TIME_LIMITS on cuda, none on cpu)."""
    limits: dict[str, float | None] = {system: (GPU_TIME_LIMITS.get(system) if device == "cuda" else None)
                                       for system in report.PEERS}
    for part in filter(None, (text or "").split(",")):
        system, _, seconds = part.rpartition("=")
        value = float(seconds)
        for name in ([system] if system else report.PEERS):
            if name not in report.PEERS:
                raise ValueError(f"unknown peer {name!r} in --time-limit")
            limits[name] = value if value > 0 else None
    return limits


# Process groups of the peers running now: killed if this process is told to stop
# (scripts/gpu-check's `timeout` signals only our own process group).
RUNNING_GROUPS: set[int] = set()
# OUT/data with --discard-data: deleted however the run ends (gigabytes of .npy on the GPU).
DATA_TO_DISCARD: list[Path] = []


def discard_data() -> None:
    for folder in DATA_TO_DISCARD:
        shutil.rmtree(folder, ignore_errors=True)


def stop_peers_and_exit(signal_number, frame) -> None:
    for group in list(RUNNING_GROUPS):
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
    discard_data()
    signal.signal(signal_number, signal.SIG_DFL)
    os.kill(os.getpid(), signal_number)


def run_logged(command: list[str], log: Path, environment: dict[str, str], echo: bool,
               time_limit: float | None = None) -> int | None:
    """Runs `command`, writing its output to `log` (and to stdout if `echo`).
    Its exit status; None if it ran past `time_limit` seconds and was killed
    (with every process it started: it runs in a process group of its own)."""
    with open(log, "w") as file:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env=environment, cwd=REPOSITORY, start_new_session=time_limit is not None)
        assert process.stdout
        if time_limit is not None:
            RUNNING_GROUPS.add(process.pid)

        def copy_output() -> None:
            assert process.stdout
            for line in process.stdout:
                file.write(line)
                if echo:
                    print(line, end="", flush=True)

        reader = threading.Thread(target=copy_output, daemon=True)
        reader.start()
        try:
            status: int | None = process.wait(timeout=time_limit)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                pass
            process.wait()
            status = None
        finally:
            RUNNING_GROUPS.discard(process.pid)
        reader.join(timeout=10)  # a killed group closes the pipe at once; never hang on it
        if not reader.is_alive():
            process.stdout.close()
        if status is None:
            file.write(f"\nbench-peers: killed after the time limit of {time_limit:g} s\n")
        return status


def default_peers(device: str) -> str:
    # TensorFlow has no GPU build on the GPU machine, and the IREE peer is CPU only; ask for them
    # with --peers to see them reported.
    return "jax,torch" if device == "cuda" else ",".join(report.PEERS)


def install_status_file() -> Path | None:
    """scripts/bench-peers-venv's record of what it installed; None with a
    Python that it did not make (the system one on the GPU machine)."""
    path = Path(sys.prefix) / "peers-install.txt"
    return path if path.is_file() else None


def draw_chart(device: str, results: Path, chart: Path) -> str:
    """scripts/bench-chart on a CPU run; a failed or skipped chart never fails the run."""
    if device == "cuda":
        return "(not drawn for GPU runs: scripts/bench-chart draws CPU runs)"
    if importlib.util.find_spec("matplotlib") is None:
        return "(not drawn: no matplotlib in this Python)"
    try:
        status = subprocess.call([sys.executable, str(REPOSITORY / "scripts/bench-chart"), str(results),
                                  "-o", str(chart)])
    except OSError as error:
        return f"(failed: {error})"
    return str(chart) if status == 0 else "(failed)"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kiln-bench", type=Path, default=REPOSITORY / "build/tools/kiln-bench")
    parser.add_argument("--out", type=Path, default=REPOSITORY / "build/bench-peers")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu (default), or cuda: kiln-bench's GPU suite and every peer on the first GPU")
    parser.add_argument("--threads", type=int, help="host threads (default: 2 on cpu, every CPU on cuda)")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--big", action="store_true", help="add seed-8192 (slow on a small CPU)")
    parser.add_argument("--workloads", nargs="*", default=[], help="kiln-bench workload ids (default: the suite)")
    parser.add_argument("--peers", help="comma-separated subset of " + ",".join(report.PEERS)
                        + " (default: all on cpu, jax,torch on cuda)")
    parser.add_argument("--time-limit", metavar="SECONDS|PEER=SECONDS,...",
                        help="wall-clock limit per peer process, 0 = none (default: none on cpu; on cuda "
                        + ", ".join(f"{system}={seconds:g}" for system, seconds in GPU_TIME_LIMITS.items()) + ")")
    parser.add_argument("--deadline", type=float, metavar="SECONDS",
                        help="finish the whole run (kiln-bench, peers, report) within SECONDS: the peers' "
                        "time limits shrink to share what kiln-bench leaves, in proportion to their limits")
    parser.add_argument("--reuse-kiln", action="store_true", help="keep OUT/kiln.json and OUT/data from a "
                        "previous run (for working on the peers; the table is then not from one run)")
    parser.add_argument("--chart", type=Path, help="PNG to draw (default OUT/chart.png; CPU runs only)")
    parser.add_argument("--discard-data", action="store_true", help="delete OUT/data (kiln's inputs and outputs "
                        "as .npy: about 6 GB for the GPU suite) once the report is written")
    arguments = parser.parse_args()
    device = arguments.device
    peers = (arguments.peers or default_peers(device)).split(",")
    for system in peers:
        if system not in report.PEERS:
            parser.error(f"unknown peer {system}")
    try:
        time_limits = parse_time_limits(arguments.time_limit, device)
    except ValueError as error:
        parser.error(f"--time-limit: {error}")

    out = arguments.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if device == "cuda":
        threads = arguments.threads or len(os.sched_getaffinity(0))
        environment = common.thread_environment(threads)
        environment.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(len(os.sched_getaffinity(0))))
        print(f"bench-peers: on the GPU, {threads} host threads, all CPUs; results in {out}", flush=True)
    else:
        threads = arguments.threads or 2
        cpus = limit_cpus(threads)
        environment = common.thread_environment(threads)
        print(f"bench-peers: {threads} threads on CPUs {cpus}; results in {out}", flush=True)
    environment["PYTHONPATH"] = str(REPOSITORY) + os.pathsep + environment.get("PYTHONPATH", "")
    for signal_number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signal_number, stop_peers_and_exit)
    if arguments.discard_data:
        DATA_TO_DISCARD.append(out / "data")
    try:
        return run_all(arguments, device, peers, time_limits, out, threads, environment)
    finally:
        discard_data()


def run_all(arguments: argparse.Namespace, device: str, peers: list[str], time_limits: dict[str, float | None],
            out: Path, threads: int, environment: dict[str, str]) -> int:
    """kiln-bench, then each peer, then the report; main() has read the arguments."""
    load_before = load_average()
    started = time.monotonic()
    kiln_failed = False
    if not arguments.reuse_kiln:
        for stale in ["kiln.json"] + [f"{system}.json" for system in report.PEERS]:
            (out / stale).unlink(missing_ok=True)
        # On cuda no ids means kiln-bench's GPU suite ("all" names the CPU suite).
        workloads = arguments.workloads or ([] if device == "cuda" else ["all"])
        command = [str(arguments.kiln_bench.resolve()), *workloads,
                   "--threads", str(threads), "--runs", str(arguments.runs),
                   "--json", str(out / "kiln.json"), "--save-inputs", str(out / "data")]
        if device == "cuda":
            command += ["--device", "cuda"]
        if arguments.big:
            command.append("--big")
        print("bench-peers: " + " ".join(command), flush=True)
        # Under a --deadline kiln-bench may take all but the report's time: the peers
        # are then skipped, and a kiln-bench that hangs is stopped in time to say so.
        limit = arguments.deadline - REPORT_SECONDS if arguments.deadline else None
        status = run_logged(command, out / "kiln-bench.txt", environment, echo=True, time_limit=limit)
        if not (out / "kiln.json").exists():
            why = f"killed after {limit:g} s" if status is None else f"exit {status}"
            print(f"bench-peers: kiln-bench failed ({why}); see {out / 'kiln-bench.txt'}", file=sys.stderr)
            return 1
        if status != 0:  # it wrote its results: a JIT output was WRONG; the peers and the report still run
            print(f"bench-peers: kiln-bench exited with {status} (see {out / 'kiln-bench.txt'}); "
                  f"going on with its results", file=sys.stderr)
            kiln_failed = True

    for position, system in enumerate(peers):
        result = out / f"{system}.json"
        result.unlink(missing_ok=True)
        if arguments.deadline:
            time_limits[system] = share_of_deadline(arguments.deadline - (time.monotonic() - started), system,
                                                    peers[position:], time_limits)
        command = [sys.executable, "-m", f"bench.peers.{system}_peer", "--manifest", str(out / "kiln.json"),
                   "--data", str(out / "data"), "--threads", str(threads), "--runs", str(arguments.runs),
                   "--device", device, "--out", str(result)]
        limit = time_limits[system]
        if limit == 0.0:
            print(f"\nbench-peers: {system} skipped: too little of the deadline left", flush=True)
            result.write_text(json.dumps({"system": system, "timed_out": "not run: too little of the deadline left"}))
            continue
        print(f"\nbench-peers: {system} (log: {out / (system + '.log')}"
              + (f", time limit {limit:g} s" if limit else "") + ")", flush=True)
        status = run_logged(command, out / f"{system}.log", environment, echo=False, time_limit=limit)
        if status != 0:
            try:
                partial = json.loads(result.read_text()) if result.exists() else {"system": system}
            except ValueError:  # killed while writing it
                partial = {"system": system}
            if status is None:
                partial["timed_out"] = f"timed out after {limit:g} s, see {system}.log"
                print(f"bench-peers: {system} timed out after {limit:g} s "
                      f"({len(partial.get('workloads', {}))} workloads done)", flush=True)
            else:
                partial["crashed"] = f"crashed (exit {status}), see {system}.log"
                print(f"bench-peers: {system} exited with {status}", flush=True)
            result.write_text(json.dumps(partial, indent=1))

    print(flush=True)
    combined = report.combine(out, install_status_file())
    combined["load_average"] = {"before": load_before, "after": load_average()}
    combined["kiln_revision"] = kiln_revision()
    (out / "results.json").write_text(json.dumps(combined, indent=1))
    (out / "table.md").write_text(report.markdown(combined))
    with open(out / "report.txt", "w") as file:
        report.print_report(combined, file)
    if device == "cuda":  # the table last: scripts/gpu-check shows the tail of the output
        print(f"bench-peers: table {out / 'table.md'}, report {out / 'report.txt'}, "
              f"chart {draw_chart(device, out / 'results.json', arguments.chart or out / 'chart.png')}\n", flush=True)
        report.print_report(combined)
    else:
        report.print_report(combined)
        chart = draw_chart(device, out / "results.json", arguments.chart or out / "chart.png")
        print(f"\nbench-peers: table {out / 'table.md'}, report {out / 'report.txt'}, chart {chart}")
    return 1 if kiln_failed or report.failures(combined) else 0


if __name__ == "__main__":
    sys.exit(main())
