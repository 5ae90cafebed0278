"""The four verdicts a claim can reach, and the two rules that combine yes/no checks into one.

Its own module so that `xmr_core.claims` (the one judge) and `xmr_core.results` (which still renders the
chapters' claim rows) both import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Verdict = Literal["held", "did not hold", "within noise", "not tested"]
VERDICTS: tuple[Verdict, ...] = ("held", "did not hold", "within noise", "not tested")
UNIVERSAL_ORDER: tuple[Verdict, ...] = ("did not hold", "not tested", "within noise", "held")  # first one present wins


def verdict(held: bool | None) -> Verdict:
    """The verdict of a yes/no check; None = not tested on this run."""
    return "not tested" if held is None else ("held" if held else "did not hold")


def universal_verdict(verdicts: Sequence[Verdict]) -> Verdict:
    """The verdict of "X holds for every model" from the verdict per model: one counterexample refutes it
    ("did not hold"); else a model not tested leaves it "not tested"; else any within noise makes it "within
    noise"; else "held"."""
    return min(verdicts, key=UNIVERSAL_ORDER.index, default=verdict(None))
