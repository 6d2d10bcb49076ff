"""A run's log keeps its first part and its newest part, says how much it dropped, stays
readable while the run writes, and survives failing writes. Real processes and files."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import resource
import signal
import sys
import time
from pathlib import Path

from helpers import rig
from tickui.dispatch import SubprocessDispatcher, read_tail
from tickui.dispatch.output import BoundedLog, dropped_marker, human_bytes
from tickui.supervisor.journal import read_journal

HEAD, TAIL = 64 * 1024, 1024 * 1024
MARKER = re.compile(rb"\n\[tickui: [0-9.]+ [KMG]i?B of output dropped here \((\d+) bytes\)\]\n")


async def _wait_for(predicate, timeout: float = 20, what: str = "a condition"):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def test_300_mb_run_keeps_head_and_tail_with_the_dropped_count(tmp_path):
    total = 300_000_000
    script = f"echo START; head -c {total} /dev/zero | tr '\\0' x; echo; echo END"
    async with rig(tmp_path / "t.db") as r:
        await r.add("chatty", every="1h", command=["sh", "-c", script])
        cpu = time.process_time()
        began = time.monotonic()
        await r.engine.start()
        await r.settle(timeout=120)
        cpu, wall = time.process_time() - cpu, time.monotonic() - began
        occ = (await r.history())[0]
    assert occ.state == "succeeded", (occ.state, occ.detail)
    data = Path(occ.log_path).read_bytes()
    found = MARKER.search(data)
    assert found, data[HEAD - 100 : HEAD + 200]
    written = len("START\n") + total + len("\nEND\n")
    assert int(found[1]) == written - HEAD - TAIL
    assert found.start() == HEAD and len(data) == HEAD + len(found[0]) + TAIL
    assert data[:HEAD] == b"START\n" + b"x" * (HEAD - 6)
    assert data[-TAIL:] == b"x" * (TAIL - 5) + b"\nEND\n"
    assert b"285.0 MiB" in found[0]
    print(f"\n300 MB run: tickui CPU {cpu:.2f}s, wall {wall:.2f}s, log {len(data)} bytes")


async def test_small_output_is_untouched(tmp_path):
    text = "".join(f"line {i}\n" for i in range(2000))
    async with rig(tmp_path / "t.db") as r:
        await r.add("quiet", every="1h", command=["printf", "%s", text])
        await r.engine.start()
        await r.settle()
        occ = (await r.history())[0]
    assert Path(occ.log_path).read_text() == text


async def test_output_just_over_the_bounds_is_cut_exactly(tmp_path):
    head, tail = 1024, 4096
    async with rig(tmp_path / "t.db") as r:
        r.engine.dispatcher = SubprocessDispatcher(r.store, r.clock, 1.0, head, tail)
        script = "import sys; sys.stdout.write(''.join(chr(65 + i % 26) for i in range(5130)))"
        await r.add("edge", every="1h", command=[sys.executable, "-c", script])
        await r.engine.start()
        await r.settle()
        occ = (await r.history())[0]
        await r.engine.dispatcher.shutdown(1)
    produced = "".join(chr(65 + i % 26) for i in range(5130)).encode()
    expect = produced[:head] + dropped_marker(10) + produced[-tail:]
    assert Path(occ.log_path).read_bytes() == expect


async def test_log_is_readable_and_bounded_while_the_run_writes(tmp_path):
    go = tmp_path / "go"
    script = (
        "import os, sys, time\n"
        "out = sys.stdout\n"
        "out.write('first line\\n')\n"
        "for i in range(40000): out.write(f'{i:08d} ' + 'y' * 91 + '\\n')\n"  # 4 MB
        "out.write('checkpoint\\n'); out.flush()\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
        "out.write('last line\\n')\n"
    )
    async with rig(tmp_path / "t.db") as r:
        await r.add("live", every="1h", command=[sys.executable, "-c", script])
        await r.engine.start()
        occ = (await r.history())[0]
        assert occ.state == "running" and occ.log_path
        path = Path(occ.log_path)
        await _wait_for(lambda: "checkpoint" in read_tail(path, 200), what="live output")
        size = path.stat().st_size
        assert size <= HEAD + 200 + 2 * TAIL, size
        assert path.read_bytes().startswith(b"first line\n")
        assert read_tail(path, 200).splitlines()[-1] == "checkpoint"
        assert (await r.history())[0].state == "running"
        go.touch()
        await r.settle()
        occ = (await r.history())[0]
    assert occ.state == "succeeded"
    data = path.read_bytes()
    assert data.endswith(b"00039999 " + b"y" * 91 + b"\ncheckpoint\nlast line\n")
    assert data.startswith(b"first line\n00000000 ")
    found = MARKER.search(data)
    assert found and len(data) == HEAD + len(found[0]) + TAIL
    assert int(found[1]) == 11 + 40000 * 101 + 11 + 10 - HEAD - TAIL


async def test_failing_log_writes_drop_output_and_the_run_goes_on(tmp_path, caplog):
    """Writes past RLIMIT_FSIZE fail with EFBIG, as ENOSPC or EIO would: that output is
    counted and dropped, the run goes on, and the log says so once writes work again."""
    go, written = tmp_path / "go", tmp_path / "written"
    limit = 8 * 1024 * 1024
    script = (
        "import os, sys, time\n"
        f"sys.stdout.write('a' * {limit + 1024 * 1024}); sys.stdout.flush()\n"
        f"open({str(written)!r}, 'w').close()\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.02)\n"
        "sys.stdout.write('\\nafter\\n'); sys.stdout.flush()\n"
        "sys.exit(3)\n"
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        async with rig(tmp_path / "t.db") as r:
            dispatcher = SubprocessDispatcher(r.store, r.clock, 1.0, 1024, 16 * 1024 * 1024)
            r.engine.dispatcher = dispatcher
            await r.add("big", every="1h", command=[sys.executable, "-c", script])
            with caplog.at_level(logging.WARNING, logger="tickui.dispatch"):
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
                try:
                    await r.engine.start()
                    await _wait_for(
                        lambda: dispatcher.output_problem == "File too large",
                        what="the supervisor to say its log's writes fail",
                    )
                    # all but a pipe's worth of the output has reached the supervisor
                    await _wait_for(written.exists, what="the command to write all its output")
                finally:
                    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
                    for run in dispatcher._runs.values():  # its supervisor writes the log
                        resource.prlimit(run.process.pid, resource.RLIMIT_FSIZE, (soft, hard))
                go.touch()
                await r.settle()
            occ = (await r.history())[0]
            await dispatcher.shutdown(1)
    finally:
        signal.signal(signal.SIGXFSZ, old_handler)
    assert occ.state == "failed" and occ.exit_code == 3
    assert occ.detail == "exit 3: after"
    ended = read_journal(str(Path(occ.log_path).with_suffix(".journal")))
    assert ended is not None
    assert ended["output_bytes"] == limit + 1024 * 1024 + len("\nafter\n")  # all received
    # the megabyte past the limit is lost, but for what the supervisor still had to write
    # when the limit was lifted (up to a few of its 64 KiB reads): those are written after
    # the marker. Every byte is either in the log or counted where it went missing.
    lost = ended["output_lost"]
    assert 1024 * 1024 - 4 * 65536 <= lost <= 1024 * 1024, lost
    data = Path(occ.log_path).read_bytes()
    marker = f"\n[tickui: {human_bytes(lost)} of output lost here: File too large]\n".encode()
    assert data.endswith(marker + b"a" * (1024 * 1024 - lost) + b"\nafter\n"), data[-200:]
    assert len(data) == limit + 1024 * 1024 - lost + len(marker) + len("\nafter\n")
    said = [m.getMessage() for m in caplog.records]
    assert len([m for m in said if "cannot be written" in m]) == 1, said
    assert [m for m in said if "written again" in m] == [
        f"run output is written again ({human_bytes(lost)} dropped meanwhile)"
    ]
    assert dispatcher.output_problem is None


async def test_failure_detail_is_the_redacted_bounded_last_line(tmp_path):
    secret = "echo 'connect redis://app:hunter2@db:6379/0 failed'; echo " + "z" * 5000 + " >&2"
    async with rig(tmp_path / "t.db") as r:
        await r.add("leaky", every="1h", command=["sh", "-c", f"{secret}; echo; exit 1"])
        await r.add(
            "said", every="1h", command=["sh", "-c", "echo 'pw redis://u:s3cret@h/0'; exit 2"]
        )
        await r.engine.start()
        await r.settle()
        by_task = {o.task: o for o in await r.history()}
    leaky, said = by_task["leaky"].detail, by_task["said"].detail
    assert leaky.startswith("exit 1: zzz") and len(leaky) < 400, leaky
    assert said == "exit 2: pw redis://u:***@h/0", said
    assert "s3cret" not in said


def test_compaction_keeps_bounds_for_any_chunking(tmp_path):
    """Pure file logic: whatever the chunk sizes, the result is head + marker + tail."""
    produced = bytes(range(256)) * 4000  # 1,024,000 bytes
    for head, tail, step in ((0, 1024, 1000), (100, 1024, 7), (5000, 3000, 65536)):
        path = tmp_path / f"{head}-{tail}-{step}.log"
        sink = BoundedLog(path, head, tail)
        for i in range(0, len(produced), step):
            sink.write(produced[i : i + step])
            assert path.stat().st_size <= head + 80 + 2 * tail + step
        sink.close()
        dropped = len(produced) - head - tail
        assert path.read_bytes() == produced[:head] + dropped_marker(dropped) + produced[-tail:]
        with contextlib.suppress(OSError):
            os.unlink(path)


async def test_a_large_tail_is_compacted_by_the_run_supervisor_and_stays_bounded(tmp_path):
    """Above INLINE_COMPACT: the run's supervisor compacts it (the event loop never does,
    it does not write run output at all)."""
    head, tail = 1024, 9 * 1024 * 1024
    total = 60_000_000
    script = f"echo START; head -c {total} /dev/zero | tr '\\0' q; echo; echo END"
    async with rig(tmp_path / "t.db") as r:
        dispatcher = SubprocessDispatcher(r.store, r.clock, 1.0, head, tail)
        r.engine.dispatcher = dispatcher
        await r.add("huge", every="1h", command=["sh", "-c", script])
        await r.engine.start()
        path = Path((await r.history())[0].log_path)
        largest = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while dispatcher.active() and loop.time() < deadline:
            with contextlib.suppress(OSError):
                largest = max(largest, path.stat().st_size)
            await asyncio.sleep(0.005)
        await r.settle()
        occ = (await r.history())[0]
        await dispatcher.shutdown(1)
    assert occ.state == "succeeded", occ.detail
    assert largest <= head + 100 + 2 * tail + 16 * 65536, largest
    data = path.read_bytes()
    found = MARKER.search(data)
    assert found and found.start() == head
    assert int(found[1]) == 6 + total + 5 - head - tail
    assert data[:head] == b"START\n" + b"q" * (head - 6)
    assert data[found.end() :] == b"q" * (tail - 5) + b"\nEND\n"
