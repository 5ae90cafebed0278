"""Claims judged from run records: each compared model's evidence is its records' per-query values of the claim's
metric, one row per seed, aligned by query (`claims.Evidence`), and a claim bound to the records it reads
(`ClaimRecords`) is what `xmr claims recompute` judges again from committed files alone.

    record_evidence(records, metric)   -> Evidence: (S, Q) values, strata, seeds, converged, collapse, diverged
    Side(records, scoring, metric)     one compared model: its records' names (one per seed), their scoring and,
                                       where not the claim's, its metric (a universal claim over several metrics)
    ClaimRecords(spec, metric, sides, dataset, profile, chapter, part)   a claim and the records that judge it
    ClaimRecords.to_json() / from_json(obj)
    judge_records(binding, read)       -> Judgement, `read(name)` giving each named record
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from xmr_core.claims import ClaimSpec, Evidence, Judgement, judge
from xmr_core.query_values import QueryMetric, query_values
from xmr_core.records import RunRecord


def record_evidence(records: Sequence[RunRecord], metric: QueryMetric) -> Evidence:
    """One model's evidence on `metric` from its runs' records (one per seed, all scored on the same test split): the
    (S, Q) per-query values in the records' order and their strata (`query_values`); converged when every run is,
    collapsed when any run's scoring is (its reasons joined), the seeds whose training diverged. `split` names the
    test split and the queries, so two models pair by query only on the same queries."""
    if not records:
        raise ValueError("record_evidence: no records")
    splits = {r.evaluation.split.fingerprint for r in records}
    if len(splits) > 1:
        raise ValueError(f"record_evidence: the records {[r.name for r in records]} were scored on different test "
                         f"splits ({sorted(s[:16] for s in splits)})")
    rows, strata = [], None
    for r in records:
        try:
            values, strata = query_values(r.evaluation, metric)
        except (KeyError, ValueError) as err:
            raise type(err)(f"record {r.name}: {err}") from None
        rows.append(values)
    collapse = dict.fromkeys(c for r in records if (c := r.evaluation.scorings[metric.scoring].collapse))
    return Evidence(tuple(r.seed for r in records), np.stack(rows),
                    split=f"test split {next(iter(splits))[:16]}, {metric.queries}",
                    converged=all(r.converged for r in records), collapse="; ".join(collapse), strata=strata,
                    diverged=tuple(r.seed for r in records if r.fit.get("stopped") == "diverged"))


@dataclass(frozen=True)
class Side:
    """One compared model of a claim: the names of its records (`RunRecord.name`, one per seed), the scoring it
    is read in ("" : the claim metric's own) and the metric it is read on (None: the claim's; a universal claim over
    several metrics has one side per model and metric, "<model> · <part>", each on its part's metric)."""

    records: tuple[str, ...]
    scoring: str = ""
    metric: QueryMetric | None = None


@dataclass(frozen=True)
class ClaimRecords:
    """A claim and the records that judge it: its spec, the metric every side is read on (`QueryMetric`), each
    compared model's `Side`, and where it was judged (data set and profile, the chapter and the notebook whose
    judgements table, `judgements_<part>.csv`, holds the committed verdict)."""

    spec: ClaimSpec
    metric: QueryMetric
    sides: Mapping[str, Side]
    dataset: str
    profile: str
    chapter: str
    part: str

    def __post_init__(self) -> None:
        missing = [m for m in self.spec.compared if m not in self.sides]
        if missing:
            raise ValueError(f"claim {self.spec.key!r}: no records named for {missing}")

    def to_json(self) -> dict[str, Any]:
        """A JSON object (the spec without `margin_from`: its margin's value stands)."""
        spec = {f.name: getattr(self.spec, f.name) for f in dataclasses.fields(ClaimSpec) if f.name != "margin_from"}
        return {"spec": spec, "metric": dataclasses.asdict(self.metric),
                "sides": {m: {k: v for k, v in dataclasses.asdict(s).items() if k != "metric" or v is not None}
                          for m, s in self.sides.items()},
                "dataset": self.dataset, "profile": self.profile, "chapter": self.chapter, "part": self.part}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ClaimRecords:
        spec = dict(obj["spec"])
        spec["pairs"] = tuple(tuple(p) for p in spec.get("pairs", ()))
        for name in ("models", "datasets", "profiles"):
            spec[name] = tuple(spec.get(name, ()))
        return cls(ClaimSpec(**spec), _metric(obj["metric"]),
                   {m: Side(tuple(s["records"]), s.get("scoring", ""), _metric(s["metric"]) if s.get("metric") else None)
                    for m, s in obj["sides"].items()},
                   obj["dataset"], obj["profile"], obj["chapter"], obj["part"])


def _metric(obj: Mapping[str, Any]) -> QueryMetric:
    return QueryMetric(**{**obj, "directions": tuple(obj["directions"])})


def judge_records(binding: ClaimRecords, read: Callable[[str], RunRecord]) -> Judgement:
    """`claims.judge` of the binding's claim on evidence from its records (`record_evidence`, each side on its
    metric and in its scoring), `read(name)` giving the record of each name."""
    evidence = {}
    for model, side in binding.sides.items():
        own = side.metric or binding.metric
        metric = dataclasses.replace(own, scoring=side.scoring or own.scoring)
        evidence[model] = record_evidence([read(name) for name in side.records], metric)
    return judge(binding.spec, evidence, dataset=binding.dataset, profile=binding.profile)
