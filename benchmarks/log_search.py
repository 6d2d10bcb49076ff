"""Search of a run's output (the run view's `/`): a log whose every line is coloured
(SGR sequences, as `ls --color`, pytest or a logger print) against the same log plain,
in the same run. The last line is one JSON object.

    .venv/bin/python benchmarks/log_search.py [--lines 300000] [--rounds 5]

Each log is indexed whole, then counted end to end (`LineIndex.count`, what the status
line's `match 3/812` runs in a thread) for a plain-text search and a regular expression;
the figure is the median of `--rounds` counts. A coloured line's SGR sequences are not
text: the search looks through the bytes with them taken out, so a coloured log is only
read further where its text matches, as a plain one is.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from tickui.ui.log_index import LineIndex, Search

SEARCHES = ("item 12345 ", "re:item 1234\\d ")


def write(path: Path, lines: int, coloured: bool) -> None:
    level = "\x1b[32mINFO\x1b[0m" if coloured else "INFO"
    with open(path, "w") as log:
        for i in range(lines):
            log.write(f"{level} 2027-01-15 08:00:{i % 60:02d} worker processed item {i} ok\n")


def count(path: Path, typed: str, rounds: int) -> tuple[float, int]:
    fd = os.open(path, os.O_RDONLY)
    try:
        index = LineIndex(fd)
        while (step := index.scan()) is not None:
            index.apply(step)
        search, times, found = Search.parse(typed), [], 0
        for _ in range(rounds):
            start = time.perf_counter()
            found = len(index.count(search, 0, limit=1 << 40).lines)
            times.append(time.perf_counter() - start)
        return statistics.median(times), found
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    result: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for coloured in (False, True):
            path = Path(tmp) / f"{'coloured' if coloured else 'plain'}.log"
            write(path, args.lines, coloured)
            for typed in SEARCHES:
                median, found = count(path, typed, args.rounds)
                name = f"{path.stem} {typed}"
                result[name] = round(median * 1000, 1)
                print(f"{name:30} median {median * 1000:8.1f} ms  {found} matching lines")
    for typed in SEARCHES:
        ratio = result[f"coloured {typed}"] / result[f"plain {typed}"]
        result[f"ratio {typed}"] = round(ratio, 2)
        print(f"coloured / plain, {typed!r}: {ratio:.2f}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
