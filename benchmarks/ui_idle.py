"""What the dashboard costs while nothing happens: CPU and bytes written to the terminal.

The real `tickui` process runs under tmux (a private server, a 120x40 pane) on a temp
database holding 3 idle tasks (every 1h, and a cron far away), with the ticker at 1 s.
Beside it, in the same run and on the same tmux server, a bare Textual app whose only
work is a clock updated every second (a tiny script this benchmark writes). After a
settle period, for each: CPU as utime+stime from /proc/PID/stat over `--seconds`, and
the bytes the app wrote to its pane (tmux `pipe-pane` into a file) per second, and the
wakeups per second (voluntary context switches of all its threads).

Targets: cpu_pct <= 1.5 (% of one core), ratio to the bare app <= 3,
bytes_per_s <= 5,000.

    .venv/bin/python benchmarks/ui_idle.py                     # 1 round, 30 s
    .venv/bin/python benchmarks/ui_idle.py --rounds 3 --seconds 30

Last line: one JSON object (medians over the rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICKUI = Path(sys.executable).with_name("tickui")
CLK_TCK = os.sysconf("SC_CLK_TCK")

BARE_APP = """
import time
from textual.app import App
from textual.widgets import Static


class Clock(App):
    def compose(self):
        yield Static(id="clock")

    def on_mount(self):
        self.tick()
        self.set_interval(1.0, self.tick)

    def tick(self):
        self.query_one("#clock", Static).update(time.strftime("%H:%M:%S"))


Clock().run()
"""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def wakeups(pid: int) -> int:
    """Voluntary context switches of all the process's threads: each is a sleep that
    ended, so a count of wakeups (timers, thread hops) whatever woke them."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
        except OSError:
            continue  # a thread that ended meanwhile
    return total


class Tmux:
    def __init__(self, socket: str, env: dict[str, str]) -> None:
        self.socket = socket
        self.env = env

    def __call__(self, *args: str) -> str:
        out = subprocess.run(
            ["tmux", "-L", self.socket, *args],
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout

    def start(self, name: str, command: str, capture: Path) -> int:
        self("new-session", "-d", "-s", name, "-x", "120", "-y", "40", command)
        self("pipe-pane", "-o", "-t", name, f"cat >> {capture}")
        return int(self("display-message", "-p", "-t", name, "#{pane_pid}").strip())

    def screen(self, name: str) -> str:
        return self("capture-pane", "-p", "-t", name)

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise SystemExit(f"ui_idle: timed out waiting for {what}")


def stop(pid: int) -> None:
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def one_round(scratch: Path, seconds: float, settle: float, n: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "TMUX")}
    env.update(
        TERM="xterm-256color",
        XDG_DATA_HOME=str(scratch / "data"),
        XDG_CONFIG_HOME=str(scratch / "config"),
        TICKUI_TICK_INTERVAL="1s",
    )
    db = scratch / f"idle{n}.db"
    tasks = (
        ("hourly", ["--every", "1h"]),
        ("daily", ["--every", "24h"]),
        ("new-year", ["--cron", "0 0 1 1 *"]),
    )
    for name, schedule in tasks:
        subprocess.run(
            [str(TICKUI), "--db", str(db), "task", "add", name, *schedule, "--", "true"],
            env=env,
            cwd=scratch,
            check=True,
            capture_output=True,
        )
    bare = scratch / "bare_clock.py"
    bare.write_text(BARE_APP)
    tmux = Tmux(f"tickui-idle-{os.getpid()}-{n}", env)
    pids: list[int] = []
    try:
        out_ui, out_bare = scratch / f"ui{n}.out", scratch / f"bare{n}.out"
        ui_pid = tmux.start("ui", f"cd {scratch} && exec {TICKUI} --db {db}", out_ui)
        pids.append(ui_pid)
        bare_pid = tmux.start("bare", f"exec {sys.executable} {bare}", out_bare)
        pids.append(bare_pid)
        wait_for(lambda: "ticker running" in tmux.screen("ui"), 30, "the dashboard")
        wait_for(lambda: ":" in tmux.screen("bare"), 30, "the bare clock")
        time.sleep(settle)
        start = time.monotonic()
        cpu0 = {p: cpu_seconds(p) for p in pids}
        woke0 = {p: wakeups(p) for p in pids}
        bytes0 = {p: path.stat().st_size for p, path in ((ui_pid, out_ui), (bare_pid, out_bare))}
        time.sleep(seconds)
        elapsed = time.monotonic() - start
        cpu1 = {p: cpu_seconds(p) for p in pids}
        woke1 = {p: wakeups(p) for p in pids}
        bytes1 = {p: path.stat().st_size for p, path in ((ui_pid, out_ui), (bare_pid, out_bare))}
        shown = tmux.screen("ui")
    finally:
        tmux.kill()
        for pid in pids:
            stop(pid)

    def pct(pid: int) -> float:
        return 100 * (cpu1[pid] - cpu0[pid]) / elapsed

    def rate(pid: int) -> float:
        return (bytes1[pid] - bytes0[pid]) / elapsed

    if "running" not in shown:
        print(shown, file=sys.stderr)
    return {
        "cpu_pct": pct(ui_pid),
        "bare_cpu_pct": pct(bare_pid),
        "bytes_per_s": rate(ui_pid),
        "bare_bytes_per_s": rate(bare_pid),
        "wakeups_per_s": (woke1[ui_pid] - woke0[ui_pid]) / elapsed,
        "bare_wakeups_per_s": (woke1[bare_pid] - woke0[bare_pid]) / elapsed,
    }


def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=30.0, help="measured window")
    parser.add_argument("--settle", type=float, default=5.0, help="wait after first paint")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("ui_idle: needs tmux")
    rounds = []
    scratch = Path(tempfile.mkdtemp(prefix="tickui-idle-"))
    try:
        for n in range(args.rounds):
            r = one_round(scratch, args.seconds, args.settle, n)
            r["ratio"] = r["cpu_pct"] / r["bare_cpu_pct"] if r["bare_cpu_pct"] > 0 else None
            rounds.append(r)
            print(
                f"round {n + 1}: tickui {r['cpu_pct']:.2f}% CPU, {r['bytes_per_s']:.0f} B/s;"
                f" bare Textual clock {r['bare_cpu_pct']:.2f}% CPU,"
                f" {r['bare_bytes_per_s']:.0f} B/s; ratio {r['ratio'] or 0:.2f};"
                f" wakeups/s {r['wakeups_per_s']:.0f} vs {r['bare_wakeups_per_s']:.0f}",
                flush=True,
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rounds if r[key] is not None)

    result = {
        "cpu_pct": round(med("cpu_pct"), 2),
        "bare_cpu_pct": round(med("bare_cpu_pct"), 2),
        "ratio": round(med("ratio"), 2),
        "bytes_per_s": round(med("bytes_per_s")),
        "bare_bytes_per_s": round(med("bare_bytes_per_s")),
        "wakeups_per_s": round(med("wakeups_per_s")),
        "bare_wakeups_per_s": round(med("bare_wakeups_per_s")),
        "seconds": args.seconds,
        "rounds": args.rounds,
    }
    print(
        f"median: tickui {result['cpu_pct']}% of a core (target 1.5), ratio to bare"
        f" {result['ratio']} (target 3), {result['bytes_per_s']} B/s (target 5000);"
        f" bare {result['bare_cpu_pct']}%, {result['bare_bytes_per_s']} B/s"
    )
    return result


if __name__ == "__main__":
    print(json.dumps(main()))
