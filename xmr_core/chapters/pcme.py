"""The PCME chapter's notebooks' helpers (one place for the three notebooks: `train.py` tunes and trains,
`ablate.py` and `visualise.py` load the same cached runs).

The compared models are the book's baselines (`xmr_core.experiment.compared.BASELINES`), tuned and trained as
every chapter does (`xmr_core.experiment.training`): the one protocol of `xmr_core.runs.tuning` on the seen-class
validation split, the learning rate and the method's own main loss weight or margin, log-spaced around their
defaults and searched until the choice is bracketed or at a hard bound, then the training length checked. The
weights (`xmr_core.experiment.compared`):

- VSE0 and PVSE: the hinge margin α (the papers' 0.2, step ×2, at most 2). PVSE is tuned at K = 1 and its
  K = 2 and 4 rows reuse the tuned values (PVSE's paper uses one setting for every K).
- PCME μ-only: the uniformity weight (PCME's CUB value 10, step ×10), its only weight.
- PCME: the KL weight (PCME's CUB value 1e-3, step ×10; its COCO value 1e-5 is two steps down); the
  uniformity weight stays at PCME's CUB value 10. The values are the code's `vib_beta`, but the book's KL is the
  paper's, which pulls log sigma about twice as hard as the code's at small sigma (`docs/methods.md`): a KL
  weight of w here acts there like about 2w, so the tuned value is compared with the paper's in that sense.

smoke runs one setting per method (every code path, seconds).

Below, what the chapter's notebooks call so that they hold narration, parameters and calls only: training one
PCME ablation (`train_tuned`), the tables' rows and layouts, then a section per notebook (train.py, ablate.py,
visualise.py) with its tables, figures (returned, never saved) and claims.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
from matplotlib.figure import Figure
from torch import Tensor

from xmr_core.book.results import write_figure
from xmr_core.ceiling import SplitCeiling
from xmr_core.chapters.summary import (
    ceiling_share,
    mean_std,
    seed_summary,
    with_paper,
    write_ceiling_table,
)
from xmr_core.chapters.views import DATASET_NAMES, missing_reason, missing_views, not_tested
from xmr_core.claims import (
    RUN_MEANS,
    ClaimSpec,
    Evidence,
    Judgement,
    judge,
    seed_only,
)
from xmr_core.config import RunConfig
from xmr_core.data.corpus import Split
from xmr_core.data.datasets import with_pixels
from xmr_core.data.scene_grammar import LEVELS
from xmr_core.data.scenes import RGB
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.trunk import PretrainedTrunk
from xmr_core.evaluate import (
    coco1k_missing,
    embed_split,
    score_matrix,
)
from xmr_core.experiment.compared import BASELINE_SPECS, BASELINES, Compared, model_label
from xmr_core.experiment.compared_records import RecordedRun, record_run, records_row, unseen_scorings
from xmr_core.experiment.protocols import ChapterData
from xmr_core.experiment.scoring import (
    TABLE3_COLUMNS,
    TABLE3_PROTOCOLS,
)
from xmr_core.experiment.training import fit_row, request_built, request_model, train_many, train_model
from xmr_core.margins import Cell, Margin
from xmr_core.methods.base import RetrievalModel
from xmr_core.methods.pcme import PCME, TEST_TIME_SIMILARITIES, PCMEConfig, uncertainty
from xmr_core.metrics import ranking_stats, recall_by_bins
from xmr_core.paper_words import Words, worded
from xmr_core.perturb import UNKNOWN_WORD, erase_centre, erase_words, mix_halves, with_captions, with_images
from xmr_core.query_values import QueryMetric, scoring_metrics
from xmr_core.record_evidence import ClaimRecords, Side, judge_records
from xmr_core.records import RunRecord
from xmr_core.reported import paper_values
from xmr_core.run_evaluation import Scoring
from xmr_core.runs.train import FitResult, RunRequest
from xmr_core.runs.tuning import TuningResult
from xmr_core.viz import (
    chi2_radius,
    class_styles,
    confidence_ellipses,
    pca_basis,
    project_gaussians,
    retrieval_gallery,
    sigma_scale,
)

COMPARED = BASELINES  # the chapter's compared methods: the book's baselines (`experiment.compared`)
SPECS = BASELINE_SPECS  # its trained models (name, K)
CEILING_RSUM = {"5K": "rsum 5K"}  # protocol -> the per-run rSum column of its ceiling share (`with_ceiling_share`)
ORDER: list[str] = [model_label(name, k) for name, k in SPECS]  # the rows of Tables 2 and 3, in the paper's order


def request_tuned(method: str, cfg: PCMEConfig, data: ChapterData, tuned: dict[str, TuningResult], run: RunConfig,
                  seed: int | None = None, label: str = "", **train_overrides: object) -> RunRequest:
    """One PCME of config `cfg` (an ablation) at `method`'s tuned learning rate, as a request (`request_built`);
    seed: default `run.seed`."""
    return request_built(lambda: PCME(cfg, data.word_vectors), tuned[method], data, run,
                         run.seed if seed is None else seed, label, **train_overrides)


def train_tuned(method: str, cfg: PCMEConfig, data: ChapterData, tuned: dict[str, TuningResult], run: RunConfig,
                seed: int | None = None, **train_overrides: object) -> tuple[RetrievalModel, FitResult]:
    """One PCME of config `cfg` (`request_tuned`), trained or loaded on its own (`train_many`)."""
    return train_many([request_tuned(method, cfg, data, tuned, run, seed, **train_overrides)], run)[0]





def table1_frame(runs: pd.DataFrame, dataset_label: str) -> pd.DataFrame:
    """Table 1 from its per-seed rows (`table1_runs`): per variant and similarity (first-seen order) the
    sampling flag, the storage per gallery item, and the paper's (CUB) and our mean and std of i2t / t2i R-P."""
    agg = mean_std(runs, ["variant", "similarity"], ["i2t R-P", "t2i R-P"]).reset_index()
    space = {label: (sampling, cost) for label, sampling, cost in TEST_TIME_SIMILARITIES.values()}
    paper = paper_values("pcme")
    paper = paper[paper["table"] == "table1"]
    paper_rp = lambda direction: [
        float(paper[(paper["row"] == f"{v} / {s}") & (paper["key"] == f"class/{direction}/R-P")]["value"].iloc[0])
        for v, s in zip(agg["variant"], agg["similarity"])]
    return pd.DataFrame({
        "variant": agg["variant"], "similarity": agg["similarity"],
        "sampling": [space[s][0] for s in agg["similarity"]],
        "space": [space[s][1] for s in agg["similarity"]],
        "i2t R-P (paper, CUB)": paper_rp("i2t"),
        f"i2t R-P ({dataset_label})": agg["i2t R-P mean"], "i2t std": agg["i2t R-P std"],
        "t2i R-P (paper, CUB)": paper_rp("t2i"),
        f"t2i R-P ({dataset_label})": agg["t2i R-P mean"], "t2i std": agg["t2i R-P std"],
    })


def ablation_row(name: str, rec: RecordedRun, cached: bool, model: PCME) -> dict[str, object]:
    """One ablation row from its run's records (`record_run`), scored with the model's own similarity, the match
    probability: class R-P / R@1 on the unseen classes, PMRP and instance rSum on the whole test split
    (`query_values.scoring_metrics`), the fit and the record's name; a value whose view the data lacks (class,
    plausible) is NaN. The learned a, b of Eq. (3) are read from the model (its weights)."""
    nan = float("nan")
    unseen = {} if rec.unseen is None else scoring_metrics(rec.unseen.evaluation, "default", by_level=False)
    full = scoring_metrics(rec.test.evaluation, "default", by_level=False)
    return {"ablation": name, "cached": cached,
            **{f"{d} {m}": unseen.get(f"class/{d}/{m}", nan) for m in ("R-P", "R@1") for d in ("i2t", "t2i")},
            "i2t PMRP": full.get("plausible/i2t/PMRP", nan), "t2i PMRP": full.get("plausible/t2i/PMRP", nan),
            "rSum": full["rsum"], "a": model.scale.item(), "b": model.shift.item(),
            "best epoch": rec.test.fit.get("best_epoch", nan), "converged": rec.test.converged,
            "train s": round(rec.test.timings.get("train_seconds", nan), 1), "record": rec.test.name}


def embed_gaussians(model: PCME, split: Split, vocab: Vocabulary,
                    device: torch.device | str) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """((image mu, logvar) each (N, D), (caption mu, logvar) each (M, D)) of a split, on the CPU."""
    img, cap = embed_split(model, split, vocab, device=device)
    return tuple(t.cpu() for t in img), tuple(t.cpu() for t in cap)  # type: ignore[return-value]


def own_caption_scores(scores: Tensor, images: np.ndarray, caption_image: np.ndarray) -> np.ndarray:
    """scores (n, M) of n query images against all M captions: (n,) the mean score of row k with the captions
    written for image `images[k]` (`caption_image`: (M,) image of each caption)."""
    return np.array([float(scores[k, np.flatnonzero(caption_image == i)].mean()) for k, i in enumerate(images)])


def own_caption_score(scores: Tensor, images: np.ndarray, caption_image: np.ndarray) -> float:
    """The mean over rows of `own_caption_scores`."""
    return float(own_caption_scores(scores, images, caption_image).mean())


def table3_ceiling_row(ceiling: SplitCeiling, dataset_label: str) -> dict[str, object]:
    """Table 3's "Bayes ceiling" row: the ceiling's instance R@1 per protocol and direction in our columns.
    ceiling: `split_ceiling(test, "5K")`."""
    row: dict[str, object] = {"model": "Bayes ceiling", "seeds": 0, "5K rSum % of ceiling": 100.0}
    for proto in TABLE3_PROTOCOLS:
        for direction in ("i2t", "t2i"):
            row[f"T3 {proto} {direction} R@1 ({dataset_label})"] = ceiling[proto][f"{direction}/R@1"]
    return row


# ==================================================================================================
# train.py: the tuning and training tables, the learning curves, Tables 2 and 3 with the ceiling, the claims.
# ==================================================================================================


def weight_axes(compared: Mapping[str, Compared] = COMPARED) -> str:
    """One line naming each compared method's tuned weight and its axis ("VSE0: margin 0.2 x 2^k, at most 2; ..."),
    of this chapter's methods or a later chapter's (its `COMPARED`)."""
    return "; ".join(f"{m.name}: {m.weight.describe()}" for m in compared.values())


def split_sizes(data: ChapterData) -> pd.DataFrame:
    """Images and captions of each split the chapter uses: seen-class train and validation, the unseen-class test
    split (Table 2) and the whole test split (Table 3)."""
    splits = [("train (seen classes)", data.train), ("val (seen classes)", data.val),
              ("test, unseen classes (Table 2)", data.test_unseen), ("test, all (Table 3)", data.test)]
    return pd.DataFrame([(name, s.n_images, s.n_captions) for name, s in splits],
                        columns=["split", "images", "captions"])



class TrainedModels(NamedTuple):
    """`train_models`' output: the models (best weights, eval mode) and their fits, both keyed by (row label
    `model_label`, seed), and the training table (one `fit_row` per run)."""

    models: dict[tuple[str, int], RetrievalModel]
    results: dict[tuple[str, int], FitResult]
    fits: pd.DataFrame


def train_models(runs: Sequence[tuple[str, int, int]], data: ChapterData, tuned: dict[str, TuningResult], enc: dict,
                 run: RunConfig) -> TrainedModels:
    """Train (or load from the run cache) every (method, K, seed) of `runs` (`chapter_runs`) at its tuned setting,
    as one batch (`request_model`, `train_many`: side by side on the workers), then print each run's `fit_row`
    (`wall s`: the run's share of the batch's wall time)."""
    models, results, fits = {}, {}, []
    t0 = time.perf_counter()
    trained = train_many([request_model(name, k, data, tuned, enc, run, seed) for name, k, seed in runs], run)
    share = (time.perf_counter() - t0) / max(len(runs), 1)
    for (name, k, seed), (model, result) in zip(runs, trained):
        key = (model_label(name, k), seed)
        models[key], results[key] = model, result
        fits.append(fit_row(key[0], seed, tuned[name], result, share))
        print(fits[-1])
    return TrainedModels(models, results, pd.DataFrame(fits))


def learning_curves(results: Mapping[tuple[str, int], FitResult]) -> pd.DataFrame:
    """Validation rSum after every epoch of every run (its history, cached runs included): columns model, seed,
    epoch, val rSum (a run not trained, the run plan's trace: no row)."""
    return pd.DataFrame([{"model": name, "seed": seed, "epoch": h["epoch"], "val rSum": h["val/rsum"]}
                         for (name, seed), result in results.items() for h in result.history],
                        columns=["model", "seed", "epoch", "val rSum"])


def learning_curves_figure(curves: pd.DataFrame, order: Sequence[str], ceiling: float | None, title: str) -> Figure:
    """Validation rSum per epoch of each model of `order` (`learning_curves`; line: mean over seeds, band: std),
    with the validation split's Bayes ceiling `ceiling` dashed (none on real data: `val_ceiling_rsum`)."""
    fig, ax = plt.subplots(figsize=(8.5, 4))
    sns.lineplot(data=curves, x="epoch", y="val rSum", hue="model", hue_order=list(order), errorbar="sd", marker="o",
                 ax=ax)
    if ceiling is not None:
        ax.axhline(ceiling, color="black", ls="--", lw=1)
        ax.text(1, ceiling, " Bayes ceiling", va="bottom", fontsize=8)
    ax.set_title(title)
    ax.legend(title="model", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def record_compared(name: str, k: int, model: RetrievalModel, result: FitResult, seed: int, data: ChapterData,
                    tuned: Mapping[str, TuningResult], run: RunConfig) -> RecordedRun:
    """One trained compared model (`name`, K = `k`) recorded as train.py records it (`compared_records.record_run`,
    its tuned setting as the tuning facts): on the whole test split and on the unseen classes (`unseen_scorings`: a
    PCME with sigma with every test-time similarity, Table 1); a record already there is read back."""
    t = tuned[name]
    facts = {"method": name, "lr": t.lr, t.weight_name: t.weight, "epochs": t.epochs, "K": k}
    return record_run(model, result, seed, data, run, facts, unseen_scorings(model))


def record_models(runs: Sequence[tuple[str, int, int]], trained: TrainedModels, data: ChapterData,
                  tuned: Mapping[str, TuningResult], run: RunConfig) -> dict[tuple[str, int], RecordedRun]:
    """Every trained model of `runs` (`chapter_runs`, as `train_models` trained them) scored once and recorded
    (`record_compared`). Keyed by (row label, seed)."""
    out = {}
    for name, k, seed in runs:
        key = (model_label(name, k), seed)
        out[key] = record_compared(name, k, trained.models[key], trained.results[key], seed, data, tuned, run)
    return out


def per_run_frame(records: Mapping[tuple[str, int], RecordedRun]) -> pd.DataFrame:
    """One row per trained model and seed, from its records (`record_models`): whether it converged, whether it
    collapsed (`claims.instance_collapse` of its test image-to-text scores; "" when it learnt something), every
    Table 2 / 3 value (`records_row`) and the name of its test record."""
    return pd.DataFrame([{"model": name, "seed": seed, "converged": rec.test.converged,
                          "collapse": rec.test.evaluation.scorings["default"].collapse, **records_row(rec),
                          "record": rec.test.name} for (name, seed), rec in records.items()])


def table3_frame(per_run: pd.DataFrame, label: str, ceiling: SplitCeiling | None, order: Sequence[str] = ORDER,
                 chapter: str = "pcme") -> pd.DataFrame:
    """Table 3: PMRP and instance R@1 (1K, 5K) of the models in `order`, the paper's value beside each
    (`summary.with_paper`, `chapter`'s paper values). With a `ceiling` (`split_ceiling` of the test split, "5K"):
    each model's "5K rSum % of ceiling" (`summary.ceiling_share`) and the ceiling's row on top
    (`table3_ceiling_row`)."""
    table = with_paper(seed_summary(per_run, list(TABLE3_COLUMNS), order), chapter, "table3", TABLE3_COLUMNS, label)
    if ceiling is None:
        return table
    table["5K rSum % of ceiling"] = ceiling_share(per_run, "rsum 5K", ceiling["5K"]["rsum"], table["model"])
    return pd.concat([pd.DataFrame([table3_ceiling_row(ceiling, label)]), table], ignore_index=True)


def ceiling_figure(table: pd.DataFrame) -> Figure:
    """Each model's share of the ceiling (`summary.ceiling_frame`) as bars: mean over seeds, std as a line; 100%
    dashed."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    sns.barplot(data=table, y="model", x="percent_of_ceiling", errorbar="sd", ax=ax, color="tab:blue")
    ax.axvline(100, color="black", ls="--", lw=1)
    ax.set_xlabel("5K-analogue rSum, % of the Bayes ceiling (bar: mean over seeds, line: std)")
    ax.set_ylabel("")
    return fig


def write_ceiling(per_run: pd.DataFrame, ceiling: SplitCeiling | None, run: RunConfig,
                  caption: str) -> pd.DataFrame | None:
    """Write `pcme/ceiling` (`summary.write_ceiling_table` of the 5K rSum, with `caption`) and its figure
    (`ceiling_figure`); nothing without a ceiling. Returns the table, or None."""
    table = write_ceiling_table(per_run, ceiling, "pcme/ceiling", run, protocol="5K", rsum_column="rsum 5K",
                                caption=caption)
    if table is None:
        return None
    write_figure(ceiling_figure(table), "pcme/ceiling", run=run,
                 caption="Each model's share of the Bayes ceiling (rSum).")
    return table


PVSE_KS = (1, 2, 4)


PVSE_ROWS = tuple(model_label("PVSE", k) for k in PVSE_KS)
RP = "T2 R-P (class relevance, unseen classes; mean of i2t and t2i), pp"
R1 = "T2 R@1 (class relevance, unseen classes; mean of i2t and t2i), pp"
PMRP = "T3 5K-analogue PMRP (mean of i2t and t2i), pp"
# a claim's metric -> (its per-query values in the records, which record: "unseen" (Table 2) or "test" (Table 3))
CLAIM_METRICS: dict[str, tuple[QueryMetric, str]] = {
    RP: (QueryMetric("R-P", "class"), "unseen"), R1: (QueryMetric("R@1", "class"), "unseen"),
    PMRP: (QueryMetric("PMRP", "plausible"), "test")}

# The claims of Sec. 4.2-4.3 judged on train.py's runs (`xmr_core.claims`, docs/claims.md). The margin of "R-P
# does not rise with K" is the smallest R-P gain the paper calls a gain: PCME over mu only in Table 2 ("some margin").
RP_GAIN = Margin.from_paper(
    "pcme", "PCME over mu only in Table 2's R-P, the gain the paper calls 'some margin'",
    above=(Cell("table2", "PCME", "class/i2t/R-P"), Cell("table2", "PCME", "class/t2i/R-P")),
    below=(Cell("table2", "PCME mu only", "class/i2t/R-P"), Cell("table2", "PCME mu only", "class/t2i/R-P")))
TRAIN_CLAIMS: list[ClaimSpec] = [
    ClaimSpec("rp-over-mu-only", "PCME improves on its deterministic version (mu only) in R-Precision (CUB-style, "
              "class relevance).", "Sec. 4.2, Table 2", "superiority", RP, ("PCME", "PCME mu only")),
    ClaimSpec("pmrp-over-mu-only", "PCME improves on mu only in PMRP (COCO-style plausible matches).",
              "Sec. 4.3, Table 3", "superiority", PMRP, ("PCME", "PCME mu only")),
    ClaimSpec("pvse-r1-rises-with-k", "PVSE with hardest negatives: R@1 rises with K.", "Sec. 4.2, Table 2",
              "trend", R1, PVSE_ROWS),
    ClaimSpec("pvse-r1-k4-over-k1", "PVSE with hardest negatives: a larger K improves R@1 (K=4 above K=1).",
              "Sec. 4.2, Table 2", "superiority", R1, (PVSE_ROWS[-1], PVSE_ROWS[0])),
    ClaimSpec("pvse-rp-not-up-with-k", "PVSE with hardest negatives: R-Precision does not rise with K (K=1 at "
              f"least as good as K=4 within {RP_GAIN.value:g} pp).", "Sec. 4.2, Table 2", "non-inferiority", RP,
              (PVSE_ROWS[0], PVSE_ROWS[-1]), margin_from=RP_GAIN),
    ClaimSpec("pvse-below-vse0", "Every PVSE with hardest negatives is below VSE0 in R-Precision.",
              "Sec. 4.2, Table 2", "universal", RP, direction="less", pairs=tuple((m, "VSE0") for m in PVSE_ROWS)),
    ClaimSpec("pcme-best-rp", "PCME has the best R-Precision of all compared methods.", "Sec. 4.2, Table 2", "peak",
              RP, tuple(ORDER), peak="PCME"),
    ClaimSpec("pcme-best-pmrp", "PCME has the best PMRP of all compared methods.", "Sec. 4.3, Table 3", "peak",
              PMRP, tuple(ORDER), peak="PCME"),
]


def table_views(data: ChapterData, dataset: str) -> dict[str, str]:
    """{view: why it is missing} of the views Tables 2 and 3 need (class on the unseen classes, plausible on the
    whole test split) that `data` lacks (`views.missing_views`), and "1K" where the test split does not split into
    COCO's five folds (`evaluate.coco1k_missing`: its columns are NaN)."""
    folds = coco1k_missing(data.test)
    return {**missing_views({"class": data.test_unseen, "plausible": data.test}, dataset),
            **({"1K": f"{DATASET_NAMES.get(dataset, dataset)}: {folds}"} if folds else {})}


def train_bindings(records: Mapping[tuple[str, int], RecordedRun], run: RunConfig,
                   missing: Mapping[str, str] | None = None) -> dict[str, ClaimRecords]:
    """Each claim of `TRAIN_CLAIMS` bound to the records that judge it (`record_evidence.ClaimRecords`, written
    beside train.py's judgements for `xmr claims recompute pcme`): its metric's per-query values (`CLAIM_METRICS`)
    in each compared model's records of every seed (`record_models`). A claim on a view in `missing`
    (`table_views`) has none."""
    out = {}
    for spec in TRAIN_CLAIMS:
        metric, which = CLAIM_METRICS[spec.metric]
        if missing_reason(metric.view, missing):
            continue
        sides = {m: Side(tuple(getattr(rec, which).name for (name, _), rec in records.items() if name == m))
                 for m in spec.compared}
        out[spec.key] = ClaimRecords(spec, metric, sides, run.dataset, run.profile, "pcme", "train")
    return out


def train_judgements(records: Mapping[tuple[str, int], RecordedRun], bindings: Mapping[str, ClaimRecords],
                     run: RunConfig, missing: Mapping[str, str] | None = None) -> list[Judgement]:
    """Every claim of `TRAIN_CLAIMS` judged (`claims.judge`) on train.py's records as `xmr claims recompute` judges it
    (`record_evidence.judge_records` of its binding, `train_bindings`): each model's per-query values, one row per
    seed, paired by seed and query; a claim on a view in `missing` (`table_views`) is not tested, with its reason."""
    by_name = {r.name: r for rec in records.values() for r in (rec.test, rec.unseen) if r is not None}
    return [judge_records(bindings[spec.key], by_name.__getitem__) if spec.key in bindings else
            not_tested(spec, missing_reason(CLAIM_METRICS[spec.metric][0].view, missing))
            for spec in TRAIN_CLAIMS]


# ==================================================================================================
# ablate.py: Table 1 over the seeds, the ablations, the claims.
# ==================================================================================================


def tuned_settings(tuned: Mapping[str, TuningResult]) -> dict[str, tuple[float, str, float]]:
    """{method: (learning rate, weight name, weight)} of each tuned method."""
    return {name: (t.lr, t.weight_name, t.weight) for name, t in tuned.items()}


T1_SIMILARITIES: dict[str, tuple[str, ...]] = {"PCME mu only": ("mean_cosine",), "PCME": tuple(TEST_TIME_SIMILARITIES)}
T1_VARIANTS: dict[str, str] = {"PCME mu only": "mu only", "PCME": "PCME"}  # Table 1's models -> its variant label


def table1_records(seeds: Sequence[int], data: ChapterData, tuned: dict[str, TuningResult], enc: dict,
                   run: RunConfig) -> dict[tuple[str, int], RecordedRun]:
    """The records of train.py's mu-only model and PCME at every seed (`train_models`: runs loaded from the cache;
    `record_models`: train.py's records read back, the PCME's unseen-class record holding every test-time
    similarity), keyed by (row label, seed)."""
    runs = [(name, 1, seed) for seed in seeds for name in T1_SIMILARITIES]
    return record_models(runs, train_models(runs, data, tuned, enc, run), data, tuned, run)


def similarity_scoring(record: RunRecord, similarity: str) -> str:
    """The scoring of `record` that scores with the test-time similarity `similarity`: "default" for the model's
    own (its config's `test_similarity`), else the similarity's key (`unseen_scorings`)."""
    return "default" if similarity == record.config["test_similarity"] else similarity


def table1_runs(records: Mapping[tuple[str, int], RecordedRun]) -> pd.DataFrame:
    """Table 1's per-seed rows from the records of `table1_records`: per model, seed and test-time similarity
    (`T1_SIMILARITIES`) its variant and similarity labelled as in the paper, whether the run converged and why it
    collapsed (its own scores on the whole test split, `claims.instance_collapse`; "" when it did not), and the mean
    i2t and t2i R-Precision (class relevance, unseen classes) of the record's scoring with that similarity
    (`similarity_scoring`); NaN where the data has no class relevance."""
    rows = []
    for (label, seed), rec in records.items():
        for m in T1_SIMILARITIES.get(label, ()):
            values = {} if rec.unseen is None else scoring_metrics(
                rec.unseen.evaluation, similarity_scoring(rec.unseen, m), by_level=False)
            rows.append({"variant": T1_VARIANTS[label], "similarity": TEST_TIME_SIMILARITIES[m][0], "seed": seed,
                         "converged": rec.test.converged, "collapse": rec.test.evaluation.scorings["default"].collapse,
                         **{f"{d} R-P": values.get(f"class/{d}/R-P", math.nan) for d in ("i2t", "t2i")}})
    return pd.DataFrame(rows)


def ablation_frame(ablations: Sequence[tuple[str, PCMEConfig, Mapping[str, object]]], data: ChapterData,
                   tuned: dict[str, TuningResult], run: RunConfig, seed: int) -> pd.DataFrame:
    """Train (or load) one PCME per ablation (name, config, training overrides such as finetune=True) at PCME's
    tuned learning rate and seed `seed` (`request_tuned`; the ablations as one batch, `train_many`), record it
    (`record_run`: the whole test split, and the unseen classes with its own similarity; the default's run is
    train.py's PCME, its records read back) and read its row from the records (`ablation_row`): one row each."""
    rows, t = [], tuned["PCME"]
    trained = train_many([request_tuned("PCME", cfg, data, tuned, run, seed, f"PCME ablation {name}", **overrides)
                          for name, cfg, overrides in ablations], run, weights=True)  # a, b read from the weights
    for (name, _, _), (model, result) in zip(ablations, trained):
        facts = {"method": "PCME", "ablation": name, "lr": t.lr, "epochs": t.epochs}
        rec = record_run(model, result, seed, data, run, facts, {"default": Scoring(views=("class",))})
        rows.append(ablation_row(name, rec, result.cached, model))  # type: ignore[arg-type]
    return pd.DataFrame(rows)


T1 = "Table 1 R-P (class relevance, unseen classes; mean of i2t and t2i), pp"
PCME_SIMILARITIES = tuple(f"PCME: {label}" for label, _, _ in TEST_TIME_SIMILARITIES.values())
MU_ONLY = "mu only: Mean only"

# The claims of Sec. 4.2 on Table 1, judged on ablate.py's runs: every similarity of one trained PCME per seed on
# the same test queries, so the similarities are paired by seed and by query. The margin of "close" and "at least
# as good" is the gap of Table 1 the paper does not call close: the similarities it calls reasonable (2-Wasserstein,
# Average L2) are within 0.2 pp of Mean only, ELK, the nearest it does not, this far below.
T1_CLOSE = Margin.from_paper(
    "pcme", "PCME Mean only over ELK in Table 1's R-P, the nearest similarity the paper does not call reasonable",
    above=(Cell("table1", "PCME / Mean only", "class/i2t/R-P"), Cell("table1", "PCME / Mean only", "class/t2i/R-P")),
    below=(Cell("table1", "PCME / ELK", "class/i2t/R-P"), Cell("table1", "PCME / ELK", "class/t2i/R-P")))
ABLATE_CLAIMS: list[ClaimSpec] = [
    ClaimSpec("match-prob-best", "At test time the match probability is the best similarity for PCME.",
              "Sec. 4.2, Table 1", "peak", T1, PCME_SIMILARITIES, peak="PCME: Match prob"),
    ClaimSpec("w2-close-to-mean-only", "2-Wasserstein (2x storage) performs close to the mean-only similarity.",
              "Sec. 4.2, Table 1", "equivalence", T1, ("PCME: 2-Wasserstein", "PCME: Mean only"),
              margin_from=T1_CLOSE),
    ClaimSpec("any-similarity-over-mu-only", "PCME with any test-time similarity mostly improves over mu-only "
              f"training (declared: every similarity at least as good as mu only, within {T1_CLOSE.value:g} pp).",
              "Sec. 4.2, Table 1", "universal", T1, pairs=tuple((m, MU_ONLY) for m in PCME_SIMILARITIES),
              each="non-inferiority", margin_from=T1_CLOSE),
]


T1_METRIC = QueryMetric("R-P", "class")  # Table 1's claims: each query's class R-P, i2t and t2i as two strata


def ablate_bindings(records: Mapping[tuple[str, int], RecordedRun], run: RunConfig,
                    missing: Mapping[str, str] | None = None) -> dict[str, ClaimRecords]:
    """Each claim of `ABLATE_CLAIMS` bound to the records that judge it (written beside ablate.py's judgements for
    `xmr claims recompute pcme`): each "<variant>: <similarity>" of Table 1 is its model's unseen-class records of
    every seed (`table1_records`) in the scoring of that similarity (`similarity_scoring`), on `T1_METRIC`. None
    where `missing` (`table_views`) has the class view."""
    if missing_reason("class", missing) or any(rec.unseen is None for rec in records.values()):
        return {}
    sides = {}
    for label, similarities in T1_SIMILARITIES.items():
        recs = [rec.unseen for (name, _), rec in records.items() if name == label and rec.unseen is not None]
        for m in similarities:
            sides[f"{T1_VARIANTS[label]}: {TEST_TIME_SIMILARITIES[m][0]}"] = Side(
                tuple(r.name for r in recs), similarity_scoring(recs[0], m))
    return {spec.key: ClaimRecords(spec, T1_METRIC, {m: sides[m] for m in spec.compared}, run.dataset, run.profile,
                                   "pcme", "ablate") for spec in ABLATE_CLAIMS}


def ablate_judgements(records: Mapping[tuple[str, int], RecordedRun], bindings: Mapping[str, ClaimRecords],
                      missing: Mapping[str, str] | None = None) -> list[Judgement]:
    """Every claim of `ABLATE_CLAIMS` judged (`claims.judge`) on Table 1's records as `xmr claims recompute` judges it
    (`record_evidence.judge_records` of its binding, `ablate_bindings`): each similarity's per-query class R-P of
    both directions; the similarities of one PCME score the same queries, so they pair by query as well as by
    seed. Table 1 is class relevance: not tested where `missing` (`table_views`) has it."""
    by_name = {r.name: r for rec in records.values() for r in (rec.test, rec.unseen) if r is not None}
    return [judge_records(bindings[spec.key], by_name.__getitem__) if spec.key in bindings else
            not_tested(spec, missing_reason("class", missing) or "the data has no class relevance")
            for spec in ABLATE_CLAIMS]


# ==================================================================================================
# visualise.py: Figures 5-8, sigma by caption specificity, a gallery, the claims. Gaussians are (mu, logvar)
# pairs, each (n, D), on the CPU (`embed_gaussians`).
# ==================================================================================================

Gaussians = tuple[Tensor, Tensor]


def spread_classes(image_class: np.ndarray, n: int) -> list[int]:
    """`n` classes spread evenly over the sorted classes present in `image_class` (N,), first and last included."""
    present = np.unique(image_class)
    return [int(c) for c in present[np.linspace(0, len(present) - 1, n).round().astype(int)]]


def generic_caption(model: PCME, split: Split, vocab: Vocabulary, device: torch.device | str) -> Gaussians:
    """The Gaussian ((1, D), (1, D)) of the most generic caption: every word unknown, as many words as the split's
    median caption (the paper's "this bird has <unk> ... <unk>")."""
    length = int(np.median([len(c.split()) for c in split.captions]))
    one = split.subset(np.array([0]), "generic")
    generic = with_captions(one, [f"{UNKNOWN_WORD} " * length] * one.n_captions, "generic")
    mu, logvar = embed_gaussians(model, generic, vocab, device)[1]
    return mu[:1], logvar[:1]


def image_groups(split: Split) -> np.ndarray:
    """(N,) the group of each image Figure 5 colours by: its class (CUB, scenes), or the image itself where the data
    has no classes (COCO: each image with its own captions)."""
    return np.asarray(split.image_class) if split.image_class is not None else np.arange(split.n_images)


def embedding_figure(split: Split, images: Gaussians, captions: Gaussians, generic: Gaussians,
                     classes: Sequence[int]) -> Figure:
    """Figure 5: the 50% regions of the images (left) and captions (right) of `classes` (groups of `image_groups`:
    classes, or images where the data has none), projected onto the two
    principal directions of their means (`viz.project_gaussians`), each class in the colour and marker its name
    says (`viz.class_styles`: "red circle" red, a circle at each mean), with the 99% region of the `generic` caption
    (`generic_caption`) in black on both. Where σ is small beside the spread of the means, every ellipse is drawn
    `viz.sigma_scale` times larger (one factor for both panels, stated in the titles), and a bar in each panel
    shows the drawn radius of its median σ with the value."""
    groups = image_groups(split)
    pick_img = np.flatnonzero(np.isin(groups, classes))
    pick_cap = np.flatnonzero(np.isin(groups[split.caption_image], classes))
    centre, basis = pca_basis(np.concatenate([images[0][pick_img].numpy(), captions[0][pick_cap].numpy()]))
    generic_2d = project_gaussians(generic[0].numpy(), generic[1].numpy(), centre, basis)
    names = split.class_names or [f"image {split.image_ids[c]}" if split.image_class is None else str(c)
                                  for c in range(int(groups.max()) + 1)]
    style = dict(zip(classes, class_styles([names[c] for c in classes], RGB)))
    panels = [(*project_gaussians(images[0][pick_img].numpy(), images[1][pick_img].numpy(), centre, basis),
               groups[pick_img], "images"),
              (*project_gaussians(captions[0][pick_cap].numpy(), captions[1][pick_cap].numpy(), centre, basis),
               groups[split.caption_image[pick_cap]], "captions")]
    scale = sigma_scale(np.concatenate([p[0] for p in panels]), np.concatenate([p[1] for p in panels]))
    radius = chi2_radius(0.5)
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.6))
    for ax, (m2, l2, cls, title) in zip(axes, panels):
        confidence_ellipses(ax, m2, l2, colors=[style[int(c)][0] for c in cls], level=0.5, linewidth=0.8, scale=scale)
        for c in classes:
            at = m2[np.asarray(cls) == c]
            ax.scatter(at[:, 0], at[:, 1], marker=style[c][1], color=style[c][0], s=14, edgecolors="black",
                       linewidths=0.3, zorder=3)
        confidence_ellipses(ax, *generic_2d, colors="black", level=0.99, linewidth=2.5, fill_alpha=0.0, scale=scale)
        drawn = f", drawn ×{scale:g}" if scale > 1 else ""
        ax.set_title(f"{title}: 50% regions (radius {radius:.2f}σ{drawn}); black: generic caption (99%)", fontsize=9)
        ax.set_xlabel("principal direction 1 of the means")
        ax.set_ylabel("principal direction 2 of the means")
        sigma = float(np.median(np.exp(0.5 * l2)))
        (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
        bar = radius * sigma * scale
        ax.plot([x0 + 0.05 * (x1 - x0), x0 + 0.05 * (x1 - x0) + bar], [y0 + 0.05 * (y1 - y0)] * 2, color="black", lw=2)
        ax.text(x0 + 0.05 * (x1 - x0), y0 + 0.07 * (y1 - y0), f"median σ = {sigma:.3g}: a 50% radius as drawn",
                fontsize=8, va="bottom")
    for c in classes:
        axes[0].plot([], [], color=style[c][0], marker=style[c][1], ls="-", label=names[c])
    axes[0].legend(fontsize=8, loc="best", title="class", title_fontsize=8)
    fig.tight_layout()
    return fig


def _best_ranks(scores: Tensor, split: Split) -> tuple[Tensor, Tensor]:
    """(N,) image→text and (M,) text→image best ranks (instance relevance) of scores (N, M) images × captions."""
    i2t = ranking_stats(scores, {"instance": split.relevance("instance", "i2t")})["instance"]
    t2i = ranking_stats(scores.T, {"instance": split.relevance("instance", "t2i")})["instance"]
    return i2t.best_rank, t2i.best_rank


def recall_by_sigma(scores: Tensor, split: Split, image_sigma: np.ndarray, caption_sigma: np.ndarray,
                    bins: int = 10) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Figure 6: instance R@1 of the queries in `bins` equal-count bins of σ (`metrics.recall_by_bins`), image→text
    (image_sigma (N,)) and text→image (caption_sigma (M,)); scores (N, M) images × captions."""
    i2t, t2i = _best_ranks(scores, split)
    return (pd.DataFrame(recall_by_bins(image_sigma, i2t, bins=bins, value_name="sigma")),
            pd.DataFrame(recall_by_bins(caption_sigma, t2i, bins=bins, value_name="sigma")))


def sigma_bin_hits(scores: Tensor, split: Split, image_sigma: np.ndarray, caption_sigma: np.ndarray,
                   bins: int) -> dict[str, list[np.ndarray]]:
    """The per-query values `recall_by_sigma`'s R@1 averages: {"i2t": [(n_b,) 100 × (best rank == 1) of each query
    of σ bin b, by increasing σ], "t2i": ...}, the queries binned as `metrics.recall_by_bins` bins them (stable sort
    by σ, `np.array_split` into equal-count bins)."""
    out = {}
    for direction, sigma, rank in zip(("i2t", "t2i"), (image_sigma, caption_sigma), _best_ranks(scores, split)):
        hits = 100.0 * (rank.numpy() <= 1)
        out[direction] = [hits[b] for b in np.array_split(np.argsort(np.asarray(sigma), kind="stable"), bins)]
    return out


def recall_by_sigma_figure(i2t: pd.DataFrame, t2i: pd.DataFrame) -> Figure:
    """Figure 6: R@1 per σ bin (`recall_by_sigma`) as bars, image→text and text→image."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    for ax, frame, title in ((axes[0], i2t, "image-to-text"), (axes[1], t2i, "text-to-image")):
        ax.bar(frame["bin"], frame["R@1"])
        ax.set_xlabel("uncertainty bin (low σ → high σ)")
        ax.set_ylabel("R@1 (%)")
        ax.set_title(title)
    return fig


def bin_correlation(bins: pd.DataFrame) -> float:
    """Pearson correlation of the σ bin's index and its R@1 (`recall_by_sigma`): < 0 when R@1 falls as σ rises."""
    return float(np.corrcoef(bins["bin"], bins["R@1"])[0, 1])


class Erasing(NamedTuple):
    """Figure 7: `frame` (ratio, mean image sigma, mean caption sigma) per erased ratio, and the per-item σ it
    averages: `image_sigma` (R, N) of each image, `caption_sigma` (R, M) of each caption, at each of the R ratios."""

    frame: pd.DataFrame
    image_sigma: np.ndarray
    caption_sigma: np.ndarray


def sigma_by_erasing(model: PCME, split: Split, trunk: PretrainedTrunk, vocab: Vocabulary,
                     device: torch.device | str, ratios: Sequence[float], rng: np.random.Generator) -> Erasing:
    """Figure 7: per erased ratio r, the σ of each of the split's images with their centre r of the pixels greyed
    (`perturb.erase_centre`) and of each of its captions with r of the words unknown (`perturb.erase_words`, drawing
    from `rng` in ratio order), and their means (`Erasing.frame`)."""
    image_sigma, caption_sigma = [], []
    for r in ratios:
        _, image_lv = embed_gaussians(model, with_images(split, erase_centre(split.images, r), f"erase{r}", trunk),
                                      vocab, device)[0]
        _, caption_lv = embed_gaussians(model, with_captions(split, erase_words(split.captions, r, rng), f"drop{r}"),
                                        vocab, device)[1]
        image_sigma.append(uncertainty(image_lv).double().numpy())
        caption_sigma.append(uncertainty(caption_lv).double().numpy())
    images, captions = np.stack(image_sigma), np.stack(caption_sigma)
    frame = pd.DataFrame({"ratio": list(ratios), "image sigma": images.mean(1), "caption sigma": captions.mean(1)})
    return Erasing(frame, images, captions)


def erasing_figure(erasing: pd.DataFrame) -> Figure:
    """Figure 7: mean σ against the erased ratio (`sigma_by_erasing`), images and captions."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
    axes[0].plot(erasing["ratio"], erasing["image sigma"], marker="o")
    axes[0].set_title("images: erased pixels")
    axes[1].plot(erasing["ratio"], erasing["caption sigma"], marker="o")
    axes[1].set_title("captions: erased words")
    for ax in axes:
        ax.set_xlabel("erased ratio")
    axes[0].set_ylabel("mean σ (geometric mean over dims)")
    fig.tight_layout()
    return fig


def mixed_and_erased(a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
    """Figure 8's images, each (n, H, W, 3): A, B, "mix" (the left half of A beside the right half of B,
    `perturb.mix_halves`) and "erase" (A with its centre quarter of the pixels grey)."""
    return {"A": a, "B": b, "mix": mix_halves(a, b), "erase": erase_centre(a, 0.25)}


def image_gaussians(model: PCME, split: Split, images: Mapping[str, np.ndarray], trunk: PretrainedTrunk,
                    vocab: Vocabulary, device: torch.device | str) -> dict[str, Gaussians]:
    """{name: the image Gaussians of `split` with its pixels replaced by `images[name]` (split.n_images, H, W, 3)}."""
    return {name: embed_gaussians(model, with_images(split, pixels, name, trunk), vocab, device)[0]
            for name, pixels in images.items()}


class SetAlgebra(NamedTuple):
    """Figure 8 measured per image pair (A, B), each (n,): the mean match probability of the mix with A's, B's and
    any caption, of erase(A) with A's and any caption, and the σ of A and of erase(A)."""

    mix_a: np.ndarray
    mix_b: np.ndarray
    mix_any: np.ndarray
    erase_a: np.ndarray
    erase_any: np.ndarray
    sigma_a: np.ndarray
    sigma_erase: np.ndarray

    def frame(self) -> pd.DataFrame:
        """The measures averaged over the pairs as (quantity, value) rows (the σ as the share of images whose σ
        grows when erased)."""
        names = ["p(mix, captions of A)", "p(mix, captions of B)", "p(mix, any caption)",
                 "p(erase(A), captions of A)", "p(erase(A), any caption)",
                 "share of images whose sigma grows when erased"]
        values = [float(np.mean(v)) for v in self[:5]] + [float(np.mean(self.sigma_erase > self.sigma_a))]
        return pd.DataFrame({"quantity": names, "value": values})


def set_algebra(model: PCME, split: Split, trunk: PretrainedTrunk, vocab: Vocabulary, device: torch.device | str,
                captions: Gaussians, n_pairs: int) -> SetAlgebra:
    """Figure 8 over `n_pairs` pairs: image k (A) with image n_pairs + k (B) of the split, mixed and erased
    (`mixed_and_erased`), each scored against every caption of the split (`captions`) by the match probability."""
    a_idx, b_idx = np.arange(n_pairs), np.arange(n_pairs, 2 * n_pairs)
    emb = image_gaussians(model, split.subset(a_idx, "A"), mixed_and_erased(split.images[a_idx], split.images[b_idx]),
                          trunk, vocab, device)
    p_mix = score_matrix(model, emb["mix"], captions).cpu()
    p_erase = score_matrix(model, emb["erase"], captions).cpu()
    return SetAlgebra(own_caption_scores(p_mix, a_idx, split.caption_image),
                      own_caption_scores(p_mix, b_idx, split.caption_image), p_mix.double().mean(1).numpy(),
                      own_caption_scores(p_erase, a_idx, split.caption_image), p_erase.double().mean(1).numpy(),
                      uncertainty(emb["A"][1]).double().numpy(), uncertainty(emb["erase"][1]).double().numpy())


SET_ALGEBRA_COLOURS = {"A": "C0", "B": "C1", "mix": "C2", "erase": "C3"}


def set_algebra_figure(images: Mapping[str, np.ndarray], gaussians: Mapping[str, Gaussians], centre: np.ndarray,
                       basis: np.ndarray) -> Figure:
    """Figure 8 for one pair: the four images of `mixed_and_erased` (each (1, H, W, 3)) on top, and below the 50%
    regions of their Gaussians (`image_gaussians`) projected onto `basis` (`viz.pca_basis`): the mix beside A and B,
    erase(A) beside A."""
    fig = plt.figure(figsize=(10, 7))
    grid = fig.add_gridspec(2, 4, height_ratios=[1, 2.2])
    for k, (name, pixels) in enumerate(images.items()):
        thumb = fig.add_subplot(grid[0, k])
        thumb.imshow(pixels[0])
        thumb.set_title("erase(A)" if name == "erase" else name, color=SET_ALGEBRA_COLOURS[name], fontsize=10)
        thumb.set_xticks([])
        thumb.set_yticks([])
    panels = [fig.add_subplot(grid[1, :2]), fig.add_subplot(grid[1, 2:])]
    for ax, (label, drawn) in zip(panels, [("mix", ("A", "B", "mix")), ("erase", ("A", "erase"))]):
        for name in drawn:
            m2, l2 = project_gaussians(gaussians[name][0].numpy(), gaussians[name][1].numpy(), centre, basis)
            confidence_ellipses(ax, m2, l2, colors=SET_ALGEBRA_COLOURS[name], level=0.5, linewidth=1.5)
            ax.plot([], [], color=SET_ALGEBRA_COLOURS[name], label=name)
        ax.legend()
        ax.locator_params(nbins=5)
        ax.set_title(f"{label} (50% regions, PCA of the image means)", fontsize=9)
    return fig


def sigma_by_level(split: Split, caption_sigma: np.ndarray) -> pd.DataFrame | None:
    """Per caption level: the number of captions, their mean σ (caption_sigma (M,)) and their mean number of exact
    positives, rows by increasing positives; None without caption levels and exact relevance (real data)."""
    if split.caption_level is None or split.exact is None:
        return None
    levels = pd.DataFrame({"level": split.caption_level, "sigma": caption_sigma,
                           "exact positives": split.exact.sum(1)})
    by_level = levels.groupby("level").agg(captions=("sigma", "size"), sigma=("sigma", "mean"),
                                           positives=("exact positives", "mean")).reset_index()
    return by_level.sort_values("positives").reset_index(drop=True)


def sigma_per_level(split: Split, caption_sigma: np.ndarray) -> dict[str, np.ndarray]:
    """{level: (n_l,) the σ of each caption of that level} (caption_sigma (M,)): the values `sigma_by_level` averages;
    {} without caption levels (real data)."""
    if split.caption_level is None:
        return {}
    levels = np.asarray(split.caption_level)
    return {str(lv): np.asarray(caption_sigma, dtype=np.float64)[levels == lv] for lv in np.unique(levels)}


def sigma_positives_correlation(split: Split, caption_sigma: np.ndarray) -> float:
    """Spearman correlation of each caption's σ (caption_sigma (M,)) with its number of exact positives; NaN without
    exact relevance (real data)."""
    if split.exact is None:
        return float("nan")
    return float(pd.Series(caption_sigma).corr(pd.Series(split.exact.sum(1)), method="spearman"))


def level_gallery(scores: Tensor, split: Split, levels: Sequence[str] | None, k: int = 5) -> Figure:
    """Text-to-image top-k (scores (N, M) images × captions) of the first caption of each of `levels`, framed green
    where the caption's logical form holds in the image (`viz.retrieval_gallery`). Without levels (real data): the
    first caption of `GALLERY_CAPTIONS` test images, framed green on the image it was written for."""
    if levels is not None and split.exact is not None:
        picks = [int(np.flatnonzero(np.array(split.caption_level) == lv)[0]) for lv in levels]
        relevance, titles = split.exact, [f"[{split.caption_level[c]}] {split.captions[c]}" for c in picks]
    else:
        picks = [int(np.flatnonzero(split.caption_image == i)[0]) for i in range(min(GALLERY_CAPTIONS, split.n_images))]
        relevance, titles = split.relevance("instance", "t2i"), [split.captions[c] for c in picks]
    top = torch.topk(scores.T[picks], k, dim=1)
    relevant = np.stack([relevance[c, top.indices[q].numpy()] for q, c in enumerate(picks)])
    return retrieval_gallery(titles, split.images[top.indices.numpy()], relevant, top.values.numpy())


GALLERY_CAPTIONS = 4  # captions `level_gallery` draws on real data (one per level on scenes)
SIGMA_THIRDS = ("lowest", "middle", "highest")  # the σ bins of Figure 6's claims, by increasing σ
ERASE_RATIOS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)  # Figure 7's erased shares of pixels / words
FIG8 = {"mix_a": "p(mix, A's captions)", "mix_b": "p(mix, B's captions)", "mix_any": "p(mix, any caption)",
        "erase_a": "p(erase(A), A's captions)", "erase_any": "p(erase(A), any caption)", "sigma_a": "sigma of A",
        "sigma_erase": "sigma of erase(A)"}  # `SetAlgebra` field -> compared "model"


def sigma_third(direction: str, third: str) -> str:
    """The compared "model" of Figure 6's claims: one direction's queries in one third of σ."""
    return f"{direction} queries, {third} third of sigma"


def query_sigma(direction: str, what: str) -> str:
    """The key under which `visualise_evidence` carries one direction's per-query R@1 hits or σ ("hits", "sigma") in
    test order, for `stacked_evidence` to bin across seeds (`thirds_across_seeds`)."""
    return f"{direction} queries' {what} (test order)"


def thirds_across_seeds(hits: np.ndarray, sigma: np.ndarray) -> list[np.ndarray]:
    """Figure 6's thirds of σ with the same queries at every seed: the query indices of each third, by increasing
    mean over the seeds of each query's σ rank (`sigma` (S, Q), ranks within each seed, stable; `np.array_split`
    into equal-count bins as `metrics.recall_by_bins`), so that a column of a third's (S, n) hits is one query at every
    seed (`hits` (S, Q) is only checked for its shape)."""
    if hits.shape != sigma.shape or sigma.ndim != 2:
        raise ValueError(f"thirds_across_seeds: hits {hits.shape} and sigma {sigma.shape} must both be (S, Q)")
    ranks = np.argsort(np.argsort(sigma, axis=1, kind="stable"), axis=1, kind="stable").mean(axis=0)
    return np.array_split(np.argsort(ranks, kind="stable"), len(SIGMA_THIRDS))


def erased(modality: str, ratio: float) -> str:
    """The compared "model" of Figure 7's claims: the images (captions) at one erased ratio."""
    return f"{modality}, {ratio:.0%} erased"


def level_captions(level: str) -> str:
    """The compared "model" of Figure 5's claim: the captions of one specificity level."""
    return f"{level} captions"


# The claims of Sec. 4.4 judged on visualise.py's measurements of train.py's PCME at every seed (loaded from the run
# cache): paired by seed, so each interval covers training noise and the sampling of the test queries (images,
# captions, image pairs).
# - Figure 6 ("performance drops with increasing uncertainty"): a falling trend of R@1 over the queries' σ,
#   in thirds of σ rather than the figure's 10 bins: a trend must resolve every adjacent step, and ten bins of a
#   few hundred queries cannot; thirds test the same direction at a resolution the test split can. Each third
#   holds other queries: not paired.
# - Figure 7 ("σ positively correlates with the ratio of erased pixels"; the figure rises at every step): a rising
#   trend of each image's (caption's) σ over the erased ratios, the same items at every ratio: paired by item.
# - Figure 5 (the generic caption gets the widest distribution): on scenes, the vague captions (a count, a colour
#   or a shape only) have the largest mean σ of the four levels; each level holds other captions: not paired.
# - Figure 8 (mixing covers the intersection, erasing gives a slightly wider distribution that includes the
#   original): per image pair, the mix matches A's captions and B's captions better than an average caption; erase(A)
#   has a larger σ than A and still matches A's captions better than an average caption; paired by pair.
VISUALISE_CLAIMS: list[ClaimSpec] = [
    *(ClaimSpec(f"r1-falls-with-sigma-{d}", f"Performance drops with increasing uncertainty ({d}: R@1 falls from the "
                "lowest to the highest third of sigma).", "Sec. 4.4, Figure 6", "trend",
                f"{d} instance R@1 of the queries in each third of sigma (per-query hits), %",
                tuple(sigma_third(d, t) for t in SIGMA_THIRDS), direction="less") for d in ("i2t", "t2i")),
    *(ClaimSpec(f"sigma-rises-with-erased-{what}", f"Sigma rises with the share of erased {what}.",
                "Sec. 4.4, Figure 7", "trend", f"sigma of each {item} (geometric mean over dims)",
                tuple(erased(modality, r) for r in ERASE_RATIOS))
      for what, item, modality in (("pixels", "image", "images"), ("words", "caption", "captions"))),
    *(ClaimSpec(f"sigma-higher-when-erased-{what}", f"Sigma is higher with {ERASE_RATIOS[-1]:.0%} of the {what} "
                "erased than with none.", "Sec. 4.4, Figure 7", "superiority",
                f"sigma of each {item} (geometric mean over dims)",
                (erased(modality, ERASE_RATIOS[-1]), erased(modality, ERASE_RATIOS[0])))
      for what, item, modality in (("pixels", "image", "images"), ("words", "caption", "captions"))),
    ClaimSpec("vague-captions-widest", "Generic captions get the widest distributions (on scenes: the vague captions "
              "have the largest sigma of the four levels).", "Sec. 4.4, Figure 5", "peak",
              "sigma of each caption (geometric mean over dims)", tuple(level_captions(lv) for lv in LEVELS),
              peak=level_captions("vague"), datasets=("scenes",)),
    ClaimSpec("mix-covers-intersection", "Mixing two images covers the intersection: the mix matches the captions of "
              "both images better than an average caption.", "Sec. 4.4, Figure 8", "universal",
              "match probability per image pair", pairs=((FIG8["mix_a"], FIG8["mix_any"]),
                                                         (FIG8["mix_b"], FIG8["mix_any"]))),
    ClaimSpec("erase-wider", "Erasing part of an image gives a wider distribution.", "Sec. 4.4, Figure 8",
              "superiority", "sigma of each image A (geometric mean over dims)",
              (FIG8["sigma_erase"], FIG8["sigma_a"])),
    ClaimSpec("erase-includes-original", "The erased image's distribution still includes the original: erase(A) "
              "matches A's captions better than an average caption.", "Sec. 4.4, Figure 8", "superiority",
              "match probability per image", (FIG8["erase_a"], FIG8["erase_any"])),
]
# The paper's words of every claim (docs/claims.md, "The paper's words"): verbatim, and how the test reads them.
_ERASE_PIXELS = ("We quantitatively verify that the sigma values positively correlate with the ratio of erased pixels in "
                "Figure 7.")
_ERASE_WORDS = "between the caption ambiguity induced by erasing words and the embedding uncertainty"
WORDS: dict[str, Words] = {
    "rp-over-mu-only": Words(
        "PCME also improves upon its deterministic version, PCME μ -only, with some margin: +1.6 pp and +1.2 pp on "
        "i2t and t2i R-Precision scores, respectively.",
        "PCME above mu only in the mean of i2t and t2i R-P; the paper's margin is its finding, not the test's."),
    "pmrp-over-mu-only": Words(
        "We observe that the stochastic version of PCME performs better than the deterministic variant (μ only) "
        "across the board.",
        "Read on PMRP, Table 3's metric: PCME above mu only in the mean of i2t and t2i 5K-analogue PMRP."),
    "pvse-r1-rises-with-k": Words(
        "Comparing PVSE with different values of K , we note that increasing K does not always bring about "
        "performance gains under the R-Precision metric (20.5%, 21.2% and 19.9% for $K=1,2,4$, respectively, for "
        "t2i), while the improvement is more pronounced under the R@1 metric.",
        "R@1 (mean of i2t and t2i) rises at every step K = 1 → 2 → 4.",
        stronger_than_paper="the words say the improvement with K is pronounced in R@1, not that it comes at every "
        "step (the paper's own t2i R@1 falls from K=1 to 2); `pvse-r1-k4-over-k1` tests the words"),
    "pvse-r1-k4-over-k1": Words(
        "Comparing PVSE with different values of K , we note that increasing K does not always bring about "
        "performance gains under the R-Precision metric (20.5%, 21.2% and 19.9% for $K=1,2,4$, respectively, for "
        "t2i), while the improvement is more pronounced under the R@1 metric.",
        "The improvement with K in R@1: PVSE K=4 above K=1 in the mean of i2t and t2i R@1."),
    "pvse-rp-not-up-with-k": Words(
        "Comparing PVSE with different values of K , we note that increasing K does not always bring about "
        "performance gains under the R-Precision metric (20.5%, 21.2% and 19.9% for $K=1,2,4$, respectively, for "
        "t2i), while the improvement is more pronounced under the R@1 metric.",
        "No gain in R-P from K=1 to K=4: K=1 at least as good as K=4 within the smallest R-P gain the paper calls "
        "one (PCME over mu only, `RP_GAIN`)."),
    "pvse-below-vse0": Words(
        "However, under the R-Precision metric, we observe all PVSE models with HNM are worse than VSE0 "
        "(R-Precision drops from 22.4% for VSE0 to 18.4% for PVSE $K=4$).",
        "Each PVSE (K = 1, 2, 4) below VSE0 in the mean of i2t and t2i R-P; one PVSE not below refutes it."),
    "pcme-best-rp": Words(
        "Finally, PCME provides the best performances on both R-Precision and R@1 metrics, except for the R@1 "
        "score for i2t.",
        "Read on R-P (the mean of i2t and t2i): PCME above every other model of Table 2, mu only included."),
    "pcme-best-pmrp": Words(
        "However, on the more accurate PMRP metric, PCME outperforms previous methods with some margin (e.g. "
        "31.8%, 29.7%, 33.0% versus 34.1% for the 5K, i2t task).",
        "PCME above every other model the chapter trains (mu only included) in the mean of i2t and t2i "
        "5K-analogue PMRP; VSRN and AOQ are not built."),
    "match-prob-best": Words(
        "The best performance is indeed attained by the similarity measure using the match probability, with "
        "26.3% and 26.8% i2t and t2i performances, respectively.",
        "The match probability above every other test-time similarity of the same trained PCME (Table 1 R-P)."),
    "w2-close-to-mean-only": Words(
        "Other cheaper variants of probabilistic distances, such as 2-Wasserstein, also result in reasonable "
        "performances (26.2% and 26.7% for i2t and t2i, respectively), while introducing only twice the original "
        "space consumption.",
        "2-Wasserstein within ±`T1_CLOSE` of Mean only (closer than ELK, the nearest similarity the paper does not "
        "call reasonable). Nearly by construction: W2² = |μ − μ'|² + |σ − σ'|², and with σ of a few hundredths "
        "the σ-term is too small to reorder the gallery, so W2 ranks almost as Mean only does; it holds whatever "
        "the uncertainty learnt and says little about it."),
    "any-similarity-over-mu-only": Words(
        "First of all, we observe that PCME, with any test-time similarity measure, mostly improves over the "
        "deterministically trained PCME (μ -only training).",
        "Every similarity of the trained PCME at least as good as mu only's Mean only within `T1_CLOSE` ('mostly' "
        "read as: none falls below by more than the gap the paper calls a real difference in Table 1)."),
    **{f"r1-falls-with-sigma-{d}": Words(
        "We observe performance drops with increasing uncertainty.",
        f"{d} R@1 falls at each step from the lowest to the middle to the highest third of the queries' σ (the "
        "figure's 10 bins in thirds; each third other queries, unpaired).") for d in ("i2t", "t2i")},
    **{f"sigma-rises-with-erased-{what}": Words(
        quote, f"Each {item}'s σ rises at every step of the erased ratio 0 → 50% (the same {item}s at every ratio, "
        "paired).", stronger_than_paper=f"the words say σ correlates positively with the erased share, not that it "
        f"rises at every step; `sigma-higher-when-erased-{what}` tests the words")
       for what, item, quote in (("pixels", "image", _ERASE_PIXELS), ("words", "caption", _ERASE_WORDS))},
    **{f"sigma-higher-when-erased-{what}": Words(
        quote, f"The positive correlation read as: each {item}'s σ with 50% erased above its σ with none (paired "
        "by item)" + (";" if what == "words" else ".") + (" the sentence opens 'We discover another positive "
        "correlation' before Figure 8's caption." if what == "words" else ""))
       for what, item, quote in (("pixels", "image", _ERASE_PIXELS), ("words", "caption", _ERASE_WORDS))},
    "vague-captions-widest": Words(
        "This generic caption covers most of the caption variations in the embedding space (red ellipses).",
        "On scenes the vague captions (a count, a colour or a shape only) stand for the generic one: their mean σ "
        "above each other caption level's."),
    "mix-covers-intersection": Words(
        "On the embedding space, we find that the mixing operation on the images results in embeddings that cover "
        "the *intersection* of the original embeddings.",
        "Per image pair, the mix's match probability with A's captions and with B's captions each above its "
        "match probability with an average caption."),
    "erase-wider": Words(
        "Occluding a small region in input images, on the other hand, amounts to slightly wider distributions, "
        "indicating an *inclusion* relationship.",
        "Per image, σ of erase(A) (centre quarter grey) above σ of A."),
    "erase-includes-original": Words(
        "Occluding a small region in input images, on the other hand, amounts to slightly wider distributions, "
        "indicating an *inclusion* relationship.",
        "The inclusion read as: erase(A) still matches A's captions better than an average caption."),
}
TRAIN_CLAIMS, ABLATE_CLAIMS, VISUALISE_CLAIMS = (worded(c, WORDS) for c in (TRAIN_CLAIMS, ABLATE_CLAIMS,
                                                                           VISUALISE_CLAIMS))
# The committed train.py verdicts were judged on per-seed scores, before train.py read its runs' records.
TRAIN_CLAIMS = seed_only(TRAIN_CLAIMS, lambda s: RUN_MEANS)
CLAIMS: list[ClaimSpec] = TRAIN_CLAIMS + ABLATE_CLAIMS + VISUALISE_CLAIMS  # every claim of the chapter


def visualise_evidence(seed: int, converged: bool, collapse: str, hits: Mapping[str, Sequence[np.ndarray]],
                       erasing: Erasing, per_level: Mapping[str, np.ndarray], algebra: SetAlgebra,
                       queries: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None) -> dict[str, Evidence]:
    """{compared model: Evidence} of `VISUALISE_CLAIMS` from one PCME (seed `seed`, its `converged` and `collapse`):
    the per-query R@1 hits of each third of σ (`sigma_bin_hits` with `len(SIGMA_THIRDS)` bins), the per-item σ of each
    erased ratio (`sigma_by_erasing`), the per-caption σ of each level (`sigma_per_level`) and the per-pair values of
    Figure 8 (`set_algebra`). Items scored at every ratio, and the image pairs, share a split (paired by item). With
    `queries` ({direction: (hits (Q,), sigma (Q,)) in test order}, `sigma_query_hits`) they ride along too
    (`query_sigma`), so that `stacked_evidence` bins the thirds with the same queries at every seed."""

    def one(values: np.ndarray, split: str) -> Evidence:
        return Evidence((seed,), np.asarray(values, dtype=np.float64)[None, :], split=split, converged=converged,
                        collapse=collapse)

    out = {}
    for direction, bins in hits.items():
        if len(bins) != len(SIGMA_THIRDS):
            raise ValueError(f"visualise_evidence: {direction}: {len(bins)} σ bins, expected {len(SIGMA_THIRDS)}")
        for third, values in zip(SIGMA_THIRDS, bins):
            out[sigma_third(direction, third)] = one(values, f"test {direction} queries, {third} third of sigma")
    for r, images, captions in zip(erasing.frame["ratio"], erasing.image_sigma, erasing.caption_sigma):
        out[erased("images", float(r))] = one(images, "test images")
        out[erased("captions", float(r))] = one(captions, "test captions")
    for level, values in per_level.items():
        out[level_captions(level)] = one(values, f"test {level} captions")
    for name, model in FIG8.items():
        out[model] = one(getattr(algebra, name), "test image pairs")
    for direction, (query_hits, sigma) in (queries or {}).items():
        out[query_sigma(direction, "hits")] = one(query_hits, f"test {direction} queries")
        out[query_sigma(direction, "sigma")] = one(sigma, f"test {direction} queries")
    return out


def sigma_query_hits(scores: Tensor, split: Split, image_sigma: np.ndarray, caption_sigma: np.ndarray
                     ) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{direction: ((Q,) 100 × (best rank == 1) of each query, (Q,) its σ)} in test order: what `sigma_bin_hits`
    bins, kept per query for `thirds_across_seeds`."""
    return {direction: (100.0 * (rank.numpy() <= 1), np.asarray(sigma, dtype=np.float64))
            for direction, sigma, rank in zip(("i2t", "t2i"), (image_sigma, caption_sigma), _best_ranks(scores, split))}


def seed_visualise_evidence(seed: int, data: ChapterData, trunk: PretrainedTrunk, tuned: dict[str, TuningResult],
                            enc: dict, run: RunConfig, n_pairs: int) -> dict[str, Evidence]:
    """`visualise_evidence` of train.py's PCME of seed `seed` (loaded from the run cache): what visualise.py's
    figures measure, for that model: the R@1 hits of each third of σ, σ at each erased ratio (the erased words drawn
    by `default_rng(seed)`), σ per caption level and the set algebra of the first `n_pairs` test image pairs."""
    model, fit = train_model("PCME", 1, data, tuned, enc, run, seed, weights=True)  # drawn: needs weights
    drawn = record_compared("PCME", 1, model, fit, seed, data, tuned, run).test  # its record: converged, collapsed
    test, device = with_pixels(data.test), run.torch_device  # real data: the image files decoded (erasing, mixing)
    (img_mu, img_lv), (cap_mu, cap_lv) = embed_gaussians(model, test, data.vocab, device)
    img_sigma, cap_sigma = uncertainty(img_lv).numpy(), uncertainty(cap_lv).numpy()
    scores = score_matrix(model, (img_mu, img_lv), (cap_mu, cap_lv)).cpu()
    hits = sigma_bin_hits(scores, test, img_sigma, cap_sigma, bins=len(SIGMA_THIRDS))
    erasing = sigma_by_erasing(model, test, trunk, data.vocab, device, ERASE_RATIOS, np.random.default_rng(seed))
    algebra = set_algebra(model, test, trunk, data.vocab, device, (cap_mu, cap_lv), n_pairs)
    return visualise_evidence(seed, drawn.converged, drawn.evaluation.scorings["default"].collapse, hits, erasing,
                              sigma_per_level(test, cap_sigma), algebra,
                              sigma_query_hits(scores, test, img_sigma, cap_sigma))


def stacked_evidence(per_seed: Sequence[Mapping[str, Evidence]]) -> dict[str, Evidence]:
    """One Evidence per compared model from each seed's (`seed_visualise_evidence`): the seeds' rows stacked (S, Q),
    converged when every seed's run converged, collapsed when any seed's collapsed (the first reason). A model's
    evidence must score the same split with the same number of queries at every seed. Where the seeds carry each
    query's hits and σ (`query_sigma`), Figure 6's thirds are binned again across the seeds (`thirds_across_seeds`):
    each seed's own thirds hold different queries, so a column of their stack would not be one query."""
    out = {}
    for model in per_seed[0]:
        parts = [e[model] for e in per_seed]
        shapes, splits = {p.values.shape[1:] for p in parts}, {p.split for p in parts}
        if len(shapes) != 1 or len(splits) != 1:
            raise ValueError(f"stacked_evidence: {model!r}: the seeds' evidence differs in queries {sorted(shapes)} "
                             f"or split {sorted(splits)}")
        out[model] = Evidence(tuple(s for p in parts for s in p.seeds), np.concatenate([p.values for p in parts]),
                              split=parts[0].split, converged=all(p.converged for p in parts),
                              collapse=next((p.collapse for p in parts if p.collapse), ""), strata=parts[0].strata)
    for direction in ("i2t", "t2i"):
        hits, sigma = out.pop(query_sigma(direction, "hits"), None), out.pop(query_sigma(direction, "sigma"), None)
        if hits is None or sigma is None:
            continue
        for third, cols in zip(SIGMA_THIRDS, thirds_across_seeds(hits.values, sigma.values)):
            key = sigma_third(direction, third)
            out[key] = dataclasses.replace(out[key], values=hits.values[:, cols],
                                           split=f"{out[key].split}, binned by the mean σ rank over the seeds")
    return out


def visualise_judgements(evidence: Mapping[str, Evidence], run: RunConfig) -> list[Judgement]:
    """Every claim of `VISUALISE_CLAIMS` judged (`claims.judge`) on `visualise_evidence`."""
    return [judge(spec, evidence, dataset=run.dataset, profile=run.profile) for spec in VISUALISE_CLAIMS]
