"""Who owns a file, and whether that owner still runs: the owner of a temp file (`xmr_core.io`) or of a run
claim (`xmr_core.runs.cache`).

An owner is (host, pid, start): `start` is the process's start time in clock ticks since boot (Linux
`/proc/<pid>/stat`, field 22; "0" where there is no /proc), so a pid reused by a later process is not taken
for the owner. Whether an owner runs is known on its own host only; another host's owner is judged by how
recently it touched its files (the callers' rule).
"""

from __future__ import annotations

import hashlib
import os
import socket
from dataclasses import dataclass


def _proc_stat(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (state first), or None when there is no such process or no /proc."""
    try:
        text = open(f"/proc/{pid}/stat", encoding="ascii", errors="replace").read()  # noqa: SIM115
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # the command name (field 2) may hold spaces and parentheses


def start_time(pid: int) -> str:
    """The start time of process `pid` in clock ticks since boot, "0" when unknown (no /proc)."""
    fields = _proc_stat(pid)
    return fields[19] if fields else "0"


def pid_alive(pid: int, start: str) -> bool:
    """Whether process `pid` of this host runs and is the one that started at `start` ("0": not checked).
    A zombie (exited, not yet reaped by its parent) is dead."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    fields = _proc_stat(pid)
    if fields is None:  # no /proc on this system: the pid's existence is all there is to know
        return not os.path.isdir("/proc")
    return fields[0] != "Z" and start in ("0", fields[19])


def host_tag(host: str) -> str:
    """8 hex digits naming `host` in file names (host names may hold dots and dashes)."""
    return hashlib.sha256(host.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class Owner:
    host: str
    pid: int
    start: str

    @classmethod
    def current(cls) -> Owner:
        """This process."""
        return cls(socket.gethostname(), os.getpid(), start_time(os.getpid()))

    @property
    def local(self) -> bool:
        """Whether the owner runs (or ran) on this host, where its pid can be checked."""
        return self.host == socket.gethostname()

    def alive(self) -> bool:
        """On this host: whether the owner still runs. Another host's owner cannot be checked: raises."""
        if not self.local:
            raise ValueError(f"{self}: a process of another host; judge it by its files' mtimes")
        return pid_alive(self.pid, self.start)

    def tag(self) -> str:
        """`<host tag>-<pid>-<start>`, for file names (`xmr_core.io` temp files)."""
        return f"{host_tag(self.host)}-{self.pid}-{self.start}"
