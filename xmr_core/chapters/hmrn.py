"""The HMRN chapter: its data protocol, compared models and tuning budget, its tables' layouts, its ablation grids
and the helpers its notebooks call (`book/05_hmrn/`).

HMRN (Ji et al., Neural Networks 2024) has public code (LZH-053/HMRN); `xmr_core.methods.hmrn` follows the paper
and lists in its docstring every choice the paper leaves open and where the code differs. This book does
neither of the code's two test-time departures: no round weighting of S_R ((1 + .. + t) / 55, test time only)
and no query set dropped (the code's evaluation drops the last 96).

Data (multi-query retrieval): the scenes benchmark's "multi" variant (5-10 objects an image, one region query
per object) read through Drill-down's Visual Genome layout (`DATA_FORMAT`), as HMRN's code reads VG. Query set
q is test image q's region queries in stored order; round r scores the set of its first r queries against every
gallery image. Scenes images hold 5 to 10 queries, so a set shorter than r keeps its whole set in the later
rounds (`short="hold"`, the same rule the per-epoch validation uses), and nothing is dropped. `ROUNDS` = 10, the
paper's N.

Cost: HMRN scores every (image, query set) pair by cross attention, nothing is embedded once per side, so a
gallery of G images costs G² pair scorings a round, and a training batch of B sets B² (the InfoNCE of Eq. 20 over
the batch). Measured by the method's author: a 64 × 64 block of images × 10-query sets takes 0.2 s at D = 64 and
1.7 s at D = 256 on this CPU; measured here (niced, one thread, beside another job): 0.12 s for that block at
D = 64 and 2.4 s for one training step at batch 128 (forward and backward of the three levels). The cpu profile
therefore uses D = 64 (`hmrn_encoders`), batch 32 (`TRAIN_OVERRIDES`, for every trained model of the chapter: 16×
fewer pairs a step, 4× fewer a epoch) and the first images of each split (`SUBSETS["cpu"]`): 2,000 of 5,000
training images, 128 of 1,000 validation images scored every epoch, 500 of 1,000 test images for the tables.
smoke and paper use the whole splits and the recipe's batch.

Compared models, each with the same tuning budget on the validation split (`xmr_core.tuning.tune` through
`pcme.tune_methods`): three learning rates at the default weight, then three values of the weight at the best
learning rate. HMRN I-T and HMRN T-I are tuned on the InfoNCE scale τ (20, 40, 80; the paper's 40 in the
middle), the temperature of their only loss (Eq. 20); R-RE, R-HRE, Drill-down and the baselines' single-query
model VSE0 on their hinge margin (0.1, 0.2, 0.4; VSE0's grid, the PCME chapter's). "HMRN ensemble" (Eq. 17) sums the two
models' scores of the same seed, no training.

Baselines the book builds, in the paper's row order. Single-vector (Sec. 4.3, after Drill-down): R-RankFusion
averages a single-query model's per-round ranks (`fusion="ranks"`, Drill-down's rank fusion); R-RE and R-HRE
encode the query set into one vector by a GRU over the concatenated queries or a query-level GRU over the
queries (`xmr_core.methods.recurrent_sets`, which lists what the papers leave open), trained on the query sets
like HMRN and scored round by round against one pooled vector per image. Multi-vector: Drill-down's supervised
model tracks the set as M = 3 GRU-updated state vectors scored against each image's regions by a softmax attention
(`xmr_core.methods.drilldown`: its choices, and why its REINFORCE stage is not built), trained on the query sets
with the same summed hinge and margin grid as R-RE and R-HRE; the paper's "*" rows
re-train single-query ITR methods on VG's region captions and average their similarities over the rounds; here the
single-query model is VSE0 trained on the region queries as captions (`queries_as_captions`: each query a caption
of its image, validated by instance rSum), scored per query and averaged over the rounds so far ("VSE0*",
`fusion="scores"`); R-RankFusion fuses the same VSE0. Not built (`NOT_BUILT`): the paper's five re-trained ITR
methods.
"""

from __future__ import annotations

import dataclasses
import textwrap
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.figure import Figure
from torch import Tensor
from torch.utils.flop_counter import FlopCounterMode

from xmr_core.ceiling import multi_round_ceiling
from xmr_core.chapters import pcme as pcme_chapter
from xmr_core.chapters.dvse import attention_heat, paper_table
from xmr_core.chapters.pcme import LEARNING_RATES, Compared, train_built, train_config
from xmr_core.chapters.protocols import ChapterData, word_table
from xmr_core.chapters.summary import (
    best_other_margin,
    ceiling_first,
    ceiling_share,
    compare_models,
    converged_by_model,
    model_means,
    peak,
    seed_means,
)
from xmr_core.config import RunConfig, check_profile
from xmr_core.data.corpus import Corpus, Split
from xmr_core.data.datasets import image_loader, query_loader
from xmr_core.data.scenes import query_attributes
from xmr_core.data.text import Vocabulary, load_word_vectors
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import BertEncoderConfig, TextEncoderConfig
from xmr_core.evaluate import multi_query_scores, multi_round_metrics
from xmr_core.methods.base import RetrievalModel
from xmr_core.methods.drilldown import DrillDown, DrillDownConfig
from xmr_core.methods.hmrn import HMRN, HMRNConfig, clipped_cosines, hmrn_config, text_image_weights
from xmr_core.methods.recurrent_sets import RHRE, RRE, RecurrentSetConfig
from xmr_core.results import (
    Verdict,
    difference_verdict,
    paper_values,
    require_converged,
    universal_verdict,
    verdict,
    write_figure,
    write_table,
)
from xmr_core.train import FitResult, TrainConfig
from xmr_core.tuning import TuningResult
from xmr_core.viz import heatmap, retrieval_gallery

DATA_FORMAT = "drilldown"  # Drill-down's Visual Genome layout, what HMRN's code reads
VARIANT = "multi"  # the scenes variant with 5-10 objects (region queries) an image
ROUNDS = 10  # N, the paper's rounds
IT, TI = "HMRN I-T", "HMRN T-I"
MODELS = (IT, TI)  # trained, tuned, every seed
LOCAL = {IT: "I-T", TI: "T-I"}
ENSEMBLE = "HMRN ensemble"  # Eq. (17): S_1 + S_2 of the same seed
SINGLE = "VSE0"  # the single-query model of the baselines, trained on the region queries as captions
ROUND_MEAN = "VSE0*"  # the paper's "*" protocol: per-query scores averaged over the rounds so far
RANK_FUSION = "R-RankFusion"  # Drill-down's rank fusion of the same single-query model
RE, HRE = "R-RE", "R-HRE"  # Drill-down's recurrent single-vector encoders of the query set
DRILL = "Drill-down"  # Drill-down's multi-vector state tracker (its supervised stage)
RECURRENT = {RE: (RRE, RecurrentSetConfig), HRE: (RHRE, RecurrentSetConfig),
             DRILL: (DrillDown, DrillDownConfig)}  # trained on the query sets, tuned on the hinge margin, every seed
SINGLE_VECTOR = (RANK_FUSION, RE, HRE)  # Sec. 4.3's paradigms: one vector per query set ...
MULTI_VECTOR = (DRILL, ROUND_MEAN, TI, IT, ENSEMBLE)  # ... or several (the "*" protocol among them)
ORDER = [*SINGLE_VECTOR, *MULTI_VECTOR]  # the paper's row order (single-, then multi-vector)
TAUS = (20.0, 40.0, 80.0)  # HMRN's tuned weight: the InfoNCE scale τ (Eq. 20)
BERT_PROFILES = ("paper",)  # Table 10's MiniLM rows are trained in these profiles only
SUBSETS: dict[str, tuple[int | None, int | None, int | None]] = {  # (train, val, test) first images; None: all
    "smoke": (None, None, None), "cpu": (2000, 128, 500), "paper": (None, None, None)}
TRAIN_OVERRIDES: dict[str, dict[str, object]] = {"smoke": {}, "cpu": {"batch_size": 32}, "paper": {}}

NOT_BUILT: dict[str, str] = {
    "VSRN*": "a graph-reasoning ITR model: the book builds the '*' protocol with VSE0 instead (row VSE0*)",
    "SGR*": "SGRAF's graph-reasoning branch: not in the library (the '*' protocol is row VSE0*)",
    "SAF*": "SGRAF's attention-filtration branch: not in the library (the '*' protocol is row VSE0*)",
    "SGRAF*": "SGR + SAF: not in the library (the '*' protocol is row VSE0*)",
    "NAAF*": "negative-aware attention: not in the library (the '*' protocol is row VSE0*)",
}
PAPER_ONLY = tuple(NOT_BUILT)

TABLE_METRICS = {"table1": "R@1", "table2": "R@5", "table3": "R@10", "table4": "meanR"}  # Tables 1-4: per round
TABLE5_COLUMNS = {"mean/R@1": "mean/R@1", "mean/R@5": "mean/R@5", "mean/R@10": "mean/R@10", "rsum": "rsum",
                  "mean/meanR": "mean/meanR"}  # Avg. R@K, Avg. R@Sum, Avg. MR

# Table 6: each level alone and in pairs (a row: the model whose tuned setting it starts from, the changes). The
# paper does not say how the weights of a pair are set; here a removed level's weight is shared by the others in
# their paper proportions (local + global: 0.4 : 0.2 -> 2/3 : 1/3). Rows 7-9 are train.py's models.
TABLE6: dict[str, tuple[str, dict[str, object]]] = {
    "S_I-T": (IT, {"alpha": 1.0, "beta": 0.0}),
    "S_G": (IT, {"alpha": 0.0, "beta": 0.0}),
    "S_R": (IT, {"alpha": 0.0, "beta": 1.0}),
    "S_T-I": (TI, {"alpha": 1.0, "beta": 0.0}),
    "S_T-I + S_G": (TI, {"alpha": 2 / 3, "beta": 0.0}),
    "S_I-T + S_G": (IT, {"alpha": 2 / 3, "beta": 0.0}),
}
TABLE6_FULL = {"S_T-I + S_G + S_R (HMRN T-I)": TI, "S_I-T + S_G + S_R (HMRN I-T)": IT,
               "all (HMRN ensemble)": ENSEMBLE}
TABLE6_ROWS: dict[str, tuple[str, ...]] = {"smoke": ("S_I-T", "S_T-I + S_G"), "cpu": tuple(TABLE6),
                                           "paper": tuple(TABLE6)}
TABLE7: dict[str, tuple[str, dict[str, object]]] = {"T-I, Concat": (TI, {"intra_mode": "concat"}),
                                                     "I-T, Concat": (IT, {"intra_mode": "concat"})}
TABLE7_FULL = {"T-I, Sub": TI, "I-T, Sub": IT}
TABLE7_ROWS: dict[str, tuple[str, ...]] = {"smoke": ("T-I, Concat",), "cpu": tuple(TABLE7), "paper": tuple(TABLE7)}
# Table 9: joint training, one network with both local similarities (`methods/hmrn.py` choice 10: the book's reading
# of a row the paper describes in one sentence), at HMRN I-T's tuned setting; "Split" is train.py's ensemble.
TABLE9: dict[str, tuple[str, dict[str, object]]] = {"Joint": (IT, {"local": "joint"})}
TABLE9_FULL = {"Split": ENSEMBLE}
# Seeds of each Table 6-7 row: the rows are compared by claims, so every seed (3) on cpu and paper; smoke one.
# A claim's spread is the larger of the rows' own seed spread and train.py's spread of the claim's model.
ABLATION_SEEDS = {"smoke": 1, "cpu": 3, "paper": 3}
ICR_STEPS: dict[str, tuple[int, ...]] = {"smoke": (1, 3), "cpu": (1, 3), "paper": (1, 2, 3, 4)}
ICR_DEFAULT = 3
# Figures 5-8 (one seed each; the tuned setting, train.py's, is always among them). λ is λ1 for HMRN I-T and λ2
# for HMRN T-I; τ's grid holds the tuning grid, whose runs at the tuned learning rate are loaded from the cache.
LAMBDA_FIELD = {IT: "lambda1", TI: "lambda2"}
LAMBDA_GRID: dict[str, dict[str, tuple[float, ...]]] = {
    "smoke": {IT: (1.0, 5.0), TI: (15.0,)},
    "cpu": {IT: (2.0, 5.0, 10.0), TI: (5.0, 15.0, 30.0)},
    "paper": {IT: (1.0, 3.0, 5.0, 10.0, 20.0), TI: (5.0, 10.0, 15.0, 20.0, 30.0)},
}
TAU_GRID: dict[str, tuple[float, ...]] = {"smoke": (20.0, 40.0), "cpu": TAUS, "paper": (10.0,) + TAUS}
ALPHA_BETA_GRID: dict[str, tuple[tuple[float, float], ...]] = {  # Figure 8, HMRN I-T
    "smoke": ((0.4, 0.4), (0.6, 0.2)),
    "cpu": ((0.2, 0.4), (0.4, 0.4), (0.6, 0.2)),
    "paper": tuple((a, b) for a in (0.2, 0.3, 0.4, 0.5, 0.6) for b in (0.2, 0.3, 0.4) if a + b <= 1.0),
}


# ---------------------------------------------------------------------------------------------- data
class HMRNData(NamedTuple):
    """The chapter's data: `multi` (train / validation / test gallery with region queries, for HMRN), `single`
    (the same splits with the region queries as captions, for the single-query baseline; the same vocabulary)
    and `queries` (the test query sets and gallery objects as attribute values, `scenes.query_attributes`, the
    ceiling's input; scenes only, else None)."""

    multi: ChapterData
    single: ChapterData
    queries: tuple[list[np.ndarray], np.ndarray, np.ndarray] | None


def first_images(split: Split, n: int | None) -> Split:
    """The split's first `n` images with their captions and queries (the whole split when n is None or larger)."""
    return split if n is None or n >= split.n_images else split.subset(np.arange(n), f"{split.name}[:{n}]")


def queries_as_captions(split: Split) -> Split:
    """The split with its region queries as its captions (each query a caption of its image, stored order), the
    captions' own fields (exact relevance, levels, per-caption meta) dropped: what a single-query model trains on."""
    if split.queries is None:
        raise ValueError(f"{split.source}: split {split.name!r} has no region queries")
    counts = [len(q) for q in split.queries]
    ids = [f"{split.image_ids[i]}#q{t}" for i, c in enumerate(counts) for t in range(c)]
    per_caption = {k for k, v in split.meta.items() if isinstance(v, list | np.ndarray) and len(v) == split.n_captions}
    return dataclasses.replace(
        split, name=f"{split.name}-queries", captions=[q for qs in split.queries for q in qs], caption_ids=ids,
        caption_image=np.repeat(np.arange(split.n_images), counts).astype(np.int64), exact=None, caption_level=None,
        meta={k: v for k, v in split.meta.items() if k not in per_caption}).validate()


def gallery_queries(split: Split, n: int | None) -> tuple[list[np.ndarray], np.ndarray, np.ndarray] | None:
    """`scenes.query_attributes` of a scenes split restricted to its first `n` images (sets and gallery); None for a
    split without the generator's logical forms (real data: no exact relevance, no ceiling)."""
    if "query_logical_forms" not in split.meta:
        return None
    queries, objects, valid = query_attributes(split)
    n = len(queries) if n is None else min(n, len(queries))
    return queries[:n], objects[:n], valid[:n]


def hmrn_data(corpus: Corpus, profile: str, word_vectors: str = "glove-6b-50d") -> HMRNData:
    """Train on the first `SUBSETS[profile][0]` training images, validate on the first `[1]` validation images and
    test on the first `[2]` test images; the vocabulary and word vectors of the training queries."""
    train, val, test = corpus["train"], corpus["val"], corpus["test"]
    missing = [s.name for s in (train, val, test) if s.regions is None or s.queries is None]
    if missing:
        raise ValueError(f"{corpus.meta.get('name', 'this corpus')}: splits {missing} lack region features or region "
                         "queries; HMRN reads both (scenes: variant 'multi'; real data: Drill-down's VG layout)")
    n_train, n_val, n_test = SUBSETS[check_profile(profile)]
    train, val, gallery = first_images(train, n_train), first_images(val, n_val), first_images(test, n_test)
    queries = [q for qs in train.queries for q in qs]
    vocab = Vocabulary.build(queries)
    vectors = load_word_vectors(vocab, word_vectors, train_captions=queries)
    multi = ChapterData(train, val, gallery, gallery, vocab, vectors.matrix, vectors.coverage)
    single = dataclasses.replace(multi, train=queries_as_captions(train), val=queries_as_captions(val))
    return HMRNData(multi, single, gallery_queries(test, n_test))


def rounds_of(split: Split) -> int:
    """The rounds scored on a split: N = `ROUNDS`, or fewer when no set is that long."""
    return min(ROUNDS, max(len(q) for q in split.queries or [[]]))


def hmrn_encoders(profile: str, region_dim: int, bert: bool = False) -> dict[str, object]:
    """Encoders of every model of the chapter: the region features projected to D and the BiGRU (hidden = D, as in
    the paper) over word vectors, or the packaged MiniLM (`bert`, Table 10). D: smoke 32, cpu 64 (the scoring cost,
    module docstring), paper 256 (the paper's)."""
    if region_dim <= 0:
        raise ValueError(f"hmrn_encoders: region_dim must be > 0, got {region_dim}")
    d = {"smoke": 32, "cpu": 64, "paper": 256}[check_profile(profile)]
    text = BertEncoderConfig() if bert else TextEncoderConfig(hidden=d)
    return {"embed_dim": d, "image": ImageEncoderConfig(kind="regions", region_dim=region_dim), "text": text}


# ---------------------------------------------------------------------------------------- compared models
def _hmrn(name: str):
    def build(enc: dict, wv: np.ndarray, tau: float, k: int) -> RetrievalModel:
        return HMRN(hmrn_config(enc, local=LOCAL[name], tau=tau), wv)
    return build


def _recurrent(name: str):
    def build(enc: dict, wv: np.ndarray, margin: float, k: int) -> RetrievalModel:
        model, config = RECURRENT[name]
        return model(config(**enc, margin=margin), wv)
    return build


def compared() -> dict[str, Compared]:
    """The models trained on the query sets: HMRN I-T and T-I, each tuned on τ (the same grid for both), and R-RE,
    R-HRE and Drill-down, each tuned on its hinge margin (VSE0's grid and default)."""
    vse0 = pcme_chapter.COMPARED[SINGLE]
    return {**{name: Compared(name, "tau", TAUS, 40.0, _hmrn(name)) for name in MODELS},
            **{name: Compared(name, vse0.weight_name, vse0.weights, vse0.default, _recurrent(name))
               for name in RECURRENT}}


def tune_models(profile: str, enc: dict, data: HMRNData, seed: int = 0, **train_overrides: object
                ) -> dict[str, TuningResult]:
    """Tune HMRN I-T, T-I, R-RE, R-HRE, Drill-down (on the multi-query splits) and VSE0 (on the queries as captions)
    with the same budget (cached runs: free the second time, so `ablate.py` and `visualise.py` call this to read
    `train.py`'s choices)."""
    overrides = {**TRAIN_OVERRIDES[check_profile(profile)], **train_overrides}
    tuned = pcme_chapter.tune_methods(profile, enc, data.multi.word_vectors, data.multi.train, data.multi.val,
                                      data.multi.vocab, seed, compared=compared(), **overrides)
    single = {SINGLE: pcme_chapter.COMPARED[SINGLE]}
    return {**tuned, **pcme_chapter.tune_methods(profile, enc, data.single.word_vectors, data.single.train,
                                                 data.single.val, data.single.vocab, seed, compared=single,
                                                 **overrides)}


def hmrn_train_config(profile: str, lr: float, seed: int = 0, **overrides: object) -> TrainConfig:
    """The chapter's recipe: `pcme.train_config` with the profile's `TRAIN_OVERRIDES` (cpu: batch 32)."""
    return train_config(profile, lr, seed, **{**TRAIN_OVERRIDES[check_profile(profile)], **overrides})


def tuned_config(name: str, enc: dict, tuned: Mapping[str, TuningResult], **changes: object) -> HMRNConfig:
    """HMRN I-T or T-I at its tuned τ with `changes` (an ablation); no changes: the config `train.py` trains."""
    return hmrn_config(enc, **{"local": LOCAL[name], "tau": tuned[name].weight, **changes})


def train_variant(name: str, data: HMRNData, tuned: Mapping[str, TuningResult], enc: dict, run: RunConfig,
                  seed: int, bert: bool = False, **changes: object) -> tuple[HMRN, FitResult]:
    """Train (or load from the run cache) HMRN I-T or T-I at its tuned setting with `changes`, at its tuned
    learning rate (`pcme.train_built`). Returns the model (best weights, eval mode) and the fit."""
    cfg = tuned_config(name, enc, tuned, **changes)
    wv = word_table(data.multi, bert)
    return train_built(lambda: HMRN(cfg, wv), tuned[name].lr, data.multi, run, seed,  # type: ignore[return-value]
                       **TRAIN_OVERRIDES[run.profile])


def train_recurrent(name: str, data: HMRNData, tuned: Mapping[str, TuningResult], enc: dict, run: RunConfig,
                    seed: int) -> tuple[RetrievalModel, FitResult]:
    """R-RE, R-HRE or Drill-down on the query sets at its tuned margin and learning rate (`pcme.train_built`)."""
    build = lambda: compared()[name].build(enc, data.multi.word_vectors, tuned[name].weight, 1)
    return train_built(build, tuned[name].lr, data.multi, run, seed, **TRAIN_OVERRIDES[run.profile])


def train_single(data: HMRNData, tuned: Mapping[str, TuningResult], enc: dict, run: RunConfig,
                 seed: int) -> tuple[RetrievalModel, FitResult]:
    """VSE0 on the region queries as captions at its tuned margin and learning rate."""
    build = lambda: pcme_chapter.COMPARED[SINGLE].build(enc, data.single.word_vectors, tuned[SINGLE].weight, 1)
    return train_built(build, tuned[SINGLE].lr, data.single, run, seed, **TRAIN_OVERRIDES[run.profile])


# ------------------------------------------------------------------------------------------ scores and rows
@dataclasses.dataclass(frozen=True)
class RoundScores:
    """One model's test scores after each round (T, Q, G) on the CPU, and the seconds embedding and scoring took."""

    scores: Tensor
    seconds: float


def score_rounds(model: RetrievalModel, split: Split, vocab: Vocabulary, device: torch.device | str,
                 fusion: str = "scores") -> RoundScores:
    """`evaluate.multi_query_scores` of every round 1..`rounds_of(split)` (short sets held), timed."""
    t0 = time.perf_counter()
    scores = multi_query_scores(model, split, vocab, rounds_of(split), short="hold", fusion=fusion, device=device)
    return RoundScores(scores.cpu(), time.perf_counter() - t0)


def ensemble_scores(image_text: RoundScores, text_image: RoundScores) -> RoundScores:
    """Eq. (17): S_1 + S_2 (what `HMRNEnsemble.score` computes, from the two models' stored scores)."""
    return RoundScores(image_text.scores + text_image.scores, image_text.seconds + text_image.seconds)


def run_row(model: str, seed: int, converged: bool, scores: RoundScores) -> dict[str, object]:
    """A per-run row: model, seed, converged, scoring seconds and every `multi_round_metrics` value."""
    return {"model": model, "seed": seed, "converged": converged, "score s": round(scores.seconds, 1),
            **multi_round_metrics(scores.scores)}


def train_and_score(seeds: Sequence[int], data: HMRNData, tuned: Mapping[str, TuningResult], enc: dict,
                    run: RunConfig) -> tuple[pd.DataFrame, pd.DataFrame, dict[tuple[str, int], RoundScores]]:
    """Train (or load) HMRN I-T, T-I, R-RE, R-HRE, Drill-down and VSE0 with every seed, score each on the test
    gallery, and add each seed's ensemble, VSE0* (score mean) and R-RankFusion (rank mean). Returns (per-run rows,
    `run_row`; fit rows, `pcme.fit_row`; {(model, seed): RoundScores})."""
    per_run, fits, scores = [], [], {}
    test, vocab, device = data.multi.test, data.multi.vocab, run.torch_device
    trainers = {**{name: train_variant for name in MODELS}, **{name: train_recurrent for name in RECURRENT}}
    for seed in seeds:
        converged = {}
        for name, train in trainers.items():
            t0 = time.perf_counter()
            model, result = train(name, data, tuned, enc, run, seed)
            fits.append(pcme_chapter.fit_row(name, seed, tuned[name], result, time.perf_counter() - t0))
            scores[name, seed], converged[name] = score_rounds(model, test, vocab, device), result.converged
            per_run.append(run_row(name, seed, result.converged, scores[name, seed]))
        scores[ENSEMBLE, seed] = ensemble_scores(scores[IT, seed], scores[TI, seed])
        per_run.append(run_row(ENSEMBLE, seed, converged[IT] and converged[TI], scores[ENSEMBLE, seed]))
        t0 = time.perf_counter()
        single, result = train_single(data, tuned, enc, run, seed)
        fits.append(pcme_chapter.fit_row(SINGLE, seed, tuned[SINGLE], result, time.perf_counter() - t0))
        for label, fusion in ((ROUND_MEAN, "scores"), (RANK_FUSION, "ranks")):
            scores[label, seed] = score_rounds(single, test, vocab, device, fusion=fusion)
            per_run.append(run_row(label, seed, result.converged, scores[label, seed]))
    return pd.DataFrame(per_run), pd.DataFrame(fits), scores


# ------------------------------------------------------------------------------------------- table layout
def round_columns(metric: str, rounds: int) -> dict[str, str]:
    """Tables 1-4: our per-round column -> the paper's key, `round{r}/<metric>` for r = 1..rounds."""
    return {f"round{r}/{metric}": f"round{r}/{metric}" for r in range(1, rounds + 1)}


def ceiling_row(ceiling: Mapping[str, float], mapping: Mapping[str, str], label: str) -> dict[str, object]:
    """The "Bayes ceiling" row in `paper_table`'s layout (`ceiling.multi_round_ceiling` keys)."""
    return {"model": "Bayes ceiling", "seeds": 0, **{f"{c} ({label})": ceiling[c] for c in mapping}}


def hmrn_table(per_run: pd.DataFrame, table: str, mapping: Mapping[str, str], label: str,
               ceiling: Mapping[str, float] | None = None, order: Sequence[str] = ORDER,
               paper_only: Sequence[str] = PAPER_ONLY) -> pd.DataFrame:
    """One of the paper's tables: our rows in `order` with the paper's value beside each (`dvse.paper_table` on
    the HMRN paper values), the paper-only rows, and the Bayes ceiling row on top when `ceiling` is given."""
    out = paper_table(per_run, order, table, mapping, label, paper_only, chapter="hmrn")
    if ceiling is None:
        return out
    return ceiling_first(out, ceiling_row(ceiling, mapping, label))


def round_table(per_run: pd.DataFrame, table: str, label: str, rounds: int,
                ceiling: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Tables 1-4: R@1, R@5, R@10 or mean rank per round 1..rounds."""
    return hmrn_table(per_run, table, round_columns(TABLE_METRICS[table], rounds), label, ceiling)


def table5(per_run: pd.DataFrame, label: str, ceiling: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Table 5: Avg. R@1/5/10, Avg. R@Sum and Avg. MR, plus each model's Avg. R@Sum as % of the ceiling's (the
    mean over seeds of each run's share) when `ceiling` is given."""
    out = hmrn_table(per_run, "table5", TABLE5_COLUMNS, label, ceiling)
    if ceiling is not None:
        out["R@Sum % of ceiling"] = ceiling_share(per_run, "rsum", ceiling["rsum"], out["model"])
    return out


def ceiling_frame(per_run: pd.DataFrame, ceiling: Mapping[str, float], rounds: int) -> pd.DataFrame:
    """`ceiling.csv`: per model, seed and round, R@1/5/10 beside the ceiling's and their % of it."""
    rows = []
    for _, r in per_run.iterrows():
        for rnd in range(1, rounds + 1):
            row = {"model": r["model"], "seed": r["seed"], "round": rnd, "converged": r["converged"]}
            for k in (1, 5, 10):
                key = f"round{rnd}/R@{k}"
                row |= {f"R@{k}": r[key], f"ceiling R@{k}": ceiling[key],
                        f"R@{k} % of ceiling": 100.0 * r[key] / ceiling[key]}
            rows.append(row)
    return pd.DataFrame(rows)


def not_built_table() -> pd.DataFrame:
    """The paper's compared methods this book does not build, each with the reason."""
    return pd.DataFrame([{"method": m, "why not built": why} for m, why in NOT_BUILT.items()])


# ------------------------------------------------------------------------------------- Table 11: complexity
def session_flops(model: RetrievalModel, split: Split, vocab: Vocabulary, image: int) -> int:
    """FLOPs (torch's `FlopCounterMode`: matrix products, convolutions, attention) of one retrieval session of
    image `image`'s query set against that one image: the image and every query encoded, every round 1..N
    scored (`multi_query_scores` on a one-image split, on the CPU)."""
    one = split.subset([image], f"{split.name}[{image}]")
    model = model.cpu().eval()
    with FlopCounterMode(display=False) as counter:
        multi_query_scores(model, one, vocab, rounds_of(one), short="hold", device="cpu")
    return counter.get_total_flops()


def complexity_row(label: str, models: Sequence[RetrievalModel], split: Split, vocab: Vocabulary,
                   text_backbone: str) -> dict[str, object]:
    """Table 11's row of one compared method (its models together: the ensemble has two): trainable parameters
    (M, the word embedding table included) and MFLOPs of one session (`session_flops`) on the split's image with
    the most queries."""
    image = int(np.argmax([len(q) for q in split.queries]))
    params = sum(p.numel() for m in models for p in m.parameters() if p.requires_grad)
    flops = sum(session_flops(m, split, vocab, image) for m in models)
    return {"model": label, "image input": "region features", "text backbone": text_backbone,
            "params (M)": params / 1e6, "MFLOPs per session": flops / 1e6,
            "queries in the session": len(split.queries[image])}


def table11(rows: Sequence[Mapping[str, object]], per_run: pd.DataFrame, label: str) -> pd.DataFrame:
    """Table 11: our complexity rows with our Avg. R@1 (mean over seeds) and the paper's params, GFLOPs and Avg.
    R@1 beside them, then the paper's rows this book does not build."""
    paper = paper_values("hmrn")
    paper = paper[paper["table"] == "table11"]
    paper = paper.pivot(index="method", columns="key", values="value").reindex(paper["method"].unique())
    r1 = per_run.groupby("model")["mean/R@1"].mean()
    cited = lambda m: {"params (M) (paper)": paper["params_M"].get(m, float("nan")),
                       "GFLOPs (paper)": paper["GFLOPs"].get(m, float("nan")),
                       "Avg. R@1 (paper)": paper["mean/R@1"].get(m, float("nan"))}
    out = [{**row, **cited(row["model"]), f"Avg. R@1 ({label})": r1.get(row["model"], float("nan"))} for row in rows]
    out += [{"model": f"{m} (paper only)", **cited(m)} for m in paper.index if m not in r1.index]
    return pd.DataFrame(out)


# ------------------------------------------------------------------------------------------------ ablations
def variant_runs(rows: Mapping[str, tuple[str, dict[str, object]]], seeds: Sequence[int], data: HMRNData,
                 tuned: Mapping[str, TuningResult], enc: dict, run: RunConfig, bert: bool = False
                 ) -> tuple[pd.DataFrame, dict[tuple[str, int], RoundScores]]:
    """Train and score every row {label: (model, changes)} with every seed (Tables 6, 7, 10; figures). Returns
    (per-run rows labelled `model` = the row's label, plus `cached`; {(label, seed): RoundScores})."""
    per_run, scores = [], {}
    for seed in seeds:
        for label, (name, changes) in rows.items():
            model, result = train_variant(name, data, tuned, enc, run, seed, bert=bert, **changes)
            scores[label, seed] = score_rounds(model, data.multi.test, data.multi.vocab, run.torch_device)
            per_run.append({**run_row(label, seed, result.converged, scores[label, seed]), "cached": result.cached})
    return pd.DataFrame(per_run), scores


def ensemble_runs(rows: Mapping[str, dict[str, object]], seeds: Sequence[int], data: HMRNData,
                  tuned: Mapping[str, TuningResult], enc: dict, run: RunConfig, bert: bool = False) -> pd.DataFrame:
    """Table 8: per row {label: changes} and seed, HMRN I-T and T-I trained with the changes and their ensemble
    scored (Eq. 17); per-run rows labelled with the row's label."""
    per_run = []
    for label, changes in rows.items():
        members, scores = variant_runs({IT: (IT, changes), TI: (TI, changes)}, seeds, data, tuned, enc, run, bert)
        for seed in seeds:
            converged = bool(members[members["seed"] == seed]["converged"].all())
            per_run.append(run_row(label, seed, converged, ensemble_scores(scores[IT, seed], scores[TI, seed])))
    return pd.DataFrame(per_run)


def renamed(per_run: pd.DataFrame, names: Mapping[str, str]) -> pd.DataFrame:
    """The runs of `train.py`'s models named in `names` ({new label: model}), relabelled."""
    parts = [per_run[per_run["model"] == model].assign(model=label) for label, model in names.items()]
    return pd.concat(parts, ignore_index=True)


def config_default(field: str) -> float:
    """The default of an `HMRNConfig` field (the paper's value)."""
    return {f.name: f.default for f in dataclasses.fields(HMRNConfig)}[field]


def sweep_settings(profile: str, name: str, kind: str, tuned: Mapping[str, TuningResult]) -> list[dict[str, float]]:
    """The settings of one figure's sweep for model `name`, the tuned one (train.py's) always among them:
    kind "lambda" (Figure 5), "tau" (Figure 6) or "alpha_beta" (Figure 8)."""
    profile = check_profile(profile)
    if kind == "lambda":
        field = LAMBDA_FIELD[name]
        return [{field: v} for v in sorted(set(LAMBDA_GRID[profile][name]) | {config_default(field)})]
    if kind == "tau":
        return [{"tau": v} for v in sorted(set(TAU_GRID[profile]) | {tuned[name].weight})]
    if kind == "alpha_beta":
        default = (config_default("alpha"), config_default("beta"))
        return [{"alpha": a, "beta": b} for a, b in sorted(set(ALPHA_BETA_GRID[profile]) | {default})]
    raise ValueError(f"sweep_settings: kind must be 'lambda', 'tau' or 'alpha_beta', got {kind!r}")


def sweep_runs(name: str, settings: Sequence[Mapping[str, float]], seed: int, data: HMRNData,
               tuned: Mapping[str, TuningResult], enc: dict, run: RunConfig
               ) -> tuple[pd.DataFrame, dict[tuple[float, ...], RoundScores]]:
    """One model's sweep (one seed): per setting a row with the setting's fields and the metrics; {setting
    values: RoundScores}."""
    rows = {" ".join(f"{k}={v:g}" for k, v in s.items()): (name, dict(s)) for s in settings}
    per_run, scores = variant_runs(rows, [seed], data, tuned, enc, run)
    fields = pd.DataFrame([dict(s) for s in settings])
    out = pd.concat([fields, per_run.reset_index(drop=True)], axis=1).assign(model=name)
    return out, {tuple(s.values()): scores[label, seed] for label, s in zip(rows, settings)}


def ensemble_grid(image_text: Mapping[tuple[float, ...], RoundScores],
                  text_image: Mapping[tuple[float, ...], RoundScores]) -> pd.DataFrame:
    """Figure 7: the ensemble (Eq. 17) of every pair of an HMRN I-T and an HMRN T-I setting of one sweep: rows
    (I-T value, T-I value, Avg. R@Sum, Avg. MR)."""
    rows = []
    for a, s_a in image_text.items():
        for b, s_b in text_image.items():
            m = multi_round_metrics(ensemble_scores(s_a, s_b).scores)
            rows.append({"I-T": a[0], "T-I": b[0], "rsum": m["rsum"], "mean/meanR": m["mean/meanR"]})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------------ figures
def sweep_figure(sweeps: pd.DataFrame, field: Mapping[str, str], title: str) -> Figure:
    """Figures 5-6: per model (one panel each) Avg. R@1/5/10 (left axis) and Avg. MR (right axis) against the
    swept value (`field`: model -> its column)."""
    models = list(field)
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 3.4), squeeze=False)
    for ax, model in zip(axes[0], models):
        part = sweeps[sweeps["model"] == model].sort_values(field[model])
        for k in (1, 5, 10):
            ax.plot(part[field[model]], part[f"mean/R@{k}"], marker="o", label=f"Avg. R@{k}")
        ax.set_xlabel(field[model])
        ax.set_ylabel("Avg. Recall")
        twin = ax.twinx()
        twin.plot(part[field[model]], part["mean/meanR"], marker="s", color="black", linestyle="--", label="Avg. MR")
        twin.set_ylabel("Avg. MR")
        ax.set_title(f"{model}")
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def bubble_figure(frame: pd.DataFrame, x: str, y: str, title: str, ax: plt.Axes | None = None) -> Figure:
    """Figures 7-8: one bubble per (x, y) setting, colour and size by Avg. R@Sum (`rsum`), annotated."""
    fig = ax.figure if ax is not None else plt.figure(figsize=(4.2, 3.6))
    ax = ax if ax is not None else fig.add_subplot(1, 1, 1)
    values = frame["rsum"].to_numpy(dtype=float)
    span = np.ptp(values) if np.ptp(values) > 0 else 1.0
    sizes = 80 + 600 * (values - values.min()) / span
    points = ax.scatter(frame[x], frame[y], s=sizes, c=values, cmap="coolwarm", edgecolors="black")
    for xv, yv, v in zip(frame[x], frame[y], values):
        ax.annotate(f"{v:.0f}", (xv, yv), fontsize=7, ha="center", va="center")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title, fontsize=9)
    fig.colorbar(points, ax=ax, label="Avg. R@Sum")
    return fig


# ------------------------------------------------------------------------------------------------ visualise
def round_ranks(scores: Tensor, split: Split, query_set: int, k: int = 5
                ) -> tuple[list[str], np.ndarray, np.ndarray, list[int]]:
    """The per-round retrieval of one query set (image `query_set`'s queries) from scores (T, Q, G): per round the
    text (the query added and the target's rank), the top-k gallery images (T, k), whether each is the target (T, k)
    and the target's rank (T,), pessimistic as `metrics.multi_round`. Needs no pixels."""
    texts, tops, ranks = [], [], []
    queries = split.queries[query_set]
    for r in range(scores.shape[0]):
        row = scores[r, query_set]
        ranks.append(int((row >= row[query_set]).sum()))
        tops.append(torch.argsort(row, descending=True, stable=True)[:k].numpy())
        added = queries[r] if r < len(queries) else "(no new query: the set is held)"
        texts.append(f"round {r + 1}: + '{added}' -> target rank {ranks[-1]}")
    top = np.stack(tops)
    return texts, top, top == query_set, ranks


def round_gallery(scores: Tensor, split: Split, query_set: int, k: int = 5
                  ) -> tuple[list[str], np.ndarray, np.ndarray, list[int]]:
    """`round_ranks` with pixels: a first row with the target image alone (the rest blank), then per round the text
    and the top-k images; returns (texts (T + 1), images (T + 1, k, H, W, 3), whether each is the target
    (T + 1, k), the target's rank after each round (T,))."""
    if split.images is None:
        raise ValueError(f"{split.source}: split {split.name!r} holds no pixels to draw")
    texts, top, hits, ranks = round_ranks(scores, split, query_set, k)
    target = np.zeros((k, *split.images.shape[1:]), dtype=split.images.dtype)
    target[0] = split.images[query_set]
    return ([f"target: test image {query_set}", *texts], np.concatenate([target[None], split.images[top]]),
            np.concatenate([np.arange(k)[None] == 0, hits]), ranks)


@torch.no_grad()
def _one_image(model: HMRN, split: Split, vocab: Vocabulary, image: int) -> tuple[tuple, tuple, Split]:
    """Image `image`'s embedding and its own query set's (eval mode, on the CPU), and the one-image split."""
    one = split.subset([image], f"{split.name}[{image}]")
    model = model.cpu().eval()
    img = model.encode_images(next(iter(image_loader(one, 1, visual=model.visual))))
    sets = model.encode_queries(next(iter(query_loader(one, vocab, 1, visual=None, max_queries=model.max_queries))))
    return img, sets, one


@torch.no_grad()
def query_attention(model: HMRN, split: Split, vocab: Vocabulary, image: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Eq. (7)'s T-I cross attention of image `image`'s own queries over its regions, with the model's λ2:
    (weights (R, N) (0 on padded regions), the heat of each pixel per query (N, S, S), `dvse.attention_heat`; None
    when the split holds no pixels)."""
    img, sets, one = _one_image(model, split, vocab, image)
    v, region_mask, _ = img
    t, query_mask = sets
    pos = clipped_cosines(v, region_mask, t, query_mask, model.config.clip_slope)
    weights = text_image_weights(pos, region_mask, model.config.lambda2)[0, 0]  # (R, N)
    weights = weights[:, query_mask[0]].numpy()
    if one.images is None:
        return weights, None
    return weights, attention_heat(weights, one.region_boxes[0], one.images.shape[1])


@torch.no_grad()
def correlation_graph(model: HMRN, split: Split, vocab: Vocabulary, image: int) -> list[np.ndarray]:
    """The inter-correlation graph (Eq. 15) of image `image` with its own query set: per reasoning step the
    affinity A (N + 1, N + 1), entry [q, k] the weight of node q in node k's update (each column sums to 1), the
    global node last."""
    img, sets, _ = _one_image(model, split, vocab, image)
    t, query_mask = sets
    pos = clipped_cosines(img[0], img[1], t, query_mask, model.config.clip_slope)
    c, nodes = model.correlation_nodes(pos, img, sets, model.query_pool(t, query_mask))
    graphs = []
    for step in model.inter:
        graphs.append(step.affinity(c, nodes)[0, 0].numpy())
        c = step(c, nodes)
    return graphs


def attention_figure(split: Split, image: int, weights: np.ndarray, heat: np.ndarray | None,
                     queries: Sequence[str]) -> Figure:
    """Test image `image` beside one panel per query with its attention heat (N, S, S) drawn over the image; without
    pixels (`heat` None) the weights (R, N) as a regions x queries heatmap."""
    if heat is None:
        fig, ax = plt.subplots(figsize=(1.2 * len(queries) + 2.5, 0.3 * len(weights) + 1.5))
        heatmap(ax, weights, [f"region {r + 1}" for r in range(len(weights))], [textwrap.fill(q, 18) for q in queries],
                fmt="{:.2f}", vmin=0.0, vmax=1.0)
        ax.set_title(f"test image {image}: Eq. (7)'s weight of each region per query", fontsize=8)
        fig.tight_layout()
        return fig
    pixels = split.images[image]
    fig, axes = plt.subplots(1, len(queries) + 1, figsize=(1.9 * (len(queries) + 1), 2.4), squeeze=False)
    axes[0, 0].imshow(pixels)
    axes[0, 0].set_title("image", fontsize=7)
    for ax, h, q in zip(axes[0, 1:], heat, queries):
        ax.imshow(pixels)
        ax.imshow(h, cmap="inferno", alpha=0.6, vmin=0.0, vmax=max(float(h.max()), 1e-9))
        ax.set_title(textwrap.fill(q, 18), fontsize=6)
    for ax in axes[0]:
        ax.axis("off")
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------------------ run counts
def training_runs(profile: str, n_seeds: int = 3) -> pd.DataFrame:
    """How many training runs the chapter needs from a cold cache, per notebook and part, with the seeds each gets
    (smoke: one seed, one setting per tuned model)."""
    profile = check_profile(profile)
    seeds = 1 if profile == "smoke" else n_seeds
    tune_runs = len(LEARNING_RATES[profile]) + (0 if profile == "smoke" else 2)
    trained = len(MODELS) + len(RECURRENT) + 1  # + VSE0
    bert = profile in BERT_PROFILES
    lam = sum(len(set(LAMBDA_GRID[profile][m]) - {config_default(LAMBDA_FIELD[m])}) for m in MODELS)
    tuned_taus = set(TAUS) if profile != "smoke" else {config_default("tau")}  # at the tuned lr: cached
    taus = len(set(TAU_GRID[profile]) - tuned_taus)
    ab_default = (config_default("alpha"), config_default("beta"))
    rows = [
        ("train", "tuning HMRN I-T and T-I (lr, then tau), R-RE, R-HRE, Drill-down and VSE0 (lr, then margin)",
         trained * tune_runs, 1),
        ("train", "seeds of HMRN I-T, T-I, R-RE, R-HRE, Drill-down and VSE0 (the first reuses its tuning run)",
         trained * (seeds - 1), seeds),
        ("ablate", "Table 6: levels alone and in pairs", len(TABLE6_ROWS[profile]) * ABLATION_SEEDS[profile],
         ABLATION_SEEDS[profile]),
        ("ablate", "Table 7: concatenation in Eq. (14)", len(TABLE7_ROWS[profile]) * ABLATION_SEEDS[profile],
         ABLATION_SEEDS[profile]),
        ("ablate", "Table 9: the jointly trained model", len(TABLE9) * ABLATION_SEEDS[profile], ABLATION_SEEDS[profile]),
        ("ablate", "Table 8: ICR steps other than 3, both models", 2 * len(set(ICR_STEPS[profile]) - {ICR_DEFAULT}), 1),
        ("ablate", "Figure 5: lambda (I-T: lambda1, T-I: lambda2), non-default values", lam, 1),
        ("ablate", "Figure 6: tau, values outside the tuning grid (the others: its runs), both models", 2 * taus, 1),
        ("ablate", "Figure 8: (alpha, beta) of HMRN I-T, non-default", len(set(ALPHA_BETA_GRID[profile]) - {ab_default}), 1),
        ("ablate", "Table 10: MiniLM text backbone, both models", 2 * seeds if bert else 0, seeds),
        ("ablate", "Figure 7 (ensembles of Figure 5's and 6's runs; no training)", 0, 1),
        ("visualise", "galleries, attention, graph (train.py's runs)", 0, 1),
    ]
    return pd.DataFrame(rows, columns=["notebook", "part", "runs", "seeds"])


# ---------------------------------------------------------------------------------------------- claims
def round_gain(per_run: pd.DataFrame, model: str, rounds: int) -> tuple[float, float, Verdict]:
    """"Performance improves as queries are added": the mean over seeds of R@1 after the last round minus after
    the first, its seed std and `difference_verdict` against 0 (not tested with one seed)."""
    runs = per_run[per_run["model"] == model]
    gains = runs[f"round{rounds}/R@1"] - runs["round1/R@1"]
    spread = float(gains.std(ddof=1)) if len(gains) > 1 else float("nan")
    return float(gains.mean()), spread, difference_verdict(float(gains.mean()), spread) if len(gains) > 1 else verdict(None)


def late_rounds(rounds: int, first: int = 3) -> list[str]:
    """The R@1 columns of rounds `first`..rounds (Sec. 4.3.3: "after the third round")."""
    return [f"round{r}/R@1" for r in range(first, rounds + 1)]


def default_margin(values: Mapping[object, float], default: object, spread: float) -> tuple[float, Verdict]:
    """"The default setting is the best": (its Avg. R@Sum minus the best other setting's, `difference_verdict`);
    not tested without another setting or a finite spread."""
    others = [v for k, v in values.items() if k != default]
    if default not in values or not others:
        return float("nan"), verdict(None)
    diff = values[default] - max(others)
    return diff, difference_verdict(diff, spread) if np.isfinite(spread) else verdict(None)


def seed_spread(per_run: pd.DataFrame, model: str, col: str = "rsum") -> float:
    """The seed std of `col` of `model` (NaN with one seed)."""
    values = seed_means(per_run, model, [col])
    return float(values.std(ddof=1)) if len(values) > 1 else float("nan")


# Table 6's claims (Sec. 4.4.1): claim -> (row a, row b, train.py's model whose seed spread judges a one-seed row).
TABLE6_CLAIMS: dict[str, tuple[str, str, str]] = {
    "T-I alone beats I-T alone (Method 4 > 1).": ("S_T-I", "S_I-T", TI),
    "Global added to the T-I local level helps (Method 5 > 4).": ("S_T-I + S_G", "S_T-I", TI),
    "Global added to the I-T local level helps (Method 6 > 1).": ("S_I-T + S_G", "S_I-T", IT),
    "Reasoning added to T-I local + global helps (Method 7 > 5).": ("S_T-I + S_G + S_R (HMRN T-I)", "S_T-I + S_G", TI),
    "Reasoning added to I-T local + global helps (Method 8 > 6).": ("S_I-T + S_G + S_R (HMRN I-T)", "S_I-T + S_G", IT),
    "Reasoning alone is far below the full hierarchy (Method 8 > 3).": ("S_I-T + S_G + S_R (HMRN I-T)", "S_R", IT),
}
TABLE7_CLAIMS: dict[str, tuple[str, str, str]] = {
    "T-I: subtraction (Eq. 14) beats concatenation.": ("T-I, Sub", "T-I, Concat", TI),
    "I-T: subtraction (Eq. 14) beats concatenation.": ("I-T, Sub", "I-T, Concat", IT),
}
TABLE9_CLAIMS: dict[str, tuple[str, str, str]] = {
    "Training I-T and T-I separately beats training them jointly.": ("Split", "Joint", ENSEMBLE),
}


def pair_claims(runs: pd.DataFrame, pairs: Mapping[str, tuple[str, str, str]], spread: Mapping[str, float],
                source: str) -> list[dict[str, object]]:
    """Each claim "row a is above row b" on Avg. R@Sum (`summary.compare_models`), judged against the larger of the
    rows' own seed spread and train.py's seed spread of the claim's model (`spread`); "not tested" when a row was
    not trained in this profile or no spread is finite (one seed everywhere)."""
    out = []
    trained = set(runs["model"])
    for claim, (a, b, model) in pairs.items():
        if not {a, b} <= trained:
            out.append({"claim": claim, "source": source, "verdict": verdict(None),
                        "evidence": f"{', '.join(sorted({a, b} - trained))} not trained in this profile"})
            continue
        c = compare_models(runs, a, b, ["rsum"])
        s = max(c.spread, spread[model]) if np.isfinite(spread[model]) else float("nan")
        out.append({"claim": claim, "source": source, "evidence": f"{a} - {b} = {c.diff:+.2f} Avg. R@Sum (spread {s:.2f})",
                    "verdict": difference_verdict(c.diff, s) if np.isfinite(s) else verdict(None)})
    return out


def sweep_claims(lam: Mapping[str, pd.DataFrame], tau: Mapping[str, pd.DataFrame],
                 spread: Mapping[str, float]) -> list[dict[str, object]]:
    """Figures 5-6, per model: "performance first rises, then falls as λ grows" (`summary.peak`) and "as τ grows
    it rises quickly, then levels off" (the best τ above the smallest by more than the model's seed spread)."""
    out = []
    for m, frame in lam.items():
        field = LAMBDA_FIELD[m]
        best, _, lam_verdict = peak(dict(zip(frame[field], frame["rsum"])), spread[m])
        out.append({"claim": f"{m}: performance first rises, then falls as {field} grows.", "source": "Sec. 4.5.1, Fig. 5",
                    "evidence": f"best {field} = {best:g} on {sorted(frame[field])} (seed spread {spread[m]:.2f})",
                    "verdict": lam_verdict})
        taus = dict(zip(tau[m]["tau"], tau[m]["rsum"]))
        low = min(taus)
        diff = max(taus.values()) - taus[low]
        out.append({"claim": f"{m}: as tau grows performance rises quickly, then levels off.",
                    "source": "Sec. 4.5.2, Fig. 6", "evidence": f"best - (tau = {low:g}) = {diff:+.2f} Avg. R@Sum on "
                    f"{sorted(taus)} (seed spread {spread[m]:.2f})",
                    "verdict": difference_verdict(diff, spread[m]) if np.isfinite(spread[m]) and len(taus) > 1
                    else verdict(None)})
    return out


# ------------------------------------------------------------------------------------ notebook plumbing
def split_sizes(data: HMRNData) -> pd.DataFrame:
    """Images, region queries and the shortest and longest set of each split the chapter uses."""
    splits = [("train", data.multi.train), ("val (per-epoch validation)", data.multi.val),
              ("test gallery (the tables)", data.multi.test)]
    return pd.DataFrame([(name, s.n_images, sum(map(len, s.queries)), min(map(len, s.queries)),
                          max(map(len, s.queries))) for name, s in splits],
                        columns=["split", "images", "region queries", "fewest a set", "most a set"])


def round_ceiling(data: HMRNData, rounds: int) -> dict[str, float] | None:
    """The multi-round Bayes ceiling of the test gallery (short sets held), None without exact relevance."""
    return None if data.queries is None else multi_round_ceiling(*data.queries, rounds, short="hold")


def write_tables(per_run: pd.DataFrame, label: str, rounds: int, ceiling: Mapping[str, float] | None,
                 run: RunConfig, caption: str) -> dict[str, pd.DataFrame]:
    """Tables 1-5 (`round_table`, `table5`) and, with a ceiling, `ceiling.csv`, written under `hmrn/`; `caption`
    follows each table's own line. Returns {"table1": ..., "table5": ...}."""
    tables = {t: round_table(per_run, t, label, rounds, ceiling) for t in TABLE_METRICS}
    tables["table5"] = table5(per_run, label, ceiling)
    for t, frame in tables.items():
        what = f"{TABLE_METRICS[t]} per round" if t in TABLE_METRICS else (
            "Avg. R@1/5/10, Avg. R@Sum (rsum) and Avg. MR over the rounds; 'R@Sum % of ceiling' = each model's Avg. "
            "R@Sum over the ceiling's (mean over seeds)")
        write_table(frame, f"hmrn/{t}", run=run, caption=f"HMRN Table {t[5:]} analogue: {what}. {caption}")
    if ceiling is not None:
        write_table(ceiling_frame(per_run, ceiling, rounds), "hmrn/ceiling", run=run, extra={"ceiling": dict(ceiling)},
                    caption=f"Each model's R@1/5/10 after each round as a share of the multi-round Bayes ceiling "
                            f"(profile {run.profile}).")
    return tables


def train_claims(per_run: pd.DataFrame, rounds: int, complexity: pd.DataFrame, embed_dim: int) -> pd.DataFrame:
    """The claims of Sec. 4.3 and 4.6 checked on train.py's runs (`summary.compare_models`; a claim on a model
    that did not converge is "not tested", `results.require_converged`)."""
    means = model_means(per_run, ORDER, ["rsum"])
    best = best_other_margin(per_run, ENSEMBLE, means, ["rsum"])
    it_ti = {c: compare_models(per_run, IT, TI, [c]) for c in ("rsum", "mean/R@1")}
    ens = {m: compare_models(per_run, ENSEMBLE, m, ["rsum"]) for m in MODELS}
    gain, gain_spread, gain_verdict = round_gain(per_run, ENSEMBLE, rounds)
    paradigms = {(m, s): compare_models(per_run, m, s, late_rounds(rounds))
                 for m in MULTI_VECTOR for s in SINGLE_VECTOR}
    (closest_m, closest_s), closest = min(paradigms.items(), key=lambda pair: pair[1].diff)
    n_held = sum(c.verdict == "held" for c in paradigms.values())
    hre_re = compare_models(per_run, HRE, RE, ["rsum"])
    vs_star = {m: compare_models(per_run, m, ROUND_MEAN, ["rsum"]) for m in MODELS}
    late_ens = compare_models(per_run, IT, ENSEMBLE, late_rounds(rounds, max(1, rounds - 1)))
    drill = {c: compare_models(per_run, ENSEMBLE, DRILL, [c]) for c in (f"round{rounds}/R@1", "rsum")}
    claims = [
        {"claim": "HMRN (the ensemble) surpasses every compared method (Avg. R@Sum).",
         "source": "Sec. 4.3.1, Tables 1-5", "evidence": f"ensemble - best other = {best.diff:+.2f} (largest seed std "
         f"{best.spread:.2f})", "verdict": best.verdict, "models": ORDER},
        {"claim": "HMRN I-T is above HMRN T-I on the averaged metrics (Avg. R@Sum and Avg. R@1).",
         "source": "Sec. 4.3.2, Table 5", "evidence": "; ".join(f"I-T - T-I = {c.diff:+.2f} {k} (spread {c.spread:.2f})"
                                                               for k, c in it_ti.items()),
         "verdict": universal_verdict([c.verdict for c in it_ti.values()]), "models": list(MODELS)},
        *[{"claim": f"The ensemble surpasses {m} on Avg. R@Sum.", "source": "Sec. 4.3.2, Table 5",
           "evidence": f"ensemble - {m} = {c.diff:+.2f} (spread {c.spread:.2f})", "verdict": c.verdict,
           "models": [ENSEMBLE, m]} for m, c in ens.items()],
        {"claim": "Retrieval improves as queries are added (the ensemble's R@1, last round against the first).",
         "source": "Sec. 4.3.1, Table 1", "evidence": f"round {rounds} - round 1 = {gain:+.2f} R@1 (seed std "
         f"{gain_spread:.2f})", "verdict": gain_verdict, "models": [ENSEMBLE]},
        {"claim": f"Multi-vector methods (here {', '.join(MULTI_VECTOR)}) surpass single-vector ones (here "
         f"{', '.join(SINGLE_VECTOR)}) from the third round on: every pair.", "source": "Sec. 4.3.3, Tables 1-4",
         "evidence": f"{n_held} of {len(paradigms)} pairs held on the mean R@1 of rounds 3..{rounds}; the closest: "
         f"{closest_m} - {closest_s} = {closest.diff:+.2f} (spread {closest.spread:.2f})",
         "verdict": universal_verdict([c.verdict for c in paradigms.values()]), "models": ORDER},
        {"claim": "R-HRE is above R-RE (Avg. R@Sum): a query-level GRU over the queries beats one GRU over their "
         "concatenation.", "source": "Tables 1-5 (Drill-down's rows; Sec. 4.3 (b), (c) describe the two)",
         "evidence": f"R-HRE - R-RE = {hre_re.diff:+.2f} Avg. R@Sum (spread {hre_re.spread:.2f})",
         "verdict": hre_re.verdict, "models": [HRE, RE]},
        {"claim": "HMRN outperforms traditional single-query methods averaged over the rounds (the '*' rows; here "
         "VSE0*).", "source": "Sec. 4.3.4, Tables 1-5",
         "evidence": "; ".join(f"{m} - VSE0* = {c.diff:+.2f} Avg. R@Sum (spread {c.spread:.2f})"
                               for m, c in vs_star.items()),
         "verdict": universal_verdict([c.verdict for c in vs_star.values()]), "models": [*MODELS, ROUND_MEAN]},
        {"claim": "HMRN (the ensemble) beats Drill-down (the paper: +23.4 R@1 in the last round, +74.8 Avg. R@Sum).",
         "source": "Abstract, Sec. 4.3.1, Tables 1 and 5",
         "evidence": "; ".join(f"ensemble - Drill-down = {c.diff:+.2f} {k} (spread {c.spread:.2f})"
                               for k, c in drill.items()),
         "verdict": universal_verdict([c.verdict for c in drill.values()]), "models": [ENSEMBLE, DRILL]},
        {"claim": "In the last rounds the weaker T-I branch drags the ensemble below HMRN I-T.",
         "source": "Sec. 4.3.2, Tables 1-4", "evidence": f"I-T - ensemble = {late_ens.diff:+.2f} mean R@1 of the last "
         f"two rounds (spread {late_ens.spread:.2f})", "verdict": late_ens.verdict, "models": [IT, ENSEMBLE]},
    ]
    converged = converged_by_model(per_run)
    for claim in claims:
        claim["verdict"], claim["evidence"] = require_converged(claim["verdict"], claim["evidence"],
                                                                claim.pop("models"), converged)
    ours = complexity.set_index("model")
    claims += [
        {"claim": "HMRN is lighter than the re-implemented ITR methods (4.7 M parameters, 0.5 GFLOPs).",
         "source": "Sec. 4.6, Table 11", "evidence": f"those methods are not built; our HMRN ensemble has "
         f"{ours.loc[ENSEMBLE, 'params (M)']:.2f} M parameters and {ours.loc[ENSEMBLE, 'MFLOPs per session']:.1f} "
         f"MFLOPs a session at D = {embed_dim}", "verdict": verdict(None)},
    ]
    return pd.DataFrame(claims)


def ablation_rows(table: Mapping[str, tuple[str, dict[str, object]]], rows: Sequence[str]
                  ) -> dict[str, tuple[str, dict[str, object]]]:
    """The rows of an ablation table (`TABLE6`, `TABLE7`) a profile trains, in the profile's order."""
    return {r: table[r] for r in rows}


def icr_rows(profile: str) -> dict[str, dict[str, object]]:
    """Table 8's trained rows: {"ICR step L": {"icr_steps": L}} for the profile's L other than the default."""
    return {f"ICR step {s}": {"icr_steps": s} for s in ICR_STEPS[check_profile(profile)] if s != ICR_DEFAULT}


def icr_order(profile: str) -> list[str]:
    """Table 8's rows in order of L (the default's row is train.py's ensemble)."""
    return [f"ICR step {s}" for s in sorted(ICR_STEPS[check_profile(profile)])]


def sweeps(kind: str, profile: str, seed: int, data: HMRNData, tuned: Mapping[str, TuningResult], enc: dict,
           run: RunConfig) -> tuple[pd.DataFrame, dict[str, dict[tuple[float, ...], RoundScores]]]:
    """One figure's sweep ("lambda" or "tau", `sweep_settings`) of both models, one seed: (the rows of both, `sweep_runs`;
    {model: {setting: RoundScores}})."""
    runs = {m: sweep_runs(m, sweep_settings(profile, m, kind, tuned), seed, data, tuned, enc, run) for m in MODELS}
    return pd.concat([frame for frame, _ in runs.values()], ignore_index=True), {m: s for m, (_, s) in runs.items()}


MINILM = "MiniLM (packaged)"


def minilm_runs(profile: str, seeds: Sequence[int], data: HMRNData, tuned: Mapping[str, TuningResult],
                run: RunConfig) -> pd.DataFrame | None:
    """Table 10's MiniLM row: the ensemble of HMRN I-T and T-I on the packaged MiniLM (fine-tuned) at the BiGRU-tuned
    settings, every seed; None outside `BERT_PROFILES` (module docstring of the notebook: its CPU cost)."""
    if check_profile(profile) not in BERT_PROFILES:
        return None
    enc = hmrn_encoders(profile, data.multi.test.regions.shape[2], bert=True)
    return ensemble_runs({MINILM: {}}, seeds, data, tuned, enc, run, bert=True)


def table10(full: pd.DataFrame, minilm: pd.DataFrame | None, label: str, why: str) -> pd.DataFrame:
    """Table 10: train.py's ensemble ("Bi-GRU"), the MiniLM ensemble (or a row saying `why` it was not run) and the
    paper's CLIP row, with a note on each."""
    runs = renamed(full, {"Bi-GRU": ENSEMBLE})
    runs = runs if minilm is None else pd.concat([runs, minilm], ignore_index=True)
    order = ["Bi-GRU"] + ([] if minilm is None else [MINILM])
    out = hmrn_table(runs, "table10", TABLE5_COLUMNS, label, order=order, paper_only=("CLIP (ViT/B-16)",))
    if minilm is None:
        out = pd.concat([out, pd.DataFrame([{"model": MINILM, "seeds": 0}])], ignore_index=True)
    notes = {"Bi-GRU": "train.py's ensemble", "CLIP (ViT/B-16) (paper only)": "paper: frozen CLIP text features",
             MINILM: why if minilm is None else "the ensemble, MiniLM fine-tuned"}
    return out.assign(note=out["model"].map(notes))


def ablate_claims(runs6: pd.DataFrame, runs7: pd.DataFrame, runs8: pd.DataFrame, runs9: pd.DataFrame,
                  full: pd.DataFrame, minilm: pd.DataFrame | None, lam: pd.DataFrame, tau: pd.DataFrame,
                  alpha_beta: pd.DataFrame, spread: Mapping[str, float], minilm_why: str) -> pd.DataFrame:
    """The claims of Sec. 4.4-4.5 checked on ablate.py's runs (`full`: train.py's per-seed rows; `minilm`:
    `minilm_runs`): Tables 6, 7 and 9 (`pair_claims`), Table 8 and Figure 8 (`default_margin` against train.py's
    seed spread), Table 10, Figures 5-6 (`sweep_claims`)."""
    claims = pair_claims(runs6, TABLE6_CLAIMS, spread, "Sec. 4.4.1, Table 6")
    claims += pair_claims(runs7, TABLE7_CLAIMS, spread, "Sec. 4.4.2, Table 7")
    icr_diff, icr_verdict = default_margin(dict(zip(runs8["model"], runs8["rsum"])), f"ICR step {ICR_DEFAULT}",
                                           spread[ENSEMBLE])
    claims.append({"claim": f"{ICR_DEFAULT} reasoning steps are best (the ensemble).", "source": "Sec. 4.4.2, Table 8",
                   "evidence": f"L = {ICR_DEFAULT} - best other L = {icr_diff:+.2f} Avg. R@Sum (seed spread "
                   f"{spread[ENSEMBLE]:.2f})", "verdict": icr_verdict})
    claims += pair_claims(runs9, TABLE9_CLAIMS, spread, "Sec. 4.4.3, Table 9")
    if minilm is None:
        claims.append({"claim": "The BiGRU beats a pretrained text backbone (CLIP; here MiniLM) slightly.",
                       "source": "Sec. 4.4.4, Table 10", "evidence": minilm_why, "verdict": verdict(None)})
    else:
        c = compare_models(pd.concat([renamed(full, {"Bi-GRU": ENSEMBLE}), minilm]), "Bi-GRU", MINILM, ["rsum"])
        claims.append({"claim": "The BiGRU beats a pretrained text backbone (CLIP; here MiniLM) slightly.",
                       "source": "Sec. 4.4.4, Table 10", "evidence": f"Bi-GRU - MiniLM = {c.diff:+.2f} Avg. R@Sum "
                       f"(spread {c.spread:.2f})", "verdict": c.verdict})
    claims += sweep_claims({m: lam[lam["model"] == m] for m in MODELS}, {m: tau[tau["model"] == m] for m in MODELS},
                           spread)
    default = (config_default("alpha"), config_default("beta"))
    ab = {(a, b): v for a, b, v in zip(alpha_beta["alpha"], alpha_beta["beta"], alpha_beta["rsum"])}
    ab_diff, ab_verdict = default_margin(ab, default, spread[IT])
    claims.append({"claim": "alpha = beta = 0.4 is the best weighting of the levels (HMRN I-T).",
                   "source": "Sec. 4.5.3, Fig. 8", "evidence": f"{default} - best other = {ab_diff:+.2f} Avg. R@Sum "
                   f"(seed spread {spread[IT]:.2f})", "verdict": ab_verdict})
    return pd.DataFrame(claims)


def write_galleries(scores: Tensor, split: Split, sets: Sequence[int], k: int, run: RunConfig) -> pd.DataFrame:
    """The per-round gallery of each query set of `sets` (`round_gallery` through `viz.retrieval_gallery`), written
    as `hmrn/gallery_<set>` when the split holds pixels (real data read without images: no figure); returns the
    target's rank after each round (rows: rounds, columns: "set <q>")."""
    ranks = {}
    for q in sets:
        if split.images is None:
            ranks[f"set {q}"] = round_ranks(scores, split, int(q), k)[3]
            continue
        texts, images, hits, ranks[f"set {q}"] = round_gallery(scores, split, int(q), k)
        write_figure(retrieval_gallery(texts, images, hits, width=60), f"hmrn/gallery_{q}", run=run,
                     caption=f"Test query set {q}: the top {k} images after each round (green: the target) and the "
                     "target's rank.")
    return pd.DataFrame(ranks, index=pd.RangeIndex(1, scores.shape[0] + 1, name="round"))


def graph_figure(graphs: Sequence[np.ndarray], n_queries: int) -> Figure:
    """The inter-correlation graph per reasoning step (`correlation_graph`) as annotated heatmaps, one shared colour
    scale from 0 to 1."""
    nodes = [f"q{j + 1}" for j in range(n_queries)] + ["global"]
    fig, axes = plt.subplots(1, len(graphs), figsize=(4.2 * len(graphs), 3.8), squeeze=False)
    for step, (ax, graph) in enumerate(zip(axes[0], graphs), 1):
        heatmap(ax, graph, nodes, nodes, fmt="{:.2f}", vmin=0.0, vmax=1.0, colorbar=step == len(graphs))
        ax.set_title(f"step {step}: A[q, k] (q: source, k: updated node)", fontsize=8)
    fig.tight_layout()
    return fig


OFFICIAL_CODE_NOTE = (
    "**What the official code (LZH-053/HMRN) does differently, and this book does not.** (1) Round weighting at test "
    "time only: its test scoring multiplies the reasoning similarity by w_t = (1 + ... + t) / 55 in round t, while "
    "training and validation use no such weight; here every round is scored with the similarity that was trained "
    "(Eq. 18-19). (2) Queries dropped silently: its test evaluation sets npts = number of query sets - 96, so the "
    "last 96 query sets are never scored while the gallery keeps every image; here every query set is scored, and a "
    "set longer than the model's limit is an error naming its image, never truncated.")
