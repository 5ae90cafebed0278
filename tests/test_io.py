"""Atomic writes: ordinary permissions, and what killed writers leave behind is removed by the next write."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fixtures.corpora import synthetic_corpus

from xmr_core.book import results
from xmr_core.config import RunConfig
from xmr_core.data.export import export_corpus
from xmr_core.io import FOREIGN_TEMP_AGE_S, atomic_write, atomic_write_text, read_json_lines
from xmr_core.liveness import Owner, host_tag

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(done.stdout)


@pytest.fixture()
def umask():
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


def test_written_files_get_ordinary_permissions(tmp_path: Path, umask) -> None:
    assert atomic_write_text(tmp_path / "a.txt", "x").stat().st_mode & 0o777 == 0o644
    umask(0o027)
    assert atomic_write_text(tmp_path / "b.txt", "x").stat().st_mode & 0o777 == 0o640
    umask(0o022)
    run = RunConfig.from_params(PROFILE="smoke", SEED=0, RESULTS_DIR=str(tmp_path / "res"), DATASET="scenes")
    md = results.write_text("hello", "demo/note.md", run=run)
    written = list(md.parent.iterdir())
    assert written and all(p.stat().st_mode & 0o777 == 0o644 for p in written)


def test_next_write_removes_dead_writers_temps_and_keeps_live_ones(tmp_path: Path) -> None:
    target = tmp_path / "ckpt.pt"
    me, here = Owner.current(), host_tag(Owner.current().host)
    dead = _dead_pid()
    names = {
        "dead": f".ckpt.pt.{here}-{dead}-0.00aa11bb.tmp",
        "dead backup": f".ckpt.pt.{here}-{dead}-0.00aa11bb.tmp.bak",  # results' backups of replaced files
        "reused pid": f".ckpt.pt.{here}-{me.pid}-1.0badcafe.tmp",  # this pid, but another process's start
        "live": f".ckpt.pt.{me.tag()}.12345678.tmp",  # this process: a write in progress (another thread)
        "foreign fresh": f".ckpt.pt.{host_tag('elsewhere')}-7-99.abcdef01.tmp",
        "foreign old": f".ckpt.pt.{host_tag('elsewhere')}-8-99.abcdef02.tmp",
        "another file's": f".other.pt.{here}-{dead}-0.00aa11cc.tmp",
        "mkstemp fresh": ".ckpt.pt.k2_x9abc.tmp",  # named as before the owner tag: judged by age
        "mkstemp old": ".ckpt.pt.zz0_q1rs.tmp",
        "not a temp": ".ckpt.pt.notes",
    }
    for name in names.values():
        (tmp_path / name).write_text("debris")
    old = time.time() - FOREIGN_TEMP_AGE_S - 60
    os.utime(tmp_path / names["foreign old"], (old, old))
    os.utime(tmp_path / names["mkstemp old"], (old, old))
    atomic_write_text(target, "new")
    kept = {"live", "foreign fresh", "another file's", "not a temp", "mkstemp fresh"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.name] + [names[k] for k in kept])
    assert target.read_text() == "new"


WRITER = """
import sys, time
from xmr_core.io import atomic_write
def write(fh):
    fh.write(b"half")
    fh.flush()
    print("writing", flush=True)
    time.sleep(120)
atomic_write(sys.argv[1], write)
"""


def test_a_writer_killed_midway_leaves_a_temp_that_the_next_write_removes(tmp_path: Path) -> None:
    target = atomic_write_text(tmp_path / "result.json", "old")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], env=ENV, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert writer.stdout.readline().strip() == "writing"
        temps = [p for p in tmp_path.iterdir() if p != target]
        assert len(temps) == 1 and temps[0].name.startswith(".result.json.") and temps[0].read_bytes() == b"half"
        atomic_write_text(target, "while it writes")  # the writer is alive: its temp file stays
        assert temps[0].exists() and target.read_text() == "while it writes"
    finally:
        writer.kill()
        writer.wait()
    assert temps[0].exists() and target.read_text() == "while it writes"  # killed: debris, the file intact
    atomic_write_text(target, "new")
    assert list(tmp_path.iterdir()) == [target] and target.read_text() == "new"


LOOP = """
import sys
from xmr_core.io import atomic_write_bytes
print("ready", flush=True)
i = 0
while True:
    i += 1
    atomic_write_bytes(sys.argv[1], bytes([i % 256]) * 2_000_000)
"""


def test_writers_killed_at_random_moments_never_tear_the_file_nor_leave_debris(tmp_path: Path) -> None:
    target = tmp_path / "last.pt"
    rng = random.Random(0)
    debris = 0
    for _ in range(6):
        writer = subprocess.Popen([sys.executable, "-c", LOOP, str(target)], env=ENV, stdout=subprocess.PIPE,
                                  text=True)
        assert writer.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.4))
        writer.kill()
        writer.wait()
        if target.exists():  # whole, never torn: one byte value, the full length
            data = target.read_bytes()
            assert len(data) == 2_000_000 and data == data[:1] * len(data)
        debris += sum(p != target for p in tmp_path.iterdir())
        atomic_write(target, lambda fh: fh.write(b"parent"))
        assert list(tmp_path.iterdir()) == [target] and target.read_bytes() == b"parent"
    assert debris >= 1  # some kill landed mid-write (a write takes most of the loop's time)


EXPORTER = """
import sys, time
from pathlib import Path
import xmr_core.data.export as export
from fixtures.corpora import synthetic_corpus
def stall(*args, **kwargs):
    print("staged", flush=True)
    time.sleep(120)
export.write_sidecar = stall  # hangs once the format's own files are in the staging folder
export.export_corpus(synthetic_corpus(seed=1), Path(sys.argv[1]), "precomp", progress=False)
"""


def test_a_killed_export_leaves_a_staging_folder_that_the_next_export_removes(tmp_path: Path, umask) -> None:
    out = tmp_path / "precomp"
    env = {**ENV, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    exporter = subprocess.Popen([sys.executable, "-c", EXPORTER, str(out)], env=env,
                                stdout=subprocess.PIPE, text=True)
    try:
        assert exporter.stdout.readline().strip() == "staged"
        staged = [p for p in tmp_path.iterdir() if p.name.startswith(".precomp.")]
        assert len(staged) == 1 and staged[0].is_dir() and any(staged[0].iterdir())
        export_corpus(synthetic_corpus(seed=2), out, "precomp", progress=False)  # the exporter is alive: kept
        assert staged[0].exists()
    finally:
        exporter.kill()
        exporter.wait()
    export_corpus(synthetic_corpus(seed=3), out, "precomp", progress=False)
    assert list(tmp_path.iterdir()) == [out]
    assert out.stat().st_mode & 0o777 == 0o755  # an ordinary folder under umask 022, not mkdtemp's 0700


def test_read_json_lines_names_the_file_and_line_of_a_bad_record(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"kind": "run"}\n{"kind": "other"}\n', encoding="utf-8")
    is_run = lambda record: record.get("kind") == "run"
    with pytest.raises(ValueError, match=r"log\.jsonl: line 2 is not a run record"):
        read_json_lines(path, is_run, "a run record")
    path.write_text('{"kind": "run"}\n{"kind": \n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"log\.jsonl: line 2 is not JSON"):
        read_json_lines(path, is_run, "a run record")
    path.write_text('{"kind": "run"}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 2 is not a run record"):
        read_json_lines(path, is_run, "a run record")
    path.write_text('{"kind": "run", "n": 1}\n{"kind": "run", "n": 2}\n', encoding="utf-8")
    assert [r["n"] for r in read_json_lines(path, is_run, "a run record")] == [1, 2]
