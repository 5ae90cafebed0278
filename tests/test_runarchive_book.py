"""The smoke round trip of the run archive (marker `book`): a notebook trains into cache A, `pack`, `unpack`
into an empty cache B, the notebook again on B trains 0 runs and writes the same results as on A."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from xmr_core import book, runarchive, runlog

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "01_pcme/train"  # one notebook keeps CI short; it trains several methods and writes tables and figures
TIMES = ("wall_s", "created_utc")  # provenance fields that differ between two executions
# table columns that describe the execution, not the result: whether it trained a run, seconds it took
EXECUTION = ("cached", "wall s", "written (UTC)")


def _run(root: Path, cache: Path, results: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict], list[str]]:
    """Execute NOTEBOOK under smoke with `cache` and `results`: its run log's records, the runner's lines."""
    monkeypatch.setenv("XMR_CACHE", str(cache))
    lines: list[str] = []
    summary = book.run_book([NOTEBOOK], profile="smoke", params={"RESULTS_DIR": str(results)}, force=True,
                            root=root, echo=lines.append)
    assert summary.ok and summary.count("passed") == 1, "\n".join(lines)
    return runlog.read_log(runlog.log_path(summary.outcomes[0].output)), lines


def _markdown_without_execution(text: str) -> list:
    """A markdown page's lines, its tables' rows as cells without the `EXECUTION` columns."""
    out: list = []
    keep: list[int] | None = None
    for line in text.splitlines():
        if not line.startswith("|"):
            keep = None
            out.append(line)
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if keep is None:  # a table's header row
            keep = [i for i, c in enumerate(cells) if c not in EXECUTION]
        out.append([cells[i] for i in keep if i < len(cells)])
    return out


def _same_results(a: Path, b: Path) -> None:
    """Figures pixel for pixel; tables and texts byte for byte but for the columns that describe the execution
    (`EXECUTION`); provenance but for its times."""
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files and files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    for rel in files:
        if rel.suffix == ".png":
            pa, pb = (np.asarray(Image.open(d / rel).convert("RGBA")) for d in (a, b))
            assert pa.shape == pb.shape and np.array_equal(pa, pb), rel
        elif rel.suffix == ".json":
            ja, jb = (json.loads((d / rel).read_text()) for d in (a, b))
            for meta in (ja, jb):  # where the results were written differs by construction, not what they are
                meta.get("parameters", {}).pop("RESULTS_DIR", None)
            assert {k: v for k, v in ja.items() if k not in TIMES} == {k: v for k, v in jb.items() if k not in TIMES}, rel
        elif rel.suffix == ".csv":
            ta, tb = (pd.read_csv(d / rel, dtype=str, keep_default_na=False) for d in (a, b))
            assert list(ta.columns) == list(tb.columns), rel
            same = [c for c in ta.columns if c not in EXECUTION]
            assert ta[same].equals(tb[same]), rel
        elif rel.suffix == ".md":
            assert _markdown_without_execution((a / rel).read_text()) == _markdown_without_execution(
                (b / rel).read_text()), rel
        else:
            assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


@pytest.mark.book
@pytest.mark.timeout(1200)
def test_restored_archive_reruns_the_notebook_without_training(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "project"  # its own book/_build: run logs of other runs never enter the archive
    chapter = NOTEBOOK.split("/")[0]
    shutil.copytree(ROOT / "book" / chapter, root / "book" / chapter)
    a, b = tmp_path / "cache_a", tmp_path / "cache_b"

    log_a, _ = _run(root, a, tmp_path / "results_a", monkeypatch)
    trained = {r["name"] for r in log_a if r["kind"] == "run" and r["trained"]}
    assert trained, "the notebook trained nothing on an empty cache"
    archive = tmp_path / "smoke.tar.gz"
    runarchive.pack("smoke", archive, root=root, cache=a)
    runarchive.unpack(archive, cache=b)

    log_b, lines = _run(root, b, tmp_path / "results_b", monkeypatch)
    assert not [r["name"] for r in log_b if r["kind"] == "run" and r["trained"]]
    loaded = len({r["name"] for r in log_b if r["kind"] == "run"})
    assert any(line.startswith(f"[ ok ] {NOTEBOOK}") and f"trained 0 runs, loaded {loaded} " in line for line in lines)
    assert {r["name"] for r in log_b if r["kind"] == "run"} == {r["name"] for r in log_a if r["kind"] == "run"}
    assert not (b / "runs").exists() or not any((b / "runs").glob("*/last.pt"))  # nothing trained on B
    _same_results(tmp_path / "results_a", tmp_path / "results_b")
