"""The paper-smoke book (marker `book`): every chapter's notebooks under the paper profile's code path with the smoke
budget (`--profile paper-smoke`), on small data sets laid out as a user's download (`fixtures.real_layout`), once per
data set each chapter's paper used. The results go to a temporary RESULTS_DIR, one folder per data set."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest
from fixtures.real_layout import write_coco, write_cub, write_vg

from xmr_core.book import runner as book
from xmr_core.book.plan import PAPER_BOOKS
from xmr_core.claims import VERDICTS

ROOT = Path(__file__).resolve().parents[1]
BOOKS = {dataset: list(chapters) for dataset, chapters in PAPER_BOOKS.items()}  # each data set, its chapters in order
WRITERS = {"cub": write_cub, "coco": write_coco, "vg": write_vg}
FOLDERS = {"01_pcme": "pcme", "02_msrm": "msrm", "03_hrem": "hrem", "04_dvse": "dvse", "05_hmrn": "hmrn",
           "06_leaderboard": "leaderboard"}
# One table per chapter and data set that has the paper's numbers beside ours, with a column of ours that the data
# set can fill (its view is there): (table, one of our columns without the data set's name).
PAPER_BESIDE_OURS = {
    ("01_pcme", "cub"): ("table2", "T2 i2t R-P"), ("01_pcme", "coco"): ("table3", "T3 5K i2t PMRP"),
    ("02_msrm", "cub"): ("table2", "T2 i2t R-P"), ("02_msrm", "coco"): ("table3", "T3 5K i2t PMRP"),
    ("03_hrem", "coco"): ("table1", "all i2t R@1"), ("04_dvse", "cub"): ("table3", "CUB i2t R-P"),
    ("04_dvse", "coco"): ("table1", "all i2t R@1"), ("05_hmrn", "vg"): ("table1", "round1/R@1"),
}


@pytest.fixture(scope="module")
def data_roots(tmp_path_factory: pytest.TempPathFactory):
    """A fresh run cache for the module, and each data set written once, on demand."""
    old = os.environ.get("XMR_CACHE")
    os.environ["XMR_CACHE"] = str(tmp_path_factory.mktemp("xmr_cache"))
    roots: dict[str, Path] = {}

    def root(dataset: str) -> Path:
        if dataset not in roots:
            roots[dataset] = WRITERS[dataset](tmp_path_factory.mktemp(dataset))
        return roots[dataset]

    yield root
    if old is None:
        os.environ.pop("XMR_CACHE")
    else:
        os.environ["XMR_CACHE"] = old


def _ours(table: pd.DataFrame, column: str, dataset: str) -> pd.Series:
    return table[next(c for c in table.columns if c.startswith(column) and c.endswith(f"({dataset})"))]


@pytest.mark.book
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("dataset", list(BOOKS))
def test_every_chapter_runs_under_paper_smoke_on_real_layout_data(dataset: str, data_roots, tmp_path: Path) -> None:
    root, out = data_roots(dataset), tmp_path / "results"
    lines: list[str] = []
    summary = book.run_book(BOOKS[dataset], profile="paper-smoke", force=True, root=ROOT, echo=lines.append,
                            params={"DATASET": dataset, "DATA_ROOT": str(root), "RESULTS_DIR": str(out)})
    print(*lines, sep="\n")  # each notebook's outcome line (`pytest -rP` shows them for a passed test too)
    assert summary.ok, "\n".join(lines)
    assert summary.count("passed") == sum(len(book.chapters(ROOT / "book")[c]) for c in BOOKS[dataset])
    check_results(out, dataset, root)


def check_results(out: Path, dataset: str, root: Path) -> None:
    """What the paper-smoke book wrote to `out` for `dataset` (read from `root`): provenance, verdicts, the paper's
    numbers beside ours, and the views the data set lacks said."""
    for chapter in BOOKS[dataset]:
        folder = out / FOLDERS[chapter]
        written = sorted(folder.glob("*.json"))  # results, the claims' bindings to run records included
        assert written, f"{folder}: nothing written"
        for path in written:  # every result names the profile, the data set and where it was read from
            meta = json.loads(path.read_text())
            assert (meta["profile"], meta["dataset"], meta["data_root"]) == ("paper-smoke", dataset, str(root)), path
            if chapter in ("01_pcme", "02_msrm", "04_dvse"):  # the ResNet-50 trunk, without its ImageNet weights here
                assert "no ImageNet weights" in json.dumps(meta["encoders"]), path
        claims = (folder / "claims.md").read_text() if (folder / "claims.md").is_file() else ""
        rows = [line for line in claims.splitlines() if line.startswith("| ") and not line.startswith("| #")]
        for line in rows:
            assert any(f"**{v}**" in line for v in VERDICTS), f"{folder}/claims.md: no verdict in {line}"
        if (chapter, dataset) in PAPER_BESIDE_OURS:
            key, column = PAPER_BESIDE_OURS[chapter, dataset]
            table = pd.read_csv(folder / f"{key}.csv")
            built = table[table["seeds"] > 0]  # the paper's rows this book does not build have no values of ours
            paper, ours = built[f"{column} (paper)"], _ours(built, column, dataset)
            assert paper.notna().any() and ours.notna().all(), f"{folder}/{key}.csv:\n{table}"
    if dataset == "cub":  # CUB has classes, not COCO's concept labels: PMRP is NaN, said in the caption and claims
        table3 = pd.read_csv(out / "pcme" / "table3.csv")
        assert _ours(table3, "T3 5K i2t PMRP", "cub").map(math.isnan).all()
        caption = json.loads((out / "pcme" / "table3.json").read_text())["caption"]
        assert "PMRP not tested: CUB has no plausible relevance" in caption
        assert "No ceiling: this data set's relevance is annotated, not exact" in caption
        judged = pd.read_csv(out / "pcme" / "judgements_train.csv")
        pmrp = judged[judged["key"] == "pmrp-over-mu-only"].iloc[0]
        assert pmrp["verdict"] == "not tested" and "no plausible relevance" in pmrp["reason"]
    if dataset == "coco":  # COCO has concept labels, not classes: Table 2's class R-P is NaN and not tested
        judged = pd.read_csv(out / "pcme" / "judgements_train.csv")
        rp = judged[judged["key"] == "rp-over-mu-only"].iloc[0]
        assert rp["verdict"] == "not tested" and "COCO has no class relevance" in rp["reason"]
