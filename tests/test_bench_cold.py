"""`python -m xmr_core.bench cold`: an empty run cache and a private results directory for the timed run, the
per-notebook times and the total, a failed notebook failing the bench (the book run itself replaced by a recorder)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from xmr_core.bench import cold
from xmr_core.book import runner as book


def _fake_run(seen: dict, seconds: tuple[float, ...], status: str = "passed"):
    def run_book(names, profile, force, root, params):
        cache = Path(os.environ["XMR_CACHE"])
        seen.update(names=list(names), profile=profile, force=force, params=params, cache=cache,
                    cache_empty=not cache.exists() or not any(cache.iterdir()))
        nbs = [book.Notebook("00_benchmark", f"nb{i}", Path(f"nb{i}.py")) for i in range(len(seconds))]
        return book.RunSummary([book.Outcome(nb, status, s, Path("out")) for nb, s in zip(nbs, seconds)])
    return run_book


def test_cold_runs_on_an_empty_cache_and_private_results(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "user-cache"))
    seen: dict = {}
    monkeypatch.setattr(cold.book, "run_book", _fake_run(seen, (600.0, 1500.0)))
    monkeypatch.setenv("XMR_JOBS", "2")
    cold.main(["00_benchmark", "01_pcme"])
    assert seen["names"] == ["00_benchmark", "01_pcme"] and seen["profile"] == "cpu" and seen["force"]
    assert seen["cache"] != tmp_path / "user-cache" and seen["cache_empty"]
    assert Path(seen["params"]["RESULTS_DIR"]).parent == seen["cache"].parent  # a temporary dir, not results/
    assert os.environ["XMR_CACHE"] == str(tmp_path / "user-cache")  # restored
    out = capsys.readouterr().out.splitlines()
    assert "total 35.0 min on 2 worker(s)" in out
    assert out[-1].startswith("total_s=2100.0 jobs=2 notebooks=2 failed=0")


def test_cold_fails_when_a_notebook_fails(monkeypatch, capsys):
    monkeypatch.setattr(cold.book, "run_book", _fake_run({}, (10.0,), "failed"))
    with pytest.raises(SystemExit) as exit_:
        cold.main([])
    out = capsys.readouterr().out
    assert exit_.value.code == 1 and "1 notebook(s) failed" in out and "failed=1" in out.splitlines()[-1]
