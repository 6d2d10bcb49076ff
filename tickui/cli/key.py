"""`tickui key`: make and rotate the key file the engine and its workers sign with.

Rotation, with every process reading the same file: `add` a key (accepted everywhere
once the file is copied, not used yet), `use` it (it signs from each process's next
start), then `drop` the old one once nothing signs with it."""

from __future__ import annotations

import argparse
from pathlib import Path

from tickui.common.errors import BadInput
from tickui.common.options import add_argument, option

WORKER_KEY_FILE = "the key the engine signs with ([dispatch] key_file, TICKUI_KEY_FILE)"
WORKER_INSECURE = "run without a key: any command on the runs topic runs (never on a shared broker)"


def add_signing_arguments(parser: argparse.ArgumentParser, who: str = "engine") -> None:
    """--key-file and --insecure, for an engine dispatching to workers or for a worker.
    Absent unless given: the command line merges them into [dispatch] (with_flags)."""
    key_file, insecure = option("dispatch", "key_file"), option("dispatch", "insecure")
    if who == "worker":  # the same settings, in a worker's words
        add_argument(parser, key_file, suppress=True, help=WORKER_KEY_FILE)
        add_argument(parser, insecure, suppress=True, help=WORKER_INSECURE)
    else:
        add_argument(parser, key_file, suppress=True)
        add_argument(parser, insecure, suppress=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="key_command", metavar="new|add|use|drop|list")
    sub.required = True
    new = sub.add_parser("new", help="write a new key file (mode 600) with one key")
    path = "the key file"
    new.add_argument("path", metavar="PATH", help="the key file to write (never over another)")
    add = sub.add_parser("add", help="add a key that is accepted but does not sign yet")
    add.add_argument("path", metavar="PATH", help=path)
    use = sub.add_parser("use", help="sign with this key (it moves to the first line)")
    use.add_argument("path", metavar="PATH", help=path)
    use.add_argument("kid", metavar="KEY_ID", help="the key that signs from now on")
    drop = sub.add_parser("drop", help="stop accepting a key (never the one that signs)")
    drop.add_argument("path", metavar="PATH", help=path)
    drop.add_argument("kid", metavar="KEY_ID", help="the key to forget")
    lst = sub.add_parser("list", help="the key ids, which one signs (never a secret)")
    lst.add_argument("path", metavar="PATH", help=path)


def main(args: argparse.Namespace) -> int:
    from tickui.dispatch import keyfile  # the dispatch package: only `tickui key` needs it

    path = Path(args.path).expanduser()
    what = args.key_command
    if what == "new":
        key = keyfile.new_key()
        try:
            keyfile.write(path, [key], new=True)
        except FileExistsError:
            raise BadInput(str(path), "exists already (rotate with 'tickui key add')") from None
        except OSError as exc:
            raise BadInput(str(path), exc.strerror or "cannot be written") from None
        print(f"wrote {path} (mode 600), key {key.kid}")
        print(f"give it to the engine and every worker: --key-file {path}")
        return 0
    keys = list(keyfile.read(path, "key file").keys)
    if what == "list":
        for index, key in enumerate(keys):
            print(f"{key.kid}  {'signs' if index == 0 else 'accepted'}")
        return 0
    if what == "add":
        key = keyfile.new_key()
        keys.append(key)
        said = f"added key {key.kid}: accepted, not signing; copy {path} everywhere, then"
        said += f" 'tickui key use {path} {key.kid}'"
    else:
        found = [k for k in keys if k.kid == args.kid]
        if not found:
            raise BadInput(args.kid, f"no such key in {path}")
        if what == "use":
            keys = found + [k for k in keys if k.kid != args.kid]
            said = f"key {args.kid} signs from each process's next start"
        else:
            if keys[0].kid == args.kid:
                raise BadInput(args.kid, "signs now: 'tickui key use' another key first")
            keys = [k for k in keys if k.kid != args.kid]
            said = f"dropped key {args.kid}: messages signed with it are refused"
    try:
        keyfile.write(path, keys, new=False)
    except OSError as exc:
        raise BadInput(str(path), exc.strerror or "cannot be written") from None
    print(said)
    return 0
