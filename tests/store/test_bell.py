"""A SQLite file's request bell (tickui.store.bell): named after the file, one listener at
a time, woken by the file owner's processes only."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tickui.store.bell import Bell, address, ring


async def until(predicate, timeout: float = 10) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


def test_the_name_is_the_files_whatever_path_reaches_it(tmp_path: Path) -> None:
    db, other = tmp_path / "a.db", tmp_path / "b.db"
    db.write_bytes(b"")
    other.write_bytes(b"")
    (tmp_path / "link.db").symlink_to(db)
    assert address(db) == address(tmp_path / "link.db") == address(tmp_path / "." / "a.db")
    assert address(db) != address(other)
    assert address(tmp_path / "missing.db") is None
    ring(tmp_path / "missing.db")  # nothing to ring: no error
    ring(other)  # nobody listens: no error


async def test_one_listener_at_a_time_and_the_next_after_it(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    db.write_bytes(b"")
    heard: list[str] = []
    first, second = Bell(db), Bell(db)
    first.listen(lambda: heard.append("first"))
    second.listen(lambda: heard.append("second"))
    assert first.listening and not second.listening
    ring(db)
    await until(lambda: heard == ["first"])
    first.close()
    second.listen(lambda: heard.append("second"))  # tried again: free now
    assert second.listening
    ring(tmp_path / "." / "a.db")
    await until(lambda: heard == ["first", "second"])
    second.listen(None)
    assert not second.listening
    ring(db)  # nobody listens now
    assert heard == ["first", "second"]


async def test_another_users_ring_is_dropped() -> None:
    # a folder the other user can reach (pytest's are the test user's own)
    folder = Path(tempfile.mkdtemp(prefix="tickui-bell-"))
    folder.chmod(0o755)
    db = folder / "a.db"
    db.write_bytes(b"")
    heard: list[int] = []
    bell = Bell(db)
    bell.listen(lambda: heard.append(1))
    try:
        code = (
            "import sys; from pathlib import Path; from tickui.store.bell import ring;"
            " ring(Path(sys.argv[1]))"
        )
        src = str(Path(__file__).resolve().parents[2])
        proc = await asyncio.create_subprocess_exec(
            "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
            sys.executable, "-c", code, str(db), env={"PYTHONPATH": src},
            stderr=subprocess.PIPE,
        )  # fmt: skip
        _, err = await proc.communicate()
        assert proc.returncode == 0, err
        await until(lambda: bell.ignored == 1)
        assert heard == []
        ring(db)
        await until(lambda: heard == [1])
    finally:
        bell.close()
        shutil.rmtree(folder)


async def test_a_flood_of_rings_wakes_the_listener_a_few_times_a_second(tmp_path: Path) -> None:
    """Rung without a pause for half a second, from a thread, the listener is woken at most
    once per rest (REST_S) and the rest is drained or dropped, not answered one by one."""
    import threading
    import time

    from tickui.store.bell import REST_S

    db = tmp_path / "a.db"
    db.write_bytes(b"")
    heard: list[float] = []
    bell = Bell(db)
    bell.listen(lambda: heard.append(time.monotonic()))
    rung = [0]

    def flood() -> None:
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            ring(db)
            rung[0] += 1

    try:
        sender = threading.Thread(target=flood)
        sender.start()
        while sender.is_alive():
            await asyncio.sleep(0.01)
        await asyncio.sleep(2 * REST_S)
        assert rung[0] > 1000
        assert 1 <= len(heard) <= 0.5 / REST_S + 3, (len(heard), rung[0])
        before = len(heard)
        ring(db)  # after the flood, a ring is heard again
        await until(lambda: len(heard) > before)
    finally:
        bell.close()
