"""Claims on run directories: one worker trains a run, any other waits for it (or trains something else).

Any number of processes, on one machine or on hosts sharing a file system, may ask for the same run. A run
directory's claims are the files `claim.<N>` in it, N = 0, 1, 2, ...; the highest N is the current claim.
Each holds a JSON record: the owner (host, pid, start time: `xmr_core.liveness.Owner`), when it was claimed,
and whether it was released. A claim file is written in full to a temp file and then hard-linked to its
name: `os.link` fails when the name exists (atomically, on NFS too), so exactly one process creates each
`claim.<N>`, and a reader never sees a half-written record.

- To claim a run whose current claim is N (none: N = -1) a process creates `claim.<N+1>`, and only when
  claim N is released or dead. Taking over a dead claim is therefore itself atomic: of two processes that
  find the same dead claim, one creates the next file and the other finds it live. Claim numbers are never
  reused while a claim is current, and a process that created a number below the current one (it looked
  at an old listing) withdraws it.
- A claim is dead when its owner runs on this host and its process is gone (or its pid now names another
  process), or when its owner runs on another host and its file has not been touched for
  `ClaimPolicy.stale_after_s` (host clocks are assumed to agree to well within that). The owner touches its
  claim file every `heartbeat_s` from a background thread while it holds it.
- The owner releases the claim when it stops: a finished run's claim files are removed (a finished run
  is read, never claimed: whoever claims a run checks right after whether it has finished meanwhile); an
  unfinished run gets a released record on top, so the next process claims it at once.
- `acquire` waits, polling every `poll_s` with one log line per owner, until the run is finished (None) or
  claimed by the caller (the `Claim`). `try_claim` never waits: a scheduler that finds a run claimed
  trains another one.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from xmr_core.io import remove_stale_temps, temp_beside
from xmr_core.liveness import Owner

_CLAIM = re.compile(r"claim\.(\d+)")
_RETRY_S = 0.02  # a lost race is looked at again after this (a directory listing may lag on NFS)


@dataclass(frozen=True)
class ClaimPolicy:
    poll_s: float = 1.0  # a waiter looks again this often
    heartbeat_s: float = 30.0  # the owner touches its claim file this often
    stale_after_s: float = 300.0  # another host's claim untouched for this long is dead

    def __post_init__(self) -> None:
        if not 0 < self.heartbeat_s < self.stale_after_s or self.poll_s <= 0:
            raise ValueError(f"ClaimPolicy needs 0 < heartbeat_s < stale_after_s and poll_s > 0, got {self}")


class ClaimLost(RuntimeError):
    """The claim was taken over by another worker (its heartbeat went stale): this process must stop."""


@dataclass(frozen=True)
class ClaimRecord:
    """The current claim of a run directory, as read from its file."""

    path: Path
    number: int
    owner: Owner
    claimed_at: float  # time.time() of the claiming process
    released: bool
    touched: float  # the file's mtime: the owner's last heartbeat

    def dead(self, policy: ClaimPolicy) -> bool:
        if self.owner.local:
            return not self.owner.alive()
        return time.time() - self.touched > policy.stale_after_s

    def describe(self) -> str:
        return (f"{self.owner.host} pid {self.owner.pid} since "
                f"{time.strftime('%H:%M:%S', time.localtime(self.claimed_at))}")


def _numbers(run_dir: Path) -> list[int]:
    return sorted(int(m[1]) for name in os.listdir(run_dir) if (m := _CLAIM.fullmatch(name)))


def current(run_dir: str | Path) -> ClaimRecord | None:
    """The current (highest-numbered) claim of `run_dir`, None when it has none."""
    run_dir = Path(run_dir)
    while True:
        numbers = _numbers(run_dir) if run_dir.is_dir() else []
        if not numbers:
            return None
        path = run_dir / f"claim.{numbers[-1]}"
        try:
            record, touched = json.loads(path.read_text()), path.stat().st_mtime
        except FileNotFoundError:  # removed meanwhile (the run finished): look again
            continue
        return ClaimRecord(path, numbers[-1], Owner(**record["owner"]), record["claimed_at"],
                           record["released"], touched)


def _create(path: Path, record: dict) -> bool:
    """Create `path` holding `record` unless it exists: True when this call created it."""
    fd, tmp = temp_beside(path.with_name("claim"))
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(record, fh)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        created = os.stat(tmp).st_nlink == 2  # NFS: link may report failure for a link it made, or not
    finally:
        tmp.unlink(missing_ok=True)
    remove_stale_temps([path.with_name("claim")])
    return created


class Claim:
    """A claim this process holds: a heartbeat thread touches its file until `release`."""

    def __init__(self, run_dir: Path, number: int, policy: ClaimPolicy, took_over: ClaimRecord | None) -> None:
        self.run_dir, self.number, self.policy, self.took_over = run_dir, number, policy, took_over
        self.path = run_dir / f"claim.{number}"
        self._stop = threading.Event()
        self._lost = False
        self._released = False
        self._thread = threading.Thread(target=self._beat, name=f"claim heartbeat {self.path}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.policy.heartbeat_s):
            try:
                os.utime(self.path)
            except FileNotFoundError:
                self._lost = True
                return

    def held(self) -> bool:
        """Whether this claim is still the current one (another host may take over a stale heartbeat)."""
        numbers = _numbers(self.run_dir)
        return not self._lost and bool(numbers) and numbers[-1] == self.number

    def check(self) -> None:
        """Raise `ClaimLost` when another worker has taken the run over."""
        if not self.held():
            top = current(self.run_dir)
            raise ClaimLost(f"{self.run_dir}: this process's claim was taken over by "
                            f"{top.describe() if top else 'another worker'}; its training is abandoned")

    def release(self, finished: bool) -> None:
        """Stop the heartbeat and give the run up: a finished run's claim files are removed, an unfinished
        run's claim is marked released (when it is still this process's), so any process may claim it."""
        if self._released:
            return
        self._released = True
        self._stop.set()
        self._thread.join()
        if finished:
            for n in _numbers(self.run_dir):
                (self.run_dir / f"claim.{n}").unlink(missing_ok=True)
        elif self.held() and _create(self.run_dir / f"claim.{self.number + 1}", _record(released=True)):
            _remove_below(self.run_dir, self.number + 1)


def _record(released: bool) -> dict:
    return {"owner": asdict(Owner.current()), "claimed_at": time.time(), "released": released}


def _remove_below(run_dir: Path, number: int) -> None:
    for n in _numbers(run_dir):
        if n < number:
            (run_dir / f"claim.{n}").unlink(missing_ok=True)


def try_claim(run_dir: str | Path, policy: ClaimPolicy = ClaimPolicy()) -> Claim | None:
    """Claim `run_dir` (created if missing) unless a live worker holds it (then None); never waits."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    while True:
        top = current(run_dir)
        if top is not None and not top.released and not top.dead(policy):
            return None
        number = 0 if top is None else top.number + 1
        if not _create(run_dir / f"claim.{number}", _record(released=False)):
            time.sleep(_RETRY_S)  # another process claimed this number first: look again
            continue
        numbers = _numbers(run_dir)
        if numbers[-1:] != [number]:  # created from an old listing, below the current claim (or the run
            # finished and its claims were removed meanwhile): withdraw
            (run_dir / f"claim.{number}").unlink(missing_ok=True)
            time.sleep(_RETRY_S)
            continue
        _remove_below(run_dir, number)
        return Claim(run_dir, number, policy, top if top is not None and not top.released else None)


def acquire(run_dir: str | Path, finished: Callable[[], bool], policy: ClaimPolicy = ClaimPolicy(),
            log: Callable[[str], None] = print) -> Claim | None:
    """Wait until the run in `run_dir` is finished (`finished()`: returns None) or claimed by this process
    (returns the `Claim`; release it when done). Logs one line per owner waited for, and a takeover."""
    waited_for: tuple[str, int, str] | None = None
    while True:
        if finished():
            return None
        claim = try_claim(run_dir, policy)
        if claim is not None:
            if finished():  # finished between the first look and the claim
                claim.release(finished=True)
                return None
            if claim.took_over is not None:
                log(f"{run_dir}: took over the dead claim of {claim.took_over.describe()}")
            return claim
        top = current(run_dir)
        if top is not None and (top.owner.host, top.owner.pid, top.owner.start) != waited_for:
            waited_for = (top.owner.host, top.owner.pid, top.owner.start)
            log(f"{run_dir}: claimed by {top.describe()}; waiting for it to finish (looking every "
                f"{policy.poll_s:g} s)")
        time.sleep(policy.poll_s)
