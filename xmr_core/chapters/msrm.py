"""The MSRM chapter: its compared models, their tuning budget, its two data protocols, its ablation grids and
the helpers its notebooks call (`book/02_msrm/`).

MSRM (Wang et al., CVPR 2023) has no public code: `xmr_core.methods.msrm` is a re-implementation from the
paper's text, and its docstring lists every choice the paper leaves open.

Compared models. VSE0, PVSE (K = 1, 2, 4, hardest negatives), PCME mu-only and PCME are the PCME chapter's
(`xmr_core.chapters.pcme.COMPARED`): the same builders, training recipe and tuning budget, so on the same data
their runs have the same run keys and are loaded from the cache, never retrained. MSRM is added with the same
budget (`xmr_core.tuning.tune`): three learning rates at its default weight, then three values of its main
loss weight at the best learning rate. Its main weight is gamma of Eq. (12), L = gamma L_d + L_h, over
(0.5, 0.8, 2.0): the ends of the range the paper sweeps in Figure 4 and its chosen 0.8. gamma was chosen over
the Eq. (8) form or Eq. (10)'s last sigmoid because it is a continuous loss weight like every other method's
tuned weight (margin, KL or uniformity weight), and the paper names it as the weight it tuned; the last
sigmoid (printed form vs HGNN's) is an ablation row of `ablate.py` instead.

Protocols. Zero-shot (the paper's Table 2, and the COCO-style Table 3): train and validate on the seen classes,
score Table 2 on the unseen classes of the test split and Table 3 on the whole test split
(`protocols.load_chapter_data`, PCME's). All classes (Table 1, and the ablations, which the paper runs in this
setting): train and validate on every class, score with class relevance on the whole test split
(`all_classes_data`); the models use the hyperparameters tuned in the zero-shot setting.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from xmr_core.chapters import pcme as pcme_chapter
from xmr_core.chapters.pcme import COMPARED as PCME_COMPARED
from xmr_core.chapters.pcme import LEARNING_RATES, Compared, train_built, train_config
from xmr_core.chapters.protocols import ChapterData
from xmr_core.config import RunConfig
from xmr_core.data.corpus import Corpus, Split
from xmr_core.data.datasets import PairDataset, collate
from xmr_core.data.text import Vocabulary, load_word_vectors
from xmr_core.evaluate import direction_scores, embed_split, evaluate_model, evaluate_scores
from xmr_core.methods.base import RetrievalModel, in_batch_positives
from xmr_core.methods.msrm import MSRM, MSRMConfig, mahalanobis, msrm_config, soft_incidence
from xmr_core.train import FitResult
from xmr_core.tuning import TuningResult


def _msrm(enc: dict, wv: np.ndarray, gamma: float, k: int) -> RetrievalModel:
    return MSRM(msrm_config(enc, gamma=gamma), wv)


MSRM_COMPARED = Compared("MSRM", "gamma", (0.5, 0.8, 2.0), 0.8, _msrm)
COMPARED: dict[str, Compared] = {**PCME_COMPARED, "MSRM": MSRM_COMPARED}

# The rows of Tables 1-3 (PVSE rows carry their K, as in the PCME chapter) and the model specs (name, K).
ORDER = ["VSE0", "PVSE K=1", "PVSE K=2", "PVSE K=4", "PCME mu only", "PCME", "MSRM"]
SPECS: list[tuple[str, int]] = [("VSE0", 1), ("PVSE", 1), ("PVSE", 2), ("PVSE", 4), ("PCME mu only", 1),
                                ("PCME", 1), ("MSRM", 1)]

# Table 1 (all classes) per profile: the models and how many of the seeds each gets. Its claim compares MSRM with
# PCME, so those two get every seed; on cpu the other models get the first seed only (their rows say "1 seed"),
# which keeps the chapter's cold run within reach on 2 cores; smoke trains only the compared two (the code path
# is the same for every model); paper trains every model with every seed.
ALL_CLASSES_SPECS: dict[str, list[tuple[str, int]]] = {"smoke": [("PCME", 1), ("MSRM", 1)], "cpu": SPECS,
                                                       "paper": SPECS}
ALL_CLASSES_SEEDED: dict[str, tuple[str, ...]] = {"smoke": ("PCME", "MSRM"), "cpu": ("PCME", "MSRM"),
                                                  "paper": tuple(name for name, _ in SPECS)}


def chapter_runs(profile: str, seeds: Sequence[int]) -> list[tuple[str, str, int, int]]:
    """The trained models of `train.py`, in training order: (protocol, method, K, seed) with protocol
    "zero-shot" (every model, every seed) or "all classes" (`ALL_CLASSES_SPECS`; the methods outside
    `ALL_CLASSES_SEEDED` with the first seed only)."""
    runs = [("zero-shot", name, k, seed) for seed in seeds for name, k in SPECS]
    runs += [("all classes", name, k, seed) for seed in seeds for name, k in ALL_CLASSES_SPECS[profile]
             if seed == seeds[0] or name in ALL_CLASSES_SEEDED[profile]]
    return runs

# Our Table 1 (all classes) and Table 2 (zero-shot) columns -> the paper's keys (`summary.with_paper`).
TABLE1_COLUMNS: dict[str, str] = {f"T1 {d} {m}": f"class/{d}/{m}" for d in ("i2t", "t2i") for m in ("R-P", "R@1")}
TABLE2_COLUMNS = pcme_chapter.TABLE2_COLUMNS
TABLE3_COLUMNS = pcme_chapter.TABLE3_COLUMNS
TABLE4_COLUMNS: dict[str, str] = {f"{d} {m}": f"class/{d}/{m}" for d in ("i2t", "t2i") for m in ("R-P", "R@1")}

# Ablation grids of `ablate.py` (the paper's values; smoke: one or two values a grid, every code path).
ABLATION_GRIDS: dict[str, dict[str, tuple[float, ...]]] = {
    "smoke": {"alpha": (0.0, 2.0), "gamma": (0.8,), "layers": (2,), "batch": (32,)},  # only alpha = 0 trains
    # cpu: a coarser grid over the paper's ranges (2 cores); each grid's default is train.py's all-classes MSRM
    "cpu": {"alpha": (0.0, 1.0, 2.0, 4.0), "gamma": (0.5, 0.8, 2.0), "layers": (1, 2, 3),
            "batch": (32, 64, 128)},
    "paper": {"alpha": (0.0, 0.5, 1.0, 2.0, 4.0), "gamma": (0.5, 0.8, 1.0, 1.5, 2.0), "layers": (1, 2, 3, 4),
              "batch": (32, 64, 96, 128)},
}
FIG7_ZETAS: tuple[int, ...] = (0, 1, 2, 3, 4)  # Figure 7: PMRP's R-Precision at each zeta


def tune_methods(profile: str, enc: dict, word_vectors: np.ndarray, train: Split, val: Split, vocab: Vocabulary,
                 seed: int = 0, **train_overrides: object) -> dict[str, TuningResult]:
    """The PCME chapter's tuning (its cached runs, loaded) plus MSRM's, the same budget (`pcme.tune_methods`)."""
    return pcme_chapter.tune_methods(profile, enc, word_vectors, train, val, vocab, seed, compared=COMPARED,
                                     **train_overrides)


def tuned_model(name: str, tuned: dict[str, TuningResult], enc: dict, word_vectors: np.ndarray,
                k: int = 1) -> RetrievalModel:
    """A fresh model of a compared method (MSRM included) at its tuned weight (PVSE: with K embeddings)."""
    return COMPARED[name].build(enc, word_vectors, tuned[name].weight, k)


def has_all_classes(corpus: Corpus) -> bool:
    """Whether the corpus can be trained on all classes (scenes: every split holds every class; CUB's reader
    splits by class, so its all-classes setting would need CUB's own all-classes split files)."""
    return "seen" in corpus.meta.get("class_split", {})


def all_classes_data(corpus: Corpus, word_vectors: str = "glove-6b-50d") -> ChapterData:
    """The 'all classes training' protocol (the paper's Table 1): train / val / test on every class. Table 1 is
    scored on `test_unseen`, which here is the whole test split (class relevance); grid features must already
    be attached (`load_chapter_data(corpus, trunk=...)` does it for every split)."""
    if not has_all_classes(corpus):
        raise ValueError(f"{corpus.meta.get('name', 'this corpus')}: no all-classes split (the CUB reader splits by "
                         "class); Table 1 needs a corpus whose splits hold every class")
    train, val, test = corpus["train"], corpus["val"], corpus["test"]
    vocab = Vocabulary.build(train.captions)
    vectors = load_word_vectors(vocab, word_vectors, train_captions=train.captions)
    return ChapterData(train, val, test, test, vocab, vectors.matrix, vectors.coverage)


def train_model(name: str, k: int, data: ChapterData, tuned: dict[str, TuningResult], enc: dict, run: RunConfig,
                seed: int, config: MSRMConfig | None = None, **train_overrides: object
                ) -> tuple[RetrievalModel, FitResult]:
    """Train (or load from the run cache) one compared model at its tuned setting on `data`'s train split
    (`pcme.train_built`). config: an MSRM config to use instead of the tuned one (the ablations), at MSRM's
    tuned learning rate. Returns the model (best weights, eval mode, on `run.torch_device`) and the fit."""
    if config is None:
        return train_built(lambda: tuned_model(name, tuned, enc, data.word_vectors, k), tuned[name].lr, data, run,
                           seed, **train_overrides)
    return train_built(lambda: MSRM(config, data.word_vectors), tuned[name].lr, data, run, seed, **train_overrides)


def class_row(model: RetrievalModel, split: Split, vocab: Vocabulary, device: torch.device | str,
              prefix: str = "T1 ") -> dict[str, float]:
    """Class-relevance R-P and R@1 in both directions on `split` (the model's own per-direction scores):
    {f"{prefix}{direction} {metric}"}."""
    values = evaluate_model(model.to(device).eval(), split, vocab, device=device, views=["class"])
    return {f"{prefix}{d} {m}": values[f"class/{d}/{m}"] for d in ("i2t", "t2i") for m in ("R-P", "R@1")}


def pmrp_by_zeta(model: RetrievalModel, split: Split, vocab: Vocabulary, device: torch.device | str,
                 zetas: Sequence[int] = FIG7_ZETAS) -> dict[str, float]:
    """Figure 7: plausible-relevance R-Precision at each zeta, both directions, on `split` (whole-split
    protocol): {f"{direction} zeta{z}": value}."""
    img, cap = embed_split(model.to(device).eval(), split, vocab, device=device)
    i2t, t2i = direction_scores(model, img, cap)
    whole = dataclasses.replace(split, caption_level=None)
    values = evaluate_scores(whole, i2t, views=["plausible"], zetas=zetas, scores_t2i=t2i)
    return {f"{d} zeta{z}": values[f"plausible/{d}/R-P_zeta{z}"] for d in ("i2t", "t2i") for z in zetas}


def label_distance(labels: np.ndarray, query_image: int, images: np.ndarray) -> np.ndarray:
    """zeta of Figure 3: the L1 distance between the concept-label vector of `query_image` and that of each of
    `images` ((N, C) 0/1 labels) -> (len(images),) int."""
    labels = np.asarray(labels, dtype=np.int64)
    return np.abs(labels[np.asarray(images)] - labels[query_image][None, :]).sum(1)


def top_k_lists(scores_i2t: Tensor, scores_t2i: Tensor, split: Split, image_queries: Sequence[int],
                caption_queries: Sequence[int], k: int = 6) -> pd.DataFrame:
    """Figure 3's lists: for each image query its top-k captions (by `scores_i2t` rows) and for each caption
    query its top-k images (by `scores_t2i` columns), with each result's zeta to the query's image and whether
    it is an instance positive. Columns: direction, query, rank, result, zeta, instance."""
    rows = []
    cap_img = np.asarray(split.caption_image)
    for q in image_queries:
        top = torch.topk(torch.as_tensor(scores_i2t)[q], k).indices.numpy()
        zeta = label_distance(split.image_labels, q, cap_img[top])
        rows += [{"direction": "i2t", "query": int(q), "rank": r + 1, "result": int(c), "zeta": int(z),
                  "instance": bool(cap_img[c] == q)} for r, (c, z) in enumerate(zip(top, zeta))]
    for q in caption_queries:
        top = torch.topk(torch.as_tensor(scores_t2i)[:, q], k).indices.numpy()
        zeta = label_distance(split.image_labels, int(cap_img[q]), top)
        rows += [{"direction": "t2i", "query": int(q), "rank": r + 1, "result": int(i), "zeta": int(z),
                  "instance": bool(i == cap_img[q])} for r, (i, z) in enumerate(zip(top, zeta))]
    return pd.DataFrame(rows)


@torch.no_grad()
def batch_incidence(model: MSRM, split: Split, vocab: Vocabulary, captions: Sequence[int],
                    device: torch.device | str) -> tuple[np.ndarray, np.ndarray]:
    """The learned soft incidence S of Eq. (8) on one batch of (image, caption) pairs (caption indices of
    `split`, each with its own image), image queries x caption candidates (v2t), as in training but without
    augmentation: returns (S (B, B), matched (B, B) bool)."""
    model = model.to(device).eval()
    batch = collate([PairDataset(split, vocab, visual=model.visual)[int(c)] for c in captions])
    batch = {key: v.to(device) for key, v in batch.items()}
    img = MSRM.gaussian(model.encode_images(batch))
    cap = MSRM.gaussian(model.encode_captions(batch))
    matched = in_batch_positives(batch)
    _, _, alpha = model.temperatures()
    if alpha is None:
        raise ValueError("batch_incidence: the model has no hypergraph (w/o L_h)")
    s = soft_incidence(mahalanobis(img, cap[0]), matched, alpha, model.config.incidence)
    return s.cpu().numpy(), matched.cpu().numpy()


def training_runs(profile: str, n_seeds: int = 3, all_classes: bool = True) -> pd.DataFrame:
    """How many training runs the chapter needs from a cold cache (profile's grids): per notebook and part, the
    runs the PCME chapter already made (`shared`) and the chapter's own."""
    lrs, grids = len(LEARNING_RATES[profile]), ABLATION_GRIDS[profile]
    default_batch = train_config(profile, LEARNING_RATES[profile][0]).batch_size
    tune_runs = lrs + 2  # coordinate search: lrs at the default weight, then the two other weights
    seeds = 1 if profile == "smoke" else n_seeds
    rows = [
        ("train", "tuning, PCME chapter's 4 methods", 4 * tune_runs, True),
        ("train", "tuning, MSRM", tune_runs, False),
        ("train", "zero-shot seeds, PCME chapter's 6 models (one per method reuses its tuning run)",
         6 * seeds - 4, True),
        ("train", "zero-shot seeds, MSRM", seeds - 1, False),
        ("train", "all-classes runs (Table 1)",
         sum(p == "all classes" for p, *_ in chapter_runs(profile, range(seeds))) if all_classes else 0, False),
        ("ablate", "Table 4: mu only, w/o L_d, w/o L_h (seeds)", 3 * seeds, False),
        ("ablate", "Table 5: alpha grid (alpha = 0 with seeds) + last-sigmoid ablation",
         (seeds if 0.0 in grids["alpha"] else 0) + sum(a not in (0.0, 2.0) for a in grids["alpha"]) + 1, False),
        ("ablate", "Figure 4: gamma grid", sum(g != 0.8 for g in grids["gamma"]), False),
        ("ablate", "Figure 5: layers grid", sum(l != 2 for l in grids["layers"]), False),
        ("ablate", "Figure 6: batch grid", sum(b != default_batch for b in grids["batch"]), False),
    ]
    return pd.DataFrame(rows, columns=["notebook", "part", "runs", "shared with PCME chapter"])
