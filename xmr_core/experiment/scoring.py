"""Scoring a trained model under the zero-shot data protocol (`protocols.ChapterData`): every value of PCME's
Tables 2 and 3 (`scored_row`), which the MSRM chapter reports too, and a run's collapse check (`run_collapse`)."""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor

from xmr_core.claims import instance_collapse
from xmr_core.data.corpus import Split
from xmr_core.data.text import Vocabulary
from xmr_core.evaluate import (
    Reranker,
    coco1k_missing,
    direction_scores,
    embed_split,
    evaluate_model,
    evaluate_scores,
)
from xmr_core.experiment.protocols import ChapterData
from xmr_core.methods.base import RetrievalModel

# Our Table 2 / Table 3 columns -> the paper's keys ("<protocol>|<key>"; `summary.with_paper`).
TABLE2_COLUMNS: dict[str, str] = {f"T2 {d} {m}": f"class/{d}/{m}" for d in ("i2t", "t2i") for m in ("R-P", "R@1")}
TABLE3_COLUMNS: dict[str, str] = {
    f"T3 {proto} {d} {m}": f"{proto}|{view}/{d}/{m}"
    for proto in ("1K", "5K") for d in ("i2t", "t2i") for view, m in (("plausible", "PMRP"), ("instance", "R@1"))
}
TABLE3_PROTOCOLS = {"1K": "coco1k", "5K": "full"}  # our name -> `evaluate_scores` protocol


def tables_row(model: RetrievalModel, data: ChapterData, device: torch.device | str,
               rerank: Reranker | None = None) -> dict[str, float]:
    """Every Table 2 / Table 3 value of one trained model with its own test-time similarity (per direction,
    optionally re-ranked): T2 = class R-P and R@1 on the unseen classes; T3 = PMRP and instance R@1 on the
    whole test split under the 1K (five folds) and 5K (all) protocols; plus `rsum 5K` (instance rSum, 5K)."""
    return scored_row(model, data, device, rerank)[0]



def scored_row(model: RetrievalModel, data: ChapterData, device: torch.device | str,
               rerank: Reranker | None = None) -> tuple[dict[str, float], Tensor]:
    """(`tables_row`, the image-to-text scores (N, M) of the whole test split it was computed from). A value whose
    view the data lacks (class relevance off CUB and scenes, plausible matches off COCO and scenes) is NaN
    (`chapters.views` says why)."""
    model.to(device).eval()
    nan = {f"class/{d}/{m}": math.nan for d in ("i2t", "t2i") for m in ("R-P", "R@1")}
    unseen = evaluate_model(model, data.test_unseen, data.vocab, device=device, views=["class"], rerank=rerank) \
        if "class" in data.test_unseen.views() else nan
    img, cap = embed_split(model, data.test, data.vocab, device=device)
    i2t, t2i = direction_scores(model, img, cap, rerank=rerank)
    # Table 3 needs no per-level breakdown (a small fold may lack a level): the split without caption levels
    whole = dataclasses.replace(data.test, caption_level=None)
    views = [v for v in ("instance", "plausible") if v in whole.views()]
    protocols = {proto: evaluate_scores(whole, i2t, views=views, protocol=protocol, scores_t2i=t2i)
                 if protocol != "coco1k" or not coco1k_missing(whole) else {}  # no five folds: NaN
                 for proto, protocol in TABLE3_PROTOCOLS.items()}
    row = {"rsum 5K": protocols["5K"]["rsum"]}
    for direction in ("i2t", "t2i"):
        row[f"T2 {direction} R-P"] = unseen[f"class/{direction}/R-P"]
        row[f"T2 {direction} R@1"] = unseen[f"class/{direction}/R@1"]
        for proto, values in protocols.items():
            row[f"T3 {proto} {direction} PMRP"] = values.get(f"plausible/{direction}/PMRP", math.nan)
            row[f"T3 {proto} {direction} R@1"] = values.get(f"instance/{direction}/R@1", math.nan)
    return row, i2t



def run_collapse(model: RetrievalModel, split: Split, vocab: Vocabulary, device: torch.device | str) -> str:
    """`claims.detect_collapse` of `model`'s image-to-text scores on `split` under instance relevance."""
    img, cap = embed_split(model, split, vocab, device=device)
    i2t, _ = direction_scores(model, img, cap)
    return instance_collapse(i2t, split)
