"""Results: provenance, atomicity (a failed write leaves the old files intact), the index, claims."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from xmr_core.book import results
from xmr_core.claims import verdict
from xmr_core.config import RunConfig
from xmr_core.reported import paper_values
from xmr_core.runs.log import git_commit


@pytest.fixture()
def run(tmp_path: Path) -> RunConfig:
    return RunConfig.from_params(PROFILE="smoke", SEED=7, RESULTS_DIR=str(tmp_path / "res"), DATASET="scenes")


def test_table_files_and_provenance(run: RunConfig) -> None:
    df = pd.DataFrame({"method": ["a", "b"], "R@1": [12.345, 67.8], "count": [3.0, 40.0], "k": [1, 2]})
    csv = results.write_table(df, "demo/table1", run=run, caption="paper vs ours")
    base = csv.with_suffix("")
    assert pd.read_csv(csv).equals(df)
    md = base.with_suffix(".md").read_text()
    assert "paper vs ours" in md and "12.3" in md and "67.8" in md
    assert re.search(r"\|\s+40 \|\s+2 \|", md) and "40.0" not in md and "3.0" not in md and "2.0" not in md
    meta = json.loads(base.with_suffix(".json").read_text())
    assert (meta["profile"], meta["dataset"], meta["seed"], meta["kind"]) == ("smoke", "scenes", 7, "table")
    assert meta["device"] == "cpu" and meta["wall_s"] >= 0 and meta["xmr_version"]
    assert "git_commit" in meta and meta["columns"] == ["method", "R@1", "count", "k"]
    index = (Path(run.results_dir) / "README.md").read_text()
    assert "demo/table1.md" in index


def test_provenance_records_the_versions_and_the_torch_threads_it_was_computed_with(run: RunConfig) -> None:
    import numpy as np
    import torch

    from xmr_core.config import torch_threads

    df = pd.DataFrame({"a": [1]})
    for n in (1, 2):
        with torch_threads(n):
            meta = json.loads(results.write_table(df, f"demo/threads{n}", run=run).with_suffix(".json").read_text())
        assert meta["torch_threads"] == n
        assert (meta["numpy"], meta["torch"]) == (np.__version__, torch.__version__)


def test_small_values_are_not_rounded_to_zero_in_markdown(run: RunConfig) -> None:
    # a learning rate of 5e-4 or a KL weight of 1e-5 at one decimal would read 0.0: such a column prints in
    # general format instead; the csv keeps the exact values either way
    # general format is rounded as the rest (one decimal), to two significant digits where that would read 0.0
    df = pd.DataFrame({"lr": [5e-4, 2e-3], "KL weight": [1e-5, 0.0], "R@1": [12.34, 56.78],
                       "std": [0.782413, 0.0732106]})
    md = results.write_table(df, "demo/small", run=run).with_suffix(".md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("|")][2:]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    assert cells == [["0.0005", "1e-05", "12.3", "0.8"], ["0.002", "0", "56.8", "0.073"]]


def test_a_pipe_in_a_column_name_or_cell_stays_in_its_cell(run: RunConfig) -> None:
    from markdown_it import MarkdownIt

    df = pd.DataFrame({"model": ["a"], "mean |corr|": [0.5], "evidence": ["|W2 - mean| = 0.03"]})
    md = results.write_table(df, "demo/pipes", run=run).with_suffix(".md").read_text()
    page = MarkdownIt("commonmark").enable("table").render(md)
    cells = [c.strip() for c in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", page)]
    assert cells == ["model", "mean |corr|", "evidence", "a", "0.5", "|W2 - mean| = 0.03"]


def test_failed_write_leaves_old_files_intact(run: RunConfig, monkeypatch) -> None:
    csv = results.write_table(pd.DataFrame({"x": [1]}), "demo/t", run=run)
    before = {p.name: p.read_bytes() for p in csv.parent.iterdir()}

    def unrenderable(*a, **k):  # fails while rendering, before anything is staged
        raise RuntimeError("render failed")

    with monkeypatch.context() as patch:
        patch.setattr(pd.DataFrame, "to_markdown", unrenderable)
        with pytest.raises(RuntimeError, match="render failed"):
            results.write_table(pd.DataFrame({"x": [2]}), "demo/t", run=run)
    assert {p.name: p.read_bytes() for p in csv.parent.iterdir()} == before

    real_replace, calls = os.replace, {"n": 0}

    def flaky_replace(src, dst):  # the first rename (the .csv) works, the second (.md) fails
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky_replace)
    with pytest.raises(OSError, match="disk full"):
        results.write_table(pd.DataFrame({"x": [3]}), "demo/t", run=run)
    monkeypatch.setattr(os, "replace", real_replace)
    assert calls["n"] >= 2
    assert {p.name: p.read_bytes() for p in csv.parent.iterdir()} == before  # csv rolled back, no temp files


def test_atomic_write_keeps_old_file_when_writer_fails(tmp_path: Path) -> None:
    from xmr_core.io import atomic_write, atomic_write_text

    target = atomic_write_text(tmp_path / "ckpt.bin", "old")

    def broken(fh):
        fh.write(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, broken)
    assert target.read_text() == "old" and list(tmp_path.iterdir()) == [target]


def test_figure_text_claims_and_index(run: RunConfig) -> None:
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    png = results.write_figure(fig, "demo/fig1", run=run)
    plt.close(fig)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    claims = [
        results.Claim("A beats B", "Table 2", "A 51.0 vs B 49.0", verdict(True)),
        results.Claim("C rises with K", "Fig. 3", "falls: 3.0, 2.0", verdict(False)),
        results.Claim("D | E", "Sec. 4", "not run under smoke", verdict(None)),
        results.Claim("F beats G", "Table 3", "+0.1 [-0.4, +0.6]", "inconclusive"),
    ]
    path = results.write_claims(claims, "demo", run=run)
    text = path.read_text()
    for v in ("held", "did not hold", "not tested", "inconclusive"):
        assert f"**{v}**" in text
    assert "D \\| E" in text
    assert "Of 4 claims" in text and "1 held, 1 did not hold, 0 negligible, 1 inconclusive, 1 not tested" in text
    with pytest.raises(ValueError, match="verdict must be one of"):
        results.Claim("H", "Sec. 1", "-", "yes")  # type: ignore[arg-type]
    index = (Path(run.results_dir) / "README.md").read_text()
    assert "demo/fig1.png" in index and "demo/claims.md" in index


def test_bad_keys_and_empty_tables(run: RunConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="<chapter>/<name>"):
        results.write_table(pd.DataFrame({"x": [1]}), "flat", run=run)
    with pytest.raises(ValueError, match="empty"):
        results.write_table(pd.DataFrame({"x": []}), "demo/e", run=run)
    with monkeypatch.context() as m:  # the run plan's trace (results thrown away): untrained runs may leave one empty
        m.setenv("XMR_PLAN", str(Path(run.results_dir) / "plan.jsonl"))
        assert results.write_table(pd.DataFrame({"x": []}), "demo/e", run=run).with_suffix(".csv").is_file()
    with pytest.raises(FileNotFoundError, match="no paper values"):
        paper_values("no_such_chapter")


def test_git_commit_is_dirty_for_changed_sources_but_not_for_changed_results(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "t.csv").write_text("a\n1\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True,
                          check=True).stdout.strip()
    assert git_commit(tmp_path) == head
    (tmp_path / "results" / "t.csv").write_text("a\n2\n")  # a run rewrote its own output
    assert git_commit(tmp_path) == head
    (tmp_path / "code.py").write_text("x = 2\n")  # a source changed
    assert git_commit(tmp_path) == head + "+dirty"


def test_notebook_claims_reads_both_notebooks_and_names_a_missing_one(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "_READS", {})
    from xmr_core.book.results import notebook_claims
    from xmr_core.config import RunConfig

    run = RunConfig.from_params(PROFILE="smoke", RESULTS_DIR=str(tmp_path), PROGRESS=False)
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "claims_train.csv").write_text(
        "claim,source,evidence,verdict\nA beats B.,Table 1,A - B = +1.0,held\nC beats D.,Table 2,n/a,not tested\n")
    claims = notebook_claims(run, "demo")
    assert [(c.claim, c.verdict) for c in claims[:2]] == [("A beats B.", "held"), ("C beats D.", "not tested")]
    assert len(claims) == 3 and claims[2].verdict == "not tested"
    assert "claims_ablate.csv not found: run it first" in claims[2].evidence
    assert set(results._READS[tmp_path.resolve()]) == {"demo/claims_train.csv", "demo/claims_ablate.csv"}
    assert results._READS[tmp_path.resolve()]["demo/claims_ablate.csv"] is None  # absent: its appearance counts


def test_claims_frame_is_one_row_per_claim_in_order() -> None:
    claims = [results.Claim("c", "Sec. 1", "e", "held"), results.Claim("d", "Sec. 2", "f", "not tested")]
    assert results.claims_frame(claims).to_dict("records") == [
        {"claim": "c", "source": "Sec. 1", "evidence": "e", "verdict": "held"},
        {"claim": "d", "source": "Sec. 2", "evidence": "f", "verdict": "not tested"}]


def test_results_written_after_a_read_name_what_was_read(run: RunConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    """`read_result` / `read_table`: the provenance of every result written after a read into the same folder
    names the file read and the digest of its bytes (16 hex of sha256; None for a file found absent); results written before the
    read, or into another folder, name nothing."""
    import hashlib

    monkeypatch.setattr(results, "_READS", {})
    upstream = results.write_table(pd.DataFrame({"a": [1.0, 2.0]}), "demo/per_seed", run=run)
    before = results.write_table(pd.DataFrame({"b": [3.0]}), "demo/before", run=run)
    assert "reads" not in json.loads(before.with_suffix(".json").read_text())
    assert results.read_table("demo/per_seed", run=run).equals(pd.DataFrame({"a": [1.0, 2.0]}))
    assert results.read_result("demo/absent.csv", run=run) is None
    with pytest.raises(FileNotFoundError, match=r"res/demo/missing\.csv: not found for profile smoke on scenes; run the "
                                                r"notebook that writes demo/missing under that profile and data set first"):
        results.read_table("demo/missing", run=run)
    after = results.write_table(pd.DataFrame({"c": [4.0]}), "demo/after", run=run)
    assert json.loads(after.with_suffix(".json").read_text())["reads"] == {
        "demo/absent.csv": None, "demo/missing.csv": None,
        "demo/per_seed.csv": hashlib.sha256(upstream.read_bytes()).hexdigest()[:16]}  # sources.digest_bytes
    elsewhere = RunConfig.from_params(PROFILE="smoke", RESULTS_DIR=str(Path(run.results_dir).parent / "other"))
    other = results.write_table(pd.DataFrame({"d": [5.0]}), "demo/other", run=elsewhere)
    assert "reads" not in json.loads(other.with_suffix(".json").read_text())
