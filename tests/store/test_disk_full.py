"""A full disk under the database: one warning per outage, a visible state, nothing lost.

The database lives on a small tmpfs mounted for the test (root only: CI runs as root),
filled to the last byte with a filler file and freed again.
"""

from __future__ import annotations

import logging

from disk_support import fill

from helpers import rig, wait_for


async def test_full_disk_is_one_warning_a_visible_state_and_nothing_lost(small_disk, caplog):
    caplog.set_level(logging.INFO, logger="tickui")
    flag = small_disk.parent / "release"
    async with rig(small_disk / "t.db") as r:
        # One run is in flight across the outage; it ends when the test says so.
        await r.add(
            "long",
            every="1h",
            command=["sh", "-c", f"while [ ! -e {flag} ]; do sleep 0.02; done; echo done"],
        )
        await r.add("beat", every="1s", command=["echo", "beat"])
        await r.engine.start()
        filler = fill(small_disk)
        for _ in range(5):
            await r.tick(1)
        status = r.engine.status()
        assert status.result == "error", status
        assert status.detail.startswith("disk full"), status.detail
        warnings = [m for m in caplog.messages if "failed" in m and "disk full" in m]
        assert len(warnings) == 1, caplog.messages
        assert "Traceback" not in caplog.text

        flag.touch()  # the long run ends while the disk is still full
        # Its last line could not be written: the status says so, once space is short.
        await wait_for(
            lambda: "run output not written" in (r.engine.status().warning or ""),
            10, "the status to say the run's output was not written",
        )  # fmt: skip
        filler.unlink()
        await r.tick(1)
        assert r.engine.status().result == "ok", r.engine.status()
        assert any("works again" in m for m in caplog.messages)
        await r.settle()
        long_runs = await r.history("long")
        assert [o.state for o in long_runs] == ["succeeded"], [
            (o.state, o.error_code, o.detail) for o in long_runs
        ]
        beats = await r.history("beat")
        assert beats and all(o.state in ("succeeded", "skipped") for o in beats)
        assert r.engine.status().result == "ok"
        # Runs that ended during the outage were not known to have ended, so `forbid`
        # skipped the slots meanwhile; the next slot runs and its output is written.
        await r.tick(1)
        await r.settle()
        assert (await r.history("beat"))[-1].state == "succeeded"
        assert r.engine.status().warning is None
