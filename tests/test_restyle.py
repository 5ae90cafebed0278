"""`xmr results restyle` (`xmr_core.chapters.restyle`): a figure drawn from committed tables alone is redrawn from
them by today's code, keeping its notebook's provenance; a figure a notebook gained after its last execution is drawn;
the book calls a figure drawn by older code so (`book.static.older_code_note`) until it is redrawn."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
from PIL import Image

from xmr_core.book.staleness import Verdict
from xmr_core.book.static import older_code_note
from xmr_core.chapters import restyle
from xmr_core.sources import digest_bytes

ROOT = Path(__file__).resolve().parents[1]


def _copy(results: Path, *keys: str) -> None:
    for key in keys:
        for source in (ROOT / "results").glob(f"{key}.*"):
            (results / source.relative_to(ROOT / "results")).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, results / source.relative_to(ROOT / "results"))


def test_a_figure_is_redrawn_from_its_committed_table(tmp_path: Path) -> None:
    _copy(tmp_path, "hrem/fig7")
    before = json.loads((tmp_path / "hrem" / "fig7.json").read_text())
    curves = pd.read_csv(tmp_path / "hrem" / "fig7.csv")
    curves[curves["seed"] == curves["seed"].min()].to_csv(tmp_path / "hrem" / "fig7.csv", index=False)  # one seed left
    assert restyle.restyle(tmp_path, ["hrem/fig7"], ROOT) == ["hrem/fig7"]
    after = json.loads((tmp_path / "hrem" / "fig7.json").read_text())
    kept = {k: v for k, v in before.items() if k != "restyled"}
    assert {k: v for k, v in after.items() if k != "restyled"} == kept  # the notebook's provenance
    assert after["restyled"]["created_utc"] > (before.get("restyled") or {}).get("created_utc", "")
    sources = after["restyled"]["sources"]
    assert set(sources) == {p for p in before["xmr_core_sources"] if p.startswith("xmr_core/chapters/") or
                            p == "xmr_core/viz.py"} and "xmr_core/viz.py" in sources  # its drawing code's
    assert sources["xmr_core/chapters/hrem.py"] == digest_bytes((ROOT / "xmr_core/chapters/hrem.py").read_bytes())
    drawn = (tmp_path / "hrem" / "fig7.png").read_bytes()
    assert drawn != (ROOT / "results" / "hrem" / "fig7.png").read_bytes()  # drawn from the table as it is now
    assert Image.open(tmp_path / "hrem" / "fig7.png").size[0] > 300


def test_a_figure_missing_from_the_results_is_drawn_from_its_tables(tmp_path: Path) -> None:
    _copy(tmp_path, "hmrn/table1", "hmrn/table2", "hmrn/table3")
    assert not (tmp_path / "hmrn" / "rounds.png").exists()
    restyle.restyle(tmp_path, ["hmrn/rounds"], ROOT)
    meta = json.loads((tmp_path / "hmrn" / "rounds.json").read_text())
    seeds = int(pd.read_csv(tmp_path / "hmrn" / "table1.csv")["seeds"].max())
    assert meta["kind"] == "figure" and meta["key"] == "hmrn/rounds" and meta["notebook"] == "book/05_hmrn/train.py"
    assert f"mean over {seeds} seed(s)" in meta["caption"] and "cell" not in meta and "columns" not in meta
    assert Image.open(tmp_path / "hmrn" / "rounds.png").size[0] > 1000
    assert "hmrn/rounds.png" in (tmp_path / "README.md").read_text()  # the results index lists it


def test_the_book_says_a_figure_is_drawn_by_older_code_until_it_is_redrawn(tmp_path: Path) -> None:
    (tmp_path / "xmr_core" / "chapters").mkdir(parents=True)
    drawing = tmp_path / "xmr_core" / "chapters" / "demo.py"
    drawing.write_text("def figure(): ...\n")
    meta = {"notebook": "book/01_demo/visualise.py", "git_commit": "0123456789abcdef",
            "xmr_core_sources": {"xmr_core/chapters/demo.py": "old", "xmr_core/metrics.py": "old"}}
    assert older_code_note(meta, Verdict("stale", ("xmr_core/metrics.py",)), tmp_path) is None  # no drawing code
    assert older_code_note(meta, Verdict("fresh"), tmp_path) is None
    stale = Verdict("stale", ("xmr_core/chapters/demo.py", "xmr_core/metrics.py"))
    note = older_code_note(meta, stale, tmp_path)
    assert note is not None and "`xmr_core/chapters/demo.py`" in note and "metrics" not in note
    assert "`0123456789ab`" in note and "xmr book run 01_demo/visualise" in note
    redrawn = {**meta, "restyled": {"git_commit": "fedcba", "sources": {"xmr_core/chapters/demo.py":
                                                                        digest_bytes(drawing.read_bytes())}}}
    assert older_code_note(redrawn, stale, tmp_path) is None  # restyled by today's code: stale, not older-drawn
    drawing.write_text("def figure(): return 1\n")
    assert "`fedcba`" in older_code_note(redrawn, stale, tmp_path)
