"""The run supervisor: one small process per run, between tickui and the run's command.

    python -I -S -c BOOT SOURCE_ROOT --journal J --log L [--lease F --lease-deadline D]
        [--grace S] [--head N] [--tail N] -- argv...

(`tickui.supervisor.launch.supervisor_argv` builds it; tickui.supervisor.server forks
it instead and calls `main` with those arguments and the command's environment.) It
leaves the session and process group of whoever started it (`setsid`) and becomes a
child subreaper, then waits at the gate: one line on stdin starts the command, EOF
first ends it with 125, the command never started. The command runs in a process group
of its own, in the supervisor's session, with /dev/null as stdin and its stdout and
stderr into a pipe the supervisor copies into the run's bounded log
(tickui.common.boundedlog: head, marker, tail, as tickui's own logs). Each step is
recorded durably in the journal (tickui.supervisor.journal).

Guarantees, whatever happens to the process that started it (frozen, killed, cut off):
- the command never runs unrecorded: `running` is durable before it is released;
- its output keeps draining into the bounded log;
- when the command ends, whatever it left behind (background children, double-forked
  daemons: orphans re-parent to the supervisor, so none escapes) is ended too, the log
  is closed, then the end is recorded, and the supervisor exits with the command's
  status (its exit code, 128 + the signal that killed it);
- the run ends when its lease runs out: once CLOCK_MONOTONIC passes the deadline in the
  lease file (read at least every 0.2 s; the last deadline read, or the one given at
  start, stands while the file is missing or unreadable), the whole tree gets SIGTERM
  (its group and every descendant), and SIGKILL after the grace for what is left; the
  end is recorded as fenced. So a run is over at the latest deadline + 0.2 s + grace +
  the time SIGKILL takes;
- SIGTERM, SIGINT or SIGHUP to the supervisor end the run the same way (recorded as
  cancelled). Signals to the group or session of the starter never reach it.

Assumes: the reader of the journal and the owner of the lease are on the same host
(pids, /proc start ticks and the monotonic clock mean nothing elsewhere, nor after a
reboot: the journal records the boot id); Linux (/proc, the subreaper); the grace is
long enough for the command to stop cleanly; nobody SIGKILLs the supervisor itself (then
the journal stays `running` and a reader sees `lost`).

Exit status: the command's; 125 never started; 122 the command could not be started
(exec failed, the log or journal could not be opened; the journal says why when it
could be written); 2 a malformed command line.
"""

from __future__ import annotations

# the signal module wraps these in enums, and enum costs milliseconds to import
import _signal as signal
import os
import select
import sys
import time

from tickui.common.boundedlog import (
    HEAD_BYTES_DEFAULT,
    TAIL_BYTES_DEFAULT,
    BoundedLog,
    OutputHealth,
)
from tickui.supervisor import journal as j
from tickui.supervisor.lease import read_lease
from tickui.supervisor.tree import (
    attempt,
    descendants,
    enable_subreaper,
    environment_given,
    exit_status,
    survives_term,
)

TYPE_CHECKING = False  # typing costs milliseconds to import
if TYPE_CHECKING:
    pass

EXIT_NOT_STARTED = 125
EXIT_START_FAILED = 122
EXIT_USAGE = 2
LEASE_CHECK = 0.2  # seconds between looks at the lease file
END_POLL = 0.05  # while a tree is being ended, how often it is looked at again
KILL_WAIT = 5.0  # after SIGKILL, how long to wait for the tree before giving up on it
AFTER_EXIT_READ = 4 << 20  # output read after the command exits, before its rest is ended
READ_CHUNK = 1 << 16
READS_PER_WAKEUP = 16
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Usage(Exception):
    """The command line is malformed."""


class Options:
    __slots__ = ("argv", "grace", "head", "journal", "lease", "lease_deadline", "log", "tail")

    def __init__(self) -> None:
        self.journal = ""
        self.log = ""
        self.lease: str | None = None
        self.lease_deadline = float("-inf")
        self.grace = 3.0
        self.head = HEAD_BYTES_DEFAULT
        self.tail = TAIL_BYTES_DEFAULT
        self.argv: list[str] = []


def parse(args: list[str]) -> Options:
    """`--name value` pairs, `--`, then the command (argparse costs milliseconds)."""
    opts = Options()
    names = {
        "--journal": ("journal", str),
        "--log": ("log", str),
        "--lease": ("lease", str),
        "--lease-deadline": ("lease_deadline", float),
        "--grace": ("grace", float),
        "--head": ("head", int),
        "--tail": ("tail", int),
    }
    i = 0
    while i < len(args) and args[i] != "--":
        if args[i] not in names or i + 1 >= len(args):
            raise Usage(f"unknown or incomplete option {args[i]!r}")
        attr, kind = names[args[i]]
        try:
            setattr(opts, attr, kind(args[i + 1]))
        except ValueError:
            raise Usage(f"bad value for {args[i]}: {args[i + 1]!r}") from None
        i += 2
    opts.argv = args[i + 1 :]
    if not opts.journal or not opts.log or not opts.argv or opts.grace < 0:
        raise Usage("--journal, --log and a command after -- are required")
    return opts


OUTPUT_FAILING = "output cannot be written: "
OUTPUT_WRITTEN_AGAIN = "output is written again, bytes lost: "


class ReportedHealth(OutputHealth):
    """Says on stderr when the log's writes start failing and when they work again (with
    what was lost), once each, for the process that started the run to show."""

    def failed(self, count: int, reason: str) -> None:
        if self.problem is None:
            say(OUTPUT_FAILING + reason)
        self.problem = reason
        self.lost += count

    def recovered(self) -> None:
        if self.problem is not None:
            say(f"{OUTPUT_WRITTEN_AGAIN}{self.lost}")
            self.problem, self.lost = None, 0


def say(text: str) -> None:
    """One line on stderr, read by the process that started the run."""
    try:
        os.write(2, f"tickui supervisor: {text}\n".encode())
    except OSError:
        return


def _noted(signum: int, frame: object) -> None:
    """The signal's number reaches the loop through the wakeup pipe."""


def ended_by_itself(code: int | None, outlives_signal: bool | None) -> bool:
    """The command exited (`code`, not by a signal) before a signal to end it could reach
    it: none was sent (`outlives_signal` None), or it could not have outlived the one sent
    (it was already ending, or it neither catches nor ignores SIGTERM). A fence or a cancel
    that came as it was ending then ended nothing: its own end is its outcome."""
    if code is None or code < 0:
        return False
    return not outlives_signal


class Supervisor:
    def __init__(self, opts: Options, env: dict[bytes, bytes] | None = None) -> None:
        self.opts = opts
        self.me = os.getpid()
        self.journal = j.JournalWriter(opts.journal)
        self.log: BoundedLog | None = None
        self.deadline = opts.lease_deadline
        self.next_lease_check = 0.0
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        self.poller = select.poll()
        self.poller.register(self.wake_r, select.POLLIN)
        self.stop_asked = False
        self.out: int | None = None
        self.pid = 0  # the command's main process
        self.code: int | None = None  # its os.waitstatus_to_exitcode, once reaped
        self.ended_us = 0
        self.why: str | None = None  # "fenced" or "cancelled", once ending began for it
        # whether the command could exit by itself after the first signal sent to end it
        # (it catches or ignores SIGTERM); None while none was sent
        self.outlives_signal: bool | None = None
        self.ending_since: float | None = None
        self.killing = False
        self.stuck = False  # processes outlived SIGKILL (uninterruptible sleep)
        self.signalled: set[tuple[int, int]] = set()
        self.env = environment_given() if env is None else env
        self.subreaper = False  # orphans of the command re-parent here

    # ---- signals, lease ----------------------------------------------------------------

    def install_signals(self) -> None:
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        for sig in (*STOP_SIGNALS, signal.SIGCHLD):
            signal.signal(sig, _noted)

    def take_signals(self) -> None:
        try:
            numbers = os.read(self.wake_r, 512)
        except (BlockingIOError, InterruptedError):
            return
        if any(n in numbers for n in STOP_SIGNALS):
            self.stop_asked = True

    def lease_lapsed(self, now: float) -> bool:
        """Look at the lease (at most every LEASE_CHECK): True once its deadline is past."""
        if self.opts.lease is None:
            return False
        if now >= self.next_lease_check:
            self.next_lease_check = now + LEASE_CHECK
            deadline = read_lease(self.opts.lease)
            if deadline is not None:
                self.deadline = deadline
        return now >= self.deadline

    def timeout_ms(self, now: float, limit: float) -> int:
        wait = limit
        if self.opts.lease is not None:
            wait = min(wait, max(0.0, self.next_lease_check - now))
        return max(0, int(wait * 1000) + 1)

    # ---- the gate ----------------------------------------------------------------------

    def wait_at_gate(self) -> str | None:
        """None once the go line came; else why the command must not start."""
        self.poller.register(0, select.POLLIN)
        line = b""
        try:
            while True:
                now = time.monotonic()
                if self.stop_asked:
                    return "cancelled"
                if self.lease_lapsed(now):
                    return "fenced"
                for fd, _ in self.poller.poll(self.timeout_ms(now, 1.0)):
                    if fd == self.wake_r:
                        self.take_signals()
                    elif fd == 0:
                        try:
                            data = os.read(0, 256)
                        except OSError:  # no stdin at all: no go line can come
                            data = b""
                        if not data:
                            return "gate_closed"
                        line += data
                        if b"\n" in line:  # the lease looked at once more, now
                            self.next_lease_check = 0.0
                            return "fenced" if self.lease_lapsed(time.monotonic()) else None
        finally:
            self.poller.unregister(0)

    # ---- starting ----------------------------------------------------------------------

    def start(self) -> str | None:
        """Fork the command, record it as running, release it; the error text if exec failed."""
        out_r, out_w = os.pipe()
        release_r, release_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            self._child(out_w, release_r, err_w)  # never returns
        for fd in (out_w, release_r, err_w):
            os.close(fd)
        attempt(os.setpgid, pid, pid)  # fails when it did so itself first
        self.pid = pid
        self.out = out_r
        os.set_blocking(out_r, False)
        self.poller.register(out_r, select.POLLIN)
        try:
            command = {"pid": pid, "start": j.start_ticks(pid), "started_us": j.now_us()}
            self.journal.write(j.RUNNING, command=command)
            os.write(release_w, b"x")
        finally:
            os.close(release_w)  # unreleased, the child ends unrun
        with os.fdopen(err_r, "rb") as errs:
            failure = errs.read()  # EOF as it execs (close-on-exec), else the errno
        if not failure:
            return None
        code = int(failure) if failure.isdigit() else 0
        return f"{self.opts.argv[0]}: {os.strerror(code) if code else 'cannot start'}"

    def _child(self, out_w: int, release_r: int, err_w: int) -> None:
        try:
            signal.set_wakeup_fd(-1)
            for sig in (*STOP_SIGNALS, signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ):
                signal.signal(sig, signal.SIG_DFL)
            os.setpgid(0, 0)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_w, 1)
            os.dup2(out_w, 2)
            if not os.read(release_r, 1):
                os._exit(EXIT_NOT_STARTED)
            os.execvpe(self.opts.argv[0], self.opts.argv, self.env)
        except OSError as exc:
            try:
                os.write(err_w, str(exc.errno or 0).encode())
            finally:
                os._exit(EXIT_START_FAILED)
        except BaseException:
            os._exit(EXIT_START_FAILED)

    # ---- running -----------------------------------------------------------------------

    def read_output(self, reads: int) -> bool:
        """Copy what the pipe holds (up to `reads` chunks) into the log; True at its end."""
        for _ in range(reads):
            if self.out is None:
                return True
            try:
                data = os.read(self.out, READ_CHUNK)
            except BlockingIOError:
                return False
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:
                self.poller.unregister(self.out)
                os.close(self.out)
                self.out = None
                return True
            assert self.log is not None
            self.log.write(data)
            if self.log.needs_compaction():  # a tail past INLINE_COMPACT: no thread here
                self.log.compact()
        return False

    def drain(self) -> None:
        """The tree is gone: take what its pipe still holds (its writers are gone, so it
        is at its end; one that could not be killed leaves it open: stop when empty)."""
        while self.out is not None:
            try:
                data = os.read(self.out, READ_CHUNK)
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if data:
                assert self.log is not None
                self.log.write(data)
                if self.log.needs_compaction():
                    self.log.compact()
                continue
            self.poller.unregister(self.out)
            os.close(self.out)
            self.out = None

    def reap(self) -> None:
        """Wait for every ended child: the command, and orphans re-parented here."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            except InterruptedError:
                continue
            if pid == 0:
                return
            if pid == self.pid and self.code is None:
                self.code = os.waitstatus_to_exitcode(status)
                self.ended_us = j.now_us()

    def has_children(self) -> bool:
        """Whether any child is left, ended or not (none is reaped here)."""
        try:
            os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return False
        except OSError:
            return True
        return True

    def end_tree_step(self, now: float) -> bool:
        """One step of ending the tree: signal what is there; True once nothing is left."""
        if self.ending_since is None:
            self.ending_since = now
        if not self.killing and now >= self.ending_since + self.opts.grace:
            self.killing = True
            self.signalled.clear()
        sig = signal.SIGKILL if self.killing else signal.SIGTERM
        if self.code is not None and self.subreaper and not self.has_children():
            return True  # every descendant would be a child of a subreaper: none is left
        tree = descendants(self.me)
        live = {pid: v for pid, v in tree.items() if not v[2]}
        if not live and self.code is not None:
            return not tree  # zombies left are reaped by the next `reap`
        if self.killing and now >= self.ending_since + self.opts.grace + KILL_WAIT:
            if not self.stuck:
                self.stuck = True
                self.say(f"processes left after SIGKILL: {sorted(live)}")
            if self.code is not None:  # else it still runs: recording an end would be a lie
                return True
        if self.code is None and (self.pid, sig) not in self.signalled:
            if self.outlives_signal is None:  # looked at before: it may end meanwhile
                self.outlives_signal = sig == signal.SIGTERM and survives_term(self.pid)
            attempt(os.killpg, self.pid, sig)  # unreaped, its pid and group are still its own
            self.signalled.add((self.pid, sig))
        for pid, (start, _pgrp, _zombie) in live.items():
            if (pid, start) in self.signalled:
                continue
            if j.start_ticks(pid) == start:  # still that process, not a reused pid
                attempt(os.kill, pid, sig)
            self.signalled.add((pid, start))
        return False

    def run(self) -> int:
        """From the released command to its recorded end; returns the exit status."""
        after_exit_read = False
        done = False
        while not done:
            now = time.monotonic()
            self.reap()
            if self.ending_since is None and self.code is None:
                if self.stop_asked:
                    self.why = "cancelled"
                elif self.lease_lapsed(now):
                    self.why = "fenced"
            if self.code is not None and not after_exit_read:
                after_exit_read = True  # as tickui does: what it said before its end
                self.read_output(max(1, AFTER_EXIT_READ // READ_CHUNK))
            if self.why is not None or self.code is not None:
                done = self.end_tree_step(now)
                if done:
                    break
                limit = END_POLL
            else:
                limit = 1.0
            for fd, _ in self.poller.poll(self.timeout_ms(now, limit)):
                if fd == self.wake_r:
                    self.take_signals()
                elif fd == self.out:
                    self.read_output(READS_PER_WAKEUP)
        self.reap()
        self.drain()
        assert self.log is not None and self.code is not None
        self.log.close()
        signum = -self.code if self.code < 0 else None
        status = exit_status(self.code)
        ended_by_us = self.why is not None and not ended_by_itself(self.code, self.outlives_signal)
        self.record(  # when it fails, the journal stays `running`: a reader sees `lost`
            j.ENDED,
            exit_code=None if signum else self.code,
            signal=signum,
            status=status,
            ended_us=self.ended_us,
            fenced=ended_by_us and self.why == "fenced",
            cancelled=ended_by_us and self.why == "cancelled",
            output_bytes=self.log.received,
            output_lost=self.log.lost_total,
        )
        return status

    def record(self, state: str, **fields: object) -> None:
        """A final record; a journal that cannot take it is said on stderr."""
        try:
            self.journal.write(state, **fields)
        except OSError as exc:
            self.say(f"journal {self.opts.journal}: {exc.strerror}")

    def wait_unreleased(self) -> None:
        """The command's process was never let go (or its exec failed): it ends at once."""
        if self.pid and self.code is None:
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                return

    def say(self, text: str) -> None:
        say(text)


def main(args: list[str] | None = None, env: dict[bytes, bytes] | None = None) -> int:
    """`env`: the command's environment (default: the one this process was started with;
    a supervisor forked by tickui.supervisor.server has the server's)."""
    try:
        opts = parse(sys.argv[1:] if args is None else args)
    except Usage as exc:
        print(f"tickui supervisor: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if os.getsid(0) != os.getpid():
        attempt(os.setsid)  # fails for a group leader: still out of its starter's group
    subreaper = enable_subreaper()
    try:
        sup = Supervisor(opts, env)
    except OSError as exc:
        print(f"tickui supervisor: journal {opts.journal}: {exc.strerror}", file=sys.stderr)
        return EXIT_START_FAILED
    sup.subreaper = subreaper
    sup.install_signals()
    me = {"pid": sup.me, "start": j.start_ticks(sup.me), "boot_id": j.boot_id()}
    try:
        sup.log = BoundedLog(opts.log, opts.head, opts.tail, ReportedHealth())
    except OSError as exc:
        sup.journal.write(
            j.START_FAILED, supervisor=me, error=f"log {opts.log}: {exc.strerror}",
            status=EXIT_START_FAILED, ended_us=j.now_us(),
        )  # fmt: skip
        return EXIT_START_FAILED
    try:
        sup.journal.write(
            j.WAITING, durable=False, supervisor=me, lease=opts.lease, grace=opts.grace
        )
    except OSError as exc:
        sup.log.close()
        sup.say(f"journal {opts.journal}: {exc.strerror}")
        return EXIT_START_FAILED
    why = sup.wait_at_gate()
    if why is not None:
        sup.log.close()
        sup.record(j.NOT_STARTED, reason=why, status=EXIT_NOT_STARTED, ended_us=j.now_us())
        return EXIT_NOT_STARTED
    try:
        failure = sup.start()
    except OSError as exc:  # no fork, or no `running` record: the command was not let go
        failure = f"cannot start {opts.argv[0]}: {exc.strerror}"
    if failure is not None:
        sup.wait_unreleased()
        sup.log.close()
        sup.record(j.START_FAILED, error=failure, status=EXIT_START_FAILED, ended_us=j.now_us())
        return EXIT_START_FAILED
    return sup.run()


if __name__ == "__main__":
    sys.exit(main())
