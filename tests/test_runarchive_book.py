"""The smoke round trip of the run archive (marker `book`): a notebook trains into cache A, `pack`, `unpack`
into an empty cache B, the notebook again on B trains 0 runs and writes the same results as on A."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from xmr_core.book import diff as results_diff
from xmr_core.book import runner as book
from xmr_core.runs import archive as runarchive
from xmr_core.runs import log as runlog

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "01_pcme/train"  # one notebook keeps CI short; it trains several methods and writes tables and figures


def _run(root: Path, cache: Path, results: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict], list[str]]:
    """Execute NOTEBOOK under smoke with `cache` and `results`: its run log's records, the runner's lines."""
    monkeypatch.setenv("XMR_CACHE", str(cache))
    lines: list[str] = []
    summary = book.run_book([NOTEBOOK], profile="smoke", params={"RESULTS_DIR": str(results)}, force=True,
                            root=root, echo=lines.append)
    assert summary.ok and summary.count("passed") == 1, "\n".join(lines)
    return runlog.read_log(runlog.log_path(summary.outcomes[0].output)), lines


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
    # figures pixel for pixel, tables cell for cell, provenance but for the execution's own fields
    report = results_diff.compare_trees(tmp_path / "results_a", tmp_path / "results_b")
    assert report and not {rel: found for rel, found in report.items() if found}
