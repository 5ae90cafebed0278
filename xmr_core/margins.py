"""Margins fixed before the data: each is computed from its source, the paper's own numbers or a rule that
`docs/claims.md` states, and records where it came from (`docs/claims.md`, "Margins before the data").

    Cell(table, row, key, protocol="")                 -> one number of `xmr_core/paper_values/<chapter>.csv`
    Margin.from_paper(chapter, basis, above, below)    -> mean(above) - mean(below) of the paper's numbers
    Margin.from_paper(..., total=True)                 -> sum(above) - sum(below) (a sum of recalls, as rSum)
    Margin.rule(name, **inputs)                        -> a rule of `RULES` applied to its inputs
    margin.recompute()                                 -> the value read again from its source
    doc_rules(text)                                    -> {rule: parameter} as docs/claims.md states them

A margin is never typed: editing its value means editing its source (the paper's cells it is the gap of, or the
rule's parameter), which `tests/test_margins.py` recomputes for every declared claim and checks against the rule
table of docs/claims.md.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from xmr_core.reported import PAPER_VALUES_DIR, paper_values


@dataclass(frozen=True)
class Cell:
    """One number the paper reports: the row of `paper_values/<chapter>.csv` with this `table`, `row` and `key`
    (and `protocol`, where the table has several)."""

    table: str
    row: str
    key: str
    protocol: str = ""

    def value(self, chapter: str) -> float:
        """The number, read from the chapter's paper values; an error naming the file and record unless exactly one
        row matches."""
        frame = paper_values(chapter)
        hit = (frame["table"] == self.table) & (frame["row"] == self.row) & (frame["key"] == self.key)
        if self.protocol:
            hit &= frame["protocol"].astype(str) == self.protocol
        if int(hit.sum()) != 1:
            raise ValueError(f"{PAPER_VALUES_DIR / (chapter + '.csv')}: {int(hit.sum())} rows match {self} "
                             "(a margin's cell must name exactly one)")
        return float(frame.loc[hit, "value"].iloc[0])

    def __str__(self) -> str:
        return f"{self.table} '{self.row}' {self.key}" + (f" ({self.protocol})" if self.protocol else "")


# The prior rules a margin may come from where the paper gives no number for it; docs/claims.md states each with its
# parameter in its "Margin rules" table, which `doc_rules` reads back.
#   share-of-scale: "within a narrow range" is within `share` of the metric's full scale (inputs: scale).
RULES: Mapping[str, float] = {"share-of-scale": 0.01}


def _apply(name: str, inputs: Mapping[str, float]) -> float:
    if name not in RULES:
        raise KeyError(f"margin rule {name!r} is not one of {sorted(RULES)} (docs/claims.md, Margin rules)")
    if name == "share-of-scale":
        return RULES[name] * float(inputs["scale"])
    raise AssertionError(name)  # every rule of RULES is applied above


@dataclass(frozen=True)
class Margin:
    """A claim's margin with its source: `value` in the metric's unit, `basis` one line on what it is."""

    value: float
    source: Literal["paper", "rule"]
    basis: str
    chapter: str = ""  # paper: the chapter whose paper values hold the cells
    above: tuple[Cell, ...] = ()  # paper: value = mean(above) - mean(below), or with `total` their sums
    below: tuple[Cell, ...] = ()
    total: bool = False
    name: str = ""  # rule: its name in RULES
    inputs: tuple[tuple[str, float], ...] = field(default=())  # rule: its inputs

    @classmethod
    def from_paper(cls, chapter: str, basis: str, above: Sequence[Cell], below: Sequence[Cell],
                   total: bool = False) -> Margin:
        """The gap mean(above) − mean(below) of the paper's numbers (`paper_values(chapter)`), or with `total`
        sum(above) − sum(below) (the same number of cells each side); it must be > 0."""
        m = cls(0.0, "paper", basis, chapter, tuple(above), tuple(below), total=total)
        return dataclasses.replace(m, value=m.recompute())

    @classmethod
    def rule(cls, name: str, basis: str, **inputs: float) -> Margin:
        """Rule `name` of `RULES` applied to `inputs`."""
        m = cls(0.0, "rule", basis, name=name, inputs=tuple(sorted(inputs.items())))
        return dataclasses.replace(m, value=m.recompute())

    def recompute(self) -> float:
        """The value read again from the source: the paper's cells, or the rule's parameter and inputs."""
        if self.source == "rule":
            value = _apply(self.name, dict(self.inputs))
        else:
            if not self.above or not self.below:
                raise ValueError(f"margin {self.basis!r}: a paper margin needs cells above and below")
            if self.total and len(self.above) != len(self.below):
                raise ValueError(f"margin {self.basis!r}: a total compares as many cells above as below")
            pool = np.sum if self.total else np.mean
            value = float(pool([c.value(self.chapter) for c in self.above])
                          - pool([c.value(self.chapter) for c in self.below]))
        if not value > 0:
            raise ValueError(f"margin {self.basis!r}: its source gives {value:g}, not > 0")
        return round(value, 6)

    def describe(self) -> str:
        """One line: the value, then where it comes from."""
        if self.source == "rule":
            inputs = ", ".join(f"{k} = {v:g}" for k, v in self.inputs)
            return f"{self.value:g} by the rule {self.name} ({inputs}): {self.basis}"
        pool = "sum" if self.total else "mean"
        return (f"{self.value:g} from the {self.chapter.upper()} paper: {self.basis} ({pool} of "
                f"{'; '.join(map(str, self.above))} minus {pool} of {'; '.join(map(str, self.below))})")


_RULE_ROW = re.compile(r"^\|\s*`([a-z0-9-]+)`\s*\|\s*([0-9.]+)\s*\|", re.MULTILINE)


def doc_rules(text: str) -> dict[str, float]:
    """{rule: parameter} from the "Margin rules" table of docs/claims.md (rows "| `name` | value | ... |")."""
    start = text.find("### Margin rules")
    if start < 0:
        raise ValueError("docs/claims.md: no '### Margin rules' section")
    end = text.find("\n#", start + 1)
    return {m[1]: float(m[2]) for m in _RULE_ROW.finditer(text[start:end if end > 0 else None])}
