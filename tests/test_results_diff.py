"""`xmr results diff` and the line `xmr book run` ends with: a result's two versions are the same when what it
shows is (pixels, cells, provenance but for the execution's own fields), and every other difference is named."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest
from PIL import Image, PngImagePlugin

from xmr_core.book import cli
from xmr_core.book import runner as book
from xmr_core.book.diff import compare_committed, compare_trees, differences

TABLE = """# pcme/tuning

| method | val rsum | cached | train s |
|:-------|---------:|:-------|--------:|
| VSE0   |    351.2 | False  |   101.9 |
| PCME   |    360.4 | False  |    99.0 |
"""
CSV = "method,val rsum,cached\nVSE0,351.2,False\nPCME,360.4,False\n"
META = {"key": "pcme/tuning", "kind": "table", "caption": "tuning runs", "wall_s": 3150.9, "created_utc": "2026-11-26",
        "git_commit": "16a1e8f", "xmr_core_fingerprint": "731f", "parameters": {"PROFILE": "cpu"}}


def _png(pixel: tuple[int, int, int] = (0, 0, 0), text: str = "") -> bytes:
    img = Image.new("RGB", (4, 3), (255, 255, 255))
    img.putpixel((1, 1), pixel)
    info = PngImagePlugin.PngInfo()
    info.add_text("Software", text)
    buf = io.BytesIO()
    img.save(buf, format="PNG", pnginfo=info)
    return buf.getvalue()


def test_what_describes_the_execution_is_not_a_difference() -> None:
    # a table whose runs were loaded this time (cached True) and a notebook that took other seconds
    assert differences("t.md", TABLE.encode(), TABLE.replace("False ", "True  ").encode()) == []
    assert differences("t.csv", CSV.encode(), CSV.replace("False", "True").encode()) == []
    later = META | {"wall_s": 31.8, "created_utc": "2026-11-27", "git_commit": "6f023df", "xmr_core_fingerprint": "9",
                    "parameters": {"PROFILE": "cpu", "RESULTS_DIR": "/tmp/elsewhere"}}
    assert differences("t.json", json.dumps(META).encode(), json.dumps(later).encode()) == []
    assert _png(text="matplotlib 3.9") != _png(text="matplotlib 3.10")
    assert differences("f.png", _png(text="matplotlib 3.9"), _png(text="matplotlib 3.10")) == []


def test_a_changed_number_is_named_with_both_values() -> None:
    # a "train s" column is the run's own time, read from its result: part of the result
    assert differences("t.md", TABLE.encode(), TABLE.replace("360.4", "361.0").encode()) == [
        "line 6: 'PCME | 360.4 | 99.0' -> 'PCME | 361.0 | 99.0'"]
    assert differences("t.csv", CSV.encode(), CSV.replace("351.2", "350.9").encode()) == [
        "row 1, val rsum: '351.2' -> '350.9'"]
    assert differences("t.json", json.dumps(META).encode(), json.dumps(META | {"caption": "other"}).encode()) == [
        "caption: 'tuning runs' -> 'other'"]
    assert differences("f.png", _png(), _png((0, 0, 1))) == ["1 of 12 pixels differ"]
    assert differences("t.md", TABLE.encode(), (TABLE + "one more line\n").encode()) == ["6 lines -> 7 lines"]
    assert differences("t.csv", CSV.encode(), b"method\nVSE0\n") == [
        "columns ['method', 'val rsum', 'cached'] -> ['method']"]
    assert differences("x.bin", b"a", b"b") == ["the bytes differ"]


def test_compare_trees_names_files_on_one_side(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        (root / "pcme").mkdir(parents=True)
        (root / "pcme" / "tuning.md").write_text(TABLE)
    (a / "pcme" / "gone.md").write_text("x")
    (b / "pcme" / "new.md").write_text("y")
    assert compare_trees(a, b) == {"pcme/gone.md": [f"only in {a}"], "pcme/new.md": [f"only in {b}"],
                                   "pcme/tuning.md": []}


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


@pytest.fixture()
def project(tmp_path: Path) -> Path:
    """A git checkout with one chapter that writes results/pcme/tuning.*, its results committed."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname='demo'\n")
    chapter = tmp_path / "book" / "01_pcme"
    chapter.mkdir(parents=True)
    (chapter / "train.py").write_text('# %% tags=["parameters"]\nPROFILE = "cpu"\n\n'
                                      '# %%\nwrite_table(df, "pcme/tuning", run=run)\n')
    results = tmp_path / "results" / "pcme"
    results.mkdir(parents=True)
    (results / "tuning.md").write_text(TABLE)
    (results / "tuning.csv").write_text(CSV)
    (results / "tuning.json").write_text(json.dumps(META))
    (results / "fig.png").write_bytes(_png())
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "results")
    return tmp_path


def test_the_working_tree_against_the_commit(project: Path, monkeypatch, capsys) -> None:
    results = project / "results" / "pcme"
    (results / "tuning.md").write_text(TABLE.replace("False ", "True  "))  # loaded, not trained: the same
    assert not any(compare_committed(project, ["results/pcme"]).values())
    (results / "tuning.csv").write_text(CSV.replace("360.4", "359.0"))
    (results / "fig.png").unlink()
    (results / "extra.md").write_text("new")
    report = compare_committed(project, ["results/pcme"])
    assert {rel: found for rel, found in report.items() if found} == {
        "results/pcme/tuning.csv": ["row 2, val rsum: '360.4' -> '359.0'"],
        "results/pcme/fig.png": ["missing: committed, not written"],
        "results/pcme/extra.md": ["not in HEAD"]}

    monkeypatch.setattr("xmr_core.config.project_root", lambda: project)
    assert cli.main(["results", "diff", "01_pcme"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "[DIFF] results/pcme/tuning.csv: row 2, val rsum: '360.4' -> '359.0'" in out
    assert out[-1] == "5 files against HEAD: 2 the same, 3 differ"
    with pytest.raises(SystemExit, match="no commit 'no-such-rev'"):
        cli.main(["results", "diff", "pcme", "--rev", "no-such-rev"])
    _git(project, "checkout", "-q", "--", "results")
    (results / "extra.md").unlink()
    assert cli.main(["results", "diff"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "4 files against HEAD: 4 the same, 0 differ"


def test_book_run_ends_with_the_chapters_results_against_head(project: Path) -> None:
    def rewrite(nb: book.Notebook, out: Path, params: dict) -> None:  # the notebook writes one number anew
        (project / "results" / "pcme" / "tuning.csv").write_text(CSV.replace("351.2", "352.0"))

    lines: list[str] = []
    summary = book.run_book(["pcme"], root=project, echo=lines.append, execute=rewrite)
    assert lines[-2:] == [("[DIFF] results/pcme: 1 of 4 files differ from HEAD (tuning.csv); "
                           "`xmr results diff pcme` says how"), summary.line()]
    _git(project, "checkout", "-q", "--", "results")
    lines.clear()
    book.run_book(["pcme"], root=project, echo=lines.append, force=True, execute=lambda nb, out, params: None)
    assert lines[-2] == "[same] results/pcme: all 4 files as committed (HEAD)"
    lines.clear()  # smoke results go to book/_build/smoke/results, which is not committed: no line
    book.run_book(["pcme"], root=project, profile="smoke", echo=lines.append, execute=lambda nb, out, params: None)
    assert not any("HEAD" in line for line in lines)

