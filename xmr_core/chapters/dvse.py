"""The DVSE chapter: its compared models, their tuning budget, its tables' columns, its ablation grids and the
helpers its notebooks call (`book/04_dvse/`).

DVSE (Wei et al., arXiv 2309.08154 / IEEE TMM 2025) has no public code: `xmr_core.methods.dvse` is a
re-implementation from the paper's text, and its docstring lists every choice the paper leaves open.

Compared models. VSE0, PVSE (K = 1, 2, 4, hardest negatives), PCME mu-only and PCME are the PCME chapter's
(`xmr_core.chapters.pcme.COMPARED`): the same builders, recipe and tuning budget, so their runs have the same
run keys and are loaded from the cache. DVSE (K = 6, the paper's COCO / Flickr30K value; hardest negatives with
the library's from-scratch recipe, as PVSE) is added with the same budget (`xmr_core.tuning.tune`): three
learning rates at its default weight, then three values of its main weight. That weight is the hinge margin
alpha of Eq. (10) (0.1, 0.2, 0.4; the paper's 0.2 in the middle), as for VSE0 and PVSE, the other hinge losses
of the book; beta and eta stay at the paper's 0.4 and 0.6 and are swept in Figures 8 and 9. "DVSE + FR" is
the same trained model with Fast Re-ranking on its test scores (no training). K = 6 serves every table, the
CUB-style one included (the paper: K = 8 on CUB; Table VI sweeps K). The region-feature DVSE (the paper's
Faster R-CNN rows) reads the benchmark's region features (`region_encoders`) at the grid DVSE's tuned setting,
first seed only.

Protocol (the PCME chapter's, `protocols.load_chapter_data`): train and validate on the seen classes; Table 1
(COCO-style: R@K and rSum, "1K" = five folds, "all" = the whole test split, the 5K protocol's analogue) and
Table 2 (Flickr30K-style: R@K and rSum on the whole test split, which on scenes has Flickr30K's test size,
1,000 images and 5,000 captions, so its numbers are Table 1's "all" columns) on the whole test split; Table 3
(CUB-style: class R-P and R@1) on the unseen classes of the test split.

Fast Re-ranking uses the paper's scales (Sec. IV-A-3): COCO / Flickr30K gamma = (25, 25), lambda = (20, 20) for
the instance tables (1, 2, 4), CUB gamma = (9, 8), lambda = (8, 17) for the class table (3); every model's own
test-time scores are re-ranked as they are (cosines, PCME's match probability).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from xmr_core.chapters import pcme as pcme_chapter
from xmr_core.chapters.msrm import top_k_lists
from xmr_core.chapters.pcme import COMPARED as PCME_COMPARED
from xmr_core.chapters.pcme import LEARNING_RATES, Compared, train_built
from xmr_core.chapters.protocols import ChapterData
from xmr_core.chapters.summary import compare_models, seed_summary, with_paper
from xmr_core.config import RunConfig
from xmr_core.data.corpus import Split
from xmr_core.data.datasets import ImageDataset, collate, image_loader
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.evaluate import (
    DIRECTIONS,
    Reranker,
    direction_scores,
    embed_split,
    evaluate_scores,
    rerank_directions,
)
from xmr_core.methods.base import RetrievalModel
from xmr_core.methods.dvse import DVSE, DVSEConfig, dvse_config
from xmr_core.metrics import RSUM_KS, retrieval_metrics
from xmr_core.results import Verdict, difference_verdict, verdict
from xmr_core.similarity import FastReranker, fast_rerank, multivariate_rerank, reciprocal_rerank
from xmr_core.train import FitResult
from xmr_core.tuning import TuningResult

DVSE_K = 6  # the paper's K for COCO and Flickr30K (CUB: 8)


def _dvse(enc: dict, wv: np.ndarray, margin: float, k: int) -> RetrievalModel:
    cfg = dvse_config(n_embeds=DVSE_K, hard_negatives=True, **enc)
    return DVSE(dataclasses.replace(cfg, hinge=dataclasses.replace(cfg.hinge, margin=margin)), wv)


DVSE_COMPARED = Compared("DVSE", "margin", (0.1, 0.2, 0.4), 0.2, _dvse)
COMPARED: dict[str, Compared] = {**PCME_COMPARED, "DVSE": DVSE_COMPARED}

# The trained models of train.py (name, K) and the rows of the tables (PVSE rows carry their K; "+ FR" rows are
# the same models re-ranked).
SPECS: list[tuple[str, int]] = [("VSE0", 1), ("PVSE", 1), ("PVSE", 2), ("PVSE", 4), ("PCME mu only", 1),
                                ("PCME", 1), ("DVSE", 1)]
MODELS = ["VSE0", "PVSE K=1", "PVSE K=2", "PVSE K=4", "PCME mu only", "PCME", "DVSE"]
ORDER = MODELS + ["DVSE + FR"]
REGIONS = "DVSE (regions)"  # the region-feature DVSE (the paper's Faster R-CNN rows), first seed only

# Fast Re-ranking at the paper's scales (Sec. IV-A-3): (gamma1, gamma2) for image queries, (lambda1, lambda2)
# for caption queries.
FR_COCO = FastReranker((25.0, 25.0), (20.0, 20.0))  # COCO and Flickr30K: the instance tables
FR_CUB = FastReranker((9.0, 8.0), (8.0, 17.0))  # CUB: the class table
TABLE4_K = {"RR": (15, 20), "MR": (30, 30)}  # neighbours (image queries, caption queries): the scripts' values

# Our columns -> the paper's keys ("<protocol>|<key>"; `summary.with_paper`). "all" = the whole test split.
_RK = [f"{d} R@{k}" for d in DIRECTIONS for k in RSUM_KS]
TABLE1_COLUMNS: dict[str, str] = {
    **{f"1K {c}": f"1K|instance/{c.replace(' ', '/')}" for c in _RK}, "1K rSum": "1K|rsum",
    **{f"all {c}": f"5K|instance/{c.replace(' ', '/')}" for c in _RK}, "all rSum": "5K|rsum",
}
TABLE2_COLUMNS: dict[str, str] = {**{f"all {c}": f"instance/{c.replace(' ', '/')}" for c in _RK}, "all rSum": "rsum"}
TABLE3_COLUMNS: dict[str, str] = {f"CUB {d} {m}": f"class/{d}/{m}" for d in DIRECTIONS for m in ("R-P", "R@1")}
TABLE6_COLUMNS: dict[str, str] = {**TABLE3_COLUMNS, "all i2t R@1": "5K|instance/i2t/R@1",
                                  "all t2i R@1": "5K|instance/t2i/R@1", "all rSum": "5K|rsum"}
# The paper's rows of the same encoder block that this book does not build (shown with the paper's values only).
PAPER_ONLY: dict[str, tuple[str, ...]] = {"table1_resnet": ("VSE++", "P2RM", "DiVE"),
                                          "table2_resnet": ("VSE++", "PVSE", "DiVE"), "table3": ("VSE++", "P2RM")}

# Ablation grids of `ablate.py` (the default of each is the tuned DVSE, loaded from the cache). Table V
# combinations and K = 1 ("w/o SE") get every seed, as claims compare them; the other values one seed each.
ABLATION_GRIDS: dict[str, dict[str, tuple[float, ...]]] = {
    "smoke": {"combination": (1, 5), "K": (1, 6), "beta": (0.4,), "eta": (0.6,), "fr": (10.0, 25.0)},
    "cpu": {"combination": (1, 2, 3, 4, 5, 6, 7), "K": (1, 2, 4, 6, 8, 12), "beta": (0.2, 0.4, 0.6, 0.8),
            "eta": (0.2, 0.4, 0.6, 0.8), "fr": (1.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 100.0, 200.0,
                                                500.0)},
    "paper": {"combination": (1, 2, 3, 4, 5, 6, 7), "K": (1, 2, 4, 6, 8, 10, 12), "beta": (0.2, 0.4, 0.6, 0.8),
              "eta": (0.2, 0.4, 0.6, 0.8), "fr": (1.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 100.0,
                                                  200.0, 500.0, 1000.0)},
}
SEEDED_K = (1, DVSE_K)  # Table VI values a claim compares ("w/o SE" against K = 6)
FIG6_COMBINATIONS = {"(a) SE only (combination 4)": 4, "(b) DM, no L_ort (combination 6)": 6,
                     "(c) L_ort, no DM (combination 2)": 2, "(d) full DVSE (combination 1)": 1}


# ---------------------------------------------------------------------------------------- tuning and training
def tune_methods(profile: str, enc: dict, word_vectors: np.ndarray, train: Split, val: Split, vocab: Vocabulary,
                 seed: int = 0, **train_overrides: object) -> dict[str, TuningResult]:
    """The PCME chapter's tuning (its cached runs, loaded) plus DVSE's, the same budget (`pcme.tune_methods`)."""
    return pcme_chapter.tune_methods(profile, enc, word_vectors, train, val, vocab, seed, compared=COMPARED,
                                     **train_overrides)


def tuned_model(name: str, tuned: dict[str, TuningResult], enc: dict, word_vectors: np.ndarray,
                k: int = 1) -> RetrievalModel:
    """A fresh model of a compared method (DVSE included) at its tuned weight (PVSE: with K embeddings)."""
    return COMPARED[name].build(enc, word_vectors, tuned[name].weight, k)


def region_encoders(enc: dict, region_dim: int) -> dict:
    """`enc` with the image encoder on precomputed region features (the BUTD analogue, `Split.regions`,
    (N, R, region_dim)) instead of the trunk's grid; the text encoder and sizes unchanged."""
    if region_dim <= 0:
        raise ValueError(f"region_encoders: region_dim must be > 0, got {region_dim}")
    return {**enc, "image": ImageEncoderConfig(kind="regions", region_dim=region_dim)}


def train_model(name: str, k: int, data: ChapterData, tuned: dict[str, TuningResult], enc: dict, run: RunConfig,
                seed: int, config: DVSEConfig | None = None, **train_overrides: object
                ) -> tuple[RetrievalModel, FitResult]:
    """Train (or load from the run cache) one compared model at its tuned setting on `data`'s seen classes.
    config: a DVSE config to train instead (ablations, region features), at DVSE's tuned learning rate.
    Returns the model (best weights, eval mode, on `run.torch_device`) and the fit."""
    if config is None:
        return train_built(lambda: tuned_model(name, tuned, enc, data.word_vectors, k), tuned[name].lr, data, run,
                           seed, **train_overrides)
    return train_built(lambda: DVSE(config, data.word_vectors), tuned[name].lr, data, run, seed, **train_overrides)


def chapter_runs(seeds: Sequence[int]) -> list[tuple[str, int, int]]:
    """The trained models of `train.py` in training order: (method, K, seed), every model every seed."""
    return [(name, k, seed) for seed in seeds for name, k in SPECS]


# ------------------------------------------------------------------------------------------- scores and rows
@dataclass
class ModelScores:
    """One model's test scores in `direction_scores`' layout (i2t, t2i), each (N images, M captions), on the
    whole test split and on its unseen classes, and the seconds that embedding and scoring the whole split took."""

    whole: tuple[Tensor, Tensor]
    unseen: tuple[Tensor, Tensor]
    seconds: float


def model_scores(model: RetrievalModel, data: ChapterData, device: torch.device | str) -> ModelScores:
    """Embed and score the whole test split (timed) and its unseen classes with the model's own test-time
    scores, on the CPU."""
    model.to(device).eval()
    t0 = time.perf_counter()
    img, cap = embed_split(model, data.test, data.vocab, device=device)
    whole = direction_scores(model, img, cap)
    seconds = time.perf_counter() - t0
    img, cap = embed_split(model, data.test_unseen, data.vocab, device=device)
    unseen = direction_scores(model, img, cap)
    return ModelScores(tuple(s.cpu() for s in whole), tuple(s.cpu() for s in unseen), seconds)  # type: ignore[arg-type]


def instance_row(split: Split, scores_i2t: Tensor, scores_t2i: Tensor) -> dict[str, float]:
    """Instance R@1/5/10 per direction and rSum on `split` under the 1K protocol (five folds) and on the whole
    split ("all"): {"1K i2t R@1", ..., "1K rSum", "all i2t R@1", ..., "all rSum"}. Scores (N, M) both."""
    whole = dataclasses.replace(split, caption_level=None)  # no per-level breakdown (a fold may lack a level)
    out = {}
    for proto, protocol in (("1K", "coco1k"), ("all", "full")):
        values = evaluate_scores(whole, scores_i2t, views=["instance"], protocol=protocol, scores_t2i=scores_t2i)
        out.update({f"{proto} {c}": values[f"instance/{c.replace(' ', '/')}"] for c in _RK})
        out[f"{proto} rSum"] = values["rsum"]
    return out


def class_row(split: Split, scores_i2t: Tensor, scores_t2i: Tensor) -> dict[str, float]:
    """Class-relevance R-P and R@1 per direction on `split` (Table 3): {"CUB i2t R-P", ...}."""
    whole = dataclasses.replace(split, caption_level=None)
    values = evaluate_scores(whole, scores_i2t, views=["class"], scores_t2i=scores_t2i)
    return {c: values[key] for c, key in TABLE3_COLUMNS.items()}


def metric_row(scores: ModelScores, data: ChapterData, fr: bool = False) -> dict[str, float]:
    """Every value of Tables 1-3 for one model: `instance_row` of the whole test split and `class_row` of its
    unseen classes; fr=True re-ranks them first (the COCO scales `FR_COCO`, the CUB scales `FR_CUB`)."""
    whole, unseen = scores.whole, scores.unseen
    if fr:
        whole, unseen = rerank_directions(*whole, FR_COCO), rerank_directions(*unseen, FR_CUB)
    return {**instance_row(data.test, *whole), **class_row(data.test_unseen, *unseen)}


# ----------------------------------------------------------------------------------------- Table 4 (re-rankers)
@dataclass(frozen=True)
class NeighbourReranker:
    """RR or MR (`similarity.reciprocal_rerank`, `multivariate_rerank`) as `evaluate`'s re-ranker, with
    `ks[0]` neighbours for image queries and `ks[1]` for caption queries."""

    fn: Callable[..., Tensor]
    ks: tuple[int, int]

    def __call__(self, scores: Tensor, direction: str) -> Tensor:
        if direction not in DIRECTIONS:
            raise ValueError(f"NeighbourReranker: direction must be 'i2t' or 't2i', got {direction!r}")
        return self.fn(scores, k=self.ks[0 if direction == "i2t" else 1])


def table4_rerankers() -> dict[str, Reranker]:
    """Table IV's re-rankers: FR at the COCO / Flickr30K scales, RR and MR with their scripts' neighbours."""
    return {"FR": FR_COCO, "RR": NeighbourReranker(reciprocal_rerank, TABLE4_K["RR"]),
            "MR": NeighbourReranker(multivariate_rerank, TABLE4_K["MR"])}


def rerank_rows(scores: ModelScores, split: Split, rerankers: Mapping[str, Reranker]) -> list[dict[str, object]]:
    """Table 4 rows of one model: without re-ranking, then each re-ranker on the same whole-split scores, each
    timed (both directions): method ("DVSE", "DVSE + FR", ...), re-rank s, test s (embedding and scoring
    plus re-ranking) and the `instance_row` values."""
    rows = [{"model": "DVSE", "re-rank s": 0.0, "test s": scores.seconds, **instance_row(split, *scores.whole)}]
    for name, rerank in rerankers.items():
        t0 = time.perf_counter()
        i2t, t2i = rerank_directions(*scores.whole, rerank)
        seconds = time.perf_counter() - t0
        rows.append({"model": f"DVSE + {name}", "re-rank s": seconds, "test s": scores.seconds + seconds,
                     **instance_row(split, i2t, t2i)})
    return rows


def table4_frame(runs: pd.DataFrame, label: str) -> pd.DataFrame:
    """Table 4 from `rerank_rows` of every seed: mean (std) over seeds of the re-ranking and test seconds and of
    the whole-split rSum, beside the paper's test time and rSum on Flickr30K (1,000 x 5,000, our split's size)
    and on MS-COCO 5K."""
    order = ["DVSE", "DVSE + RR", "DVSE + MR", "DVSE + FR"]
    summary = seed_summary(runs, ["re-rank s", "test s", "all rSum"], order)
    f30k = with_paper(summary, "dvse", "table4", {"test s": "test time s", "all rSum": "rsum"}, label)
    coco = with_paper(summary, "dvse", "table4", {"test s": "5K|test time s", "all rSum": "5K|rsum"}, label)
    return pd.DataFrame({
        "model": summary["model"], "seeds": summary["seeds"], f"re-rank s ({label})": summary["re-rank s"],
        f"test s ({label})": summary["test s"], "test s (paper, Flickr30K)": f30k["test s (paper)"],
        "test s (paper, COCO 5K)": coco["test s (paper)"], f"rSum ({label})": summary["all rSum"],
        "rSum std": summary["all rSum std"], "rSum (paper, Flickr30K)": f30k["all rSum (paper)"],
        "rSum (paper, COCO 5K)": coco["all rSum (paper)"]})


# -------------------------------------------------------------------------------------------- table layout
def paper_table(per_run: pd.DataFrame, order: Sequence[str], table: str, mapping: Mapping[str, str], label: str,
                paper_only: Sequence[str] = (), chapter: str = "dvse") -> pd.DataFrame:
    """One of the paper's tables: our rows (`seed_summary` of `per_run` in `order`) with the paper's value
    beside each (`with_paper`, the paper values of `chapter`), then one row per method of `paper_only` (the
    paper's rows this book does not build) with the paper's values alone, labelled "<method> (paper only)"."""
    out = with_paper(seed_summary(per_run, list(mapping), order), chapter, table, mapping, label)
    if not paper_only:
        return out
    blank = pd.DataFrame([{"model": m, "seeds": 0, **{c: float("nan") for c in mapping}} for m in paper_only])
    extra = with_paper(blank, chapter, table, mapping, label)
    extra["model"] = [f"{m} (paper only)" for m in paper_only]
    return pd.concat([out, extra], ignore_index=True)


def ceiling_row(ceiling: Mapping[str, Mapping[str, float]], mapping: Mapping[str, str],
                label: str) -> dict[str, object]:
    """The "Bayes ceiling" row of an instance table in `paper_table`'s layout: each column "<proto> <dir> R@K"
    or "<proto> rSum" of `mapping` from `ceiling[proto]` (`xmr_core.ceiling` keys "i2t/R@1", ..., "rsum")."""
    row: dict[str, object] = {"model": "Bayes ceiling", "seeds": 0}
    for col in mapping:
        proto, rest = col.split(" ", 1)
        row[f"{col} ({label})"] = ceiling[proto]["rsum" if rest == "rSum" else rest.replace(" ", "/")]
    return row


# ---------------------------------------------------------------------------------------------- claims
def fr_gains(per_run: pd.DataFrame, models: Sequence[str], cols: Sequence[str],
             converged: Mapping[str, bool]) -> pd.DataFrame:
    """For each model: its "<model> + FR" rows against its own rows (`compare_models` on the mean of `cols`):
    model, seeds, diff (FR − none), spread, verdict and why it is "not tested" ("one seed", "not converged")."""
    rows = []
    for m in models:
        c = compare_models(per_run, f"{m} + FR", m, cols)
        seeds = int((per_run["model"] == m).sum())
        why = "one seed" if seeds < 2 else ("" if converged[m] else "not converged")
        rows.append({"model": m, "seeds": seeds, "diff": c.diff, "spread": c.spread,
                     "verdict": "not tested" if why else c.verdict, "not tested": why})
    return pd.DataFrame(rows)


def peak(values: Mapping[float, float], spread: float) -> tuple[float, float, Verdict]:
    """The claim "the metric peaks inside the grid" on a one-seed sweep {parameter: metric}: (the best parameter,
    diff = best interior value − best end value, `difference_verdict(diff, spread)`); `spread` is the seed
    std of the default setting. Not tested with fewer than three values or no spread (NaN)."""
    xs = sorted(values)
    ys = [values[x] for x in xs]
    best = xs[int(np.argmax(ys))]
    if len(xs) < 3 or not np.isfinite(spread):
        return best, float("nan"), verdict(None)
    diff = max(ys[1:-1]) - max(ys[0], ys[-1])
    return best, diff, difference_verdict(diff, spread)


# --------------------------------------------------------------------------------------- Figure 7 (FR scales)
def fr_grid(scores: ModelScores, split: Split, values: Sequence[float]) -> pd.DataFrame:
    """Figure 7: instance R@1 on the whole test split after FR at every pair of `values`, image queries
    re-ranked with (gamma1, gamma2) = (s1, s2), caption queries with (lambda1, lambda2) = (s1, s2).
    Columns: direction, s1, s2, R@1."""
    i2t, t2i = scores.whole
    queries = {"i2t": i2t, "t2i": t2i.T}
    relevance = {d: split.relevance("instance", d) for d in DIRECTIONS}
    rows = []
    for d in DIRECTIONS:
        for s1 in values:
            for s2 in values:
                reranked = fast_rerank(queries[d], (s1, s2))
                rows.append({"direction": d, "s1": s1, "s2": s2,
                             "R@1": retrieval_metrics(reranked, relevance[d], ks=(1,))["R@1"]})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------- Figures 6 and 10 (sub-embeddings)
def correlation_matrices(x: Tensor) -> Tensor:
    """Pearson correlation among the K vectors of each item: x (n, K, D) -> (n, K, K) (a constant vector
    correlates 0 with everything, itself included)."""
    centred = F.normalize(x - x.mean(-1, keepdim=True), dim=-1)
    return centred @ centred.transpose(1, 2)


def mean_abs_offdiagonal(corr: Tensor) -> float:
    """Mean |correlation| over the off-diagonal entries of (n, K, K) matrices (NaN for K = 1)."""
    k = corr.shape[-1]
    off = ~torch.eye(k, dtype=torch.bool)
    return float(corr[:, off].abs().mean()) if k > 1 else float("nan")


@torch.no_grad()
def sub_embeddings(model: DVSE, split: Split, device: torch.device | str, images: Sequence[int] | None = None,
                   batch_size: int = 128) -> tuple[Tensor, Tensor, Tensor]:
    """The sub-embeddings before the mask v̂ (n, K, D), the attention weights (n, R, K) and the dynamic mask
    (n, K) of `images` (default: every image of `split`, in order), on the CPU."""
    model = model.to(device).eval()
    if images is None:
        batches = image_loader(split, batch_size, visual=model.visual)
    else:
        dataset = ImageDataset(split, model.visual)
        idx = [int(i) for i in images]
        batches = [collate([dataset[i] for i in idx[s:s + batch_size]]) for s in range(0, len(idx), batch_size)]
    parts = []
    for batch in batches:
        batch = {key: v.to(device) for key, v in batch.items()}
        residual, attn = model.attend(model.image_encoder(batch))
        parts.append((residual.cpu(), attn.cpu(), model.encode_images(batch)[2].cpu()))
    return tuple(torch.cat(p) for p in zip(*parts))  # type: ignore[return-value]


def grid_boxes(cells: int, image_size: int) -> np.ndarray:
    """Pixel boxes (x0, y0, x1, y1) of the cells of a square grid over the image, row-major (the trunk's
    `grid_to_sequence` order): (cells, 4)."""
    side = round(cells**0.5)
    if side * side != cells:
        raise ValueError(f"grid_boxes: {cells} cells do not form a square grid")
    step = image_size / side
    return np.array([[c * step, r * step, (c + 1) * step, (r + 1) * step] for r in range(side) for c in range(side)])


def attention_heat(weights: np.ndarray, boxes: np.ndarray, image_size: int) -> np.ndarray:
    """Figure 10: the heat of each pixel for each sub-embedding, the sum of the attention weights of the local
    features (grid cells or regions) whose box covers it. weights (R, K), boxes (R, 4) pixels -> (K, S, S)."""
    weights, boxes = np.asarray(weights, dtype=np.float64), np.asarray(boxes, dtype=np.float64)
    if weights.ndim != 2 or boxes.shape != (weights.shape[0], 4):
        raise ValueError(f"attention_heat: weights {weights.shape} and boxes {boxes.shape}: expected (R, K), (R, 4)")
    centres = np.arange(image_size) + 0.5
    inside_x = (centres[None, :] >= boxes[:, :1]) & (centres[None, :] < boxes[:, 2:3])  # (R, S)
    inside_y = (centres[None, :] >= boxes[:, 1:2]) & (centres[None, :] < boxes[:, 3:4])
    cover = inside_y[:, :, None] & inside_x[:, None, :]  # (R, S_y, S_x)
    return np.einsum("rk,ryx->kyx", weights, cover.astype(np.float64))


# -------------------------------------------------------------------------------- Figures 11 and 12 (lists)
def retrieval_lists(scores_i2t: Tensor, scores_t2i: Tensor, split: Split, image_queries: Sequence[int],
                    caption_queries: Sequence[int], k_captions: int = 5, k_images: int = 4) -> pd.DataFrame:
    """Figures 11-12: the top `k_images` images of each caption query and the top `k_captions` captions of each
    image query (`msrm.top_k_lists`: direction, query, rank, result, zeta, instance) plus `exact`: whether the
    caption's logical form holds in the image (scenes' exact relevance; NaN without it)."""
    lists = pd.concat([top_k_lists(scores_i2t, scores_t2i, split, image_queries, [], k_captions),
                       top_k_lists(scores_i2t, scores_t2i, split, [], caption_queries, k_images)], ignore_index=True)
    if split.exact is None:
        lists["exact"] = float("nan")
        return lists
    exact = split.relevance("exact", "t2i")  # (M, N)
    lists["exact"] = [bool(exact[r.result, r.query] if r.direction == "i2t" else exact[r.query, r.result])
                      for r in lists.itertuples()]
    return lists


def specific_captions(split: Split, n: int, rng: np.random.Generator,
                      levels: Sequence[str] = ("full", "relational")) -> list[int]:
    """`n` caption queries drawn without replacement among the captions of the given specificity `levels` (all
    captions when the split has no levels), sorted."""
    if split.caption_level is None:
        pool = np.arange(split.n_captions)
    else:
        pool = np.flatnonzero(np.isin(np.asarray(split.caption_level), list(levels)))
    if len(pool) < n:
        raise ValueError(f"specific_captions: {len(pool)} captions of levels {list(levels)}, asked for {n}")
    return sorted(int(c) for c in rng.choice(pool, n, replace=False))


# ------------------------------------------------------------------------------------------ run counts
def training_runs(profile: str, n_seeds: int = 3) -> pd.DataFrame:
    """How many training runs the chapter needs from a cold cache (profile's grids): per notebook and part,
    the runs the PCME chapter already made (`shared`) and the chapter's own, with the seeds each gets."""
    lrs, grids = len(LEARNING_RATES[profile]), ABLATION_GRIDS[profile]
    seeds = 1 if profile == "smoke" else n_seeds
    tune_runs = lrs + (0 if profile == "smoke" else len(DVSE_COMPARED.weights) - 1)
    seeded_k = [k for k in grids["K"] if k in SEEDED_K and k != DVSE_K]
    rows = [
        ("train", "tuning, the PCME chapter's 4 methods", 4 * tune_runs, 1, True),
        ("train", "tuning, DVSE (lr, then margin)", tune_runs, 1, False),
        ("train", "seeds, the PCME chapter's 6 models (one per method reuses its tuning run)", 6 * seeds - 4, seeds,
         True),
        ("train", "seeds, DVSE (the first reuses its tuning run)", seeds - 1, seeds, False),
        ("train", "DVSE on region features (first seed)", 1, 1, False),
        ("ablate", "Table V: combinations other than 1 (= DVSE)", sum(c != 1 for c in grids["combination"]) * seeds,
         seeds, False),
        ("ablate", "Table VI: K = 1 (w/o SE) with seeds", len(seeded_k) * seeds, seeds, False),
        ("ablate", "Table VI: other K", sum(k not in SEEDED_K for k in grids["K"]), 1, False),
        ("ablate", "Figure 8: beta", sum(b != 0.4 for b in grids["beta"]), 1, False),
        ("ablate", "Figure 9: eta", sum(e != 0.6 for e in grids["eta"]), 1, False),
        ("ablate", "Figure 7: FR scales (no training: re-ranks the DVSE seeds' scores)", 0, seeds, False),
        ("visualise", "Figures 6, 10-12 (no training: train.py's and ablate.py's models, loaded)", 0, 1, False),
    ]
    return pd.DataFrame(rows, columns=["notebook", "part", "runs", "seeds", "shared with PCME chapter"])
