"""`xmr claims recompute CHAPTER|CLAIM`, the auditor's path: every claim bound to run records
(`results/<chapter>/claim_records_<part>.json`, a list of `record_evidence.ClaimRecords`) judged again from the
committed records alone (`runs/records/<profile>/`, `runs.record`) and shown beside its committed judgement
(`results/<chapter>/judgements_<part>.csv`). No model, data set or run cache is read.

    write_bindings(bindings, run)         -> the claim_records files, one per chapter and notebook, with provenance
    read_bindings(results, target)        -> the bindings of a chapter (pcme, 01_pcme) or of one claim key
    recompute(target, results, root)      -> one `Recomputed` per claim
    print_recomputed(rows)                -> True when every recomputed judgement is the committed one
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from xmr_core.book.results import write_data
from xmr_core.claims import Judgement, signed
from xmr_core.config import RunConfig
from xmr_core.record_evidence import ClaimRecords, judge_records
from xmr_core.records import SplitQueries, read_record
from xmr_core.runs.record import records_root

BINDINGS = "claim_records_{part}.json"  # a JSON result (`book.results.write_data`): provenance, the bindings in "data"
TOLERANCE = 1e-9  # the effect and interval recomputed agree with the committed ones to this (relative or absolute)


def write_bindings(bindings: Sequence[ClaimRecords], run: RunConfig) -> list[Path]:
    """`<results>/<chapter>/claim_records_<part>.json` for each chapter and part of `bindings`, a result with the
    run's provenance (`book.results.write_data`): `xmr results check` says when it is stale, `xmr results diff`
    when a rerun binds other records."""
    groups: dict[tuple[str, str], list[ClaimRecords]] = {}
    for b in bindings:
        groups.setdefault((b.chapter, b.part), []).append(b)
    return [write_data([b.to_json() for b in group], f"{chapter}/{BINDINGS.format(part=part).removesuffix('.json')}",
                       run=run, caption=f"The claims of `{chapter}` ({part}) bound to the run records that judge them "
                                        "(`xmr claims recompute`).")
            for (chapter, part), group in groups.items()]


def read_bindings(results: Path, target: str) -> list[ClaimRecords]:
    """The bindings of chapter `target` (its results folder, with or without the notebook number: pcme, 01_pcme) or
    of the claim whose key is `target`, from every `claim_records_*.json` under `results`."""
    chapter = re.sub(r"^\d+_", "", target)
    out = []
    for path in sorted(results.glob(f"*/{BINDINGS.format(part='*')}")):
        try:
            found = [ClaimRecords.from_json(obj) for obj in json.loads(path.read_text())["data"]]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{path}: not a list of claims bound to records ({err})") from None
        out += [b for b in found if b.chapter == chapter or b.spec.key == target]
    return out


@dataclass(frozen=True)
class Recomputed:
    """One claim judged again from records, and its committed judgement's row (None: not in the table)."""

    binding: ClaimRecords
    judgement: Judgement
    committed: dict[str, object] | None

    @property
    def same(self) -> bool:
        """The committed verdict, effect and interval (to `TOLERANCE`)."""
        if self.committed is None or self.committed["verdict"] != self.judgement.verdict:
            return False
        return all(_close(float(self.committed[c]), getattr(self.judgement, a))  # type: ignore[arg-type]
                   for c, a in (("effect", "effect"), ("low", "low"), ("high", "high")))


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE)


def _committed(results: Path, b: ClaimRecords) -> dict[str, object] | None:
    path = results / b.chapter / f"judgements_{b.part}.csv"
    if not path.is_file():
        return None
    rows = pd.read_csv(path, keep_default_na=False, na_values=[""])
    match = rows[rows["key"] == b.spec.key]
    return None if match.empty else match.iloc[0].to_dict()


def recompute(target: str, results: Path, root: Path) -> list[Recomputed]:
    """Every claim of `target` (`read_bindings`) judged from the records of its profile under project `root`
    (`runs.record.records_root`), with its committed row of `<results>/<chapter>/judgements_<part>.csv`."""
    splits: dict[Path, SplitQueries] = {}
    out = []
    for b in read_bindings(results, target):
        folder = records_root(b.profile, root)
        judgement = judge_records(b, lambda name, folder=folder: read_record(folder / f"{name}.npz", splits))
        out.append(Recomputed(b, judgement, _committed(results, b)))
    return out


def _shown(verdict: object, effect: float, low: float, high: float) -> str:
    if not math.isfinite(effect):
        return str(verdict)
    e, lo, hi = signed(effect, low, high)
    return f"{verdict}, {e} [{lo}, {hi}]"


def print_recomputed(rows: Sequence[Recomputed]) -> bool:
    """One line per claim: the committed judgement, the recomputed one, and whether they are the same."""
    for r in rows:
        b, j, c = r.binding, r.judgement, r.committed
        committed = "not in the committed table" if c is None else \
            _shown(c["verdict"], float(c["effect"]), float(c["low"]), float(c["high"]))  # type: ignore[arg-type]
        print(f"{b.chapter}/{b.part} {b.spec.key}: committed {committed}; recomputed from records "
              f"{_shown(j.verdict, j.effect, j.low, j.high)} ({j.n_seeds} seeds, {j.n_queries} queries): "
              f"{'same' if r.same else 'DIFFERENT'}")
    n_same = sum(r.same for r in rows)
    print(f"{n_same} of {len(rows)} claims recomputed from records as committed")
    return n_same == len(rows)
