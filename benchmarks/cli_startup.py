"""How long a `tickui` command takes from start to exit, against Python reading the same
database with sqlite3.

A temp database holds five tasks (added with `tickui task add`, every 1s) and the runs of
a `tickui run --for 3`. Each command runs once untimed (to fill the bytecode cache, see
child_env); then, for `--rounds` rounds, each of these runs as a real
process, in an order that rotates each round, and its wall time is taken:

- baseline: `python -c "import sqlite3; ...select * from tasks..."` on the database;
- `python -m tickui --help`, `task list --db DB`, `history --limit 20 --db DB`;
- the same three through the `tickui` console script beside the interpreter, if present.

Target: each command's median within 3x of the baseline's median.

    .venv/bin/python benchmarks/cli_startup.py               # 20 rounds
    .venv/bin/python benchmarks/cli_startup.py --rounds 50

Last line: one JSON object (median and p90 in ms, and ratio, per command).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TICKUI = Path(sys.executable).with_name("tickui")
TARGET = 3.0
TASKS = ("alpha", "bravo", "charlie", "delta", "echo")


def child_env(scratch: Path) -> dict[str, str]:
    """This checkout's tickui first on the path, and config and data folders of its own
    (no tickui.toml of the user's is read). Bytecode is cached, as an installed tickui's is,
    in a folder of the run's own (nothing is written beside the sources): with
    PYTHONDONTWRITEBYTECODE every start would compile every module it loads."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(scratch / "pycache")
    env.update(XDG_DATA_HOME=str(scratch / "data"), XDG_CONFIG_HOME=str(scratch / "config"))
    for name in [k for k in env if k.startswith("TICKUI_")]:
        del env[name]
    return env


def make_database(db: Path, env: dict[str, str], cwd: Path) -> None:
    tickui = [sys.executable, "-m", "tickui", "--db", str(db)]
    for name in TASKS:
        add = [*tickui, "task", "add", name, "--every", "1s", "--", "true"]
        subprocess.run(add, env=env, cwd=cwd, check=True, capture_output=True)
    subprocess.run([*tickui, "run", "--for", "3", "-q"], env=env, cwd=cwd, check=True,
                   capture_output=True)  # fmt: skip


def commands(db: Path) -> dict[str, list[str]]:
    read = (
        f"import sqlite3; c=sqlite3.connect({str(db)!r}); "
        "print(c.execute('select * from tasks').fetchall())"
    )
    listing = {
        "help": ["--help"],
        "task list": ["task", "list", "--db", str(db)],
        "history": ["history", "--limit", "20", "--db", str(db)],
    }
    made = {"baseline": [sys.executable, "-c", read]}
    for name, words in listing.items():
        made[f"-m tickui {name}"] = [sys.executable, "-m", "tickui", *words]
    if TICKUI.exists():
        for name, words in listing.items():
            made[f"tickui {name}"] = [str(TICKUI), *words]
    return made


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)  # fmt: skip
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"cli_startup: {argv} exited {done.returncode}: {done.stderr.decode()}")
    return elapsed


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def main() -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="tickui-startup-"))
    try:
        env = child_env(scratch)
        db = scratch / "tickui.db"
        make_database(db, env, scratch)
        made = commands(db)
        names = list(made)
        for name in names:  # fills the bytecode cache: not timed
            timed(made[name], env, scratch)
        times: dict[str, list[float]] = {name: [] for name in names}
        for n in range(args.rounds):
            shift = n % len(names)
            for name in names[shift:] + names[:shift]:  # each command first in turn
                times[name].append(timed(made[name], env, scratch))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    base = statistics.median(times["baseline"])
    result: dict = {"rounds": args.rounds, "load": round(os.getloadavg()[0], 2)}
    for name in names:
        median = statistics.median(times[name])
        ratio = median / base
        result[name] = {
            "median_ms": round(median * 1000, 1),
            "p90_ms": round(p90(times[name]) * 1000, 1),
            "ratio": round(ratio, 2),
        }
        mark = "" if name == "baseline" or ratio <= TARGET else f"  (target {TARGET:g}x)"
        print(
            f"{name:<24} median {median * 1000:7.1f} ms  p90 {p90(times[name]) * 1000:7.1f} ms"
            f"  ratio {ratio:5.2f}{mark}",
            flush=True,
        )
    print(f"load average (1 min) at the end: {result['load']}")
    return result


if __name__ == "__main__":
    print(json.dumps(main()))
