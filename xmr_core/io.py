"""Atomic file writes: a temp file in the target directory, fsync, then `os.replace`; and staging folders for
what is written as a whole folder (an export, a restored archive), renamed into place when complete.

A run that fails midway never leaves a half-written table, figure or checkpoint behind. The temp file is
`.<name>.<owner tag>.<random>.tmp` (`xmr_core.liveness.Owner.tag`: host, pid, start time), created with the
permissions of an ordinary file (0666 less the umask). A writer killed midway leaves its temp file behind;
the next successful write of the same file removes it: a temp file of this host whose writer no longer runs,
or one of another host (or one named by `tempfile.mkstemp`, as before the owner tag) untouched for
`FOREIGN_TEMP_AGE_S`. A temp file whose writer still runs is never removed. A staging folder is named the same
way (`staging_dir`) and removed by the same rule (`remove_stale_temps`) after the next complete write.

JSON-lines files are read whole (`read_json_lines`) and appended to one record per `write` (`append_json_line`:
processes sharing the file never interleave a line). The run log (`RUN_LOG_ENV`, `xmr_core.runs.log`) is one: the
frozen inputs whose bytes enter run keys name themselves in it from here (`log_input`), so the data and encoders
that build them need nothing of the runs layer.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from xmr_core.liveness import Owner, host_tag, pid_alive

RUN_LOG_ENV = "XMR_RUN_LOG"  # the run log the book runner names for the notebook it executes (`xmr_core.runs.log`)
FOREIGN_TEMP_AGE_S = 24 * 3600  # another host's temp file older than this is a dead writer's (no write takes a day)
_TEMP = re.compile(r"(?:(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-(?P<start>\d+)\.[0-9a-f]+|[a-z0-9_]{8})\.tmp(?:\.bak)?")


def temp_name(path: Path) -> Path:
    """`.<name>.<owner tag>.<random>.tmp` beside `path` (not created)."""
    return path.parent / f".{path.name}.{Owner.current().tag()}.{secrets.token_hex(4)}.tmp"


def temp_beside(path: Path) -> tuple[int, Path]:
    """Create `temp_name(path)` (exclusively, mode 0666 less the umask): (an fd open for writing, its path)."""
    while True:
        tmp = temp_name(path)
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:  # the same random suffix twice: draw again
            continue


def staging_dir(path: Path) -> Path:
    """Create an empty folder `temp_name(path)` (mode 0777 less the umask) in which to build `path` whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        stage = temp_name(path)
        try:
            stage.mkdir()
            return stage
        except FileExistsError:
            continue


def _stale(name: str, here: str, now: float, mtime: Callable[[], float]) -> bool:
    m = _TEMP.fullmatch(name)
    if m is None:
        return False
    if m["host"] == here:  # (a mkstemp name has no host: judged by its age, as another host's)
        return not pid_alive(int(m["pid"]), m["start"])
    return now - mtime() > FOREIGN_TEMP_AGE_S


def remove_stale_temps(paths: Iterable[Path]) -> None:
    """Remove the temp files (and staging folders) that killed writers of `paths` left behind (see the module
    docstring)."""
    by_dir: dict[Path, set[str]] = {}
    for path in paths:
        by_dir.setdefault(path.parent, set()).add(path.name)
    here, now = host_tag(Owner.current().host), time.time()
    for folder, names in by_dir.items():
        for entry in os.scandir(folder):
            for name in names:
                prefix = f".{name}."
                try:
                    if entry.name.startswith(prefix) and _stale(entry.name[len(prefix):], here, now,
                                                                lambda e=entry: e.stat().st_mtime):
                        if entry.is_dir(follow_symlinks=False):
                            shutil.rmtree(entry.path)
                        else:
                            Path(entry.path).unlink()
                except FileNotFoundError:  # another writer cleaned it up first
                    pass


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None]) -> Path:
    """Call `write(fh)` on a temp file beside `path`, then rename it onto `path`; then remove the temp files
    killed writers of `path` left."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    remove_stale_temps([path])
    return path


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    return atomic_write(path, lambda fh: fh.write(data))


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def file_digest(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes, read in 16 MiB blocks (a ResNet's weights need not fit twice in memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(16 << 20):
            digest.update(block)
    return digest.hexdigest()


def read_json_lines(path: str | Path, is_record: Callable[[Any], bool], what: str) -> list[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, in order; a line that is not JSON, or not a record by `is_record`,
    is an error naming the file, the line and `what` a record is (e.g. "a run-log record")."""
    records = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: line {n} is not JSON ({err})") from None
        if not isinstance(record, dict) or not is_record(record):
            raise ValueError(f"{path}: line {n} is not {what}: {line[:80]}")
        records.append(record)
    return records


def append_json_line(path: str | Path, record: dict[str, Any]) -> None:
    """Append `record` to the JSON-lines file `path` (created if missing) as one line, with a single `write`, so
    processes appending to one file never interleave a line."""
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def append_run_log(record: dict[str, Any]) -> None:
    """Append `record` to the run log `RUN_LOG_ENV` names; nothing outside a book run (unset)."""
    target = os.environ.get(RUN_LOG_ENV)
    if target:
        append_json_line(target, record)


def log_input(folder: Path, files: list[str] | None = None) -> None:
    """Name a frozen input whose bytes enter run keys in the run log (`xmr runs pack` packs it): `files` of
    `folder`, in the order they are to be restored (a completion marker last), or the whole folder (None: complete
    as a whole)."""
    append_run_log({"kind": "input", "dir": str(Path(folder).resolve()), "files": files})
