"""The PCME chapter's compared models, their tuning budget and their tuned recipes (one place for the
three notebooks: `train.py` tunes and trains, `ablate.py` and `visualise.py` load the same cached runs).

Every compared method gets the same budget on the seen-class validation split (`xmr_core.tuning.tune`):
three learning rates at the method's default weight, then three values of its own main loss weight or
margin at the best learning rate. The weights:

- VSE0 and PVSE: the hinge margin α (0.1, 0.2, 0.4; the papers' 0.2 in the middle). PVSE is tuned at
  K = 1 and its K = 2 and 4 rows reuse the tuned values (PVSE's paper uses one setting for every K).
- PCME μ-only: the uniformity weight (1, 10, 100; PCME's CUB value 10 in the middle), its only weight.
- PCME: the KL weight (1e-5, 1e-4, 1e-3: PCME's COCO and CUB values and the one between); the
  uniformity weight stays at PCME's CUB value 10.

smoke runs one setting per method (every code path, seconds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from xmr_core.chapters.protocols import ChapterData
from xmr_core.chapters.recipes import pcme_train_config
from xmr_core.config import RunConfig
from xmr_core.data.corpus import Split
from xmr_core.data.text import Vocabulary
from xmr_core.evaluate import (
    Reranker,
    direction_scores,
    embed_split,
    evaluate_model,
    evaluate_scores,
    evaluate_similarities,
)
from xmr_core.methods.base import RetrievalModel
from xmr_core.methods.pcme import PCME, TEST_TIME_SIMILARITIES, PCMEConfig, pcme_config
from xmr_core.methods.pvse import PVSE, pvse_config
from xmr_core.methods.vse import VSE, vse0_config
from xmr_core.results import paper_values
from xmr_core.train import FitResult, TrainConfig, fit
from xmr_core.tuning import TuningResult, tune

LEARNING_RATES = {"smoke": (5e-4,), "cpu": (5e-4, 1e-3, 2e-3), "paper": (1e-4,)}


@dataclass(frozen=True)
class Compared:
    """One compared method: its tuned weight (name, grid, default) and how to build it."""

    name: str
    weight_name: str
    weights: tuple[float, ...]
    default: float
    build: Callable[[dict, np.ndarray, float, int], RetrievalModel]  # (encoders, word vectors, weight, K)


def _vse0(enc: dict, wv: np.ndarray, margin: float, k: int) -> RetrievalModel:
    cfg = vse0_config(**enc)
    return VSE(dataclasses.replace(cfg, hinge=dataclasses.replace(cfg.hinge, margin=margin)), wv)


def _pvse(enc: dict, wv: np.ndarray, margin: float, k: int) -> RetrievalModel:
    cfg = pvse_config(n_embeds=k, hard_negatives=True, **enc)
    return PVSE(dataclasses.replace(cfg, hinge=dataclasses.replace(cfg.hinge, margin=margin)), wv)


def _mu_only(enc: dict, wv: np.ndarray, weight: float, k: int) -> RetrievalModel:
    return PCME(pcme_config(enc, mu_only=True, uniformity_weight=weight), wv)


def _pcme(enc: dict, wv: np.ndarray, weight: float, k: int) -> RetrievalModel:
    return PCME(pcme_config(enc, kl_weight=weight), wv)


COMPARED: dict[str, Compared] = {
    "VSE0": Compared("VSE0", "margin", (0.1, 0.2, 0.4), 0.2, _vse0),
    "PVSE": Compared("PVSE", "margin", (0.1, 0.2, 0.4), 0.2, _pvse),
    "PCME mu only": Compared("PCME mu only", "uniformity weight", (1.0, 10.0, 100.0), 10.0, _mu_only),
    "PCME": Compared("PCME", "KL weight", (1e-5, 1e-4, 1e-3), 1e-3, _pcme),
}


def train_config(profile: str, lr: float, seed: int = 0, **overrides: object) -> TrainConfig:
    """The chapter's recipe (`pcme_train_config`) at a learning rate."""
    return pcme_train_config(profile, seed=seed, lr=lr, **overrides)


def tune_methods(profile: str, enc: dict, word_vectors: np.ndarray, train: Split, val: Split, vocab: Vocabulary,
                 seed: int = 0, *, compared: dict[str, Compared] | None = None,
                 **train_overrides: object) -> dict[str, TuningResult]:
    """Tune every compared method (`compared`, default this chapter's; a later chapter passes these plus its
    own) with the same budget (cached runs: free the second time)."""
    lrs = LEARNING_RATES[profile]
    out = {}
    for name, spec in (COMPARED if compared is None else compared).items():
        weights = spec.weights if profile != "smoke" else (spec.default,)
        out[name] = tune(name, lambda w, spec=spec: spec.build(enc, word_vectors, w, 1),
                         lambda lr: train_config(profile, lr, seed, **train_overrides), train, val, vocab,
                         lrs=lrs, weight_name=spec.weight_name, weights=weights, default_weight=spec.default,
                         seed=seed)
    return out


def tuned_model(name: str, tuned: dict[str, TuningResult], enc: dict, word_vectors: np.ndarray,
                k: int = 1) -> RetrievalModel:
    """A fresh model of a compared method at its tuned weight (PVSE: with K embeddings)."""
    spec = COMPARED[name]
    return spec.build(enc, word_vectors, tuned[name].weight, k)


# ==================================================================================================
# Notebook helpers: training one tuned PCME, scoring the chapter's tables, embedding for the figures.
# (Appended below the chapter's recipes; the notebooks call these instead of defining functions.)
# ==================================================================================================


# Our Table 2 / Table 3 columns -> the paper's keys ("<protocol>|<key>"; `summary.with_paper`).
TABLE2_COLUMNS: dict[str, str] = {f"T2 {d} {m}": f"class/{d}/{m}" for d in ("i2t", "t2i") for m in ("R-P", "R@1")}
TABLE3_COLUMNS: dict[str, str] = {
    f"T3 {proto} {d} {m}": f"{proto}|{view}/{d}/{m}"
    for proto in ("1K", "5K") for d in ("i2t", "t2i") for view, m in (("plausible", "PMRP"), ("instance", "R@1"))
}
TABLE3_PROTOCOLS = {"1K": "coco1k", "5K": "full"}  # our name -> `evaluate_scores` protocol


def model_label(name: str, k: int = 1) -> str:
    """The table row of a compared method: PVSE rows carry their K."""
    return f"PVSE K={k}" if name == "PVSE" else name


def train_built(build: Callable[[], RetrievalModel], lr: float, data: ChapterData, run: RunConfig, seed: int,
                **train_overrides: object) -> tuple[RetrievalModel, FitResult]:
    """Seed with `seed`, build the model, and train it (or load it from the run cache) on `data`'s train and
    validation splits with the chapter's recipe at learning rate `lr` (`train_config`; `train_overrides` e.g.
    finetune=True, on_nonfinite="stop"). Every chapter trains through here, so the same model, recipe and seed
    give the same run key (the tuning run at the chosen setting is the seed's run). Returns the model (best
    weights, eval mode, on `run.torch_device`) and the fit."""
    torch.manual_seed(seed)
    model = build()
    result = fit(model, data.train, data.val,
                 train_config(run.profile, lr, seed, device=run.device, progress=run.progress, **train_overrides),
                 vocab=data.vocab)
    return model.to(run.torch_device).eval(), result


def train_model(name: str, k: int, data: ChapterData, tuned: dict[str, TuningResult], enc: dict, run: RunConfig,
                seed: int, **train_overrides: object) -> tuple[RetrievalModel, FitResult]:
    """One compared model (PVSE: with K embeddings) at its tuned weight and learning rate (`train_built`)."""
    return train_built(lambda: tuned_model(name, tuned, enc, data.word_vectors, k), tuned[name].lr, data, run, seed,
                       **train_overrides)


def train_tuned(method: str, cfg: PCMEConfig, data: ChapterData, tuned: dict[str, TuningResult], run: RunConfig,
                seed: int | None = None, **train_overrides: object) -> tuple[RetrievalModel, FitResult]:
    """One PCME of config `cfg` (an ablation) at `method`'s tuned learning rate (`train_built`); seed: default
    `run.seed`."""
    return train_built(lambda: PCME(cfg, data.word_vectors), tuned[method].lr, data, run,
                       run.seed if seed is None else seed, **train_overrides)


def fit_row(label: str, seed: int, tuning: TuningResult, result: FitResult, wall_s: float) -> dict[str, object]:
    """One row of the training table: the tuned setting, the best epoch, convergence and the cost."""
    return {"model": label, "seed": seed, "lr": tuning.lr, tuning.weight_name: tuning.weight, "cached": result.cached,
            "best epoch": result.best_epoch, "epochs run": len(result.history), "converged": result.converged,
            "train s": round(result.train_seconds, 1), "images/s": round(result.pairs_per_second, 1),
            "wall s": round(wall_s, 1), "run": result.run_dir.name}


def tables_row(model: RetrievalModel, data: ChapterData, device: torch.device | str,
               rerank: Reranker | None = None) -> dict[str, float]:
    """Every Table 2 / Table 3 value of one trained model with its own test-time similarity (per direction,
    optionally re-ranked): T2 = class R-P and R@1 on the unseen classes; T3 = PMRP and instance R@1 on the
    whole test split under the 1K (five folds) and 5K (all) protocols; plus `rsum 5K` (instance rSum, 5K)."""
    model.to(device).eval()
    unseen = evaluate_model(model, data.test_unseen, data.vocab, device=device, views=["class"], rerank=rerank)
    img, cap = embed_split(model, data.test, data.vocab, device=device)
    i2t, t2i = direction_scores(model, img, cap, rerank=rerank)
    # Table 3 needs no per-level breakdown (a small fold may lack a level): the split without caption levels
    whole = dataclasses.replace(data.test, caption_level=None)
    protocols = {proto: evaluate_scores(whole, i2t, views=["instance", "plausible"], protocol=protocol,
                                        scores_t2i=t2i)
                 for proto, protocol in TABLE3_PROTOCOLS.items()}
    row = {"rsum 5K": protocols["5K"]["rsum"]}
    for direction in ("i2t", "t2i"):
        row[f"T2 {direction} R-P"] = unseen[f"class/{direction}/R-P"]
        row[f"T2 {direction} R@1"] = unseen[f"class/{direction}/R@1"]
        for proto, values in protocols.items():
            row[f"T3 {proto} {direction} PMRP"] = values[f"plausible/{direction}/PMRP"]
            row[f"T3 {proto} {direction} R@1"] = values[f"instance/{direction}/R@1"]
    return row


def table1_rows(variant: str, seed: int, per_method: dict[str, dict[str, float]]) -> list[dict[str, object]]:
    """Table 1 rows of one model and seed: per test-time similarity (`evaluate_similarities` with class
    relevance) its i2t and t2i R-Precision, labelled as in the paper."""
    return [{"variant": variant, "similarity": TEST_TIME_SIMILARITIES[m][0], "seed": seed,
             "i2t R-P": v["class/i2t/R-P"], "t2i R-P": v["class/t2i/R-P"]} for m, v in per_method.items()]


def table1_frame(runs: pd.DataFrame, dataset_label: str) -> pd.DataFrame:
    """Table 1 from its per-seed rows (`table1_rows`): per variant and similarity (first-seen order) the
    sampling flag, the storage per gallery item, and the paper's (CUB) and our mean and std of i2t / t2i R-P."""
    agg = runs.groupby(["variant", "similarity"], sort=False)[["i2t R-P", "t2i R-P"]].agg(["mean", "std"])
    agg.columns = [f"{a} {b}" for a, b in agg.columns]
    agg = agg.reset_index()
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


def ablation_row(name: str, model: PCME, result: FitResult, data: ChapterData,
                 device: torch.device | str) -> dict[str, object]:
    """One ablation row, scored with the match probability: class R-P / R@1 on the unseen classes, PMRP
    and instance rSum on the whole test split, the learned a, b of Eq. (3) and the fit."""
    unseen = evaluate_similarities(model, data.test_unseen, data.vocab, ["match_prob"], views=["class"],
                                   device=device)["match_prob"]
    full = evaluate_similarities(model, data.test, data.vocab, ["match_prob"], views=["instance", "plausible"],
                                 device=device)["match_prob"]
    return {"ablation": name, "cached": result.cached,
            "i2t R-P": unseen["class/i2t/R-P"], "t2i R-P": unseen["class/t2i/R-P"],
            "i2t R@1": unseen["class/i2t/R@1"], "t2i R@1": unseen["class/t2i/R@1"],
            "i2t PMRP": full["plausible/i2t/PMRP"], "t2i PMRP": full["plausible/t2i/PMRP"],
            "rSum": full["rsum"], "a": model.scale.item(), "b": model.shift.item(),
            "best epoch": result.best_epoch, "converged": result.converged,
            "train s": round(result.train_seconds, 1)}


def embed_gaussians(model: PCME, split: Split, vocab: Vocabulary,
                    device: torch.device | str) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """((image mu, logvar) each (N, D), (caption mu, logvar) each (M, D)) of a split, on the CPU."""
    img, cap = embed_split(model, split, vocab, device=device)
    return tuple(t.cpu() for t in img), tuple(t.cpu() for t in cap)  # type: ignore[return-value]


def own_caption_score(scores: Tensor, images: np.ndarray, caption_image: np.ndarray) -> float:
    """scores (n, M) of n query images against all M captions: the mean over rows k of the mean score of
    row k with the captions written for image `images[k]` (`caption_image`: (M,) image of each caption)."""
    return float(np.mean([scores[k, np.flatnonzero(caption_image == i)].mean() for k, i in enumerate(images)]))


def table3_ceiling_row(ceiling: dict[str, dict[str, float]], dataset_label: str) -> dict[str, object]:
    """Table 3's "Bayes ceiling" row: the ceiling's instance R@1 per protocol and direction in our columns.
    ceiling: {"1K": `fold_ceiling`, "5K": `bayes_ceiling`} of the test split."""
    row: dict[str, object] = {"model": "Bayes ceiling", "seeds": 0, "5K rSum % of ceiling": 100.0}
    for proto in TABLE3_PROTOCOLS:
        for direction in ("i2t", "t2i"):
            row[f"T3 {proto} {direction} R@1 ({dataset_label})"] = ceiling[proto][f"{direction}/R@1"]
    return row
