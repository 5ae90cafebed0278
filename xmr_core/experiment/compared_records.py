"""The run records of the zero-shot protocol's compared models (`protocols.ChapterData`; docs/records.md): each
trained model scored once on the whole test split (PCME's Table 3) and on the unseen classes (Table 2), and the
tables' values read back from those records. The PCME chapter records its models so, and the MSRM chapter, which
reports the same tables of the same runs (and adds MSRM), records them alike: the same run gives the same records.

    RecordedRun(test, unseen)                                         one model's two records
    unseen_scorings(model)                                            -> the scorings of its unseen-class record
    record_run(model, result, seed, data, run, facts, unseen)          -> RecordedRun
    records_row(recorded)                                             -> its Table 2 / 3 values
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from xmr_core.config import RunConfig
from xmr_core.experiment.protocols import ChapterData
from xmr_core.experiment.run_records import recorded
from xmr_core.experiment.scoring import TABLE3_PROTOCOLS
from xmr_core.methods.base import RetrievalModel
from xmr_core.methods.pcme import PCME, TEST_TIME_SIMILARITIES
from xmr_core.query_values import scoring_metrics
from xmr_core.records import RunRecord
from xmr_core.run_evaluation import Scoring
from xmr_core.runs.train import FitResult


class RecordedRun(NamedTuple):
    """One trained model's records (`record_run`): on the whole test split (Table 3) and on the unseen classes
    (Table 2; the same record where that split is the whole test split; None where it has no class relevance)."""

    test: RunRecord
    unseen: RunRecord | None


TABLE3_FOLD_VIEWS = ("instance", "plausible")  # Table 3's 1K columns: COCO's five folds in these views


def unseen_scorings(model: RetrievalModel) -> dict[str, Scoring]:
    """The scorings of a model's record on the unseen classes (class relevance): its own test-time similarity
    ("default"); a PCME with sigma also every other test-time similarity (PCME's Table 1), named by its key."""
    out = {"default": Scoring(views=("class",))}
    if isinstance(model, PCME) and not model.config.mu_only:
        out |= {m: Scoring(options={"method": m}, views=("class",))
                for m in TEST_TIME_SIMILARITIES if m != model.config.test_similarity}
    return out


def record_run(model: RetrievalModel, result: FitResult, seed: int, data: ChapterData, run: RunConfig,
               facts: Mapping[str, Any], unseen: Mapping[str, Scoring]) -> RecordedRun:
    """One trained model's records (`run_records.recorded`, `facts` as its tuning facts; a record already there is
    read back): on the whole test split with its own test-time similarity in every view (the COCO 1K protocol in
    Table 3's views), and on the unseen classes with the scorings `unseen` (where that split has class relevance;
    where it is the whole test split, one record: `unseen`'s other scorings in the test record)."""
    folds = [v for v in TABLE3_FOLD_VIEWS if v in data.test.views()]
    same, has_class = data.test_unseen is data.test, "class" in data.test_unseen.views()
    # one split (CUB): the default scoring covers every view, the other similarities add the class view
    others = {m: s for m, s in unseen.items() if m != "default"} if same and has_class else {}
    test = recorded(model, result, seed, data.test, data.vocab, {"default": Scoring()} | others, run,
                    fold_views=folds, tuning=facts)
    return RecordedRun(test, None if not has_class else test if same else recorded(
        model, result, seed, data.test_unseen, data.vocab, unseen, run, tuning=facts))


def records_row(rec: RecordedRun) -> dict[str, float]:
    """Every Table 2 / Table 3 value of one model from its records, as `scoring.tables_row` computes them from the
    model: T2 = class R-P and R@1 on the unseen classes; T3 = PMRP and instance R@1 on the whole test split under
    the 1K (five folds) and 5K (all) protocols; `rsum 5K`; NaN where the data lacks the view or the folds."""
    test = rec.test.evaluation
    protocols = {proto: scoring_metrics(test, "default", protocol, by_level=False) if protocol in test.split.folds
                 else {} for proto, protocol in TABLE3_PROTOCOLS.items()}
    unseen = {} if rec.unseen is None else scoring_metrics(rec.unseen.evaluation, "default", "full", by_level=False)
    row = {"rsum 5K": protocols["5K"]["rsum"]}
    for direction in ("i2t", "t2i"):
        row[f"T2 {direction} R-P"] = unseen.get(f"class/{direction}/R-P", math.nan)
        row[f"T2 {direction} R@1"] = unseen.get(f"class/{direction}/R@1", math.nan)
        for proto, values in protocols.items():
            row[f"T3 {proto} {direction} PMRP"] = values.get(f"plausible/{direction}/PMRP", math.nan)
            row[f"T3 {proto} {direction} R@1"] = values.get(f"instance/{direction}/R@1", math.nan)
    return row
