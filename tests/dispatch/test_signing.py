"""Signing and keys, without a broker: what checks and what does not, key files and their
modes, `tickui key`, the allow list, the refusal counters and the words they are shown in."""

from __future__ import annotations

import logging
import shutil
import stat

import pytest

from helpers import cli
from tickui.common.errors import BadInput
from tickui.common.redact import redact
from tickui.dispatch import keyfile
from tickui.dispatch.allow import AllowList
from tickui.dispatch.refusals import Refusals, said, security_lines
from tickui.dispatch.signing import (
    BAD_SIGNATURE,
    KID_HEADER,
    SIG_HEADER,
    UNKNOWN_KEY,
    UNSIGNED,
    Key,
    Keyring,
)

TOPIC, KEY, VALUE = "tickui.runs.v1", b"task", b'{"argv":["true"]}'


def ring(*kids: str) -> Keyring:
    return Keyring([Key(kid, kid.encode() * 8) for kid in kids])


def test_a_sealed_message_checks_and_any_change_to_it_does_not():
    keys = ring("a")
    headers = keys.seal(TOPIC, KEY, VALUE)
    assert keys.check(TOPIC, KEY, VALUE, headers) is None
    assert keys.check(TOPIC, KEY, VALUE + b" ", headers) == BAD_SIGNATURE
    assert keys.check("tickui.control.v1", KEY, VALUE, headers) == BAD_SIGNATURE
    assert keys.check(TOPIC, b"other", VALUE, headers) == BAD_SIGNATURE
    assert keys.check(TOPIC, KEY, VALUE, []) == UNSIGNED
    assert keys.check(TOPIC, KEY, VALUE, None) == UNSIGNED
    assert keys.check(TOPIC, KEY, VALUE, [(KID_HEADER, b"a")]) == UNSIGNED
    bad = [(KID_HEADER, b"a"), (SIG_HEADER, b"\xff\xfe")]
    assert keys.check(TOPIC, KEY, VALUE, bad) == BAD_SIGNATURE


def test_another_key_is_refused_whether_its_id_is_known_or_not():
    mine, theirs = ring("a"), ring("b")
    assert mine.check(TOPIC, KEY, VALUE, theirs.seal(TOPIC, KEY, VALUE)) == UNKNOWN_KEY
    same_id = Keyring([Key("a", b"another secret of 32 bytes......")])
    assert mine.check(TOPIC, KEY, VALUE, same_id.seal(TOPIC, KEY, VALUE)) == BAD_SIGNATURE


def test_rotation_old_and_new_are_both_accepted_and_the_first_signs():
    old, rotated = ring("old"), ring("new", "old")
    assert rotated.check(TOPIC, KEY, VALUE, old.seal(TOPIC, KEY, VALUE)) is None
    assert old.check(TOPIC, KEY, VALUE, rotated.seal(TOPIC, KEY, VALUE)) == UNKNOWN_KEY
    assert dict(rotated.seal(TOPIC, KEY, VALUE))[KID_HEADER] == b"new"


def test_insecure_signs_nothing_and_believes_everything():
    insecure = Keyring()
    assert insecure.insecure and insecure.seal(TOPIC, KEY, VALUE) == []
    assert insecure.check(TOPIC, KEY, VALUE, None) is None


def test_key_files_are_private_whole_and_never_shown(tmp_path):
    path = tmp_path / "k"
    key = keyfile.new_key()
    keyfile.write(path, [key], new=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert keyfile.read(path).keys == (key,)
    secret = path.read_text().split()[-1]
    assert secret not in redact(f"the key is {secret} here") and "***" in redact(secret)
    with pytest.raises(FileExistsError):
        keyfile.write(path, [key], new=True)
    for mode in (0o640, 0o604, 0o620):
        path.chmod(mode)
        with pytest.raises(BadInput, match=f"mode {mode:o}"):
            keyfile.read(path)
    path.chmod(0o600)
    path.write_text("not a key\n")
    with pytest.raises(BadInput, match="line 1 is not"):
        keyfile.read(path)
    path.write_text("# only a comment\n")
    with pytest.raises(BadInput, match="no key"):
        keyfile.read(path)
    path.write_text("k1 c2hvcnQ\n")
    with pytest.raises(BadInput, match="shorter than 16 bytes"):
        keyfile.read(path)
    with pytest.raises(BadInput, match="tickui key new"):
        keyfile.read(tmp_path / "missing")


def test_no_key_is_refused_unless_insecure_and_a_given_key_wins(tmp_path):
    with pytest.raises(BadInput, match=r"tickui key new PATH.*--insecure"):
        keyfile.keyring_for(None, "key_file", False, "a worker")
    assert keyfile.keyring_for(None, "key_file", True, "a worker").insecure
    path = tmp_path / "k"
    keyfile.write(path, [keyfile.new_key()], new=True)
    assert not keyfile.keyring_for(path, "key_file", True, "a worker").insecure


def test_tickui_key_new_add_use_drop_list(tmp_path):
    path = tmp_path / "dispatch.key"
    made = cli("key", "new", str(path))
    assert made.returncode == 0 and "mode 600" in made.stdout
    first = keyfile.read(path).signing_kid
    again = cli("key", "new", str(path))
    assert again.returncode == 2 and "exists already" in again.stderr
    assert cli("key", "add", str(path)).returncode == 0
    kids = [k.kid for k in keyfile.read(path).keys]
    assert kids[0] == first and len(kids) == 2
    assert cli("key", "use", str(path), kids[1]).returncode == 0
    assert keyfile.read(path).signing_kid == kids[1]
    refused = cli("key", "drop", str(path), kids[1])
    assert refused.returncode == 2 and "signs now" in refused.stderr
    assert cli("key", "drop", str(path), first).returncode == 0
    listed = cli("key", "list", str(path))
    assert listed.stdout.split() == [kids[1], "signs"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    secret = path.read_text().split()[-1]
    assert all(secret not in r.stdout + r.stderr for r in (made, listed))


def test_allow_compares_the_files_programs_are(tmp_path):
    allow = AllowList.build(["sh"])
    argv, _ = allow.resolve(["sh", "-c", "true"], {}, None)
    assert argv[0] == shutil.which("sh") and argv[1:] == ("-c", "true")
    assert allow.resolve([shutil.which("sh"), "-c", "true"], {}, None)[0] is not None
    assert allow.resolve(["python3", "-c", "1"], {}, None) == (None, "not allowed on this worker")
    fake = tmp_path / "sh"  # not the same file, though it has the name
    shutil.copy(shutil.which("python3"), fake)
    assert allow.resolve([str(fake)], {}, None)[0] is None
    assert AllowList().resolve(["anything"], {"LD_PRELOAD": "x"}, None) == (("anything",), "")
    with pytest.raises(BadInput, match="no such program"):
        AllowList.build(["no-such-program-here"])


@pytest.mark.parametrize(
    "name",
    ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "BASH_ENV", "ENV", "BASH_FUNC_x%%",
     "PYTHONPATH", "PYTHONSTARTUP", "PERL5OPT", "NODE_OPTIONS", "RUBYOPT", "SHELLOPTS",
     "JAVA_TOOL_OPTIONS", "GCONV_PATH", "IFS"],
)  # fmt: skip
def test_allow_refuses_a_command_that_would_make_its_program_run_other_code(name):
    """An allowed shell or interpreter loads what such variables name: refused, so that
    the allowed program is all that runs (the worker's own environment is not judged)."""
    allow = AllowList.build(["sh"])
    argv, why = allow.resolve(["sh", "-c", "true"], {name: "/tmp/x", "GREETING": "hi"}, None)
    assert argv is None and name in why and "not allowed on this worker" in why
    assert allow.resolve(["sh", "-c", "true"], {"GREETING": "hi", "TARGET": "x"}, None)[0]


def test_refusals_are_counted_and_logged_without_a_flood(caplog):
    seen = []
    refusals = Refusals(logging.getLogger("tickui.test"), clock=lambda: 100.0)
    refusals.listeners.append(lambda kind, count, detail: seen.append((kind, count)))
    with caplog.at_level(logging.WARNING, "tickui.test"):
        for _ in range(50):
            refusals.refuse("forged_command", "unsigned, token=abcdef")
    assert refusals.counts == {"forged_command": 50} and len(seen) == 50
    assert len(caplog.records) == 3  # the first three; then once a minute
    assert "abcdef" not in caplog.text
    assert said({"forged_command": 3, "replayed_command": 1}) == (
        "3 forged commands, 1 replayed command"
    )
    assert said({}) == ""


def test_security_lines_put_alarms_first():
    class W:
        def __init__(self, id, refused=None, insecure=False):
            self.id, self.refused, self.insecure = id, refused or {}, insecure

    class E:
        name, insecure, key_id, refused = "engine h", False, "k1", {}

    assert security_lines([W("w1")], [E()]) == [("engine h signs with key k1", False)]
    lines = security_lines([W("w1", {"forged_command": 3}), W("w2", insecure=True)], [E()])
    assert lines == [
        ("worker w1: 3 forged commands refused", True),
        ("worker w2: INSECURE, runs any command (no key)", True),
    ]


async def test_an_insecure_engine_says_so_in_its_status(tmp_path):
    """The dashboard's header and `tickui run`'s last line show the engine's warning."""
    from tickui.common.clock import ManualClock
    from tickui.dispatch.kafka import KafkaDispatcher
    from tickui.engine import EngineConfig, SchedulerEngine
    from tickui.store import Store

    store = await Store.open(tmp_path / "t.db")
    try:
        for keys, said in ((Keyring(), True), (ring("a"), False)):
            dispatcher = KafkaDispatcher(store, ManualClock(0), "127.0.0.1:9", keyring=keys)
            warning = SchedulerEngine(store, dispatcher, ManualClock(0), EngineConfig()).status()
            assert ("dispatch unsigned" in (warning.warning or "")) is said
    finally:
        await store.close()


def test_a_run_command_signed_for_one_partition_does_not_check_on_another():
    keys = ring("a")
    headers = keys.seal(TOPIC, KEY, VALUE, 3)
    assert keys.check(TOPIC, KEY, VALUE, headers, partition=3) is None
    assert keys.check(TOPIC, KEY, VALUE, headers, partition=4) == BAD_SIGNATURE
    assert keys.check(TOPIC, KEY, VALUE, headers) == BAD_SIGNATURE


def test_a_key_file_behind_a_link_is_read_and_its_target_must_be_private(tmp_path):
    """Mounted secrets are links to the file: followed, and the file itself is checked."""
    target = tmp_path / "data" / "dispatch.key"
    target.parent.mkdir()
    keyfile.write(target, [keyfile.new_key()], new=True)
    link = tmp_path / "dispatch.key"
    link.symlink_to(target)
    assert keyfile.read(link).signing_kid == keyfile.read(target).signing_kid
    target.chmod(0o644)
    with pytest.raises(BadInput, match="mode 644"):
        keyfile.read(link)


def test_a_worker_remembers_starts_for_as_long_as_any_command_can_wait():
    """A copy of a command is refused by whichever worker holds its partition as long as
    the command's deadline has not passed: the events a worker reads at start reach back
    as far as the longest start_timeout tickui accepts."""
    from tickui.runtime.settings import HOUR, dispatch_settings
    from tickui.worker.events_view import LOOKBACK_S

    longest = dispatch_settings({"start_timeout": "1h"}, {}).start_timeout
    assert longest == HOUR and longest <= LOOKBACK_S * 1_000_000
    with pytest.raises(BadInput):
        dispatch_settings({"start_timeout": "61m"}, {})


def test_a_heartbeat_sent_again_is_older_than_the_last_one_heard():
    """The engine keeps a worker's newest heartbeat only: by its signed process start and
    count, not by clocks, so a copy of an old one cannot keep a gone worker alive."""
    from tickui.dispatch.messages import Heartbeat

    def beat(boot: int, seq: int, at: int = 5) -> Heartbeat:
        return Heartbeat("w", "h", 2, (), "v", at, boot=boot, seq=seq)

    assert beat(10, 2).order > beat(10, 1).order
    assert beat(10, 2, at=1).order > beat(10, 1, at=9).order  # a clock stepped back
    assert beat(11, 1).order > beat(10, 99).order  # the worker restarted
    again = Heartbeat.decode(beat(10, 2).encode())
    assert again.order == (10, 2)
    from tickui.dispatch.messages import BadMessage

    with pytest.raises(BadMessage, match="nested too deeply"):  # never a reader's crash
        Heartbeat.decode(b"[" * 100_000 + b"]" * 100_000)


def test_refusals_are_logged_three_of_a_kind_then_once_a_minute_with_the_count(caplog):
    """README: everything refused is logged, the first three of a kind, then once a
    minute with the count: on a clock moved to just under, and to, the minute."""
    now = [100.0]
    refusals = Refusals(logging.getLogger("tickui.test"), clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "tickui.test"):
        for _ in range(4):
            refusals.refuse("forged_command", "unsigned")
        now[0] = 159.9
        refusals.refuse("forged_command", "unsigned")  # 59.9 s after the third: quiet
        refusals.refuse("forged_heartbeat", "unsigned")  # another kind: its first is said
        now[0] = 160.0
        refusals.refuse("forged_command", "unsigned")  # a minute after the third: said
    said_lines = [r.getMessage() for r in caplog.records]
    assert len(said_lines) == 5, said_lines
    assert said_lines[3] == "refused a forged heartbeat: unsigned"
    assert said_lines[4] == "refused a forged command: unsigned (3 since the last said, 6 in all)"
