"""Margins before the data (`xmr_core.margins`): every declared margin recomputed from its source, the rules' parameters
as docs/claims.md states them, and a margin edited without its source refused."""

from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path

import pytest

from xmr_core.claims import ClaimSpec
from xmr_core.margins import RULES, Cell, Margin, doc_rules

CHAPTERS = ("pcme", "msrm", "hrem", "dvse", "hmrn", "leaderboard")
DOC = Path(__file__).resolve().parents[1] / "docs" / "claims.md"


def _has_margin(spec: ClaimSpec) -> bool:
    return spec.kind in ("non-inferiority", "equivalence") or (
        spec.kind == "universal" and spec.each in ("non-inferiority", "equivalence"))


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_margin_is_recomputed_from_its_source(chapter: str) -> None:
    specs = importlib.import_module(f"xmr_core.chapters.{chapter}").CLAIMS
    for s in specs:
        if not _has_margin(s):
            assert s.margin_from is None and s.margin == 0.0, s.key
            continue
        assert s.margin_from is not None, f"{s.key}: a margin without its source"
        # read again from the paper's values (or the rule's parameter), never from the stored value
        fresh = dataclasses.replace(s.margin_from, value=float("nan")).recompute()
        assert s.margin == fresh == s.margin_from.value, s.key
        assert s.margin_from.basis.strip() and s.margin_from.describe().startswith(f"{s.margin:g} "), s.key


def test_the_rules_parameters_are_those_docs_claims_md_states() -> None:
    stated = doc_rules(DOC.read_text())
    assert stated == dict(RULES)
    with pytest.raises(ValueError, match="no '### Margin rules' section"):
        doc_rules("# Claims\n\nno rules here\n")


def test_a_margin_edited_without_its_source_is_refused_or_caught() -> None:
    gain = Margin.from_paper("pcme", "PCME over mu only, Table 2 R-P",
                             above=(Cell("table2", "PCME", "class/i2t/R-P"), Cell("table2", "PCME", "class/t2i/R-P")),
                             below=(Cell("table2", "PCME mu only", "class/i2t/R-P"),
                                    Cell("table2", "PCME mu only", "class/t2i/R-P")))
    # by hand from the paper's Table 2: PCME 26.3 / 26.8, mu only 24.7 / 25.6: 26.55 - 25.15
    assert gain.value == pytest.approx(1.4)
    spec = ClaimSpec("k", "t", "s", "non-inferiority", "m", ("A", "B"), margin_from=gain)
    assert spec.margin == gain.value
    with pytest.raises(ValueError, match="differs from its source"):
        ClaimSpec("k", "t", "s", "non-inferiority", "m", ("A", "B"), margin=1.0, margin_from=gain)
    edited = dataclasses.replace(gain, value=1.0)  # the value typed over, the cells unchanged
    assert edited.recompute() != edited.value
    # a total of four recalls (HREM Table 3b): HREM 83.3 + 96.0 + 63.5 + 87.1 against w/o S 81.7 + 95.3 + 61.9 + 86.5
    cells = [f"instance/{d}/R@{k}" for d in ("i2t", "t2i") for k in (1, 5)]
    total = Margin.from_paper("hrem", "w/o S", [Cell("table3b", "HREM", c) for c in cells],
                              [Cell("table3b", "w/o relevance matrix S", c) for c in cells], total=True)
    assert total.value == pytest.approx(329.9 - 325.4)


def test_a_rule_margin_and_bad_sources() -> None:
    narrow = Margin.rule("share-of-scale", "a narrow range", scale=300.0)
    assert narrow.value == pytest.approx(RULES["share-of-scale"] * 300.0) and narrow.source == "rule"
    with pytest.raises(KeyError, match="not one of"):
        Margin.rule("half-of-noise", "no such rule", scale=1.0)
    with pytest.raises(ValueError, match="0 rows match"):
        Cell("table2", "no such row", "class/i2t/R-P").value("pcme")
    with pytest.raises(ValueError, match="not > 0"):  # a margin from a gap the wrong way round
        Margin.from_paper("pcme", "mu only over PCME", above=(Cell("table2", "PCME mu only", "class/i2t/R-P"),),
                          below=(Cell("table2", "PCME", "class/i2t/R-P"),))
