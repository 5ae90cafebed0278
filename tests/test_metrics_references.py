"""xmr_core.metrics against independent implementations: torchmetrics, pytorch-metric-learning's
AccuracyCalculator and the eccv-caption package's metric functions, on random matrices with and without ties.

These libraries break ties in their own (undocumented) order, so the tied cases hand them scores in which
every positive is moved just below the negatives it ties with: the pessimistic rule written as a perturbation.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from xmr_core import metrics as M


def random_case(seed: int, n_q: int, n_g: int, max_pos: int, ties: bool):
    rng = np.random.default_rng(seed)
    if ties:
        scores = rng.integers(0, 4, (n_q, n_g)).astype(np.float64)
    else:
        scores = rng.standard_normal((n_q, n_g))
    rel = np.zeros((n_q, n_g), dtype=bool)
    for i in range(n_q):
        rel[i, rng.choice(n_g, rng.integers(1, max_pos + 1), replace=False)] = True
    return scores, rel


def pessimistic(scores: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """Scores without ties between a positive and a negative: integer-valued ties in `random_case` are
    broken by lowering every positive by 0.25 (less than the gap of 1 between distinct values)."""
    return scores - 0.25 * rel


@pytest.mark.parametrize("ties", [False, True])
def test_torchmetrics_hit_rate_and_r_precision(ties):
    from torchmetrics.retrieval import RetrievalHitRate, RetrievalRPrecision

    scores, rel = random_case(1 + ties, 40, 30, 6, ties)
    ours = M.retrieval_metrics(scores, rel, ks=(1, 5, 10))
    preds = torch.from_numpy(pessimistic(scores, rel) if ties else scores).flatten()
    target = torch.from_numpy(rel).flatten()
    indexes = torch.arange(40)[:, None].expand(40, 30).flatten()
    for k in (1, 5, 10):
        want = 100 * float(RetrievalHitRate(top_k=k)(preds, target, indexes=indexes))
        assert ours[f"R@{k}"] == pytest.approx(want), k
    assert ours["R-P"] == pytest.approx(100 * float(RetrievalRPrecision()(preds, target, indexes=indexes)))


def test_pytorch_metric_learning_class_labels():
    from pytorch_metric_learning.distances import DotProductSimilarity
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    from pytorch_metric_learning.utils.inference import CustomKNN

    rng = np.random.default_rng(8)
    query, reference = rng.standard_normal((60, 8)), rng.standard_normal((90, 8))
    q_cls, r_cls = rng.integers(0, 5, 60), rng.integers(0, 5, 90)
    calc = AccuracyCalculator(
        include=("r_precision", "mean_average_precision_at_r"),
        k="max_bin_count",
        knn_func=CustomKNN(DotProductSimilarity(normalize_embeddings=False)),
        device=torch.device("cpu"),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = calc.get_accuracy(
            torch.from_numpy(query).float(),
            torch.from_numpy(q_cls),
            torch.from_numpy(reference).float(),
            torch.from_numpy(r_cls),
            ref_includes_query=False,
        )
    scores = torch.from_numpy(query).float() @ torch.from_numpy(reference).float().T
    ours = M.retrieval_metrics(scores, q_cls[:, None] == r_cls[None, :])
    assert ours["R-P"] == pytest.approx(100 * want["r_precision"], abs=1e-4)
    assert ours["mAP@R"] == pytest.approx(100 * want["mean_average_precision_at_r"], abs=1e-4)


def _rankings(scores: np.ndarray) -> dict[int, list[int]]:
    return {q: list(np.argsort(-row, kind="stable")) for q, row in enumerate(scores)}


def _positives(rel: np.ndarray) -> dict[int, list[int]]:
    return {q: list(np.flatnonzero(row)) for q, row in enumerate(rel)}


@pytest.mark.parametrize("ties", [False, True])
def test_eccv_caption_metrics(ties):
    from eccv_caption import _metrics as eccv

    scores, rel = random_case(5 + ties, 25, 40, 12, ties)
    ours = M.retrieval_metrics(scores, rel, ks=(1, 5, 10))
    target, gt = _rankings(pessimistic(scores, rel) if ties else scores), _positives(rel)
    want = eccv.compute_eccv_metrics(target, gt)
    assert ours["mAP@R"] == pytest.approx(100 * want["eccv_map_at_r"])
    assert ours["R-P"] == pytest.approx(100 * want["eccv_rprecision"])
    assert ours["R@1"] == pytest.approx(100 * want["eccv_r1"])
    for k in (5, 10):
        assert ours[f"R@{k}"] == pytest.approx(100 * eccv.compute_r_at_k(target, gt, K=k))


def test_eccv_caption_coco_1k_folds():
    # eccv-caption's COCO 1K: filter each full ranking down to the fold's gallery, then R@K; average folds
    from eccv_caption import _metrics as eccv

    rng = np.random.default_rng(9)
    n_img, per = 15, 5
    cap_img = np.repeat(np.arange(n_img), per)
    rel = cap_img[None, :] == np.arange(n_img)[:, None]
    scores = rng.standard_normal((n_img, n_img * per)) + 1.5 * rel
    ours = M.coco_1k(scores, rel)
    i2t_rank, t2i_rank = _rankings(scores), _rankings(scores.T)
    for direction, ranking, positives, n_q, n_g in (
        ("i2t", i2t_rank, _positives(rel), n_img, n_img * per),
        ("t2i", t2i_rank, _positives(rel.T), n_img * per, n_img),
    ):
        for k in (1, 5, 10):
            folds = []
            for f in range(5):
                queries = range(f * n_q // 5, (f + 1) * n_q // 5)
                gallery = list(range(f * n_g // 5, (f + 1) * n_g // 5))
                folds.append(
                    eccv.compute_coco1k_r_at_k(ranking, {q: positives[q] for q in queries}, gallery, K=k)
                )
            assert ours[f"{direction}/R@{k}"] == pytest.approx(100 * np.mean(folds)), (direction, k)


def test_eccv_rankings_through_scores_from_rankings():
    # eccv-caption takes ranked id lists; a full ranking turned into scores gives the same R-P / mAP@R
    from eccv_caption import _metrics as eccv

    scores, rel = random_case(12, 10, 20, 5, False)
    target, gt = _rankings(scores), _positives(rel)
    via_rankings = M.retrieval_metrics(
        M.scores_from_rankings(np.array([target[q] for q in range(10)]), 20), rel
    )
    want = eccv.compute_eccv_metrics(target, gt)
    assert via_rankings["mAP@R"] == pytest.approx(100 * want["eccv_map_at_r"])
    assert via_rankings["R-P"] == pytest.approx(100 * want["eccv_rprecision"])
