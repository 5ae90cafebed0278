"""The one evaluation of a finished run: `evaluate_run(model, split, vocab)` scores the test split once and keeps,
query by query, what every metric of `xmr_core.evaluate` is the mean of (`records.Evaluation`, what a run record
stores).

    Scoring(options, rerank, rerank_name, views, fusion)   one way to score the run (default: its own score)
    evaluate_run(model, split, vocab, scorings=..., rounds=...) -> records.Evaluation

Every view the split defines (instance, class, exact, plausible at each ζ), both directions, every protocol that
applies ("full", and "coco1k" when the images fall into five equal folds, `evaluate.coco1k_missing`: by default in
the instance view), for each named
scoring (e.g. DVSE's Fast Re-ranking as a second scoring of the same embeddings, PCME's test-time similarities),
and with `rounds` the multi-query rounds of a split with region queries. The split is embedded once. Its means over
queries are `evaluate.evaluate_model`'s and `evaluate.evaluate_multi_query`'s metrics (`query_values`); by default
(`FOLD_VIEWS`, `AP_VIEWS`, `RANK_VIEWS`, `RANK_TOP`) those the book's tables and claims read: no mAP@R outside the
instance view, no R@K of the plausible view, no medR or meanR (HMRN's round ranks are kept exact).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from xmr_core import metrics
from xmr_core.claims import instance_collapse
from xmr_core.data.corpus import Split, split_fingerprint
from xmr_core.evaluate import (
    DIRECTIONS,
    Fusion,
    Reranker,
    Short,
    _relevances,  # the one construction of a block's relevances, shared with `evaluate_scores`
    coco1k_missing,
    direction_scores,
    embed_split,
    multi_query_scores,
    rerank_directions,
)
from xmr_core.records import Block, Evaluation, Fold, QueryStats, Scored, SplitQueries


@dataclass(frozen=True)
class Scoring:
    """One scoring of a run: the model's test-time score with `options` (e.g. PCME's `method`), re-ranked by
    `rerank` (named `rerank_name`) or not, in `views` (None: every view of the split; (): none, rounds only), and
    for a single-query model's multi-query rounds the `fusion` of its queries (`evaluate.multi_query_scores`)."""

    options: Mapping[str, Any] = field(default_factory=dict)
    rerank: Reranker | None = None
    rerank_name: str = ""
    views: tuple[str, ...] | None = None
    fusion: Fusion = "scores"

    def __post_init__(self) -> None:
        if (self.rerank is None) != (not self.rerank_name):
            raise ValueError("Scoring: a re-ranker needs its name (rerank_name), and a name its re-ranker")


DEFAULT_SCORINGS: dict[str, Scoring] = {"default": Scoring()}
# What a record keeps by default (docs/records.md, "Size"): the COCO 1K protocol in the instance view (COCO's own
# protocol, the tables' 1K columns) and AP@R in the instance view, where it costs about a byte a query; elsewhere
# AP@R is about four incompressible bytes a query, the largest field, and no table or claim reads mAP@R.
FOLD_VIEWS: tuple[str, ...] = ("instance",)
AP_VIEWS: tuple[str, ...] = ("instance",)
# Best ranks (R@K, medR, meanR) in every view but the plausible one: the plausible view's R@K at each ζ is read by no
# table or claim (its R-P per ζ and PMRP need only the hit counts), and its three ζ's ranks were 40% of a record.
RANK_VIEWS: tuple[str, ...] = ("instance", "class", "exact")
# Best ranks up to R@10's (every rank metric a table or claim reads: R@1, 5, 10 and rSum; medR and meanR none, HMRN's
# round ranks aside), a rank beyond kept as RANK_TOP + 1: an exact rank is ~11 bits a query, a capped one ~2-3.
RANK_TOP: int | None = max(metrics.RSUM_KS)


def split_folds(split: Split) -> dict[str, tuple[Fold, ...]]:
    """The protocols that apply to `split` and their blocks: "full", and "coco1k" (five folds by image,
    `metrics.image_folds`) unless `evaluate.coco1k_missing`."""
    out: dict[str, tuple[Fold, ...]] = {"full": ((0, split.n_images, 0, split.n_captions),)}
    if not coco1k_missing(split):
        folds = metrics.image_folds(split.caption_image, split.n_images)
        out["coco1k"] = tuple((i.start, i.stop, c.start, c.stop) for i, c in folds)
    return out


def _stats(st: metrics.RankingStats) -> QueryStats:
    """A block's per-query values from `metrics.ranking_stats` (hit counts recovered exactly from the fractions)."""
    n_pos = st.n_positives.long()
    return QueryStats(best_rank=st.best_rank.long().numpy(),
                      rp_hits=torch.round(st.r_precision * n_pos).long().numpy(),
                      ap_at_r=st.ap_at_r.numpy().astype(np.float32),
                      precision_hits={k: torch.round(p * k).long().numpy() for k, p in st.precision_at.items()})


def _concat(parts: Sequence[QueryStats]) -> QueryStats:  # every part with AP@R (as `_stats` makes them)
    return QueryStats(np.concatenate([p.best_rank for p in parts]), np.concatenate([p.rp_hits for p in parts]),
                      np.concatenate([p.ap_at_r for p in parts]),
                      {k: np.concatenate([p.precision_hits[k] for p in parts]) for k in parts[0].precision_hits})


def _pairwise(split: Split, i2t: Tensor, t2i: Tensor, views: Sequence[str], folds: Mapping[str, tuple[Fold, ...]],
              zetas: Sequence[int], precision_ks: Sequence[int], n_positives: dict[Block, np.ndarray],
              fold_views: Sequence[str] | None, ap_views: Sequence[str] | None,
              rank_views: Sequence[str] | None, rank_top: int | None) -> dict[Block, QueryStats]:
    """Every block (protocol, view, direction) of scores `i2t`, `t2i` (N, M): `metrics.ranking_stats` per fold under
    the view's relevance (`evaluate._relevances`), the folds' queries concatenated in split order; protocols other
    than "full" in `fold_views` only, AP@R kept in `ap_views` only, best ranks in `rank_views` only (None: every
    view), above `rank_top` as rank_top + 1 (None: exact). Each block's numbers of positives are added to (or
    checked against) `n_positives`."""
    relevance_t2i = {v: None if v == "plausible" else split.relevance(v, "t2i") for v in views}
    parts: dict[Block, list[tuple[QueryStats, np.ndarray]]] = {}
    for protocol, blocks in folds.items():
        chosen = [v for v in views if protocol == "full" or fold_views is None or v in fold_views]
        for i0, i1, c0, c1 in blocks if chosen else ():
            images, captions = slice(i0, i1), slice(c0, c1)
            rels = {v: _relevances(split, v, relevance_t2i[v], zetas, images, captions) for v in chosen}
            for direction in DIRECTIONS:
                scores = i2t[images, captions] if direction == "i2t" else t2i[images, captions].T
                named = {name: rel for v in chosen for name, rel in rels[v][direction].items()}
                for name, st in metrics.ranking_stats(scores, named, precision_ks=precision_ks).items():
                    parts.setdefault((protocol, name, direction), []).append((_stats(st), st.n_positives.numpy()))
    out = {}
    for block, got in parts.items():
        stats, view = _concat([s for s, _ in got]), block[1].partition("/")[0]
        out[block] = dataclasses.replace(
            stats, ap_at_r=stats.ap_at_r if ap_views is None or view in ap_views else None,
            best_rank=None if rank_views is not None and view not in rank_views else
            stats.best_rank if rank_top is None else np.minimum(stats.best_rank, rank_top + 1))
        n_pos = np.concatenate([n for _, n in got]).astype(np.int64)
        if not np.array_equal(n_positives.setdefault(block, n_pos), n_pos):
            raise ValueError(f"block {block}: another scoring found other numbers of positives")
    return out


def _round_ranks(scores: Tensor) -> np.ndarray:
    """(T, Q) the pessimistic 1-based rank of set q's target, image q, among the gallery after each round, from
    `multi_query_scores`' (T, Q, G) scores (as `metrics.multi_round` ranks it)."""
    target = scores.diagonal(dim1=1, dim2=2)[..., None]  # (T, Q, 1) each set's score of its own image
    if not bool(torch.isfinite(scores).all()):
        raise ValueError("multi-query scores contain a NaN or inf")
    return (scores >= target).sum(-1).numpy()


@torch.no_grad()
def evaluate_run(
    model: Any,
    split: Split,
    vocab: Any = None,
    *,
    scorings: Mapping[str, Scoring] = DEFAULT_SCORINGS,
    rounds: int | None = None,
    short: Short = "error",
    zetas: Sequence[int] = metrics.DEFAULT_ZETAS,
    precision_ks: Sequence[int] = (),
    fold_views: Sequence[str] | None = FOLD_VIEWS,
    ap_views: Sequence[str] | None = AP_VIEWS,
    rank_views: Sequence[str] | None = RANK_VIEWS,
    rank_top: int | None = RANK_TOP,
    batch_size: int = 128,
    device: str | torch.device | None = None,
    loaders: tuple[Iterable[Mapping[str, Any]], Iterable[Mapping[str, Any]]] | None = None,
) -> Evaluation:
    """Score a finished run once on `split` (its test split): per scoring, the per-query values of every block
    (`split_folds` × views × directions; the COCO 1K protocol in `fold_views` only, AP@R in `ap_views` only, best
    ranks in `rank_views` only: None for every view; best ranks above `rank_top` as rank_top + 1, None: exact)
    and, with `rounds`, the target ranks of the multi-query rounds (`evaluate.multi_query_scores`, `short`, the
    scoring's `fusion`). A multi-query model (`task == "multi_query"`) is scored in rounds only.
    Seconds: the embedding once; each scoring's scores (those of options already scored: counted once, with the
    first scoring that asked) and ranks."""
    multi = getattr(model, "task", "pairs") == "multi_query"
    if multi and not rounds:
        raise ValueError(f"{getattr(model, 'name', 'the model')} scores query sets: evaluate_run needs rounds")
    folds = split_folds(split)
    n_positives: dict[Block, np.ndarray] = {}
    embedded, embed_seconds = None, 0.0
    raw: dict[str, tuple[Tensor, Tensor]] = {}  # the scores of each set of options, shared by its scorings
    out = {}
    for name, scoring in scorings.items():
        views = [] if multi else list(split.views() if scoring.views is None else scoring.views)
        missing = [v for v in views if v not in split.views()]
        if missing:
            raise ValueError(f"{split.source}: split {split.name!r} has no {missing} relevance (has {split.views()})")
        blocks, collapse, t0 = {}, "", time.perf_counter()
        if views:
            if embedded is None:
                embedded = embed_split(model, split, vocab, batch_size=batch_size, device=device, loaders=loaders)
                embed_seconds = time.perf_counter() - t0
                t0 = time.perf_counter()
            options = json.dumps(dict(scoring.options), sort_keys=True, default=repr)
            if options not in raw:
                raw[options] = tuple(s.cpu() for s in direction_scores(model, *embedded, **scoring.options))
            i2t, t2i = raw[options] if scoring.rerank is None else rerank_directions(*raw[options], scoring.rerank)
            blocks = _pairwise(split, i2t, t2i, views, folds, zetas, precision_ks, n_positives, fold_views, ap_views,
                               rank_views, rank_top)
            collapse = instance_collapse(i2t, split) if "instance" in views else ""
        ranks = None
        if rounds:
            ranks = _round_ranks(multi_query_scores(model, split, vocab, rounds, short=short, fusion=scoring.fusion,
                                                    batch_size=batch_size, device=device).cpu())
        out[name] = Scored(blocks, dict(scoring.options), scoring.rerank_name, ranks, collapse,
                           time.perf_counter() - t0)
    levels = tuple(dict.fromkeys(split.caption_level)) if split.caption_level is not None else ()
    queries = SplitQueries(split.name, split.source, split_fingerprint(split), split.n_images,
                           np.asarray(split.caption_image), folds, n_positives, levels,
                           np.array([levels.index(x) for x in split.caption_level]) if levels else None)
    return Evaluation(queries, out, embed_seconds, rank_top)
