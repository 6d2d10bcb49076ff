"""The run supervisor's cost: start latency and memory, against today's sh start gate.

Both sides are started as ProcessRunner starts a gated run (own session, stdin a pipe
that gets the go line at once, output to a pipe), alternating, `--rounds` times:
- baseline: the sh start gate ProcessRunner used before runs had supervisors
  (`sh -c 'read -r _ ...; exec "$@"'`) before the command;
- supervisor: `tickui.supervisor.launch.supervisor_argv` (python -I -S, setsid,
  subreaper, journal `waiting` and `running` fsynced, output into a bounded log).

Start latency is from just before the spawn to the moment the command runs (it opens a
FIFO the benchmark waits on). A whole run is spawn to reaped for `true` (the supervisor
also scans /proc for leftovers, closes the log and records the end). Memory is VmRSS and
RssAnon (its own, unshared pages) of the supervisor while it waits at the gate and
while the command runs, against the gate's sh while it waits (once the gate opens, sh
is the command). One journal record (write, fsync, rename, fsync of the directory) is
timed on its own. Last, ProcessRunner itself (what both dispatchers use), once with its
supervisor server (supervisors forked from it) and once starting each supervisor as a
program, alternating: spawn to the command running, spawn to outcome of `true` one at a
time and `--burst` at once, and the CPU its processes spent per run (every process below
the benchmark, the server and what it forked included: they are all reaped by the end).
The last line is one JSON object.

    .venv/bin/python benchmarks/run_supervisor.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tickui.dispatch.process import ProcessRunner
from tickui.supervisor.journal import JournalWriter, read_journal
from tickui.supervisor.launch import supervisor_argv

# The start gate ProcessRunner used before runs had supervisors: a tiny sh waits for the
# go line, then execs the command (same pid and group).
GATE = ("/bin/sh", "-c", 'read -r _ || exit 125; exec </dev/null; exec "$@"', "tickui-gate")
OPEN_FIFO = ["sh", "-c", 'exec 3>"$1"; exec sleep 30', "sh"]


def spawn(argv: list[str], go: bool = True) -> subprocess.Popen:
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True
    )
    if go:
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.close()
    return proc


def memory(pid: int) -> tuple[int, int]:
    """VmRSS and RssAnon of `pid`, in KiB."""
    found = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon"):
                found[key] = int(value.split()[0])
    return found["VmRSS"], found["RssAnon"]


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.001)


def start_latency(
    work: Path, supervised: bool, n: int | str
) -> tuple[float, tuple[int, int] | None]:
    """Seconds from spawn to the command running; the supervisor's memory meanwhile."""
    n = f"{n}-{int(supervised)}"
    fifo = work / f"fifo-{n}"
    os.mkfifo(fifo)
    command = [*OPEN_FIFO, str(fifo)]
    if supervised:
        argv = supervisor_argv(command, journal=work / f"j-{n}", log=work / f"l-{n}")
    else:
        argv = [*GATE, *command]
    began = time.perf_counter()
    proc = spawn(argv)
    reader = os.open(fifo, os.O_RDONLY)  # returns once the command has opened it
    latency = time.perf_counter() - began
    mem = memory(proc.pid) if supervised else None
    os.close(reader)
    if supervised:
        proc.send_signal(signal.SIGTERM)  # the supervisor ends the run (a cancel)
    else:
        os.killpg(proc.pid, signal.SIGTERM)
    proc.wait()
    return latency, mem


def whole_run(work: Path, supervised: bool, n: int | str) -> float:
    n = f"{n}-{int(supervised)}"
    argv = ["true"]
    if supervised:
        argv = supervisor_argv(argv, journal=work / f"t-{n}", log=work / f"tl-{n}")
    else:
        argv = [*GATE, *argv]
    began = time.perf_counter()
    spawn(argv).wait()
    return time.perf_counter() - began


def gate_memory(work: Path, supervised: bool, n: int | str) -> tuple[int, int]:
    """Memory of the process waiting at the gate."""
    n = f"{n}-{int(supervised)}"
    if supervised:
        journal = work / f"g-{n}"
        proc = spawn(supervisor_argv(["true"], journal=journal, log=work / f"gl-{n}"), go=False)
        wait_until(lambda: (read_journal(str(journal)) or {}).get("state") == "waiting")
    else:
        proc = spawn([*GATE, "true"], go=False)
        wait_until(lambda: "pipe_read" in Path(f"/proc/{proc.pid}/wchan").read_text())
    mem = memory(proc.pid)
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait()
    return mem


def journal_write(work: Path, times: int = 20) -> float:
    writer = JournalWriter(str(work / "timed.json"))
    spent = []
    for i in range(times):
        began = time.perf_counter()
        writer.write("running", command={"pid": i, "start": i, "started_us": i})
        spent.append(time.perf_counter() - began)
    writer.close()
    return statistics.median(spent)


async def runner_runs(
    work: Path, rounds: int, burst: int, fork_server: bool, attempt: int
) -> dict[str, float]:
    """ProcessRunner as the dispatchers use it: spawn to the command running, spawn to
    outcome in hand for `true` one at a time, then `burst` at once; against a bare
    asyncio spawn and wait of `true`. CPU per run: of every process below this one (the
    runner's server is reaped at its shutdown, its supervisors by it, their commands by
    them, so all of it is in RUSAGE_CHILDREN once the runner is shut down)."""
    import asyncio
    import resource

    tag = f"{'fork' if fork_server else 'exec'}{attempt}"
    env = dict(os.environ)

    async def one(n: int) -> float:
        began = time.perf_counter()
        log = work / f"r-{tag}-{n}.log"
        run = await runner.spawn(n, ["true"], cwd=None, env=env, log_path=log)
        timed_out = await runner.wait(run, None)
        await runner.finish(run)
        runner.outcome(run, None, timed_out)
        return time.perf_counter() - began

    async def started(n: int) -> float:
        fifo = work / f"rf-{tag}-{n}"
        os.mkfifo(fifo)
        log = work / f"rs-{tag}-{n}.log"
        began = time.perf_counter()
        run = await runner.spawn(n, [*OPEN_FIFO, str(fifo)], cwd=None, env=env, log_path=log)
        reader = os.open(fifo, os.O_RDONLY)  # the supervisor needs nothing of this loop
        latency = time.perf_counter() - began
        os.close(reader)
        await runner.terminate(run)
        await runner.finish(run)
        return latency

    async def bare() -> float:
        began = time.perf_counter()
        proc = await asyncio.create_subprocess_exec("true")
        await proc.wait()
        return time.perf_counter() - began

    bares = [await bare() for _ in range(rounds)]
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    self_before = resource.getrusage(resource.RUSAGE_SELF)
    runner = ProcessRunner(kill_grace=1.0, fork_server=fork_server)
    starts = [await started(50_000 + n) for n in range(rounds)]
    singles = [await one(n) for n in range(rounds)]
    began = time.perf_counter()
    await asyncio.gather(*(one(10_000 + n) for n in range(burst)))
    burst_s = time.perf_counter() - began
    await runner.shutdown()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    mine = resource.getrusage(resource.RUSAGE_SELF)
    runs = 2 * rounds + burst
    children_cpu = (children.ru_utime + children.ru_stime) - (
        children_before.ru_utime + children_before.ru_stime
    )
    self_cpu = (mine.ru_utime + mine.ru_stime) - (self_before.ru_utime + self_before.ru_stime)
    return {
        "start_ms": statistics.median(starts) * 1000,
        "runner_true_ms": statistics.median(singles) * 1000,
        "runner_true_p90_ms": statistics.quantiles(singles, n=10)[8] * 1000,
        "bare_true_ms": statistics.median(bares) * 1000,
        "burst": burst,
        "burst_s": burst_s,
        "burst_runs_per_s": burst / burst_s,
        "processes_cpu_ms_per_run": children_cpu * 1000 / runs,
        "runner_cpu_ms_per_run": self_cpu * 1000 / runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--burst", type=int, default=20, help="runs started at once")
    args = parser.parse_args()
    ms = 1000.0
    with tempfile.TemporaryDirectory(prefix="tickui-sup-") as tmp:
        work = Path(tmp)
        start = {False: [], True: []}
        run = {False: [], True: []}
        running_mem = []
        for n in range(args.rounds):
            for supervised in (n % 2 == 0, n % 2 == 1):  # alternate who goes first
                latency, mem = start_latency(work, supervised, n)
                start[supervised].append(latency)
                if mem is not None:
                    running_mem.append(mem)
                run[supervised].append(whole_run(work, supervised, n))
        gate_sup = [gate_memory(work, True, n) for n in range(5)]
        gate_sh = [gate_memory(work, False, n) for n in range(5)]
        record = journal_write(work)
        import asyncio

        runs = {}
        for attempt, fork_server in enumerate((True, False, True, False)):  # the load drifts
            found = asyncio.run(runner_runs(work, args.rounds, args.burst, fork_server, attempt))
            runs.setdefault("fork_server" if fork_server else "exec", []).append(found)
        runs = {
            path: {k: statistics.median(f[k] for f in found) for k in found[0]}
            for path, found in runs.items()
        }

    def med(values: list[float]) -> float:
        return round(statistics.median(values) * ms, 2)

    summary = {
        "rounds": args.rounds,
        "start_ms": {"supervisor": med(start[True]), "sh_gate": med(start[False])},
        "start_added_ms": round(med(start[True]) - med(start[False]), 2),
        "start_ratio": round(statistics.median(start[True]) / statistics.median(start[False]), 1),
        "start_p90_ms": {
            "supervisor": round(statistics.quantiles(start[True], n=10)[8] * ms, 2),
            "sh_gate": round(statistics.quantiles(start[False], n=10)[8] * ms, 2),
        },
        "run_true_ms": {"supervisor": med(run[True]), "sh_gate": med(run[False])},
        "run_ratio": round(statistics.median(run[True]) / statistics.median(run[False]), 1),
        "journal_record_ms": round(record * ms, 2),
        "process_runner": {
            path: {k: round(v, 2) for k, v in found.items()} for path, found in runs.items()
        },
        "rss_kib": {
            "supervisor_running": statistics.median(m[0] for m in running_mem),
            "supervisor_at_gate": statistics.median(m[0] for m in gate_sup),
            "sh_at_gate": statistics.median(m[0] for m in gate_sh),
        },
        "rss_anon_kib": {
            "supervisor_running": statistics.median(m[1] for m in running_mem),
            "supervisor_at_gate": statistics.median(m[1] for m in gate_sup),
            "sh_at_gate": statistics.median(m[1] for m in gate_sh),
        },
    }
    s = summary
    print(
        f"start to command running, median: supervisor {s['start_ms']['supervisor']} ms, "
        f"sh gate {s['start_ms']['sh_gate']} ms (+{s['start_added_ms']} ms, "
        f"{s['start_ratio']}x)"
    )
    print(
        f"whole run of `true`, median: supervisor {s['run_true_ms']['supervisor']} ms, "
        f"sh gate {s['run_true_ms']['sh_gate']} ms ({s['run_ratio']}x)"
    )
    print(f"one durable journal record: {s['journal_record_ms']} ms")
    rss, anon = s["rss_kib"], s["rss_anon_kib"]
    print(
        f"RSS (anon): supervisor running {rss['supervisor_running']} KiB "
        f"({anon['supervisor_running']}), at the gate {rss['supervisor_at_gate']} KiB "
        f"({anon['supervisor_at_gate']}); sh at the gate {rss['sh_at_gate']} KiB "
        f"({anon['sh_at_gate']})"
    )
    for path, pr in s["process_runner"].items():
        print(
            f"ProcessRunner ({path}), spawn to command running {pr['start_ms']} ms; spawn "
            f"to outcome of `true`, median: {pr['runner_true_ms']} ms "
            f"(p90 {pr['runner_true_p90_ms']} ms; a bare asyncio spawn and wait: "
            f"{pr['bare_true_ms']} ms); {pr['burst']} at once: {pr['burst_s']} s "
            f"({pr['burst_runs_per_s']} runs/s); CPU a run: its processes "
            f"{pr['processes_cpu_ms_per_run']} ms, the runner {pr['runner_cpu_ms_per_run']} ms"
        )
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
