"""Metrics from a run record's per-query values (`records.Evaluation`): the means `evaluate` reports, and each
query's value of a metric that is a mean over queries (what a claim's interval resamples).

    block_stats(evaluation, scoring, block, rows)  -> metrics.RankingStats of those queries
    scoring_metrics(evaluation, scoring, protocol)  -> `evaluate.evaluate_scores`' dict for the scoring's views
    round_metrics(evaluation, scoring)              -> `evaluate.multi_round_metrics`' dict
    QueryMetric(value, view, directions, ...)       one metric that is a mean over queries, named
    query_values(evaluation, metric)                -> (values (Q,), strata (Q,) or None)

A `QueryMetric`'s value is the mean of its strata's means (`claims.Evidence`): one stratum per direction and fold,
so that rSum (`value="rsum"` over both directions: each query's share is 2 · 100 · its hits at 1, 5 and 10, as
`evaluate.rsum_per_query`), a mean of i2t and t2i R-P, or a COCO 1K metric (the mean over five folds) come out as
`scoring_metrics` gives them. medR is not a mean over queries: it has no per-query values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from xmr_core import metrics
from xmr_core.records import ROUNDS, Block, Evaluation, QueryStats

DIRECTIONS = ("i2t", "t2i")


def block_stats(ev: Evaluation, scoring: str, block: Block, rows: slice = slice(None)) -> metrics.RankingStats:
    """The `metrics.RankingStats` of `rows` of one block of a scoring (R-P and P@K from their exact hit counts; best
    ranks and AP@R NaN where the record does not keep them)."""
    try:
        q = ev.scorings[scoring].blocks[block]
    except KeyError:
        have = {s: sorted(v.blocks) for s, v in ev.scorings.items()}
        raise KeyError(f"no scoring {scoring!r} with block {block} (the record has {have})") from None
    n_pos = torch.from_numpy(ev.split.n_positives[block][rows].astype(np.int32))
    hits = torch.from_numpy(q.rp_hits[rows].astype(np.int32))
    return metrics.RankingStats(
        best_rank=(torch.full((len(hits),), torch.nan, dtype=torch.float64) if q.best_rank is None
                   else torch.from_numpy(q.best_rank[rows].astype(np.int32))),
        n_positives=n_pos,
        r_precision=hits / n_pos.double(),
        ap_at_r=(torch.full((len(hits),), torch.nan, dtype=torch.float64) if q.ap_at_r is None
                 else torch.from_numpy(q.ap_at_r[rows].astype(np.float64))),
        precision_at={k: torch.from_numpy(h[rows].astype(np.int32)).double() / k for k, h in q.precision_hits.items()},
    )


def _view(block: Block) -> tuple[str, str]:
    """(view, ζ suffix) of a block: ("plausible", "_zeta1") or ("instance", "")."""
    view, _, zeta = block[1].partition("/")
    return view, f"_{zeta}" if zeta else ""


RANK_KEYS = ("R@", "medR", "meanR")  # the metrics of best ranks


def _summary(st: metrics.RankingStats, ks: Sequence[int], kept: QueryStats, top: int | None,
             mask: np.ndarray | None = None) -> dict[str, float]:
    """`RankingStats.summary`, without mAP@R where the record keeps no AP@R, nor R@K, medR and meanR where it keeps
    no best ranks (`kept`: the block's values), nor medR, meanR and R@K beyond `top` where its ranks stop there."""
    def known(key: str) -> bool:
        if not key.startswith(RANK_KEYS):
            return kept.ap_at_r is not None or key != "mAP@R"
        return kept.best_rank is not None and (top is None or (key.startswith("R@") and int(key[2:]) <= top))

    return {k: v for k, v in st.summary(ks, mask).items() if known(k)}


def scoring_metrics(ev: Evaluation, scoring: str = "default", protocol: str = "full",
                    ks: Sequence[int] = metrics.RSUM_KS, by_level: bool = True) -> dict[str, float]:
    """Every metric of a scoring's views under `protocol`, keyed and averaged over folds as
    `evaluate.evaluate_scores` keys and averages them (R@1/5/10 always; the t2i breakdown per caption level unless
    not `by_level`, as for a split without caption levels: a small fold may lack a level; PMRP; rSum with the
    instance view; mAP@R where the record keeps AP@R)."""
    sp, all_ks = ev.split, tuple(sorted(set(ks) | set(metrics.RSUM_KS)))
    blocks = [b for b in ev.scorings[scoring].blocks if b[0] == protocol]
    if not blocks:
        raise KeyError(f"scoring {scoring!r} has no block under protocol {protocol!r}")
    views = list(dict.fromkeys(_view(b)[0] for b in blocks))
    zetas = [_view(b)[1] for b in blocks if _view(b)[0] == "plausible" and b[2] == "i2t"]
    folds = []
    for f in range(len(sp.folds[protocol])):
        out: dict[str, float] = {}
        for direction in DIRECTIONS:
            rows = sp.fold_queries(protocol, direction)[f]
            for block in (b for b in blocks if b[2] == direction):
                view, suffix = _view(block)
                st = block_stats(ev, scoring, block, rows)
                kept = ev.scorings[scoring].blocks[block]
                out.update({f"{view}/{direction}/{k}{suffix}": v
                            for k, v in _summary(st, all_ks, kept, ev.rank_top).items()})
                if by_level and direction == "t2i" and sp.caption_level is not None and view != "plausible":
                    levels = sp.caption_level[rows]
                    for code in dict.fromkeys(levels.tolist()):  # levels in order of first appearance
                        out.update({f"{view}/t2i@{sp.levels[code]}/{k}": v
                                    for k, v in _summary(st, all_ks, kept, ev.rank_top, levels == code).items()})
            if zetas:
                out[f"plausible/{direction}/PMRP"] = float(np.mean([out[f"plausible/{direction}/R-P{z}"]
                                                                    for z in zetas]))
        if "instance" in views:
            out["rsum"] = metrics.rsum(out, prefix="instance/")
        folds.append(out)
    return metrics.average_folds(folds)


def round_metrics(ev: Evaluation, scoring: str = "default", ks: Sequence[int] = metrics.RSUM_KS) -> dict[str, float]:
    """`evaluate.multi_round_metrics`' dict from a scoring's round ranks: per round R@K, medR, meanR, their mean
    over rounds (`mean/...`) and "rsum", the mean R@1 + R@5 + R@10 over the rounds."""
    ranks = ev.scorings[scoring].rounds
    if ranks is None:
        raise KeyError(f"scoring {scoring!r} has no multi-query rounds")
    all_ks = tuple(sorted(set(ks) | set(metrics.RSUM_KS)))
    rounds = [metrics.rank_summary(torch.from_numpy(r.astype(np.int64)), all_ks) for r in ranks]
    out = {f"round{t + 1}/{k}": v for t, r in enumerate(rounds) for k, v in r.items()}
    out.update({f"mean/{k}": v for k, v in metrics.average_folds(rounds).items()})
    out["rsum"] = sum(out[f"mean/R@{k}"] for k in metrics.RSUM_KS)
    return out


# ------------------------------------------------------------------------------------------ per query


@dataclass(frozen=True)
class QueryMetric:
    """A metric that is a mean over queries: `value` one of R@K (or the mean of R@K at several K, "R@1,5"), P@K,
    R-P, mAP@R, meanR, "rsum" (R@1 + R@5 + R@10 summed over `directions`), "PMRP" (plausible view: R-P averaged over
    its ζ), or with a ζ suffix on the plausible view ("R-P_zeta1"), or several of them joined by "," (each query's
    mean of them: "R-P,R@1"); in `view` ("rounds": a multi-query scoring's rounds, at `round` r, or the mean over
    rounds `round`..`last_round`, or 0 for the mean over every round), over `directions` (one stratum each), under
    `protocol`, of `scoring`; `level`: only the t2i queries of that caption level."""

    value: str
    view: str = "instance"
    directions: tuple[str, ...] = DIRECTIONS
    protocol: str = "full"
    scoring: str = "default"
    level: str = ""
    round: int = 0
    last_round: int = 0

    def __post_init__(self) -> None:
        if self.last_round and not 1 <= self.round <= self.last_round:
            raise ValueError(f"QueryMetric: rounds {self.round}..{self.last_round} are no range of rounds")
        if not self.directions or set(self.directions) - set(DIRECTIONS):
            raise ValueError(f"QueryMetric: directions must be among {DIRECTIONS}, got {self.directions}")
        if self.level and self.directions != ("t2i",):
            raise ValueError(f"QueryMetric: a caption level ({self.level!r}) has t2i queries only")
        if any(v.startswith("medR") for v in self.value.split(",")):
            raise ValueError("QueryMetric: medR is not a mean over queries, so it has no per-query values")

    @property
    def queries(self) -> str:
        """Which queries the values are of (two sides pair by query only when this is the same): multi-query rounds
        score the same query sets in every round, so sides read at different rounds pair by query set."""
        if self.view == ROUNDS:
            return "multi-query sets"
        return f"{self.protocol} {'+'.join(self.directions)}{f' @{self.level}' if self.level else ''} queries"


def _hits(best_rank: np.ndarray, k: int) -> np.ndarray:
    return 100.0 * (best_rank <= k)


def _rank_value(value: str, ranks: np.ndarray, n_directions: int = 1) -> np.ndarray:
    """Per-query values of a rank metric (R@K or "R@1,5", meanR, rsum) from best ranks (Q,)."""
    if value.startswith("R@"):  # "R@1,5": each query's mean of its hits at 1 and at 5
        return np.mean([_hits(ranks, int(k)) for k in value[2:].split(",")], axis=0)
    if value == "meanR":
        return ranks.astype(np.float64)
    if value == "rsum":
        return n_directions * sum(_hits(ranks, k) for k in metrics.RSUM_KS)
    raise ValueError(f"QueryMetric: {value!r} is not a rank metric (R@K, meanR, rsum)")


def _block_values(ev: Evaluation, metric: QueryMetric, direction: str, rows: slice) -> np.ndarray:
    """(rows,) the per-query values of `metric` in one direction and fold."""
    value, view = metric.value, metric.view
    joined = value.split(",")
    if len(joined) > 1 and not all(k.isdigit() for k in joined[1:]):  # each query's mean of the joined values
        return np.mean([_block_values(ev, replace(metric, value=v), direction, rows) for v in joined], axis=0)
    if value == "PMRP":
        if view != "plausible":
            raise ValueError(f"QueryMetric: PMRP is of the plausible view, not {view!r}")
        zetas = [b[1] for b in ev.scorings[metric.scoring].blocks
                 if b[0] == metric.protocol and b[2] == direction and b[1].startswith("plausible/")]
        if not zetas:
            raise KeyError(f"QueryMetric: scoring {metric.scoring!r} has no plausible view under {metric.protocol!r}")
        return np.mean([_block_values(ev, QueryMetric(f"R-P_{z.partition('/')[2]}", view, (direction,),
                                                      metric.protocol, metric.scoring), direction, rows)
                        for z in zetas], axis=0)
    base, _, zeta = value.partition("_zeta")
    if (view == "plausible") != bool(zeta):
        raise ValueError(f"QueryMetric: {value!r} on view {view!r}: the plausible view's values name a ζ "
                         "(R-P_zeta0) or are PMRP, and only its values do")
    st = block_stats(ev, metric.scoring, (metric.protocol, f"{view}/zeta{zeta}" if zeta else view, direction), rows)
    if base == "R-P":
        return 100.0 * st.r_precision.numpy()
    if base == "mAP@R":
        if not np.isfinite(st.ap_at_r.numpy()).all():
            raise KeyError(f"QueryMetric: the record keeps no AP@R in the {view} view (`run_evaluation.AP_VIEWS`)")
        return 100.0 * st.ap_at_r.numpy()
    if base.startswith("P@"):
        k = int(base[2:])
        if k not in st.precision_at:
            raise KeyError(f"QueryMetric: the record has no P@{k} (has {sorted(st.precision_at)})")
        return 100.0 * st.precision_at[k].numpy()
    if not np.isfinite(st.best_rank.numpy()).all():
        raise KeyError(f"QueryMetric: the record keeps no best ranks in the {view} view (`run_evaluation.RANK_VIEWS`)")
    needs = max(metrics.RSUM_KS) if base == "rsum" else max(int(k) for k in base[2:].split(",")) if base.startswith(
        "R@") else None  # the deepest rank the metric reads (meanR: every rank)
    if ev.rank_top is not None and (needs is None or needs > ev.rank_top):
        raise KeyError(f"QueryMetric: the record keeps best ranks up to {ev.rank_top} only (`run_evaluation.RANK_TOP`)"
                       f": no {base}")
    return _rank_value(base, st.best_rank.numpy(), len(metric.directions))


def query_values(ev: Evaluation, metric: QueryMetric) -> tuple[np.ndarray, np.ndarray | None]:
    """(values (Q,), strata (Q,) or None for one stratum): each query's value of `metric`, whose strata's means
    average to the metric (`claims.Evidence`). Queries in split order within each stratum; strata per direction
    (in `metric.directions` order), then per fold."""
    if metric.view == ROUNDS:
        ranks = ev.scorings[metric.scoring].rounds
        if ranks is None:
            raise KeyError(f"scoring {metric.scoring!r} has no multi-query rounds")
        last = metric.last_round or metric.round
        if not 0 <= metric.round <= last <= len(ranks):
            raise ValueError(f"QueryMetric: round {last} of {len(ranks)}")
        picked = ranks[metric.round - 1:last] if metric.round else ranks
        return np.mean([_rank_value(metric.value, r.astype(np.int64)) for r in picked], axis=0), None
    parts, strata = [], []
    for direction in metric.directions:
        for rows in ev.split.fold_queries(metric.protocol, direction):
            values = _block_values(ev, metric, direction, rows)
            if metric.level:
                if metric.level not in ev.split.levels:
                    raise KeyError(f"QueryMetric: no caption level {metric.level!r} (has {ev.split.levels})")
                values = values[ev.split.caption_level[rows] == ev.split.levels.index(metric.level)]
            parts.append(values)
            strata.append(np.full(len(values), len(strata)))
    return np.concatenate(parts), (np.concatenate(strata) if len(parts) > 1 else None)
