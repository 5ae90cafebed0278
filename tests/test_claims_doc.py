"""docs/claims.md checked against the committed judgements: every number it quotes for a claim, written
`` `chapter/key` effect [low, high] ``, equals that claim's committed effect and interval (results/<chapter>/
judgements_*.csv, to the two decimals the page shows), and no bracketed interval on the page goes unattributed."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
NUMBER = r"[−+-]?\d+(?:\.\d+)?"
QUOTED = re.compile(rf"`(\w+)/([\w-]+)`\s*({NUMBER})\s*\[\s*({NUMBER}),\s*({NUMBER})\]")
INTERVAL = re.compile(rf"\[\s*{NUMBER},\s*{NUMBER}\]")


def _number(text: str) -> float:
    return float(text.replace("−", "-"))


def quoted_numbers(text: str) -> list[tuple[str, str, float, float, float]]:
    """(chapter, key, effect, low, high) of every claim number `text` quotes; an interval quoted otherwise is an error
    naming it."""
    flat = re.sub(r"\s+", " ", text)
    found = [(m[1], m[2], _number(m[3]), _number(m[4]), _number(m[5])) for m in QUOTED.finditer(flat)]
    attributed = {m.span(0)[1] for m in QUOTED.finditer(flat)}
    loose = [m[0] for m in INTERVAL.finditer(flat) if m.span(0)[1] not in attributed]
    if loose:
        raise ValueError(f"docs/claims.md: intervals not attributed to a `chapter/key`: {loose}")
    return found


def committed(chapter: str, key: str, results: Path = ROOT / "results") -> pd.Series:
    """The committed judgement of `key` among `results/<chapter>/judgements_*.csv` (exactly one)."""
    rows = [r for f in sorted((results / chapter).glob("judgements_*.csv"))
            for _, r in pd.read_csv(f).iterrows() if r["key"] == key]
    if len(rows) != 1:
        raise KeyError(f"{results / chapter}: {len(rows)} committed judgements of {key!r}")
    return rows[0]


def test_every_number_the_page_quotes_is_the_committed_judgements() -> None:
    found = quoted_numbers((ROOT / "docs" / "claims.md").read_text())
    assert found  # the page quotes some: each is checked
    for chapter, key, effect, low, high in found:
        row = committed(chapter, key)
        assert [round(row[c], 2) for c in ("effect", "low", "high")] == pytest.approx([effect, low, high], abs=1e-9), \
            f"docs/claims.md quotes {chapter}/{key} {effect} [{low}, {high}]; committed {row['effect']:.2f} " \
            f"[{row['low']:.2f}, {row['high']:.2f}]"


def test_a_stale_or_unattributed_number_fails(tmp_path: Path) -> None:
    (tmp_path / "pcme").mkdir()
    pd.DataFrame({"key": ["a-claim"], "effect": [-7.4214], "low": [-8.3717], "high": [-6.333]}).to_csv(
        tmp_path / "pcme" / "judgements_train.csv", index=False)
    [(chapter, key, effect, low, high)] = quoted_numbers("held: `pcme/a-claim` −7.42 [−8.37,\n −6.33] (5 seeds)")
    row = committed(chapter, key, tmp_path)
    assert [round(row[c], 2) for c in ("effect", "low", "high")] == [effect, low, high]
    [(*_, stale, _, _)] = quoted_numbers("`pcme/a-claim` −0.57 [−1.02, −0.03]")  # the page's old number
    assert stale != round(row["effect"], 2)
    with pytest.raises(ValueError, match="not attributed"):
        quoted_numbers("every PVSE below VSE0: −0.57 [−1.02, −0.03]")
    with pytest.raises(KeyError, match="0 committed judgements of 'another'"):
        committed("pcme", "another", tmp_path)
