"""The verdicts a claim can reach, and the two rules that combine yes/no checks into one.

Its own module so that `xmr_core.claims` (the one judge) and `xmr_core.results` (which still renders the
chapters' claim rows) both import it without importing each other.

    held          the interval excludes the claim's bound on its side
    did not hold  the interval excludes it on the other side
    negligible    the interval lies inside ± the claim's smallest effect of interest: whatever the effect is,
                  it is too small to matter
    inconclusive  the interval is too wide to say either
    not tested    with the reason (the run lacks a model, a model did not converge or collapsed, ...)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

Verdict = Literal["held", "did not hold", "negligible", "inconclusive", "not tested"]
VERDICTS: tuple[Verdict, ...] = ("held", "did not hold", "negligible", "inconclusive", "not tested")
DECIDED: tuple[Verdict, ...] = ("held", "did not hold", "negligible")  # what a multiple-comparison adjustment can undo


def verdict(held: bool | None) -> Verdict:
    """The verdict of a yes/no check; None = not tested on this run."""
    return "not tested" if held is None else ("held" if held else "did not hold")


def universal_verdict(verdicts: Sequence[Verdict]) -> Verdict:
    """The verdict of "X holds for every part" from the verdict per part (an intersection-union rule): one
    counterexample refutes it ("did not hold"); else a part not tested leaves it "not tested"; else "held" when
    every part held, "negligible" when every part is negligible, and "inconclusive" otherwise (no parts: not
    tested)."""
    found = set(verdicts)
    if not found:
        return "not tested"
    for first in ("did not hold", "not tested"):
        if first in found:
            return first  # type: ignore[return-value]
    if len(found) == 1 and found & {"held", "negligible"}:
        return found.pop()
    return "inconclusive"
