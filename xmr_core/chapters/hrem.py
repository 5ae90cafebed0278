"""The HREM chapter: its compared models, their tuning budget, its data protocol, its tables' columns, its
ablation grids and the helpers its notebooks call (`book/03_hrem/`).

HREM (Fu et al., CVPR 2023) has public code (CrossmodalGroup/HREM); `xmr_core.methods.hrem` follows the paper
and lists in its docstring every choice the paper leaves open and where the code differs.

Input: region features (the BUTD analogue, `ImageEncoderConfig(kind="regions")`) and the BiGRU over GloVe
(`hrem_encoders`), the paper's "Region + BiGRU" block, for every model. "Region + BERT" (GPO and both HREM
mechanisms on the packaged MiniLM, `region_bert`) is tuned and trained like every model, with the text encoder of
`recipes.minilm_text`: fine-tuned in the `paper` profile (the paper's protocol); on `cpu` a head on the MiniLM's
frozen token features, every caption encoded once and cached (`encoders.text_features`), since fine-tuning costs
about 15 minutes an epoch on 2 cores: a deviation from the paper, which fine-tunes BERT; the captions' word
dropout is then done on the features (`FEATURE_TRAIN_OVERRIDES`, `FeatureTextEncoderConfig.token_dropout`). The
smoke tables carry the paper's BERT rows with ours marked "not run on smoke".

Compared models, each tuned by the one protocol (`xmr_core.runs.tuning`, through `training.tune_methods`): the learning
rate and the margin α around their defaults (the recipe's lr; the papers' α 0.2, step ×2, at most 2), extended
until the choice is bracketed or at a hard bound, then the training length checked. The margin is every model's
tuned weight: all four train a triplet / hinge loss with
margin α (Eq. 13). VSE++ (hardest negatives, the library's from-scratch recipe), GPO (VSE∞,
`xmr_core.methods.gpo`), HREM standalone and HREM fusion (the paper's defaults: β 0.8, τ 0.5, λ 1.5, K 10,
L 1, distance-weighted negatives). "HREM ensemble" is the paper's "Full*": the average of the standalone and
fusion models' test similarity matrices (same seed), no training. SCAN (t2i cross attention,
`xmr_core.methods.scan`), Figure 5's score-based matcher, is trained at VSE++'s tuned learning rate and margin
(the same hinge), without a tuning of its own.

Protocol (COCO / Flickr30K style, instance relevance): train on the training split, tune and stop on the
validation split, test on the test split, every class in every split (`hrem_data`). The data are read in SCAN's
precomp format (`DATA_FORMAT`, region features), as HREM's code reads them; on scenes the export in that format
carries the benchmark's region features. Table 1 (the 5K analogue) is the whole test split (on scenes 5,000
images, 25,000 captions: COCO 5K's size); Table 2's "1K" is the mean over five folds of it (the COCO 1K protocol),
and its Flickr30K analogue ("F30K-size") is the same five folds: each has Flickr30K's test size (1,000 images,
5,000 captions), and their mean counts every test query (one fold would have five times the query noise). No
second, Flickr-sized data set is generated, so Table 2's two column groups hold the same numbers.

Every final run (each compared model and seed, the ensemble, Table 3's rows, Figure 6's points, SCAN) is scored once
on the test split and recorded (`docs/records.md`, `record_trained`, `train_and_record`): the tables, Figures 5-7's
values and the claims read the records, and the claims on per-query values are bound to them (`claim_bindings`) for
`xmr claims recompute hrem`. The weights are needed only where the model itself is drawn or measured: Table 4's
query subsets (`table4_selectors`: each seed's VSE++ embeddings), Figure 5's times (`fig5_runs`), and visualise.py's
association graph, region matching and Figure 3 connections (`batch_graph`, `region_matching_figure`,
`connection_runs`).

Neighbour batches (Sec. 3.4, "at the later training") start at epoch `NEIGHBOUR_FROM[budget(profile)]`: half-way
through the cpu schedule's early-stopped runs, the code's epoch 15 of 30 on the paper profile.
"""

from __future__ import annotations

import math
import textwrap
import time
from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch import Tensor

from xmr_core.ceiling import SplitCeiling, query_ceiling
from xmr_core.chapters.summary import dataset_note, mean_std, paper_table, with_ceiling, with_paper
from xmr_core.claims import (
    ClaimSpec,
    Evidence,
    Judgement,
    judge,
    run_evidence,
    seed_evidence,
    seed_only,
)
from xmr_core.config import RunConfig, budget, check_profile
from xmr_core.data.corpus import Split
from xmr_core.data.datasets import PairDataset, collate
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.text_features import feature_train_overrides
from xmr_core.evaluate import DIRECTIONS, RK_COLUMNS, embed_split, score_split
from xmr_core.experiment.compared import (
    hrem_compared,
    hrem_defaults,
    with_margin,
)
from xmr_core.experiment.ensemble import ScoreMean
from xmr_core.experiment.protocols import (
    ChapterData,
    word_table,
)
from xmr_core.experiment.recipes import MINILM_FROZEN, hrem_encoders, minilm_not_run, minilm_text
from xmr_core.experiment.run_records import recorded, recorded_ensemble
from xmr_core.experiment.scorepool import score_trained
from xmr_core.experiment.training import fit_row, least_tuning_runs, request_built, train_many
from xmr_core.experiment.training import tune_methods as tune_compared
from xmr_core.grounding import link_precision
from xmr_core.margins import Cell, Margin
from xmr_core.methods.base import RetrievalModel
from xmr_core.methods.hrem import HREM, AssociationGraph, HREMConfig
from xmr_core.methods.scan import SCAN, scan_config
from xmr_core.paper_words import Words, worded
from xmr_core.query_values import QueryMetric, query_values, scoring_metrics
from xmr_core.record_evidence import ClaimRecords, Side, judge_records, record_evidence
from xmr_core.records import RunRecord
from xmr_core.run_evaluation import Scoring
from xmr_core.runs.train import FitResult, RunRequest
from xmr_core.runs.tuning import TuningResult, tuning_frame
from xmr_core.viz import attention_heat, heat_overlay, heatmap, image_grid, sweep_grid

MODELS = ["VSE++", "GPO", "HREM standalone", "HREM fusion"]  # trained, tuned, every seed
ENSEMBLE = "HREM ensemble"  # the paper's "HREM (Full)*": standalone + fusion similarities averaged
ORDER = MODELS + [ENSEMBLE]
SCAN_MODEL = "SCAN t2i"  # Figure 5's score-based matcher

# The paper's rows of each table that this book does not build (shown with the paper's values only).
PAPER_ONLY: dict[str, tuple[str, ...]] = {
    "table1_bigru": ("IMRAM", "UARD", "NAAF", "CGMN", "MV"),
    "table1_bert": ("SSAMT", "DIME", "DCPA", "DSRAN", "VSRN++"),
    "table2_bigru": ("VSRN*", "CVSE", "MV"),
    "table2_bert": ("CAMERA*", "DSRAN*", "VSRN++"),
}
BERT_ORDER = ["GPO", "HREM standalone", "HREM fusion", ENSEMBLE]  # the paper's Region + BERT rows we would build

# Our columns ("all" = the whole test split, "1K" = five folds of it) -> the paper's keys ("<protocol>|<key>").
TABLE1_COLUMNS: dict[str, str] = {**{f"all {c}": f"5K|instance/{c.replace(' ', '/')}" for c in RK_COLUMNS},
                                  "all rSum": "5K|rsum"}
FLICKR_PREFIX = "F30K-size"  # Table 2's Flickr30K analogue: the 1K protocol's folds, each Flickr30K's test size
TABLE2_COLUMNS: dict[str, str] = {**{f"{FLICKR_PREFIX} {c}": f"F30K|instance/{c.replace(' ', '/')}"
                                     for c in RK_COLUMNS},
                                  f"{FLICKR_PREFIX} rSum": "F30K|rsum",
                                  **{f"1K {c}": f"1K|instance/{c.replace(' ', '/')}" for c in RK_COLUMNS},
                                  "1K rSum": "1K|rsum"}
TABLE3_COLUMNS: dict[str, str] = {f"all {d} R@{k}": f"instance/{d}/R@{k}" for d in DIRECTIONS for k in (1, 5)}

# Table 3: each relation level (3a) and component (3b) removed from HREM fusion (`HREMConfig` fields, the
# method's docstring item 15).
TABLE3A: dict[str, dict[str, object]] = {
    "w/o fragment level": {"visual_fragment": False, "textual_fragment": False},
    "w/o visual fragment": {"visual_fragment": False},
    "w/o textual fragment": {"textual_fragment": False},
    "w/o instance level": {"intra": False, "inter": False},
    "w/o inter-modal": {"inter": False},
    "w/o intra-modal": {"intra": False},
}
TABLE3B: dict[str, dict[str, object]] = {
    "w/o connection A": {"connection": False},
    "w/o relevance S": {"relevance": False},
    "w/o L_cross": {"cross_loss": False},
    "w/o L_reg": {"reg_weight": 0.0},
    "w/o neighbour sampling": {"neighbour_sampling": False},
}
# Table 3 rows per profile (cpu / paper: all; smoke: one of each table, every code path).
TABLE3_ROWS: dict[str, tuple[str, ...]] = {"smoke": ("w/o instance level", "w/o connection A"),
                                           "cpu": tuple(TABLE3A) + tuple(TABLE3B),
                                           "paper": tuple(TABLE3A) + tuple(TABLE3B)}
TABLE3_WITH_RSUM: dict[str, str] = {**TABLE3_COLUMNS, "all rSum": "rsum"}  # Table 3 as shown (rSum: ours only)
# Figure 6 sweeps (every seed at every value; the default is train.py's HREM fusion).
FIG6_GRIDS: dict[str, dict[str, tuple[float, ...]]] = {
    "smoke": {"lam": (0.0, 1.5), "topk": (10,), "tau": (0.5,)},
    "cpu": {"lam": (0.0, 0.5, 1.5, 3.0), "topk": (2, 5, 10, 15), "tau": (0.1, 0.3, 0.5, 0.9)},
    "paper": {"lam": (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0), "topk": (2, 5, 10, 15, 20),
              "tau": (0.1, 0.3, 0.5, 0.7, 0.9)},  # lam 3.0: the cpu grid's, in the insensitivity claim
}
FIG6_DEFAULTS = {"lam": 1.5, "topk": 10, "tau": 0.5}
FIG6_TITLES = {"lam": "(a) λ, weight of S in Eq. (12)", "topk": "(b) K, matches of Eq. (8)",
               "tau": "(c) τ, neighbours"}
TABLE4_PERCENTS = (5, 10, 20)
WITH_SI = "HREM fusion (sample interaction)"  # Table 4's compared rows: HREM fusion and Table 3a's
WITHOUT_SI = "w/o instance level (no sample interaction)"  # "w/o instance level"
CEILING_SI = "Bayes ceiling (exact relevance)"  # Table 4's ceiling row: the ceiling scorer on the same queries
SpecialKind = Literal["hard", "infrequent"]


# ---------------------------------------------------------------------------------------------- data




def split_sizes(data: ChapterData) -> pd.DataFrame:
    """Images and captions of the train, validation and test splits (the test split: Tables 1 and 2)."""
    splits = [("train", data.train), ("val", data.val), ("test (Tables 1 and 2)", data.test)]
    return pd.DataFrame([(name, s.n_images, s.n_captions) for name, s in splits],
                        columns=["split", "images", "captions"])


# ---------------------------------------------------------------------------------------- compared models





def tune_methods(profile: str, enc: dict, data: ChapterData, seed: int = 0, bert: bool = False,
                 models: Sequence[str] = MODELS, run: RunConfig | None = None,
                 **train_overrides: object) -> dict[str, TuningResult]:
    """Tune every compared model of `models` by the one protocol on the validation split (cached runs: free the
    second time; with `run`, a search run the cache lacks stands in by its fit summary, `training.tune_methods`)."""
    compared = hrem_compared(profile)
    return tune_compared(profile, enc, word_table(data, bert), data.train, data.val, data.vocab, seed,
                         compared={m: compared[m] for m in models}, run=run, **train_overrides)


def ablation_config(enc: dict, profile: str, tuned: dict[str, TuningResult], **changes: object) -> HREMConfig:
    """HREM fusion at its tuned margin with `changes` (Table 3 rows, Figure 6 values); no changes: the very
    config of `train.py`'s HREM fusion, so its runs are loaded from the cache."""
    return with_margin(hrem_defaults(enc, profile, "fusion", **changes), tuned["HREM fusion"].weight)


# ---------------------------------------------------------------------------------------------- training
def longest_caption(data: ChapterData) -> int:
    """The most word tokens of any caption of the train, validation and test splits (SCAN pads to it)."""
    return max(len(data.vocab.encode(c)) for split in (data.train, data.val, data.test) for c in split.captions)


def build_model(name: str, data: ChapterData, tuned: dict[str, TuningResult], enc: dict, profile: str,
                bert: bool = False, config: HREMConfig | None = None) -> RetrievalModel:
    """A fresh model: a compared one at its tuned margin, SCAN at VSE++'s (its captions padded to the longest of
    the data), or an HREM of `config`."""
    wv = word_table(data, bert)
    if config is not None:
        return HREM(config, wv)
    if name == SCAN_MODEL:
        return SCAN(with_margin(scan_config(enc, max_words=longest_caption(data)), tuned["VSE++"].weight), wv)
    return hrem_compared(profile)[name].build(enc, wv, tuned[name].weight, 1)


def request_model(name: str, data: ChapterData, tuned: dict[str, TuningResult], enc: dict, run: RunConfig, seed: int,
                  bert: bool = False, config: HREMConfig | None = None, label: str = "",
                  **train_overrides: object) -> RunRequest:
    """One model's run on the training split at its tuned learning rate (SCAN: VSE++'s; an HREM `config`, the
    ablations: HREM fusion's), as a request (`request_built`; label: default the model and seed)."""
    lr_of = "HREM fusion" if config is not None else ("VSE++" if name == SCAN_MODEL else name)
    return request_built(lambda: build_model(name, data, tuned, enc, run.profile, bert, config), tuned[lr_of],
                         data, run, seed, label or f"{name} seed {seed}", **train_overrides)


def train_model(name: str, data: ChapterData, tuned: dict[str, TuningResult], enc: dict, run: RunConfig, seed: int,
                bert: bool = False, config: HREMConfig | None = None, *, weights: bool = False,
                **train_overrides: object) -> tuple[RetrievalModel, FitResult]:
    """Train (or load from the run cache) one model (`request_model`) on its own (`training.train_many`, `weights`
    as there: True where the model itself is used). Returns the model (best weights, eval mode, on
    `run.torch_device`) and the fit."""
    return train_many([request_model(name, data, tuned, enc, run, seed, bert, config, **train_overrides)], run,
                      weights=weights)[0]


# ------------------------------------------------------------------------------------------ run records
# Every final run's record on the test split (`docs/records.md`): every view, the COCO 1K protocol in the instance
# view (Table 2's "1K" columns), the model's own test-time score.
SCORINGS: dict[str, Scoring] = {"default": Scoring()}
ENSEMBLE_METHOD = "hrem-ensemble"  # the record name's method of an `ENSEMBLE` (its members' keys make its key)


def tuning_facts(tuned_as: str, tuning: TuningResult) -> dict[str, object]:
    """A record's tuning facts: the compared model whose tuned setting the run was trained at (SCAN: VSE++'s; the
    ablations: HREM fusion's), that setting and schedule."""
    return {"tuned as": tuned_as, "lr": tuning.lr, tuning.weight_name: tuning.weight, "epochs": tuning.epochs}


def records_row(record: RunRecord) -> dict[str, float]:
    """Instance R@1/5/10 both ways and rSum of a record (`query_values.scoring_metrics`, no caption levels), over
    five folds ("1K ...", NaN where the split has none) and on the whole split ("all ..."): `evaluate.instance_row`'s
    columns."""
    ev = record.evaluation
    out = {f"1K {c}": math.nan for c in [*RK_COLUMNS, "rSum"]}
    for proto, protocol in (("1K", "coco1k"), ("all", "full")):
        if protocol in ev.split.folds:
            values = scoring_metrics(ev, "default", protocol, by_level=False)
            out.update({f"{proto} {c}": values[f"instance/{c.replace(' ', '/')}"] for c in RK_COLUMNS})
            out[f"{proto} rSum"] = values["rsum"]
    return out


def run_row(name: str, seed: int, record: RunRecord) -> dict[str, object]:
    """One per-run row from a record: model, seed, converged, collapse (`claims.instance_collapse` of its test
    scores, "" when it learnt something), `records_row`'s columns and the record's name."""
    return {"model": name, "seed": seed, "converged": record.converged,
            "collapse": record.evaluation.scorings["default"].collapse, **records_row(record), "record": record.name}


class RecordedRuns(NamedTuple):
    """Models trained with every seed, each recorded once on the test split (`train_and_record`)."""

    per_run: pd.DataFrame  # `run_row` of every model and seed (the ensemble's too)
    fits: pd.DataFrame  # `training.fit_row` of every trained run
    records: dict[tuple[str, int], RunRecord]  # (model, seed) -> its record


def record_trained(keys: Sequence[tuple[str, int]], trained: Sequence[tuple[RetrievalModel, FitResult]],
                   tuned_as: str | Sequence[str], tuned: Mapping[str, TuningResult], data: ChapterData,
                   run: RunConfig) -> dict[tuple[str, int], RunRecord]:
    """{(label, seed): record} of `train_many`'s runs (`run_records.recorded` on the test split with `SCORINGS`; a
    record already there is read back), each with the tuned setting it was trained at, that of `tuned_as` (one
    compared model for every run, or one per run), as its tuning facts."""
    names = [tuned_as] * len(keys) if isinstance(tuned_as, str) else list(tuned_as)
    return {(label, seed): recorded(model, result, seed, data.test, data.vocab, SCORINGS, run,
                                    tuning=tuning_facts(name, tuned[name]))
            for (label, seed), (model, result), name in zip(keys, trained, names)}


def train_and_record(models: Sequence[str], seeds: Sequence[int], data: ChapterData, tuned: dict[str, TuningResult],
                     enc: dict, run: RunConfig, bert: bool = False, **train_overrides: object) -> RecordedRuns:
    """Train (or load) every model of `models` with every seed (`train_overrides`: `request_model`'s), record each
    once on the test split (`record_trained`), and, when both HREM mechanisms are in `models`, each seed's ensemble
    of the two (`ensemble.ScoreMean`, recorded as a run of its own, `run_records.recorded_ensemble`)."""
    t0 = time.perf_counter()  # every model and seed: one batch of independent runs (side by side on the workers)
    keys = [(name, seed) for seed in seeds for name in models]
    trained = train_many([request_model(name, data, tuned, enc, run, seed, bert=bert, **train_overrides)
                          for name, seed in keys], run)
    share = (time.perf_counter() - t0) / max(len(keys), 1)  # `wall s`: a run's share of the batch
    fits = [fit_row(name, seed, tuned[name], result, share) for (name, seed), (_, result) in zip(keys, trained)]
    records = record_trained(keys, trained, [name for name, _ in keys], tuned, data, run)
    models_of = dict(zip(keys, (model for model, _ in trained)))
    rows = []
    for seed in seeds:
        rows += [run_row(name, seed, records[name, seed]) for name in models]
        if {"HREM standalone", "HREM fusion"} <= set(models):
            pair = [(name, seed) for name in ("HREM standalone", "HREM fusion")]
            records[ENSEMBLE, seed] = recorded_ensemble(
                ScoreMean([models_of[k] for k in pair]), [records[k] for k in pair], ENSEMBLE_METHOD, data.test,
                data.vocab, SCORINGS, run)
            rows.append(run_row(ENSEMBLE, seed, records[ENSEMBLE, seed]))
    return RecordedRuns(pd.DataFrame(rows), pd.DataFrame(fits), records)


# ------------------------------------------------------------------------------------------- table layout
def hrem_table(per_run: pd.DataFrame, order: Sequence[str], table: str, mapping: Mapping[str, str], label: str,
               ceiling: SplitCeiling | None = None) -> pd.DataFrame:
    """One of the paper's instance tables (`summary.paper_table` with the HREM paper values and its paper-only
    rows), with the Bayes ceiling row on top and each model's rSum as % of the ceiling per protocol of `mapping`
    (`summary.with_ceiling`) when `ceiling` (`split_ceiling(test, "all")`) is given. The Flickr30K analogue's
    columns are the 1K protocol's (`flickr_size`)."""
    per_run, ceiling = flickr_size(per_run, ceiling)
    out = paper_table(per_run, order, table, mapping, label, PAPER_ONLY.get(table, ()), chapter="hrem")
    if ceiling is None:
        return out
    return with_ceiling(out, per_run, ceiling, mapping, label, sorted({col.split(" ", 1)[0] for col in mapping}))


def flickr_size(per_run: pd.DataFrame, ceiling: SplitCeiling | None) -> tuple[pd.DataFrame, SplitCeiling | None]:
    """`per_run` with the Flickr30K analogue's columns ("F30K-size <column>") and `ceiling` with its protocol: those
    of the 1K protocol, the mean over five folds of 1,000 images and their captions, each Flickr30K's test size."""
    one_k = [c for c in per_run.columns if c.startswith("1K ")]
    per_run = per_run.assign(**{f"{FLICKR_PREFIX} {c[3:]}": per_run[c] for c in one_k})
    return per_run, ceiling if ceiling is None or "1K" not in ceiling else {**ceiling, FLICKR_PREFIX: ceiling["1K"]}


def not_run_table(table: str, order: Sequence[str], mapping: Mapping[str, str], label: str, why: str) -> pd.DataFrame:
    """A table of models not trained in this profile: the paper's values, ours marked `why` (e.g. "not run on
    cpu"), then the paper-only rows."""
    blank = pd.DataFrame([{"model": m, "seeds": 0, **{c: float("nan") for c in mapping}} for m in order])
    out = with_paper(blank, "hrem", table, mapping, label)
    for c in mapping:
        out[f"{c} ({label})"] = why
    return pd.concat([out, paper_table(blank.iloc[:0], [], table, mapping, label, PAPER_ONLY.get(table, ()),
                                       chapter="hrem")], ignore_index=True)


class BertBlock(NamedTuple):
    """The Region + BERT block of Tables 1 and 2 (`region_bert`)."""

    table1: pd.DataFrame  # Table 1's layout
    table2: pd.DataFrame  # Table 2's layout
    fits: pd.DataFrame  # the BiGRU fit rows given, the BERT ones ("<model> (BERT)") appended when trained
    tuning: pd.DataFrame  # the BiGRU tuning rows given, the BERT ones (`tuning_frame`, "<model> (BERT)") appended
    note: str  # what "Ours" is, for the captions
    why: str | None  # why the rows are not trained (`recipes.minilm_not_run`); None: trained
    per_run: pd.DataFrame  # `train_and_record`'s per-run rows of the BERT models (empty when not trained)
    records: dict[tuple[str, int], RunRecord]  # their records, as "<model> (BERT)" (empty when not trained)


def region_bert(fits: pd.DataFrame, tuning: pd.DataFrame, seeds: Sequence[int], data: ChapterData, run: RunConfig,
                label: str, ceiling: SplitCeiling | None) -> BertBlock:
    """Tables 1-2's Region + BERT block: GPO and both HREM mechanisms on the packaged MiniLM (`recipes.minilm_text`:
    fine-tuned on paper, a head on its frozen token features of every caption on cpu, trained without the data's
    word dropout, `FEATURE_TRAIN_OVERRIDES`), tuned with the same budget as every model (seed `run.seed`), every
    seed, with their ensemble (`train_and_record`); where not trained (`recipes.minilm_not_run`) the paper's rows with
    ours marked not run (`not_run_table`)."""
    why = minilm_not_run(run.profile)
    if why is not None:
        note = (f"{why}: on cpu a head on the packaged MiniLM's frozen, cached token features, on paper MiniLM "
                "fine-tuned; encoding every caption and tuning three more models would take this notebook past the "
                "smoke profile's minute")
        return BertBlock(not_run_table("table1_bert", BERT_ORDER, TABLE1_COLUMNS, label, why),
                         not_run_table("table2_bert", BERT_ORDER, TABLE2_COLUMNS, label, why), fits, tuning,
                         note, why, pd.DataFrame(), {})
    texts = [c for split in (data.train, data.val, data.test) for c in split.captions]
    text = minilm_text(run.profile, data.vocab, texts, run.progress)
    enc = hrem_encoders(run.profile, data.test.regions.shape[2], text)
    overrides = feature_train_overrides(text)
    models = BERT_ORDER[:-1]
    tuned = tune_methods(run.profile, enc, data, run.seed, bert=True, models=models, run=run, device=run.device,
                         progress=run.progress, **overrides)
    per_run, bert_fits, records = train_and_record(models, seeds, data, tuned, enc, run, bert=True, **overrides)
    fits = pd.concat([fits, bert_fits.assign(model=bert_fits["model"] + BERT)], ignore_index=True)
    bert_tuning = tuning_frame(tuned)
    tuning = pd.concat([tuning, bert_tuning.assign(method=bert_tuning["method"] + BERT)], ignore_index=True)
    backbone = ("a head on the packaged MiniLM's frozen token features (cached; the paper fine-tunes BERT), without "
                "the captions' word dropout (token dropout on the features instead)"
                if run.profile in MINILM_FROZEN else "the packaged MiniLM fine-tuned")
    note = f"{backbone}, tuned like every model, {run.dataset}{dataset_note(run.dataset, 'COCO')}"
    return BertBlock(hrem_table(per_run, BERT_ORDER, "table1_bert", TABLE1_COLUMNS, label, ceiling),
                     hrem_table(per_run, BERT_ORDER, "table2_bert", TABLE2_COLUMNS, label, ceiling), fits, tuning,
                     note, None, per_run, {(name + BERT, seed): r for (name, seed), r in records.items()})


# ------------------------------------------------------------------------------------------ Table 3, Figure 6
def table3_variants(profile: str) -> dict[str, dict[str, object]]:
    """Table 3's rows trained in `profile`: {row: `HREMConfig` changes}, "HREM" (no change: train.py's HREM
    fusion) first."""
    return {"HREM": {}, **{name: {**TABLE3A, **TABLE3B}[name] for name in TABLE3_ROWS[budget(profile)]}}


class Table3Runs(NamedTuple):
    """Every Table 3 row trained with every seed and recorded (`table3_runs`)."""

    per_seed: pd.DataFrame  # `run_row`'s columns with cached and best epoch
    records: dict[tuple[str, int], RunRecord]  # (row, seed) -> its record (Table 4 reads HREM's and w/o instance
    # level's, Figure 7 HREM's training curve)


def table3_runs(seeds: Sequence[int], data: ChapterData, tuned: dict[str, TuningResult], enc: dict,
                run: RunConfig) -> Table3Runs:
    """Train (or load) HREM fusion with each Table 3 change (`table3_variants`) and every seed, at its tuned
    learning rate and margin (`ablation_config`), and record each once on the test split (`record_trained`)."""
    variants = table3_variants(run.profile)
    keys = [(name, seed) for seed in seeds for name in variants]
    trained = train_many([request_model("HREM fusion", data, tuned, enc, run, seed,
                                        config=ablation_config(enc, run.profile, tuned, **variants[name]),
                                        label=f"Table 3 {name} seed {seed}") for name, seed in keys], run)
    records = record_trained(keys, trained, "HREM fusion", tuned, data, run)
    rows = [{**run_row(name, seed, records[name, seed]), "cached": result.cached, "best epoch": result.best_epoch}
            for (name, seed), (_, result) in zip(keys, trained)]
    return Table3Runs(pd.DataFrame(rows), records)


def table3(per_seed: pd.DataFrame, part: Literal["table3a", "table3b"], label: str,
           ceiling: SplitCeiling | None = None) -> pd.DataFrame:
    """Table 3a (relation levels) or 3b (components): HREM, then the part's rows trained in this run, mean over
    seeds beside the paper's R@1 and R@5 (`hrem_table`), with our rSum; the Bayes ceiling row on top and each
    row's rSum as % of it when `ceiling` (`split_ceiling(test, "all")`) is given."""
    rows = {"table3a": TABLE3A, "table3b": TABLE3B}[part]
    order = ["HREM"] + [name for name in rows if name in set(per_seed["model"])]
    return hrem_table(per_seed, order, part, TABLE3_WITH_RSUM, label, ceiling)


class Fig6Runs(NamedTuple):
    """Figure 6's sweeps (`fig6_runs`)."""

    frame: pd.DataFrame  # param, value, seed, converged, collapse, all rSum, record
    records: dict[tuple[str, int], RunRecord]  # ("<symbol> = <value>" (`fig6_label`), seed) -> its record


def fig6_runs(t3: Table3Runs, seeds: Sequence[int], data: ChapterData, tuned: dict[str, TuningResult], enc: dict,
              run: RunConfig) -> Fig6Runs:
    """Figure 6's sweeps of λ, K and τ (`FIG6_GRIDS[budget(profile)]`): HREM fusion with one value changed, every seed of
    `seeds` at every value (the robustness claims compare points of the sweeps, each needing its seed noise), each
    recorded (`record_trained`); the default's records are Table 3's "HREM" of those seeds."""
    grids = FIG6_GRIDS[budget(run.profile)]
    changed = [(param, value, seed) for param, grid in grids.items() for value in grid
               for seed in seeds if value != FIG6_DEFAULTS[param]]  # the sweeps' runs: one batch (side by side)
    trained = train_many([request_model("HREM fusion", data, tuned, enc, run, s,
                                        config=ablation_config(enc, run.profile, tuned, **{p: v}),
                                        label=f"Figure 6 {fig6_label(p, v)} seed {s}") for p, v, s in changed], run)
    records = record_trained([(fig6_label(p, v), s) for p, v, s in changed], trained, "HREM fusion", tuned, data, run)
    rows = []
    for param, grid in grids.items():
        for value in grid:
            label = fig6_label(param, value)
            for seed in seeds:
                if value == FIG6_DEFAULTS[param]:
                    records[label, seed] = t3.records["HREM", seed]
                row = run_row(label, seed, records[label, seed])
                rows.append({"param": param, "value": value, "seed": seed, "converged": row["converged"],
                             "collapse": row["collapse"], "all rSum": row["all rSum"], "record": row["record"]})
    return Fig6Runs(pd.DataFrame(rows), records)


def fig6_figure(sweeps: pd.DataFrame, dataset: str) -> Figure:
    """Figure 6: rSum against λ, K and τ (`Fig6Runs.frame`: one row per value and seed), the mean over the seeds ±
    their std at every value (`viz.sweep_grid`), the default dotted."""
    frame = sweeps.rename(columns={"param": "parameter", "all rSum": "rSum"})
    return sweep_grid(frame, list(FIG6_TITLES.items()), ["rSum"], f"whole test split ({dataset})", FIG6_DEFAULTS)


# --------------------------------------------------------------------------------- Table 4: special samples
def mean_negative_similarity(img_emb: Tensor, cap_emb: Tensor, caption_image: np.ndarray, kind: SpecialKind,
                             direction: str) -> Tensor:
    """Table 4's selection value of every query: the mean cosine between the query and the samples it is not
    matched to (unit embeddings img (N, d), cap (M, d); `caption_image` (M,)). "hard" (semantic ambiguity):
    against the other modality's negatives, the items the query could be confused with; "infrequent" (semantic
    scarcity): against its own modality's other samples (captions: those of other images), the many samples of
    similar themes a rare sample resembles (the paper, Fig. 1c). i2t: (N,) per image; t2i: (M,) per caption, on
    the CPU whatever the embeddings' device."""
    if kind not in ("hard", "infrequent") or direction not in DIRECTIONS:
        raise ValueError(f"mean_negative_similarity: kind must be 'hard' or 'infrequent' and direction 'i2t' or "
                         f"'t2i', got {kind!r}, {direction!r}")
    img, cap = F.normalize(img_emb.float(), dim=-1), F.normalize(cap_emb.float(), dim=-1)
    device = img.device  # the embeddings' (cuda after a GPU run): the masks are built there, the values come back
    owner = torch.as_tensor(np.asarray(caption_image), dtype=torch.long, device=device)
    images = torch.arange(len(img), device=device)
    if kind == "hard":
        sims = img @ cap.T if direction == "i2t" else cap @ img.T  # (Q, G)
        own = (owner[None, :] == images[:, None]) if direction == "i2t" else (images[None, :] == owner[:, None])
    elif direction == "i2t":
        sims, own = img @ img.T, images[:, None] == images[None, :]
    else:
        sims, own = cap @ cap.T, owner[:, None] == owner[None, :]
    keep = (~own).to(sims.dtype)
    return ((sims * keep).sum(1) / keep.sum(1)).cpu()


def top_percent(values: Tensor, percent: float) -> np.ndarray:
    """(Q,) bool: the round(percent / 100 · Q) queries (at least one) of highest value, i.e. percentile rank
    above 100 − percent (ties broken by index)."""
    if not 0 < percent <= 100:
        raise ValueError(f"top_percent: percent must be in (0, 100], got {percent}")
    n = max(1, round(percent / 100 * len(values)))
    order = np.argsort(-np.asarray(values, dtype=np.float64), kind="stable")
    mask = np.zeros(len(values), dtype=bool)
    mask[order[:n]] = True
    return mask


def special_recall(record: RunRecord, masks: Mapping[str, np.ndarray]) -> dict[str, float]:
    """R@1 of the queries each mask selects ({"i2t": (N,) bool, "t2i": (M,) bool}), instance relevance, on the
    whole split, from a run's record (each query's R@1 hit, `query_values`): {"i2t R@1": ..., "t2i R@1": ...}."""
    out = {}
    for d in DIRECTIONS:
        hits, _ = query_values(record.evaluation, QueryMetric("R@1", directions=(d,)))
        out[f"{d} R@1"] = float(hits[masks[d]].mean())
    return out


def table4_rows(split: Split, selector: tuple[Tensor, Tensor], recorded_runs: Mapping[str, RunRecord], seed: int,
                percents: Sequence[int] = TABLE4_PERCENTS) -> list[dict[str, object]]:
    """Table 4 rows of one seed: for each kind and percent, the queries selected on the `selector` model's
    embeddings (image, caption) and the R@1 on them of every model of `recorded_runs` (its record on `split`); on a
    split with exact relevance also the Bayes ceiling's R@1 on the same queries (`CEILING_SI`,
    `xmr_core.ceiling.query_ceiling`)."""
    ceiling = query_ceiling(split, ks=(1,)) if split.exact is not None else None
    rows = []
    for kind in ("hard", "infrequent"):
        values = {d: mean_negative_similarity(*selector, split.caption_image, kind, d) for d in DIRECTIONS}
        for p in percents:
            masks = {d: top_percent(values[d], p) for d in DIRECTIONS}
            key = {"samples": kind, "percent": p}
            rows += [{**key, "model": model, "seed": seed, **special_recall(record, masks)}
                     for model, record in recorded_runs.items()]
            if ceiling is not None:
                rows.append({**key, "model": CEILING_SI, "seed": seed,
                             **{f"{d} R@1": 100.0 * float(ceiling[d][masks[d], 0].mean()) for d in DIRECTIONS}})
    return rows


def table4_selectors(seeds: Sequence[int], data: ChapterData, tuned: dict[str, TuningResult], enc: dict,
                     run: RunConfig) -> dict[int, tuple[Tensor, Tensor]]:
    """{seed: (image, caption) embeddings of the test split} of train.py's VSE++ of each seed (loaded from the run
    cache): Table 4's queries are chosen on them (`mean_negative_similarity`), so this needs VSE++'s weights."""
    return {seed: embed_split(train_model("VSE++", data, tuned, enc, run, seed, weights=True)[0], data.test,
                              data.vocab, device=run.torch_device) for seed in seeds}


def table4_runs(seeds: Sequence[int], t3: Mapping[tuple[str, int], RunRecord],
                selectors: Mapping[int, tuple[Tensor, Tensor]], split: Split) -> pd.DataFrame:
    """Table 4 of every seed (`table4_rows`): the queries selected on that seed's VSE++ embeddings (`selectors`,
    `table4_selectors`), and the R@1 on them of HREM fusion and, when trained, "w/o instance level" (Table 3's
    records `t3`)."""
    rows = []
    for seed in seeds:
        scored = {WITH_SI: t3["HREM", seed]}
        if ("w/o instance level", seed) in t3:
            scored[WITHOUT_SI] = t3["w/o instance level", seed]
        rows += table4_rows(split, selectors[seed], scored, seed)
    return pd.DataFrame(rows)


def table4_summary(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Table 4: R@1 both ways, mean and std over seeds, per kind, percent and model (`table4_runs`)."""
    return mean_std(per_seed, ["samples", "percent", "model"], ["i2t R@1", "t2i R@1"]).reset_index()


# ----------------------------------------------------------------------------------- Figure 7: loss curves
def loss_curves(history: Sequence[Mapping[str, object]]) -> pd.DataFrame:
    """Figure 7 from a fit's history: per epoch the triplet loss of the initial embeddings L(v, u) and of the
    enhanced ones L(v̄, ū) (the training means `HREM.loss` logs as `triplet_initial`, `triplet_enhanced`; NaN
    while the instance-level module is off)."""
    frame = pd.DataFrame(list(history))
    if frame.empty:  # a run not trained (the run plan's trace: `FitResult.stopped == "planned"`): no curve
        return pd.DataFrame(columns=["epoch", "initial", "enhanced"])
    if "train/triplet_initial" not in frame:
        raise ValueError("loss_curves: the history has no train/triplet_initial (not an HREM run)")
    enhanced = frame["train/triplet_enhanced"] if "train/triplet_enhanced" in frame else float("nan")
    return pd.DataFrame({"epoch": frame["epoch"], "initial": frame["train/triplet_initial"], "enhanced": enhanced})


def fig7_curves(records: Mapping[tuple[str, int], RunRecord], seeds: Sequence[int]) -> pd.DataFrame:
    """Figure 7's curves of every seed's HREM fusion (`loss_curves` of the training history in Table 3's "HREM"
    records), with a seed column."""
    return pd.concat([loss_curves(records["HREM", s].fit["history"]).assign(seed=s) for s in seeds],
                     ignore_index=True)


def fig7_figure(curves: pd.DataFrame) -> Figure:
    """Figure 7: the enhanced and the initial embeddings' triplet loss per epoch, one line per seed and term
    (`fig7_curves`; colour: term, line style: seed). Seeds stop at different epochs, so a mean over seeds would
    average different runs at different epochs; each seed is drawn whole instead."""
    fig, ax = plt.subplots(figsize=(5.6, 3.6))
    styles = ["-", "--", ":", "-."]
    for i, (seed, c) in enumerate(curves.groupby("seed")):
        style = styles[i % len(styles)]
        ax.plot(c["epoch"], c["enhanced"], style, color="C0", marker="o", markersize=3,
                label=f"enhanced L(v̄, ū), seed {seed}")
        ax.plot(c["epoch"], c["initial"], style, color="C1", marker="s", markersize=3,
                label=f"initial L(v, u), seed {seed}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("triplet loss (training mean)")
    ax.legend(fontsize=7, ncol=2)
    return fig


# ------------------------------------------------------------------------------ Figure 5: accuracy and time
class Fig5Runs(NamedTuple):
    """Figure 5's runs (`fig5_runs`)."""

    frame: pd.DataFrame  # model, seed, converged, collapse, test s, all rSum, record
    records: dict[tuple[str, int], RunRecord]  # (model, seed) -> its record


def fig5_runs(seeds: Sequence[int], data: ChapterData, tuned: dict[str, TuningResult], enc: dict,
              run: RunConfig) -> Fig5Runs:
    """Figure 5's runs: every compared model and SCAN t2i (train.py's runs and SCAN at VSE++'s setting, from the
    cache when trained before), each recorded (`record_trained`: rSum, convergence, collapse) and timed embedding and
    scoring the whole test split once (`score_split` on the model, read from the run's score cache when timed
    before: a time needs the model's weights, not only its record)."""
    names = MODELS + [SCAN_MODEL]
    keys = [(name, seed) for seed in seeds for name in names]
    trained = train_many([request_model(name, data, tuned, enc, run, seed) for name, seed in keys], run,
                         weights=True)  # timed here: needs weights
    records = record_trained(keys, trained, ["VSE++" if name == SCAN_MODEL else name for name, _ in keys], tuned,
                             data, run)
    timed = score_trained(score_split, trained, data.test, data.vocab, run.torch_device)  # on the workers
    rows = []
    for key, (_, scores) in zip(keys, timed):
        row = run_row(*key, records[key])
        rows.append({**{c: row[c] for c in ("model", "seed", "converged", "collapse")}, "test s": scores.seconds,
                     "all rSum": row["all rSum"], "record": row["record"]})
    return Fig5Runs(pd.DataFrame(rows), records)


def fig5_summary(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Figure 5's points: seconds and rSum, mean and std over seeds, per model (index)."""
    return mean_std(per_seed, ["model"], ["test s", "all rSum"])


def fig5_figure(summary: pd.DataFrame, device: torch.device | str, dataset: str) -> Figure:
    """Figure 5: rSum against the seconds to embed and score the test split (log scale), mean ± std over seeds
    (`fig5_summary`); squares: the score-based SCAN t2i, circles: the embedding-based models."""
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for name, r in summary.iterrows():
        ax.errorbar(r["test s mean"], r["all rSum mean"], xerr=np.nan_to_num(r["test s std"]),
                    yerr=np.nan_to_num(r["all rSum std"]), marker="s" if name == SCAN_MODEL else "o", label=name,
                    capsize=3)
    ax.set_xscale("log")
    ax.set_xlabel(f"seconds to embed and score the test split ({device})")
    ax.set_ylabel(f"rSum ({dataset})")
    ax.legend(fontsize=8)
    return fig


# ------------------------------------------------------------------------------- visualise: one batch's graph
@torch.no_grad()
def batch_graph(model: HREM, split: Split, vocab: Vocabulary, captions: Sequence[int], device: torch.device | str
                ) -> tuple[AssociationGraph, np.ndarray]:
    """The association graph (A, S of Eq. 4-10) of one batch of (image, caption) pairs (caption indices of
    `split`, each with its own image) in eval mode, and the first interaction layer's attention weights of
    Eq. (12) over the 2N nodes, averaged over the heads (fusion: (2N, 2N); standalone: NaN)."""
    model = model.to(device).eval()
    batch = collate([PairDataset(split, vocab, visual=model.visual)[int(c)] for c in captions])
    img, cap = model({k: v.to(device) for k, v in batch.items()})
    graph = model.association_graph(img, cap)
    layer = model.relation_layers[0]
    if model.config.mechanism != "fusion":
        return graph, np.full(graph.connect.shape, np.nan)
    x = torch.cat([img.emb, cap.emb]).unsqueeze(0)
    attention = layer.attention.attention.weights(x, x, graph.connect.unsqueeze(0), graph.relevance.unsqueeze(0),
                                                  model.config.lam)
    return graph, attention[0].mean(0).cpu().numpy()


@torch.no_grad()
def region_word_matching(model: HREM, split: Split, vocab: Vocabulary, caption: int,
                         device: torch.device | str) -> np.ndarray:
    """Eq. (7)'s I→T terms of one caption against its own image: each region's best cosine over the caption's
    words, max_n r_mᵀ c_n of the initial fragments, (n_r,) (NaN on padded regions); what p averages."""
    model = model.to(device).eval()
    batch = collate([PairDataset(split, vocab, visual=model.visual)[int(caption)]])
    img, cap = model({k: v.to(device) for k, v in batch.items()})
    regions, words = F.normalize(img.fragments[0], dim=-1), F.normalize(cap.fragments[0], dim=-1)
    sims = (regions @ words.T).masked_fill(~cap.mask[0][None, :], float("-inf")).amax(1)
    return sims.masked_fill(~img.mask[0], float("nan")).cpu().numpy()


def split_batches(split: Split, batch_size: int, seed: int = 0) -> list[np.ndarray]:
    """The whole test split as training-like batches of (image, own caption) pairs: round r pairs every image with
    its r-th own caption, the images shuffled by `seed` and dealt into batches of about `batch_size` (one caption
    per image in a batch, as in a training batch); every caption once, but in a batch of one image (nothing to
    connect it to: a split of one image). -> caption indices, one array a batch."""
    caption_image = np.asarray(split.caption_image)
    own = [np.flatnonzero(caption_image == i) for i in range(split.n_images)]
    rng = np.random.default_rng(seed)
    n_batches = max(1, round(split.n_images / batch_size))
    out = []
    for r in range(max(len(o) for o in own)):
        images = rng.permutation([i for i, o in enumerate(own) if len(o) > r])
        out += [np.array([own[i][r] for i in part]) for part in np.array_split(images, n_batches) if len(part) > 1]
    return out


@torch.no_grad()
def connection_precision(model: HREM, split: Split, vocab: Vocabulary, batch_size: int, device: torch.device | str,
                         seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Figure 3 as a number over the whole test split: in each batch of `split_batches`, the inter-modal connections
    fragment-level matching makes (A_I->T and A_T->I of Eq. 6-7: each image's τN best-matching captions and each
    caption's τN best-matching images, eval mode) scored against scenes' exact relevance
    (`grounding.link_precision`). Returns per node, pp: precision (Q,), chance (Q,) (links drawn at random in the
    batch) and strata (Q,): 0 for the image nodes (batch by batch), 1 for the caption nodes."""
    if split.exact is None:
        raise ValueError(f"connection_precision: split {split.name!r} ({split.source}) has no exact relevance")
    model = model.to(device).eval()
    pairs = PairDataset(split, vocab, visual=model.visual)
    caption_image = np.asarray(split.caption_image)
    parts: list[tuple[np.ndarray, np.ndarray, int]] = []
    for captions in split_batches(split, batch_size, seed):
        batch = collate([pairs[int(c)] for c in captions])
        img, cap = model({k: v.to(device) for k, v in batch.items()})
        connect = model.association_graph(img, cap).connect.cpu().numpy()
        n = len(captions)
        relevant = split.exact[captions][:, caption_image[captions]].T  # (images, captions) of the batch
        parts.append((*link_precision(connect[:n, n:], relevant), 0))
        parts.append((*link_precision(connect[n:, :n], relevant.T), 1))
    precision, chance, strata = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                                 np.concatenate([np.full(len(p[0]), p[2]) for p in parts]))
    order = np.argsort(strata, kind="stable")  # the image nodes, then the caption nodes
    return 100.0 * precision[order], 100.0 * chance[order], strata[order]


CONNECTED = "HREM: fragment-matched connections"
RANDOM_LINKS = "random connections (chance)"


def connection_runs(seeds: Sequence[int], batch_size: int, data: ChapterData, tuned: dict[str, TuningResult],
                    enc: dict, run: RunConfig) -> tuple[pd.DataFrame, dict[tuple[str, int], np.ndarray], np.ndarray]:
    """Figure 3 at every seed: train.py's HREM fusion (loaded), `connection_precision` on the test split in batches
    of `batch_size`. Returns (one row per side (`CONNECTED`, `RANDOM_LINKS`) and seed: model, seed, converged,
    collapse, "precision" the mean of the two strata's means, pp; {(side, seed): (Q,) per node}; strata (Q,)), for
    `claims.run_evidence`."""
    rows, values, strata = [], {}, np.zeros(0, dtype=np.int64)
    for seed in seeds:
        model, result = train_model("HREM fusion", data, tuned, enc, run, seed, weights=True)  # measured: weights
        collapse = recorded(model, result, seed, data.test, data.vocab, SCORINGS, run,
                            tuning=tuning_facts("HREM fusion", tuned["HREM fusion"])).evaluation.scorings[
            "default"].collapse  # train.py's record, read back
        *found, strata = connection_precision(model, data.test, data.vocab, batch_size, run.torch_device)
        for side, v in zip((CONNECTED, RANDOM_LINKS), found):
            rows.append({"model": side, "seed": seed, "converged": result.converged, "collapse": collapse,
                         "precision": float(np.mean([v[strata == h].mean() for h in (0, 1)]))})
            values[side, seed] = v
    return pd.DataFrame(rows), values, strata


def draw_pairs(split: Split, n: int, rng: np.random.Generator) -> list[int]:
    """`n` distinct images of the split drawn at random, in index order, and one of each image's own captions
    drawn at random: the captions' indices (n,) (their images: `split.caption_image`)."""
    caption_image = np.asarray(split.caption_image)
    images = sorted(rng.choice(split.n_images, n, replace=False).tolist())
    return [int(rng.choice(np.flatnonzero(caption_image == i))) for i in images]


def batch_figure(split: Split, captions: Sequence[int]) -> Figure:
    """The batch of the association graph: each caption's image, titled "Ik / Tk" and the caption. A split of region
    features without pixels (SCAN's precomp) shows a blank panel titled with the image id instead of the image."""
    images = np.asarray(split.caption_image)[list(captions)]
    titles = [f"I{k} / T{k}:\n" + "\n".join(textwrap.wrap(split.captions[c], 22)) for k, c in enumerate(captions)]
    if split.images is None:
        titles = [f"{t}\n(image {split.image_ids[i]}: no pixels)" for t, i in zip(titles, images)]
        return image_grid(np.full((len(images), 32, 32, 3), 235, np.uint8), titles, ncols=len(captions))
    return image_grid(split.images[images], titles, ncols=len(captions))


def neighbour_count(tau: float, n: int) -> int:
    """τN of Eq. (5-6): the neighbours each node keeps within a block of `n` nodes (at least one)."""
    return max(1, int(tau * n))


def association_figure(graph: AssociationGraph, attention: np.ndarray, lam: float) -> Figure:
    """A, S and the fusion layer's attention of one batch (`batch_graph`, 2N x 2N nodes I0.., T0..) as annotated
    heatmaps, one above the other (side by side they shrink below legibility on a page), red lines between the image
    and the caption blocks."""
    n = graph.connect.shape[0] // 2
    nodes = [f"I{k}" for k in range(n)] + [f"T{k}" for k in range(n)]
    fig, axes = plt.subplots(3, 1, figsize=(8, 20))
    heatmap(axes[0], graph.connect.cpu().numpy().astype(float), nodes, nodes, fmt="{:.0f}", cmap="Greys",
            colorbar=False)
    heatmap(axes[1], graph.relevance.cpu().numpy(), nodes, nodes, fmt="{:.2f}")
    heatmap(axes[2], attention, nodes, nodes, fmt="{:.2f}")
    for ax, title in zip(axes, ("connection A (1 = may attend)", "relevance S (Eq. 9-10)",
                                f"attention of Eq. (12), λ = {lam}, mean over heads")):
        ax.set_title(title, fontsize=10)
        ax.axhline(n - 0.5, color="red", lw=1)
        ax.axvline(n - 0.5, color="red", lw=1)
    fig.tight_layout()
    return fig


def association_stats(graph: AssociationGraph, attention: np.ndarray, tau: float) -> pd.DataFrame:
    """One batch's graph in numbers (one row): how often an image is connected to its own caption (I->T) and a
    caption to its own image (T->I), in %, and the mean inter-modal relevance S and attention (I->T) to the own
    caption against the other captions."""
    n = graph.connect.shape[0] // 2
    own = np.eye(n, dtype=bool)
    connect, relevance = graph.connect.cpu().numpy(), graph.relevance.cpu().numpy()
    return pd.DataFrame([{
        "pairs": n, "tau N": neighbour_count(tau, n),
        "own caption connected (I->T), %": 100.0 * float(connect[:n, n:][own].mean()),
        "own image connected (T->I), %": 100.0 * float(connect[n:, :n][own].mean()),
        "S I->T own caption": float(relevance[:n, n:][own].mean()),
        "S I->T other captions": float(relevance[:n, n:][~own].mean()),
        "attention I->own caption": float(attention[:n, n:][own].mean()),
        "attention I->other captions": float(attention[:n, n:][~own].mean())}])


def region_matching_missing(split: Split) -> str:
    """Why `region_matching_figure` cannot be drawn on `split` ('' when it can)."""
    lacks = [what for what, value in (("pixels", split.images), ("region boxes", split.region_boxes)) if value is None]
    return f"not drawn: {split.source} has no {' and no '.join(lacks)}" if lacks else ""


def region_matching_figure(model: HREM, split: Split, vocab: Vocabulary, captions: Sequence[int],
                           device: torch.device | str) -> Figure | None:
    """Eq. (7) over the image, one panel per caption: each real region's best word cosine with the caption
    (`region_word_matching`) painted over the pixels its box covers, each pixel showing the best region that
    covers it (`viz.attention_heat`, reduce "max": a sum would light up where boxes overlap), over the caption's
    own image; pixels no region covers are left clear. One colour scale, the panels' range of cosines. None where the
    split has no pixels or no region boxes (SCAN's precomp: `region_matching_missing` says so)."""
    if region_matching_missing(split):
        return None
    size = split.images.shape[1]
    images = [int(split.caption_image[c]) for c in captions]
    matches = [region_word_matching(model, split, vocab, c, device) for c in captions]  # (R,) each, NaN on padding
    real = np.concatenate([m[~np.isnan(m)] for m in matches])
    fig, axes = plt.subplots(1, len(captions), figsize=(3.2 * len(captions), 3.8), squeeze=False)
    for ax, c, i, match in zip(axes[0], captions, images, matches):
        real_match = match[~np.isnan(match)]
        columns = np.stack([real_match, np.ones_like(real_match)], 1)  # the heat, and 1 where a box covers
        heat, cover = attention_heat(columns, split.region_boxes[i][~np.isnan(match)], size, reduce="max")
        covered = cover > 0
        shown = heat_overlay(ax, split.images[i], heat, float(real.min()), float(real.max()), mask=covered)
        ax.set_title("\n".join(textwrap.wrap(f"image {i}: {split.captions[c]}", 30)), fontsize=7)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(shown, ax=axes[0].tolist(), shrink=0.8, label="best word cosine of the region")
    return fig


# ------------------------------------------------------------------------------------------ run counts
def training_runs(profile: str, n_seeds: int = 3) -> pd.DataFrame:
    """How many training runs the chapter needs from a cold cache, per notebook and part, with the seeds each
    gets (smoke: one seed, one setting per method)."""
    check_profile(profile)
    seeds = 1 if budget(profile) == "smoke" else n_seeds
    tune_runs = least_tuning_runs(profile)
    bert = minilm_not_run(profile) is None
    sweeps = sum(v != FIG6_DEFAULTS[p] for p, grid in FIG6_GRIDS[budget(profile)].items() for v in grid)
    rows = [
        ("train", "tuning, 4 models (lr x margin): at least the first round, the search adds runs until bracketed",
         4 * tune_runs, 1),
        ("train", "seeds, 4 models (the first reuses its tuning run)", 4 * (seeds - 1), seeds),
        ("train", "Region + BERT (MiniLM; cpu: its frozen token features): tuning GPO, HREM standalone and fusion",
         3 * tune_runs if bert else 0, 1),
        ("train", "Region + BERT: seeds, 3 models (the first reuses its tuning run)", 3 * (seeds - 1) if bert else 0,
         seeds),
        ("ablate", "Table 3: each relation level / component removed", len(TABLE3_ROWS[budget(profile)]) * seeds, seeds),
        ("ablate", "Figure 6: lambda, K, tau sweeps (non-default values)", sweeps * seeds, seeds),
        ("ablate", "Figure 5: SCAN t2i (VSE++'s tuned setting)", seeds, seeds),
        ("ablate", "Figure 7, Table 4 (no training: train.py's and Table 3's runs)", 0, seeds),
        ("visualise", "A, S and attention of one batch (no training)", 0, 1),
    ]
    return pd.DataFrame(rows, columns=["notebook", "part", "runs", "seeds"])


# ---------------------------------------------------------------------------------------------- claims
# Every claim is declared once (`ClaimSpec`) and judged by `claims.judge` (docs/claims.md). A universal claim whose
# pairs share a model names it second, with `direction="less"` ("every other is below HREM"): `claims.can_fail`
# builds its clear loss one pair at a time and a shared first model would undo it. The whole-split
# metrics are given per query (the runs' records, `CLAIM_METRICS`): the N image queries (i2t) and the M caption queries (t2i) are two
# strata, so a seed's score is the mean of the two directions and the interval covers test sampling as well as
# the seeds; the runs of one seed score the same queries, so the sides are paired by seed and by query.
RSUM = "rSum on the whole test split (Table 1's 5K analogue; per query, images and captions as two strata)"
R15 = "mean of R@1 and R@5 both ways on the whole test split, pp (per query, two strata)"
SWEEP_RSUM = f"{RSUM}; Figure 6: every seed at every value of the sweep"
LOSS = "training triplet loss, each seed's mean over the epochs where both terms are logged (lower is better)"
SPEED = "log10 of the seconds to embed and score the whole test split (HREM's time x 10: +1)"
LINKS = ("precision of the inter-modal connections A (Eq. 6-7) under exact relevance, every test batch, per image "
         "and per caption node (two strata), pp")
SCORE_BASED = ("IMRAM", "UARD", "NAAF")  # Table 1's score-based rows, not built here
BERT = " (BERT)"  # the Region + BERT models' suffix in the claims' evidence
HREM_FAST = "HREM fusion x 10"  # Figure 5's speed claim: HREM's time times ten
FIG6_SYMBOLS = {"lam": "λ", "topk": "K", "tau": "τ"}


def fig6_label(param: str, value: float) -> str:
    """A Figure 6 point as a compared model of its claims, e.g. "λ = 1.5"."""
    return f"{FIG6_SYMBOLS[param]} = {value:g}"


# Figure 6's "proper range" (Sec. 4.3): λ large enough (λ = 0 out), K not too large (15 and up out), τ not close to
# 0 or 1 (0.1 and 0.9 out); the values of the cpu grid inside it, each compared with the default.
FIG6_PROPER: dict[str, tuple[float, ...]] = {"lam": (0.5, 3.0), "topk": (2, 5), "tau": (0.3,)}
# The margin of "insensitive within a proper range", in rSum points, from the paper (docs/claims.md, Margins):
# Figure 6's values are not in our copy of the paper, only its words ("relatively stable"). A parameter moved within
# its proper range is "relatively stable" when it costs less than removing what λ weighs altogether: the relevance
# matrix S, whose removal costs HREM 4.5 points of Table 3b's recall sum (R@1 + R@5 both ways; the table has no R@10).
# It was one seed's noise of a cpu run (10 rSum, moved from 5 after the data): the run does not set it.
FIG6_MARGIN = Margin.from_paper(
    "hrem", "HREM over w/o relevance matrix S in Table 3b (sum of R@1 and R@5 both ways), what removing the matrix "
    "λ weighs costs", total=True,
    above=tuple(Cell("table3b", "HREM", f"instance/{d}/R@{k}") for d in ("i2t", "t2i") for k in (1, 5)),
    below=tuple(Cell("table3b", "w/o relevance matrix S", f"instance/{d}/R@{k}") for d in ("i2t", "t2i")
                for k in (1, 5)))

TRAIN_CLAIMS: list[ClaimSpec] = [
    ClaimSpec("beats-embedding-methods", "HREM (the ensemble, the paper's Full*) outperforms the state-of-the-art "
              "embedding-based methods (here GPO and VSE++) in rSum.", "Sec. 4.2, Tables 1-2", "universal", RSUM,
              direction="less", pairs=(("GPO", ENSEMBLE), ("VSE++", ENSEMBLE))),
    ClaimSpec("fusion-best-single", "A single HREM model (fusion) is above every other single model.",
              "Sec. 4.2, Tables 1-2", "peak", RSUM, tuple(MODELS), peak="HREM fusion"),
    ClaimSpec("standalone-over-gpo", "HREM standalone beats GPO (both mechanisms improve on the pooling baseline).",
              "Sec. 4.2, Table 1", "superiority", RSUM, ("HREM standalone", "GPO")),
    ClaimSpec("fusion-over-gpo", "HREM fusion beats GPO (both mechanisms improve on the pooling baseline).",
              "Sec. 4.2, Table 1", "superiority", RSUM, ("HREM fusion", "GPO")),
    ClaimSpec("fusion-over-standalone", "The fusion mechanism is slightly above the standalone one (the paper: +1.0 "
              "R@K sum on COCO 5K).", "Sec. 4.2, Table 1", "superiority", RSUM, ("HREM fusion", "HREM standalone")),
    ClaimSpec("ensemble-over-standalone", "The ensemble of the two mechanisms beats HREM standalone alone.",
              "Sec. 4.2, Tables 1-2", "superiority", RSUM, (ENSEMBLE, "HREM standalone")),
    ClaimSpec("ensemble-over-fusion", "The ensemble of the two mechanisms beats HREM fusion alone.",
              "Sec. 4.2, Tables 1-2", "superiority", RSUM, (ENSEMBLE, "HREM fusion")),
    ClaimSpec("both-text-encoders", "HREM's superiority over GPO holds with both text encoders (BiGRU and BERT).",
              "Sec. 4.2, Tables 1-2", "universal", RSUM, pairs=((ENSEMBLE, "GPO"), (ENSEMBLE + BERT, "GPO" + BERT))),
    ClaimSpec("beats-score-based", "HREM beats the score-based methods (IMRAM, UARD, NAAF) on COCO 5K (not built "
              "here; Figure 5's SCAN t2i is ablate.py's score-based matcher).", "Sec. 4.2, Table 1", "universal",
              RSUM, direction="less", pairs=tuple((m, ENSEMBLE) for m in SCORE_BASED),
              needs=f"the score-based methods {', '.join(SCORE_BASED)} (not built in this book) and COCO 5K"),
]

# Table 3 (Sec. 4.3): "a is above b" as the paper says it, on R@1 and R@5 (the table's columns).
TABLE3_CLAIMS: list[ClaimSpec] = [
    ClaimSpec(key, text, f"Sec. 4.3, Table 3{part}", "superiority", R15, (a, b)) for key, a, b, part, text in (
        ("instance-level", "HREM", "w/o instance level", "a",
         "Instance-level relation modelling improves the embeddings."),
        ("fragment-level", "HREM", "w/o fragment level", "a",
         "Fragment-level relation modelling improves the embeddings."),
        ("instance-over-fragment", "w/o fragment level", "w/o instance level", "a",
         "The instance-level relation matters more than the fragment-level one."),
        ("inter-over-intra", "w/o intra-modal", "w/o inter-modal", "a",
         "Within the instance level, the inter-modal relation matters more than the intra-modal one."),
        ("regions-over-words", "w/o textual fragment", "w/o visual fragment", "a",
         ("Fragment-level relations of the words are nearly redundant, those of the regions are not (removing the "
          "textual one costs less).")),
        ("visual-fragment", "HREM", "w/o visual fragment", "a", "Modelling the relations among regions is meaningful."),
        ("connection-a", "HREM", "w/o connection A", "b", "The connection matrix A is significant."),
        ("relevance-s", "HREM", "w/o relevance S", "b", "The relevance matrix S is significant."),
        ("l-cross", "HREM", "w/o L_cross", "b", "The consistency loss L_cross is indispensable."),
        ("l-reg", "HREM", "w/o L_reg", "b", "The regulariser L_reg improves the performance."),
        ("neighbour-sampling", "HREM", "w/o neighbour sampling", "b", "Neighbour batch sampling helps."))
] + [ClaimSpec("all-relations-best", "Modelling all hierarchical relations gives the best result (HREM above every "
               "Table 3a row).", "Sec. 4.3, Table 3a", "universal", R15, direction="less",
               pairs=tuple((r, "HREM") for r in TABLE3A))]

FIG6_CLAIMS: list[ClaimSpec] = [
    ClaimSpec("lambda-large-enough", "λ must be large enough: the relevance bias S helps attention (λ = 1.5 above "
              "λ = 0).", "Sec. 4.3, Figure 6(a)", "superiority", SWEEP_RSUM, ("λ = 1.5", "λ = 0")),
    ClaimSpec("k-not-too-large", "K cannot be too large (short texts): K = 10 above K = 15.", "Sec. 4.3, Figure 6(b)",
              "superiority", SWEEP_RSUM, ("K = 10", "K = 15")),
    ClaimSpec("tau-not-extreme", "τ is not meaningful close to 0 or 1: τ = 0.5 above τ = 0.1 and τ = 0.9.",
              "Sec. 4.3, Figure 6(c)", "universal", SWEEP_RSUM, direction="less",
              pairs=(("τ = 0.1", "τ = 0.5"), ("τ = 0.9", "τ = 0.5"))),
    ClaimSpec("insensitive", f"HREM is insensitive to λ, K and τ within a proper range (each value of the range "
              f"within ±{FIG6_MARGIN.value:g} rSum of the default).", "Sec. 4.3, Figure 6", "universal", SWEEP_RSUM,
              pairs=tuple((fig6_label(p, v), fig6_label(p, FIG6_DEFAULTS[p])) for p, vs in FIG6_PROPER.items()
                          for v in vs), each="equivalence", margin_from=FIG6_MARGIN),
]


def table4_metric(kind: SpecialKind) -> str:
    return f"R@1 on the {kind} queries, mean over both directions and the {TABLE4_PERCENTS} % subsets, pp"


ABLATE_CLAIMS: list[ClaimSpec] = [
    *TABLE3_CLAIMS, *FIG6_CLAIMS,
    ClaimSpec("enhanced-loss-lower", "The triplet loss of the enhanced embeddings is lower than that of the initial "
              "ones (the relation module recognises hard samples).", "Sec. 4.3, Figure 7", "superiority", LOSS,
              ("enhanced", "initial"), direction="less"),
    *[ClaimSpec(f"{kind}-samples", f"Sample relation modelling improves the {kind} samples significantly.",
                "Sec. 4.3, Table 4", "superiority", table4_metric(kind), (WITH_SI, WITHOUT_SI))
      for kind in ("hard", "infrequent")],
    ClaimSpec("ten-times-faster", "HREM retrieves more than 10 times faster than a score-based method (here SCAN "
              "t2i: its time above ten times HREM fusion's).", "Sec. 4.3, Figure 5", "superiority", SPEED,
              (SCAN_MODEL, HREM_FAST)),
    ClaimSpec("above-score-based", "HREM reaches a higher rSum than score-based matching (here SCAN t2i, at VSE++'s "
              "tuned setting, not tuned itself).", "Sec. 3.5, Figure 5", "superiority", RSUM,
              ("HREM fusion", SCAN_MODEL)),
]

VISUALISE_CLAIMS: list[ClaimSpec] = [
    ClaimSpec("fragments-find-connections", "Fragment-level matching identifies the inter-modal connections: the "
              "images and captions A connects (Eq. 6-7) are exactly relevant more often than random connections in the "
              "same batch.", "Sec. 3.3.1, Figure 3", "superiority", LINKS, (CONNECTED, RANDOM_LINKS),
              datasets=("scenes",)),
]
# The paper's words of every claim (docs/claims.md, "The paper's words"): verbatim, and how the test reads them.
_SOTA = ("Furthermore, on the more extensive database of 5K test set, our method outperforms previous work [21, 50, 51] "
        "with larger performance gaps, both embedding-based and score-based methods, which shows the superiority of "
        "our method more convincingly.")
_MECHANISMS = "We first perform two proposed interaction mechanisms individually, then report the ensemble results."
_EMBEDDING = ("Quantitative results on Flickr30K 1K test-set are shown in Tab. 2, where our proposed method outperforms "
             "all state-of-the-art embedding-based image-text matching methods [20, 21, 24, 35, 45] with impressive "
             "margins for the $R@K$ and $rSum$.")
_TABLE3A = ("It shows that both instance-level and fragment-level relation modeling help improve the learning of "
           "cross-modal embeddings.")
_CRITICAL = ("First, capturing the instance-level relation, especially the inter-modal relation, is more critical than "
            "the intra-modal and fragment-level relation.")
_MATRICES = "First, the connection and relevance matrices are significant in explicitly capturing the cross-modal relation."
_FIG6 = ("λ is the attention coefficient for the relevance matrix, thus it should be large enough to provide extra "
         "fine-grained supervision, K is related to the number of words in variable sentences, thus it cannot be too "
         "large to adapt short texts.")
_SPECIAL = "We find our method can improve these special samples significantly."
_SPEED_WORDS = ("Although our method belongs to the embedding-based image-text matching methods [4, 20], achieves both "
               "high accuracy and efficiency, and is more than 10 times faster than the latest score-based methods "
               "[7, 19, 51] on Flickr30K.")
_FROM_TABLE = "; the text does not compare these two, Table 1's rows do (HREM (Standalone), HREM (Fusion), HREM*)"
WORDS: dict[str, Words] = {
    "beats-embedding-methods": Words(_EMBEDDING, "The ensemble above GPO and above VSE++ in whole-split rSum (the "
                                     "embedding-based methods the book builds)."),
    "fusion-best-single": Words(_SOTA, "HREM fusion above every other single model the chapter trains in rSum."),
    "standalone-over-gpo": Words(_SOTA, "HREM standalone above GPO in rSum."),
    "fusion-over-gpo": Words(_SOTA, "HREM fusion above GPO in rSum."),
    "fusion-over-standalone": Words(_MECHANISMS, "HREM fusion above HREM standalone in rSum" + _FROM_TABLE + "."),
    "ensemble-over-standalone": Words(_MECHANISMS, "The ensemble above HREM standalone in rSum" + _FROM_TABLE + "."),
    "ensemble-over-fusion": Words(_MECHANISMS, "The ensemble above HREM fusion in rSum" + _FROM_TABLE + "."),
    "both-text-encoders": Words(
        "Furthermore, our method has the coincident superiority on different textual encoders [6, 38] and still gets "
        "the best on the ensemble results.",
        "The ensemble above GPO with BiGRU and with BERT, each in rSum."),
    "beats-score-based": Words(_SOTA, "The ensemble above IMRAM, UARD and NAAF on COCO 5K; not built, never tested."),
    "instance-level": Words(_TABLE3A, "HREM above w/o instance level on the mean of R@1 and R@5 both ways."),
    "fragment-level": Words(_TABLE3A, "HREM above w/o fragment level on the mean of R@1 and R@5 both ways."),
    "instance-over-fragment": Words(_CRITICAL, "Removing the instance level costs more than removing the fragment "
                                    "level: w/o fragment level above w/o instance level."),
    "inter-over-intra": Words(_CRITICAL, "Removing the inter-modal relation costs more than removing the intra-modal "
                              "one: w/o intra-modal above w/o inter-modal."),
    "regions-over-words": Words(
        "Besides, capturing fragment-level relations for the textual modality seems redundant.",
        "Removing the textual fragment level costs less than removing the visual one: w/o textual fragment above "
        "w/o visual fragment."),
    "visual-fragment": Words(
        "However, exploring the semantic relations for region features are meaningful as previous work [20, 21, 46].",
        "HREM above w/o visual fragment on the mean of R@1 and R@5 both ways."),
    "connection-a": Words(_MATRICES, "HREM above w/o connection A on the mean of R@1 and R@5 both ways."),
    "relevance-s": Words(_MATRICES, "HREM above w/o relevance S on the mean of R@1 and R@5 both ways."),
    "l-cross": Words(
        "And the cross-embedding matching loss \\mathcal{L}_{cross} is indispensable to keep the embedding "
        "consistency at the inference stage.",
        "HREM above w/o L_cross on the mean of R@1 and R@5 both ways ('indispensable' read as: removing it costs)."),
    "l-reg": Words(
        "loss \\mathcal{L}_{reg} can ensure the training stability to improve performances.",
        "HREM above w/o L_reg on the mean of R@1 and R@5 both ways (the sentence opens 'Besides, the regularization' "
        "before Table 4's caption)."),
    "neighbour-sampling": Words(
        "Finally, the neighbor batch sampling adapts to mine more potential connected samples from mini-batch.",
        "HREM above w/o neighbour sampling on the mean of R@1 and R@5 both ways."),
    "all-relations-best": Words(
        "Finally, modeling all hierarchical relations is also essential for the optimal result.",
        "HREM above every row of Table 3a on the mean of R@1 and R@5 both ways."),
    "lambda-large-enough": Words(_FIG6, "λ = 1.5 (the default) above λ = 0 in rSum, every seed at both."),
    "k-not-too-large": Words(_FIG6, "K = 10 (the default) above K = 15 in rSum."),
    "tau-not-extreme": Words(
        "τ represents the ratio of connected samples in the batch, it will not be meaningful if close to 0 or 1.",
        "τ = 0.5 (the default) above τ = 0.1 and above τ = 0.9 in rSum."),
    "insensitive": Words(
        "Finally, the performances are relatively stable when all parameter values change in a proper range, our "
        "method is insensitive to hyper-parameter selection.",
        "Each value of the cpu grid inside the proper range within ±`FIG6_MARGIN` rSum of the default: moving a "
        "parameter costs less than removing the relevance matrix λ weighs (Table 3b)."),
    "enhanced-loss-lower": Words(
        "Fig. 7 shows the curve of triplet loss with hard negative mining, the values of enhanced embeddings are lower "
        "than the initial, proving the capacity for recognizing hard samples.",
        "The enhanced embeddings' triplet loss below the initial ones', each seed's mean over the logged epochs."),
    "hard-samples": Words(_SPECIAL, "R@1 on the hard queries higher with sample relation modelling than without."),
    "infrequent-samples": Words(_SPECIAL, "R@1 on the infrequent queries higher with sample relation modelling than "
                                "without."),
    "ten-times-faster": Words(_SPEED_WORDS, "SCAN t2i's log10 seconds above HREM fusion's + 1 (ten times its time)."),
    "above-score-based": Words(_SOTA, "HREM fusion above SCAN t2i (the score-based matcher the book builds) in rSum."),
    "fragments-find-connections": Words(
        "Following score-based methods [19, 40], we use the fine-grained matching of fragments and local features to "
        "measure the inter-modal neighbor space.",
        "The connections fragment-level matching makes (Eq. 6-7) exactly relevant more often than random connections "
        "in the same batch, per node."),
}
TRAIN_CLAIMS, ABLATE_CLAIMS, VISUALISE_CLAIMS = (worded(c, WORDS) for c in (TRAIN_CLAIMS, ABLATE_CLAIMS,
                                                                           VISUALISE_CLAIMS))
# The ablate.py claims judged on seed scores only (`fig7_evidence`, `table4_evidence`, `speed_evidence`), and why.
PER_SEED_SUBSETS = ("the hard (infrequent) queries are chosen per seed, by that seed's VSE++: the seeds score different "
                    "queries, so no column of per-query values would be one query across seeds (one subset for every "
                    "seed, and the runs' scores, ride with the retrain, issue 76)")
ABLATE_CLAIMS = seed_only(ABLATE_CLAIMS, lambda s: {
    LOSS: "a training loss, each seed's mean over its epochs: no test queries",
    SPEED: "a time, measured once per run over the whole test split: not a mean over queries",
}.get(s.metric, PER_SEED_SUBSETS if s.key.endswith("-samples") else ""))
CLAIMS: list[ClaimSpec] = TRAIN_CLAIMS + ABLATE_CLAIMS + VISUALISE_CLAIMS


# ------------------------------------------------------------------------------------------- evidence
# A claim's metric that is a mean over queries -> its per-query values in the records (`query_values`): the whole
# test split's image and caption queries, one stratum each.
CLAIM_METRICS: dict[str, QueryMetric] = {RSUM: QueryMetric("rsum"), SWEEP_RSUM: QueryMetric("rsum"),
                                         R15: QueryMetric("R@1,5")}


def _records_of(records: Mapping[tuple[str, int], RunRecord], model: str) -> list[RunRecord]:
    return [r for (name, _), r in records.items() if name == model]


def claim_bindings(specs: Sequence[ClaimSpec], records: Mapping[tuple[str, int], RunRecord], run: RunConfig,
                   part: str) -> dict[str, ClaimRecords]:
    """Each claim of `specs` whose metric is a mean over queries (`CLAIM_METRICS`) bound to the records that judge it
    (`record_evidence.ClaimRecords`, written beside the notebook `part`'s judgements for `xmr claims recompute hrem`):
    every compared model's records of every seed (`records`, keyed (model, seed)). A claim that needs what the book
    does not build, or a compared model of which has no record here (the Region + BERT rows off the paper and cpu
    profiles), has none."""
    out = {}
    for spec in specs:
        sides = {m: Side(tuple(r.name for r in _records_of(records, m))) for m in spec.compared}
        if spec.metric in CLAIM_METRICS and not spec.needs and all(side.records for side in sides.values()):
            out[spec.key] = ClaimRecords(spec, CLAIM_METRICS[spec.metric], sides, run.dataset, run.profile, "hrem",
                                         part)
    return out


def records_judgements(specs: Sequence[ClaimSpec], bindings: Mapping[str, ClaimRecords],
                       records: Mapping[tuple[str, int], RunRecord], run: RunConfig,
                       evidence: Mapping[str, Mapping[str, Evidence]] | None = None) -> list[Judgement]:
    """Every claim of `specs` judged (`claims.judge`): a bound one (`claim_bindings`) as `xmr claims recompute` judges
    it (`record_evidence.judge_records`: each model's per-query values, one row per seed, paired by seed and query);
    a seed-only one on its `evidence[key]`; any other on the records of the compared models that have some (not
    tested, naming the missing ones)."""
    by_name = {r.name: r for r in records.values()}
    out = []
    for spec in specs:
        if spec.key in bindings:
            out.append(judge_records(bindings[spec.key], by_name.__getitem__))
            continue
        found = dict((evidence or {}).get(spec.key, {}))
        if spec.metric in CLAIM_METRICS:
            found |= {m: record_evidence(_records_of(records, m), CLAIM_METRICS[spec.metric]) for m in spec.compared
                      if _records_of(records, m)}
        out.append(judge(spec, found, dataset=run.dataset, profile=run.profile))
    return out


def train_bindings(records: Mapping[tuple[str, int], RunRecord], run: RunConfig) -> dict[str, ClaimRecords]:
    """`TRAIN_CLAIMS` bound to train.py's records (`claim_bindings`; with the Region + BERT models' records, as
    "<model> (BERT)", where trained: `BertBlock.records`)."""
    return claim_bindings(TRAIN_CLAIMS, records, run, "train")


def train_judgements(records: Mapping[tuple[str, int], RunRecord], bindings: Mapping[str, ClaimRecords],
                     run: RunConfig) -> list[Judgement]:
    """`TRAIN_CLAIMS` judged on train.py's records (`records_judgements`): whole-split rSum per query."""
    return records_judgements(TRAIN_CLAIMS, bindings, records, run)


def fig7_evidence(curves: pd.DataFrame, hrem_runs: pd.DataFrame) -> dict[str, Evidence]:
    """Figure 7's evidence: per seed the mean over the epochs where both are logged of the enhanced and of the
    initial triplet loss (`fig7_curves`), HREM's convergence and collapse from its Table 3 rows `hrem_runs`."""
    losses = curves.dropna().groupby("seed")[["initial", "enhanced"]].mean().reset_index()
    runs = losses.merge(hrem_runs[["seed", "converged", "collapse"]], on="seed", how="left")
    runs["converged"] = runs["converged"].fillna(False).astype(bool)  # no Table 3 row: not known to converge
    frame = pd.concat([runs.assign(model=m, loss=runs[m]) for m in ("enhanced", "initial")], ignore_index=True)
    return seed_evidence(frame, ["loss"], split="training batches")


def table4_evidence(per_seed: pd.DataFrame, table3_runs: pd.DataFrame, kind: SpecialKind) -> dict[str, Evidence]:
    """Table 4's evidence for one kind of sample: per seed the R@1 of each model (`table4_runs`) averaged over both
    directions and every percent, convergence and collapse from the Table 3 rows it scores ("HREM", "w/o
    instance level"). The subsets are chosen per seed (VSE++ of that seed), so the evidence is per seed."""
    part = per_seed[(per_seed["samples"] == kind) & per_seed["model"].isin([WITH_SI, WITHOUT_SI])]
    means = part.groupby(["model", "seed"])[["i2t R@1", "t2i R@1"]].mean().reset_index()
    row = means["model"].map({WITH_SI: "HREM", WITHOUT_SI: "w/o instance level"})
    status = table3_runs.set_index(["model", "seed"])[["converged", "collapse"]]
    keys = list(zip(row, means["seed"]))
    means["converged"] = [bool(status.loc[k, "converged"]) if k in status.index else False for k in keys]
    means["collapse"] = [status.loc[k, "collapse"] if k in status.index else "" for k in keys]
    return seed_evidence(means, ["i2t R@1", "t2i R@1"], split=f"test, {kind} queries of each seed")


def speed_evidence(fig5: pd.DataFrame) -> dict[str, Evidence]:
    """Figure 5's speed evidence: per seed log10 of SCAN t2i's seconds, and log10 of HREM fusion's seconds + 1
    (`HREM_FAST`, ten times its time). A timing does not depend on what the model learnt: no collapse here."""
    runs = fig5[fig5["model"].isin([SCAN_MODEL, "HREM fusion"])]
    frame = runs.assign(model=runs["model"].replace({"HREM fusion": HREM_FAST}), collapse="",
                        log_s=np.log10(runs["test s"].to_numpy(dtype=float))
                        + (runs["model"] == "HREM fusion").to_numpy())
    return seed_evidence(frame, ["log_s"], split="test, whole split")


def ablate_records(t3: Table3Runs, sweeps: Fig6Runs, f5: Fig5Runs) -> dict[tuple[str, int], RunRecord]:
    """Every record ablate.py's claims read, keyed (compared model, seed): Table 3's rows, Figure 6's points
    (`fig6_label`) and Figure 5's models (SCAN t2i and train.py's)."""
    return {**t3.records, **sweeps.records, **f5.records}


def ablate_bindings(records: Mapping[tuple[str, int], RunRecord], run: RunConfig) -> dict[str, ClaimRecords]:
    """`ABLATE_CLAIMS` on per-query values bound to ablate.py's records (`claim_bindings`, `ablate_records`): Table 3
    (mean of R@1 and R@5 per query), Figure 6 (every seed, rSum per query), Figure 5's rSum."""
    return claim_bindings(ABLATE_CLAIMS, records, run, "ablate")


def ablate_judgements(records: Mapping[tuple[str, int], RunRecord], bindings: Mapping[str, ClaimRecords],
                      t3: Table3Runs, curves: pd.DataFrame, t4: pd.DataFrame, f5: Fig5Runs,
                      run: RunConfig) -> list[Judgement]:
    """`ABLATE_CLAIMS` judged: those bound to records (`ablate_bindings`) from the records; the seed-only ones on
    Figure 7 (per seed), Table 4 (per seed, its subsets chosen per seed) and Figure 5's timing (per seed)."""
    hrem_runs = t3.per_seed[t3.per_seed["model"] == "HREM"]
    seed_only_evidence = {"enhanced-loss-lower": fig7_evidence(curves, hrem_runs),
                          "ten-times-faster": speed_evidence(f5.frame)}
    for kind in ("hard", "infrequent"):
        seed_only_evidence[f"{kind}-samples"] = table4_evidence(t4, t3.per_seed, kind)
    return records_judgements(ABLATE_CLAIMS, bindings, records, run, seed_only_evidence)


def visualise_judgements(connections: tuple[pd.DataFrame, Mapping[tuple[str, int], np.ndarray], np.ndarray] | None,
                         run: RunConfig) -> list[Judgement]:
    """`VISUALISE_CLAIMS` judged on `connection_runs` (per node, two strata, paired by seed and node; None where
    the data set has no exact relevance: not tested, `ClaimSpec.datasets`)."""
    evidence = run_evidence(connections[0], connections[1], strata=connections[2], split="test batches") \
        if connections is not None else {}
    return [judge(spec, evidence, dataset=run.dataset, profile=run.profile) for spec in VISUALISE_CLAIMS]


def claims_preamble(profile: str, dataset: str) -> str:
    """The claims page's preamble: the public code, the run, and how a claim is judged."""
    scenes = dataset_note(dataset, "COCO or Flickr30K", "orderings and signs carry across data sets, absolute numbers "
                          "do not", lead="synthetic scenes")
    bert_rows = minilm_not_run(profile) or ("a head on the packaged MiniLM's frozen, cached token features (the paper "
                                            "fine-tunes BERT)" if profile in MINILM_FROZEN else
                                            "the packaged MiniLM fine-tuned")
    return ("HREM has public code (CrossmodalGroup/HREM); the chapter follows the paper, the code's choices are "
            f"options (`xmr_core/methods/hrem.py`). Run: profile `{profile}`, dataset `{dataset}`{scenes}. Region + "
            f"BiGRU throughout; the Region + BERT rows: {bert_rows}. Every claim is declared "
            "in `xmr_core/chapters/hrem.py` and judged by the book's verdict protocol (docs/claims.md): a 95% "
            "bootstrap interval of the effect over the seeds and, for the whole-split metrics, the test queries "
            "(images and captions as two strata), paired by seed and query where the runs share them; margins are "
            "declared with the claim; not tested when a compared run did not converge or collapsed.")
