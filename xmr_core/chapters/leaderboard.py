"""The book's leaderboard (`book/06_leaderboard/`): every trained model of the book on one scenes test split,
every relevance view, with and without Fast Re-ranking, the Bayes ceiling on top, and the claims that should
hold across methods.

Models. Each chapter's compared models, trained as that chapter trains them (its protocol, the setting its
train.py chose and recorded in its tuning table, the same seeds), so every run is the chapter's own run, loaded
from the cache where the chapter trained it: the PCME, MSRM and DVSE models on
the frozen trunk's grid features under the zero-shot protocol (seen classes), the HREM chapter's models on region
features under the COCO-style protocol (every class in training; `PROTOCOLS`). All are scored on the same whole
test split (the same images and captions, checked: `same_test_split`), which holds every relevance view:
instance (R@K, rSum, % of the Bayes ceiling), exact (the captions whose logical form holds in the image:
R-Precision), plausible (PMRP over zeta) and class (R-Precision). A claim compares models of one protocol only.
The DVSE chapter's region-feature DVSE is the zero-shot protocol on region features (`MODEL_PROTOCOLS`).

Trained models of the book that are not on the board: the HREM ensemble (two models' scores averaged, no model
of its own: the HREM chapter); HMRN's models and baselines, trained and tested on another scenes variant (5-10
objects an image, region queries in the Drill-down layout) to rank images for a *set* of queries asked over
rounds, so not on this test split (the HMRN chapter compares them round by round); HREM's SCAN t2i, trained at
VSE++'s setting (not tuned) only to time a score-based matcher against embeddings (HREM's Figure 5: every
image-caption pair through cross-attention); and the chapters' ablation variants, which are not compared methods.

Fast Re-ranking (DVSE, Eq. 13-15) is applied to every model's own per-direction scores. Its temperatures are
tuned per model and seed on the validation split, as any hyperparameter: the i2t ranking depends only on
(gamma1, gamma2) and the t2i ranking only on (lambda1, lambda2), so each is chosen from `FR_GRID` (tied pairs,
gamma1 = gamma2) by the validation R@1 + R@5 + R@10 of its own direction. The test split is never used to
choose them.

Every number comes from run records (`docs/records.md`): each model and seed is its chapter's run, and its record on
the whole test split (`run_records.recorded`: the chapter's own record where it is there) gains the leaderboard's
re-ranked scoring (`FR_SCORING`, the tuned temperatures in the record's tuning facts); the rows are
`query_values.scoring_metrics` of the record's two scorings. A record that holds both is read back and the model is
not used.

The cross-method claims are declared once (`CLAIMS`) and judged by the book's verdict protocol (`claims.judge`,
docs/claims.md) on the records' per-query values of the whole test split (`CLAIM_METRICS`: each query's rSum and
its PMRP, images and captions as two strata): every model of a protocol scores the same queries with the same seeds,
so the sides are paired by seed and by query; a model with and without Fast Re-ranking is one trained model. Each
claim is bound to its records (`board_bindings`) so that `xmr claims recompute leaderboard` judges it again from
the committed records alone.

The notebook calls, in order: `book_setup`, `recorded_book`, `score_book` (every model and seed recorded,
`record_board_model`, and its rows, `board_rows`), `model_summary` (the table), `heatmap_figure`, `board_evidence`,
`cross_method_judgements` and `board_bindings`.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure

from xmr_core.ceiling import bayes_ceiling, percent_of_ceiling
from xmr_core.chapters.recorded import recorded_tuning
from xmr_core.chapters.views import ceiling_rsum, judge_viewed, missing_reason
from xmr_core.claims import ClaimSpec, Evidence, Judgement
from xmr_core.config import RunConfig
from xmr_core.data.corpus import Split
from xmr_core.data.text import Vocabulary
from xmr_core.evaluate import direction_scores, embed_split, evaluate_scores
from xmr_core.experiment.compared import (
    REGIONS,
    book_compared,
    model_label,
)
from xmr_core.experiment.protocols import ChapterData, chapter_setup, hrem_setup
from xmr_core.experiment.recipes import region_encoders
from xmr_core.experiment.run_records import recorded
from xmr_core.experiment.training import request_model, train_many
from xmr_core.methods.base import RetrievalModel
from xmr_core.metrics import RSUM_KS
from xmr_core.paper_words import Words, worded
from xmr_core.query_values import QueryMetric, scoring_metrics
from xmr_core.record_evidence import ClaimRecords, Side, record_evidence
from xmr_core.records import RunRecord
from xmr_core.run_evaluation import Scoring
from xmr_core.runs.train import FitResult, RunRequest
from xmr_core.runs.tuning import TuningResult
from xmr_core.similarity import FastReranker
from xmr_core.viz import heatmap

# Every compared model of the book's chapters, in book order: (chapter, method, K). A new chapter adds its rows.
BOOK_MODELS: list[tuple[str, str, int]] = [
    ("pcme", "VSE0", 1), ("pcme", "PVSE", 1), ("pcme", "PVSE", 2), ("pcme", "PVSE", 4),
    ("pcme", "PCME mu only", 1), ("pcme", "PCME", 1), ("msrm", "MSRM", 1), ("dvse", "DVSE", 1),
    ("dvse", REGIONS, 1),
    ("hrem", "VSE++", 1), ("hrem", "GPO", 1), ("hrem", "HREM standalone", 1), ("hrem", "HREM fusion", 1),
]
# Each chapter's training protocol and image input (the leaderboard's "protocol" column).
PROTOCOLS: dict[str, str] = {**dict.fromkeys(("pcme", "msrm", "dvse"), "zero-shot, grid"),
                             "hrem": "all classes, regions"}
# A model whose protocol is not its chapter's: the DVSE chapter's region-feature DVSE (zero-shot classes, regions).
MODEL_PROTOCOLS: dict[str, str] = {REGIONS: "zero-shot, regions"}
# The families the cross-method claims compare (model labels), each within the zero-shot grid protocol.
PROBABILISTIC: tuple[str, ...] = ("PCME", "MSRM")
DETERMINISTIC: tuple[str, ...] = ("VSE0", "PVSE K=1", "PVSE K=2", "PVSE K=4", "PCME mu only", "DVSE")
# A relation-modelling model -> the model it extends without the relations (same protocol and features): MSRM's
# hypergraph on PCME (nothing else differs); HREM's fragment- and instance-level relations on VSE++'s region +
# BiGRU embedding, where HREM also pools the fragments max + average (Eq. 2-3) and mines distance-weighted
# negatives, while VSE++ averages the regions, reads the BiGRU's end states and takes hardest negatives. HREM's
# own Table 3 (ablate.py) isolates each relation level.
RELATIONAL: dict[str, str] = {"MSRM": "PCME", "HREM standalone": "VSE++", "HREM fusion": "VSE++"}
# Tied Fast Re-ranking temperatures tried on the validation split (gamma1 = gamma2 for i2t, lambda1 = lambda2 for
# t2i); a wide log grid because the models' score scales differ (cosines, match probabilities, -d^2).
FR_GRID: tuple[float, ...] = (1.0, 3.0, 10.0, 30.0, 100.0)

# Leaderboard columns: (view, column) -> the `evaluate_scores` key.
METRICS: dict[str, str] = {
    **{f"{d} R@{k}": f"instance/{d}/R@{k}" for d in ("i2t", "t2i") for k in RSUM_KS},
    "rSum": "rsum",
    **{f"{d} exact R-P": f"exact/{d}/R-P" for d in ("i2t", "t2i")},
    **{f"{d} PMRP": f"plausible/{d}/PMRP" for d in ("i2t", "t2i")},
    **{f"{d} class R-P": f"class/{d}/R-P" for d in ("i2t", "t2i")},
}
VIEWS: tuple[str, ...] = ("instance", "exact", "plausible", "class")


class BookData(NamedTuple):
    """The data and encoder sizes of each protocol of `PROTOCOLS` (`book_setup`)."""

    grid: ChapterData  # `protocols.chapter_setup`: zero-shot splits, the frozen trunk's grid features
    grid_enc: dict[str, object]
    regions: ChapterData  # `protocols.hrem_setup`: every class in every split, region features
    region_enc: dict[str, object]

    def of(self, chapter: str) -> tuple[ChapterData, dict[str, object]]:
        """The data and encoders `chapter` trains on."""
        return (self.regions, self.region_enc) if chapter == "hrem" else (self.grid, self.grid_enc)


def same_test_split(a: Split, b: Split) -> None:
    """Raise unless the two test splits hold the same images and captions in the same order (the leaderboard
    scores every protocol's models on one test split)."""
    for field in ("image_ids", "captions", "caption_image"):
        x, y = list(getattr(a, field)), list(getattr(b, field))
        if x != y:
            first = next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))
            raise ValueError(f"leaderboard: the test split of {a.source} and that of {b.source} differ in {field} "
                             f"(record {first}; {len(x)} against {len(y)}); every model must be scored on the same "
                             "test split (same data set and DATA_SEED; real data: the same images and captions in "
                             "both formats)")


def aligned_test(test: Split, other: Split) -> Split:
    """`test` with, per image, only as many of its first captions as `other` has for it, when both hold the same
    images and `other` fewer captions: Karpathy's COCO json gives a few test images 6 or 7 captions, SCAN's precomp
    (HREM's regions) their first 5. `test` itself otherwise (`same_test_split` then judges them)."""
    caption_image = np.asarray(test.caption_image)
    if (list(test.image_ids) != list(other.image_ids) or test.n_captions <= other.n_captions
            or np.any(np.diff(caption_image) < 0)):
        return test
    counts = np.bincount(np.asarray(other.caption_image), minlength=other.n_images)
    rank = np.arange(test.n_captions) - np.searchsorted(caption_image, caption_image)  # the caption's place in its image
    return test.subset(np.arange(test.n_images), test.name, captions=np.flatnonzero(rank < counts[caption_image]))


def book_setup(run: RunConfig) -> BookData:
    """The zero-shot grid data (`chapter_setup`) and the HREM chapter's region data (`hrem_setup`) of `run`, their
    test splits checked to be the same (`same_test_split`, after `aligned_test` on real COCO)."""
    _, _, grid, grid_enc = chapter_setup(run)
    _, regions, region_enc = hrem_setup(run)
    grid = grid.with_test(aligned_test(grid.test, regions.test))
    same_test_split(grid.test, regions.test)
    return BookData(grid, grid_enc, regions, region_enc)


def recorded_book(run: RunConfig) -> dict[str, TuningResult]:
    """Every method of `BOOK_MODELS` at the setting its own chapter's train.py chose, read from that chapter's
    tuning table (`chapters.recorded.recorded_tuning`: "pcme/tuning" for the baselines, "msrm/tuning" for MSRM,
    ...; the region DVSE is the DVSE chapter's DVSE), in book order. Nothing is trained to choose them."""
    methods: dict[str, list[str]] = {}
    for chapter, name, _ in BOOK_MODELS:
        name = "DVSE" if name == REGIONS else name
        if name not in methods.setdefault(chapter, []):
            methods[chapter].append(name)
    return {name: tuned for chapter, names in methods.items()
            for name, tuned in recorded_tuning(f"{chapter}/tuning", run, names).items()}


def request_book_model(chapter: str, name: str, k: int, data: ChapterData, tuned: dict[str, TuningResult],
                       enc: dict, run: RunConfig, seed: int) -> RunRequest:
    """One model of `BOOK_MODELS` asked for as its chapter asks for it (its protocol `data`, its tuned setting,
    `experiment.training.request_model` of `book_compared`), i.e. the chapter's own run. The region DVSE
    (`REGIONS`) is DVSE at its tuned setting on `region_encoders` of the region features."""
    compared = book_compared(run.profile)
    if name == REGIONS:
        return request_model("DVSE", 1, data, tuned, region_encoders(enc, data.test.regions.shape[2]), run, seed,
                             compared)
    return request_model(name, k, data, tuned, enc, run, seed, compared)


def train_book_model(chapter: str, name: str, k: int, data: ChapterData, tuned: dict[str, TuningResult],
                     enc: dict, run: RunConfig, seed: int) -> tuple[RetrievalModel, FitResult]:
    """One model of `BOOK_MODELS` (`request_book_model`), trained or, usually, loaded from the cache on its own."""
    return train_many([request_book_model(chapter, name, k, data, tuned, enc, run, seed)], run)[0]


def _direction_rsum(values: dict[str, float], direction: str) -> float:
    return sum(values[f"instance/{direction}/R@{k}"] for k in RSUM_KS)


@torch.no_grad()
def tune_fast_rerank(model: RetrievalModel, val: Split, vocab: Vocabulary, device: torch.device | str,
                     grid: Sequence[float] = FR_GRID) -> tuple[FastReranker, pd.DataFrame]:
    """Fast Re-ranking's temperatures for one trained model, chosen on `val`: per tied value t of `grid`, the
    instance R@1+5+10 of i2t under gamma = (t, t) and of t2i under lambda = (t, t) (each direction depends only on
    its own pair). Returns the re-ranker with the best pair of each direction and the (len(grid), 3) search
    frame (value, i2t, t2i)."""
    if not grid:
        raise ValueError("tune_fast_rerank: empty temperature grid")
    img, cap = embed_split(model.to(device).eval(), val, vocab, device=device)
    i2t, t2i = direction_scores(model, img, cap)
    rows = []
    for t in grid:
        rerank = FastReranker((t, t), (t, t))
        values = evaluate_scores(val, rerank(i2t, "i2t"), views=["instance"],
                                 scores_t2i=rerank(t2i.T, "t2i").T)
        rows.append({"value": t, "i2t": _direction_rsum(values, "i2t"), "t2i": _direction_rsum(values, "t2i")})
    search = pd.DataFrame(rows)
    best = {d: float(search.loc[search[d].idxmax(), "value"]) for d in ("i2t", "t2i")}
    return FastReranker((best["i2t"],) * 2, (best["t2i"],) * 2), search


FR_SCORING = "board FR"  # the leaderboard's Fast Re-ranking in a run's record: its temperatures tuned on validation


def fr_scoring(reranker: FastReranker, grid: Sequence[float]) -> Scoring:
    """The record's scoring `FR_SCORING`: the model's own scores re-ranked by `reranker` in every view, named by its
    temperatures and the grid they were chosen from (other temperatures or grid: another scoring)."""
    return Scoring(rerank=reranker, rerank_name=f"FR gamma {reranker.gamma[0]:g} lambda {reranker.lam[0]:g}, tuned "
                                                f"on validation over {', '.join(f'{t:g}' for t in grid)}")


def record_board_model(model: RetrievalModel, result: FitResult, seed: int, data: ChapterData, run: RunConfig,
                       grid: Sequence[float] = FR_GRID) -> RunRecord:
    """The record of one trained model of the board on the whole test split (`run_records.recorded`: the chapter's
    own record of the run where it is there): its own scores in every view and, as `FR_SCORING`, the same scores
    after Fast Re-ranking, its temperatures tuned on the validation split (`tune_fast_rerank`) and kept in the
    record's tuning facts (`FR_SCORING`: grid, gamma, lambda and the search). A record that holds them already is
    read back: the model is not used."""
    held = recorded(model, result, seed, data.test, data.vocab, {"default": Scoring()}, run)
    facts = held.tuning.get(FR_SCORING, {})
    if FR_SCORING in held.evaluation.scorings and facts.get("grid") == list(grid):
        return held
    reranker, search = tune_fast_rerank(model, data.val, data.vocab, run.torch_device, grid)
    facts = {"grid": list(grid), "gamma": reranker.gamma[0], "lambda": reranker.lam[0],
             "search": search.to_dict("records")}
    return recorded(model, result, seed, data.test, data.vocab,
                    {"default": Scoring(), FR_SCORING: fr_scoring(reranker, grid)}, run, fold_views=(),
                    tuning={FR_SCORING: facts})


def board_rows(label: str, record: RunRecord, ceiling: float | None) -> list[dict[str, object]]:
    """Two rows of one trained model and seed from its record (`record_board_model`): its own scores and the same
    scores after Fast Re-ranking (`FR_SCORING`, "<label> + FR"), each with every `METRICS` column on the whole
    test split (`query_values.scoring_metrics`), its instance rSum as % of the Bayes ceiling `ceiling` (its rSum;
    None: NaN), whether the run converged and collapsed (`claims.instance_collapse` of its own test scores) and
    the record's name. A column whose view the test split lacks (real data: exact, and class or plausible) is NaN."""
    rows, fr = [], record.tuning[FR_SCORING]
    for is_fr, scoring in ((False, "default"), (True, FR_SCORING)):
        values = scoring_metrics(record.evaluation, scoring, "full", by_level=False)
        row: dict[str, object] = {"model": f"{label} + FR" if is_fr else label, "base model": label, "FR": is_fr,
                                  "seed": record.seed, "converged": record.converged,
                                  "collapse": record.evaluation.scorings["default"].collapse}
        row.update({col: values.get(key, float("nan")) for col, key in METRICS.items()})
        row["% of ceiling"] = float("nan") if ceiling is None else percent_of_ceiling(values["rsum"], ceiling)
        row["FR gamma"] = float(fr["gamma"]) if is_fr else float("nan")
        row["FR lambda"] = float(fr["lambda"]) if is_fr else float("nan")
        row["record"] = record.name
        rows.append(row)
    return rows


class BookRuns(NamedTuple):
    """Every model and seed of the book recorded (`score_book`)."""

    per_run: pd.DataFrame  # one row per model, seed and FR (`board_rows`), with its protocol
    records: dict[tuple[str, int], RunRecord]  # (model label, seed) -> its record (`record_board_model`)


def ranked_models(book: BookData) -> list[tuple[str, str, int]]:
    """The models of `BOOK_MODELS` this data set has: the region DVSE (`REGIONS`) only where the grid protocol's
    splits carry region features (scenes; real COCO's raw images have none), as the DVSE chapter trains it."""
    return [m for m in BOOK_MODELS if m[1] != REGIONS or book.grid.test.regions is not None]


def score_book(seeds: Sequence[int], book: BookData, tuned: dict[str, TuningResult], run: RunConfig) -> BookRuns:
    """Every model of `ranked_models` with every seed (`request_book_model` on its chapter's protocol data: its
    chapter's run, loaded or trained, as one batch), recorded (`record_board_model`: the chapter's record, Fast
    Re-ranking added where it lacks it) and its rows read from the record (`board_rows`), printing a line per run:
    one row per model, seed and FR, with the model's protocol (`MODEL_PROTOCOLS`, else its chapter's `PROTOCOLS`),
    and the records."""
    rows, records = [], {}
    requests = []  # every model and seed: one batch (side by side on the workers; usually all cached)
    models = ranked_models(book)
    for chapter, name, k in models:
        data, enc = book.of(chapter)
        requests += [request_book_model(chapter, name, k, data, tuned, enc, run, seed) for seed in seeds]
    trained = iter(train_many(requests, run))
    for chapter, name, k in models:
        label = model_label(name, k)
        data = book.of(chapter)[0]
        ceiling = ceiling_rsum(data.test)
        for seed in seeds:
            t0 = time.perf_counter()
            model, result = next(trained)
            records[label, seed] = record = record_board_model(model, result, seed, data, run)
            rows += [{**row, "protocol": MODEL_PROTOCOLS.get(name, PROTOCOLS[chapter])}
                     for row in board_rows(label, record, ceiling)]
            print(f"{chapter}: {label} seed {seed} ({'cached' if result.cached else 'trained'}) "
                  f"recorded in {time.perf_counter() - t0:.1f} s")
    return BookRuns(pd.DataFrame(rows), records)


def ceiling_row(test: Split) -> dict[str, object]:
    """The leaderboard's top row: the Bayes ceiling's instance R@K and rSum (100% of itself); the other views
    have no ceiling computed (NaN)."""
    ceiling = bayes_ceiling(test)
    row: dict[str, object] = {"model": "Bayes ceiling", "protocol": "", "seeds": 0}
    row.update({col: ceiling[key.removeprefix("instance/")] if key.startswith("instance/") else float("nan")
                for col, key in METRICS.items()})
    row["rSum"] = ceiling["rsum"]
    row["% of ceiling"] = 100.0
    return row


BOOK_LABELS: tuple[str, ...] = tuple(model_label(name, k) for _, name, k in BOOK_MODELS)
PMRP = "PMRP on the whole test split, mean of i2t and t2i, pp (per query, images and captions as two strata)"
RSUM = "instance rSum on the whole test split (per query, images and captions as two strata)"
FR_RSUM = f"{RSUM}; validation-tuned temperatures"

# The claims that should generalise across the book's methods. "Every probabilistic model beats the best
# deterministic one" is one peak claim per probabilistic model (it against every deterministic model, the best
# chosen inside each resample): a universal claim over all of those pairs would repeat models on both sides.
CLAIMS: list[ClaimSpec] = [
    *[ClaimSpec(f"{p.lower()}-pmrp-over-deterministic", f"Probabilistic embeddings help plausible-match metrics: "
                f"{p} beats the best deterministic model in PMRP (the zero-shot grid protocol's models).",
                "PCME Sec. 5, MSRM Sec. 4.3", "peak", PMRP, (p, *DETERMINISTIC), peak=p) for p in PROBABILISTIC],
    ClaimSpec("relations-help", "Relations help instance metrics: every relation-modelling model beats the model it "
              "extends (same protocol and features: MSRM over PCME; HREM standalone and fusion over VSE++, where "
              "HREM's pooling and negatives differ too, so its Table 3 isolates the relations) in instance rSum.",
              "MSRM Sec. 3.3, HREM Sec. 4", "universal", RSUM, pairs=tuple(RELATIONAL.items())),
    ClaimSpec("fr-improves-any", "Fast Re-ranking improves any model (instance rSum, temperatures tuned on "
              "validation).", "DVSE Sec. IV-D, Table IV", "universal", FR_RSUM,
              pairs=tuple((f"{m} + FR", m) for m in BOOK_LABELS)),
]
# The paper's words of every claim (docs/claims.md, "The paper's words"), each from the paper named.
WORDS: dict[str, Words] = {
    "pcme-pmrp-over-deterministic": Words(
        "However, on the more accurate PMRP metric, PCME outperforms previous methods with some margin (e.g. 31.8%, "
        "29.7%, 33.0% versus 34.1% for the 5K, i2t task).",
        "PCME above every deterministic model of the zero-shot grid protocol in whole-split PMRP, the best of them "
        "chosen inside each resample.", paper="pcme"),
    "msrm-pmrp-over-deterministic": Words(
        "2) The performance gap between two kinds of evaluation metrics of VSRN [16] and AOQ [4] further indicates "
        "that R@K focusing only on ground-truth match (the most similar instance) may lead to poor performance in "
        "semantic retrieval.",
        "MSRM above every deterministic model of the zero-shot grid protocol in whole-split PMRP.", paper="msrm"),
    "relations-help": Words(
        "It shows that both instance-level and fragment-level relation modeling help improve the learning of "
        "cross-modal embeddings.",
        "Each relation-modelling model above the model it extends in instance rSum (MSRM over PCME; HREM standalone "
        "and fusion over VSE++); one pair not above refutes it.", paper="hrem"),
    "fr-improves-any": Words(
        "Furthermore, since it operates directly on the similarity matrix, FR has the potential to enhance the "
        "accuracy of any image-text retrieval model.",
        "'Has the potential': every model of the board with FR at temperatures tuned on validation for it above "
        "itself without FR in instance rSum. The DVSE chapter's `fr-improves-any-model` asks the same question at the "
        "paper's fixed DVSE scales for every model, a harder test: where the two differ (PCME's match "
        "probabilities), the scales make the difference.", paper="dvse"),
}
CLAIMS = worded(CLAIMS, WORDS)
# a claim's metric -> its per-query values in the records (`FR_SCORING` for a "+ FR" model)
CLAIM_METRICS: dict[str, QueryMetric] = {PMRP: QueryMetric("PMRP", "plausible"), RSUM: QueryMetric("rsum"),
                                         FR_RSUM: QueryMetric("rsum")}


def board_side(model: str, records: Mapping[tuple[str, int], RunRecord], view: str = "instance") -> Side | None:
    """The records of a compared model of the claims (a board row: "<label>" or "<label> + FR", its scoring
    `FR_SCORING`), one per seed in seed order; None when the board has no run of it, or its records have no `view`
    (a chapter whose data lacks it: HREM's region features on COCO have no plausible matches)."""
    label = model.removesuffix(" + FR")
    scoring = FR_SCORING if model.endswith(" + FR") else "default"
    found = [rec for (m, _), rec in sorted(records.items(), key=lambda kv: kv[0][1]) if m == label]
    held = all(any(b[1].partition("/")[0] == view for b in rec.evaluation.scorings[scoring].blocks) for rec in found)
    return Side(tuple(rec.name for rec in found), scoring) if found and held else None


def board_evidence(records: Mapping[tuple[str, int], RunRecord]) -> dict[str, Callable[[], dict[str, Evidence]]]:
    """{claim metric: a function returning {model: Evidence}} of every model the claims compare that has records
    (`board_side`): its records' per-query values of the metric (`CLAIM_METRICS`, `record_evidence`: images and
    captions as two strata), one row per seed, as `xmr claims recompute` reads them."""
    by_name = {rec.name: rec for rec in records.values()}

    def evidence(metric: QueryMetric) -> dict[str, Evidence]:
        sides = {m: side for spec in CLAIMS for m in spec.compared if (side := board_side(m, records, metric.view))}
        return {m: record_evidence([by_name[n] for n in side.records], dataclasses.replace(metric,
                                                                                        scoring=side.scoring))
                for m, side in sides.items()}

    return {name: lambda metric=metric: evidence(metric) for name, metric in CLAIM_METRICS.items()}


def board_bindings(records: Mapping[tuple[str, int], RunRecord], run: RunConfig,
                   missing: Mapping[str, str] | None = None) -> dict[str, ClaimRecords]:
    """Each claim of `CLAIMS` bound to the records that judge it (`record_evidence.ClaimRecords`, written beside the
    judgements for `xmr claims recompute leaderboard`): every compared model's records (`board_side`) on the claim's
    metric (`CLAIM_METRICS`). A claim on a view in `missing`, or comparing a model the board has no run of, has
    none (`cross_method_judgements` finds it not tested)."""
    out = {}
    for spec in CLAIMS:
        metric = CLAIM_METRICS[spec.metric]
        sides = {m: board_side(m, records, metric.view) for m in spec.compared}
        if missing_reason(metric.view, missing) or None in sides.values():
            continue
        out[spec.key] = ClaimRecords(spec, metric, sides, run.dataset, run.profile, "leaderboard", "board")
    return out


def cross_method_judgements(evidence: Mapping[str, Callable[[], Mapping[str, Evidence]]], run: RunConfig,
                            missing: Mapping[str, str] | None = None) -> list[Judgement]:
    """`CLAIMS` judged (`claims.judge`) on their metric's evidence (`board_evidence` of the book's records: each
    model's per-query values, paired by seed and by query); the PMRP claims not tested where `missing` ({view: why},
    `views.missing_views`) has plausible relevance."""
    return judge_viewed(CLAIMS, evidence, {PMRP: "plausible"}, missing, run)


def model_summary(per_run: pd.DataFrame, test: Split) -> pd.DataFrame:
    """The leaderboard table: the Bayes ceiling row (where `test` has exact relevance), then per model (book order,
    each followed by its + FR row) its protocol, the number of seeds and the mean over seeds of every column."""
    cols = [*METRICS, "% of ceiling"]
    grouped = per_run.groupby("model", sort=False)
    table = grouped[cols].mean()
    table.insert(0, "seeds", grouped.size())
    table.insert(0, "protocol", grouped["protocol"].first())
    table = table.reset_index()
    top = [pd.DataFrame([ceiling_row(test)])] if test.exact is not None else []
    return pd.concat([*top, table], ignore_index=True)[["model", "protocol", "seeds", *cols]]


def heatmap_figure(board: pd.DataFrame, dataset: str) -> Figure:
    """Models x metrics of the leaderboard table (`model_summary`): every `METRICS` column and the share of the
    ceiling, each column coloured from its lowest to its highest model (`viz.heatmap`), the annotations the values;
    an instance column's label carries the Bayes ceiling's value (the "Bayes ceiling" row itself is not drawn); a
    column no model has a value in (a view the data set lacks) is left out."""
    models_only = board[board["model"] != "Bayes ceiling"]
    metric_cols = [c for c in [*METRICS, "% of ceiling"] if models_only[c].notna().any()]
    ceilings = board[board["model"] == "Bayes ceiling"]
    labels = [f"{c}\n(ceiling {ceilings[c].iloc[0]:.1f})"
              if len(ceilings) and pd.notna(ceilings[c].iloc[0]) and c != "% of ceiling" else c for c in metric_cols]
    fig, ax = plt.subplots(figsize=(1.0 * len(metric_cols) + 2, 0.42 * len(models_only) + 2))
    heatmap(ax, models_only[metric_cols].to_numpy(dtype=float), list(models_only["model"]), labels,
            colour_by_column=True, colorbar=False)
    ax.set_title(f"The book's models on one {dataset} test split (mean over seeds; columns coloured per metric)")
    fig.tight_layout()
    return fig
