"""xmr_core.metrics against hand-worked cases, a brute-force numpy reference and independent libraries."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xmr_core import metrics as M

# ------------------------------------------------------------------------------------ brute force


def reference(scores: np.ndarray, rel: np.ndarray, ks=(1, 5, 10), precision_ks=()) -> dict[str, float]:
    """Full stable lexsort per query: score descending, then negatives before positives (pessimistic ties)."""
    best, rp, ap, pk = [], [], [], {k: [] for k in precision_ks}
    for s, r in zip(scores, rel):
        order = np.lexsort((r, -s))  # last key is the primary one
        positions = np.flatnonzero(r[order]) + 1  # 1-based positions of the positives
        big_r = len(positions)
        best.append(positions[0])
        rp.append(np.sum(positions <= big_r) / big_r)
        ap.append(sum((j + 1) / p for j, p in enumerate(positions) if p <= big_r) / big_r)
        for k in precision_ks:
            pk[k].append(np.sum(positions <= k) / k)
    best = np.array(best)
    out = {f"R@{k}": 100 * np.mean(best <= k) for k in ks}
    out |= {
        "medR": np.floor(np.median(best)),
        "meanR": best.mean(),
        "R-P": 100 * np.mean(rp),
        "mAP@R": 100 * np.mean(ap),
    }
    out |= {f"P@{k}": 100 * np.mean(v) for k, v in pk.items()}
    return out


def random_case(rng: np.random.Generator, n_q: int, n_g: int, max_pos: int, ties: bool):
    if ties:  # few distinct values: many ties, also between positives and negatives
        scores = rng.integers(0, 4, (n_q, n_g)).astype(np.float32)
    else:
        scores = rng.standard_normal((n_q, n_g)).astype(np.float32)
    rel = np.zeros((n_q, n_g), dtype=bool)
    for i in range(n_q):
        rel[i, rng.choice(n_g, rng.integers(1, max_pos + 1), replace=False)] = True
    return scores, rel


def assert_metrics_close(got: dict[str, float], want: dict[str, float]) -> None:
    assert set(got) == set(want)
    for k, value in want.items():
        assert got[k] == pytest.approx(value, abs=1e-9), k


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("max_pos", [1, 5, 30])
@pytest.mark.parametrize("chunk_rows", [None, 7])
def test_matches_brute_force(ties, max_pos, chunk_rows):
    rng = np.random.default_rng(max_pos + 10 * ties)
    scores, rel = random_case(rng, 41, 60, max_pos, ties)
    got = M.retrieval_metrics(scores, rel, (1, 5, 10), precision_ks=(1, 3, 10), chunk_rows=chunk_rows)
    assert_metrics_close(got, reference(scores, rel, precision_ks=(1, 3, 10)))


def test_accepts_torch_and_numpy_float64():
    rng = np.random.default_rng(3)
    scores, rel = random_case(rng, 9, 20, 4, False)
    a = M.retrieval_metrics(scores.astype(np.float64), rel)
    b = M.retrieval_metrics(torch.from_numpy(scores), torch.from_numpy(rel))
    assert_metrics_close(a, b)


# -------------------------------------------------------------------------------- hand-worked cases


def test_hand_worked_every_metric():
    # Query 0: scores 0.9 0.8 0.7 0.6 0.5, positives at gallery 1 and 3 -> ranked positions 2 and 4.
    #   best rank 2; R = 2: top-2 holds one positive -> R-P 1/2;
    #   AP@R = (1/2)(P@2 = 1/2 for the positive at 2; position 4 > R) = 1/4; P@1 = 0, P@3 = 1/3.
    # Query 1: scores 0.1 0.2 0.3 0.4 0.5 (ranking 4 3 2 1 0), positive at gallery 4 -> position 1.
    #   best rank 1; R = 1: R-P 1; AP@R 1; P@1 = 1; P@3 = 1/3.
    scores = np.array([[0.9, 0.8, 0.7, 0.6, 0.5], [0.1, 0.2, 0.3, 0.4, 0.5]])
    rel = np.array([[0, 1, 0, 1, 0], [0, 0, 0, 0, 1]], dtype=bool)
    got = M.retrieval_metrics(scores, rel, ks=(1, 2), precision_ks=(1, 3))
    assert got["R@1"] == 50.0  # only query 1 hits at 1
    assert got["R@2"] == 100.0
    assert got["medR"] == 1.0  # median of best ranks {2, 1} = 1.5, floored (VSE++: floor(median(rank0)) + 1)
    assert got["meanR"] == 1.5
    assert got["R-P"] == pytest.approx(100 * (0.5 + 1) / 2)
    assert got["mAP@R"] == pytest.approx(100 * (0.25 + 1) / 2)
    assert got["P@1"] == pytest.approx(100 * (0 + 1) / 2)
    assert got["P@3"] == pytest.approx(100 * (1 / 3 + 1 / 3) / 2)


def test_i2t_uses_best_rank_over_positives():
    # one image, captions 0..5; its positives are captions 4 and 5 with scores 0.2 and 0.95:
    # ranking by score: c5 (0.95), c0 (0.9), ... -> best rank 1, so R@1 = 100 although caption 4 is last.
    scores = np.array([[0.9, 0.8, 0.7, 0.6, 0.2, 0.95]])
    rel = np.array([[0, 0, 0, 0, 1, 1]], dtype=bool)
    got = M.retrieval_metrics(scores, rel)
    assert got["R@1"] == 100.0 and got["meanR"] == 1.0
    # R = 2: top-2 = {c5, c0}: one positive -> R-P 50; AP@R = (1/2)(1/1) = 50
    assert got["R-P"] == 50.0 and got["mAP@R"] == 50.0


def test_ties_are_pessimistic():
    # all five scores equal, one positive (gallery 0): the four tied negatives rank before it -> rank 5,
    # never the lucky rank 1 that index order (np.argsort) would give.
    got = M.retrieval_metrics(np.zeros((1, 5)), np.array([[1, 0, 0, 0, 0]], dtype=bool), ks=(1, 5))
    assert got["R@1"] == 0.0 and got["R@5"] == 100.0 and got["meanR"] == 5.0
    # two positives among five equal scores: they take positions 4 and 5 -> best rank 4 = G - P + 1,
    # R-P: top-2 are negatives -> 0.
    got = M.retrieval_metrics(np.zeros((1, 5)), np.array([[1, 1, 0, 0, 0]], dtype=bool))
    assert got["meanR"] == 4.0 and got["R-P"] == 0.0
    # a tie between positives only does not hurt: scores 1 1 0, positives 0 and 1 -> positions 1, 2
    got = M.retrieval_metrics(np.array([[1.0, 1.0, 0.0]]), np.array([[1, 1, 0]], dtype=bool))
    assert got["meanR"] == 1.0 and got["R-P"] == 100.0 and got["mAP@R"] == 100.0


def test_tie_group_reaching_past_the_window():
    # R = 1, scores 5 3 3 3 3 3 (positive is gallery 5, tied with four negatives at 3):
    # pessimistic position 6 (1 + four tied negatives + itself); the tie group runs to the end of the row.
    scores = np.array([[5.0, 3, 3, 3, 3, 3], [3.0, 3, 3, 3, 3, 5]])
    rel = np.array([[0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 1]], dtype=bool)
    got = M.retrieval_metrics(scores, rel, ks=(1, 6))
    assert got["meanR"] == (6 + 1) / 2  # query 1's positive scores 5, alone at the top
    assert got["R-P"] == 50.0


def test_duplicate_images_in_gallery():
    # t2i with image 2 a duplicate of image 0 (identical embedding -> identical score for every caption).
    # Caption of image 0 scores 0.8 for images 0 and 2. Under instance relevance the duplicate is a
    # negative tied with the ground truth: pessimistic -> rank 2. If the duplicate is marked relevant
    # (as a verified positive, e.g. the exact view), both count and the best rank is 1.
    scores = np.array([[0.8, 0.1, 0.8, 0.3]])
    instance = np.array([[1, 0, 0, 0]], dtype=bool)
    assert M.retrieval_metrics(scores, instance)["meanR"] == 2.0
    both = np.array([[1, 0, 1, 0]], dtype=bool)
    got = M.retrieval_metrics(scores, both)
    assert got["meanR"] == 1.0 and got["R-P"] == 100.0


# --------------------------------------------------------------------------------------- PMRP


def test_pmrp_hand_worked():
    # Query labels q = [1,1,0]; gallery labels g0 = [1,1,0] (distance 0), g1 = [1,0,0] (1), g2 = [0,0,1] (3),
    # g3 = [1,1,1] (1). Scores 0.1 0.9 0.5 0.3 -> ranking g1, g2, g3, g0.
    # ζ=0: positives {g0}, R=1, top-1 = g1 -> 0.   ζ=1: positives {g0,g1,g3}, R=3, top-3 = g1,g2,g3 -> 2/3.
    # ζ=2: same positives as ζ=1 (g2 is at 3) -> 2/3.  PMRP = (0 + 2/3 + 2/3) / 3 = 4/9.
    q = np.array([[1, 1, 0]])
    g = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 1], [1, 1, 1]])
    got = M.pmrp(np.array([[0.1, 0.9, 0.5, 0.3]]), q, g)
    assert got["R-P_zeta0"] == 0.0
    assert got["R-P_zeta1"] == pytest.approx(100 * 2 / 3)
    assert got["R-P_zeta2"] == pytest.approx(100 * 2 / 3)
    assert got["PMRP"] == pytest.approx(100 * 4 / 9)


def test_pmrp_matches_l1_reference():
    rng = np.random.default_rng(5)
    n_img, per, c = 30, 3, 8
    labels = (rng.random((n_img, c)) < 0.25).astype(np.uint8)
    cap_img = np.repeat(np.arange(n_img), per)
    scores = rng.standard_normal((n_img, n_img * per))
    got = M.pmrp(scores.T, labels[cap_img], labels, chunk_rows=11)
    for z in (0, 1, 2):  # relevance as Split.relevance("plausible") defines it: L1 distance <= ζ
        rel = np.abs(labels[cap_img][:, None, :].astype(int) - labels[None, :, :]).sum(-1) <= z
        assert got[f"R-P_zeta{z}"] == pytest.approx(reference(scores.T, rel)["R-P"])


def test_pmrp_rejects_non_binary_labels():
    with pytest.raises(ValueError, match="query_labels row 1 is not a 0/1"):
        M.pmrp(np.zeros((2, 2)), np.array([[0, 1], [2, 0]]), np.array([[0, 1], [1, 0]]))


# ---------------------------------------------------------------------------- rSum, folds, 1K / 5K


def test_bidirectional_and_rsum_hand_worked():
    # 2 images × 4 captions (captions 0,1 -> image 0; 2,3 -> image 1). Scores i2t:
    #   image 0: 0.9 0.1 0.8 0.2 -> best positive c0 at rank 1
    #   image 1: 0.7 0.6 0.5 0.4 -> positives c2, c3 at ranks 3, 4: best 3
    # t2i (columns): c0 (0.9, 0.7) -> image 0 rank 1; c1 (0.1, 0.6) -> rank 2; c2 (0.8, 0.5) -> image 1
    #   rank 2; c3 (0.2, 0.4) -> rank 1.
    # i2t R@1 = 50, R@5 = R@10 = 100; t2i R@1 = 50, R@5 = R@10 = 100 -> rSum = 500.
    scores = np.array([[0.9, 0.1, 0.8, 0.2], [0.7, 0.6, 0.5, 0.4]])
    rel = np.array([[1, 1, 0, 0], [0, 0, 1, 1]], dtype=bool)
    got = M.bidirectional(scores, rel)
    assert got["i2t/R@1"] == 50.0 and got["i2t/meanR"] == 2.0
    assert got["t2i/R@1"] == 50.0 and got["t2i/meanR"] == 1.5
    assert got["rsum"] == 500.0 == M.rsum(got)


def test_coco_folds_stored_order():
    folds = M.coco_folds(5000, 25000)
    assert folds[0] == (slice(0, 1000), slice(0, 5000))
    assert folds[4] == (slice(4000, 5000), slice(20000, 25000))
    with pytest.raises(ValueError, match="equal folds"):
        M.coco_folds(1001, 5005)


def _fold_case(rng: np.random.Generator, n_img: int = 20, per: int = 5):
    cap_img = np.repeat(np.arange(n_img), per)
    rel = cap_img[None, :] == np.arange(n_img)[:, None]
    scores = rng.standard_normal((n_img, n_img * per)) + 2.0 * rel * rng.random((n_img, 1))
    return scores, rel, cap_img


def test_coco_1k_is_mean_of_folds_with_parts_in_order():
    # regression for vsepp PR #43: fold averages must keep each key (ar, ari, rsum) with its own values.
    rng = np.random.default_rng(7)
    scores, rel, _ = _fold_case(rng)
    folds = [M.bidirectional(scores[i, c], rel[i, c]) for i, c in M.coco_folds(20, 100)]
    got = M.coco_1k(scores, rel)
    for key in folds[0]:
        assert got[key] == pytest.approx(np.mean([f[key] for f in folds])), key
    # rSum of the averaged parts equals the average rSum, and the i2t / t2i parts are not swapped
    assert got["rsum"] == pytest.approx(M.rsum(got))
    i2t = np.mean([sum(f[f"i2t/R@{k}"] for k in (1, 5, 10)) for f in folds])
    t2i = np.mean([sum(f[f"t2i/R@{k}"] for k in (1, 5, 10)) for f in folds])
    assert sum(got[f"i2t/R@{k}"] for k in (1, 5, 10)) == pytest.approx(i2t)
    assert sum(got[f"t2i/R@{k}"] for k in (1, 5, 10)) == pytest.approx(t2i)
    assert i2t != pytest.approx(t2i)  # the case distinguishes the two directions


def test_coco_1k_hand_worked_two_folds():
    # 2 folds of 1 image / 2 captions: inside a fold every query has only its own positives left, so
    # every R@K is 100 though the full-matrix ranking is bad (image 0 prefers image 1's captions).
    scores = np.array([[0.1, 0.2, 0.9, 0.8], [0.5, 0.6, 0.3, 0.4]])
    rel = np.array([[1, 1, 0, 0], [0, 0, 1, 1]], dtype=bool)
    got = M.coco_1k(scores, rel, n_folds=2)
    assert got["i2t/R@1"] == 100.0 and got["t2i/R@1"] == 100.0 and got["rsum"] == 600.0
    full = M.bidirectional(scores, rel)
    assert full["i2t/R@1"] == 0.0  # image 0: c2, c3 first; image 1: c0, c1 first


def test_average_folds_refuses_mismatched_keys():
    with pytest.raises(ValueError, match="fold 1 has keys"):
        M.average_folds([{"a": 1.0, "b": 2.0}, {"b": 2.0, "a": 1.0}])


def test_coco_5k_refuses_other_sizes():
    with pytest.raises(ValueError, match="5000 × 25000"):
        M.coco_5k(np.zeros((10, 50)), np.eye(10, 50, dtype=bool))


def test_coco_1k_names_the_fold_of_a_query_without_positive():
    scores = np.zeros((2, 4))
    rel = np.array([[1, 1, 0, 0], [1, 0, 0, 0]], dtype=bool)  # image 1's positive lies in fold 0
    with pytest.raises(ValueError, match="COCO 1K fold 1: .*query row 0 has no positive"):
        M.coco_1k(scores, rel, n_folds=2)


# ---------------------------------------------------------------------------------- multi-round


def test_multi_round_hand_worked():
    # T=2 rounds, Q=2 queries, G=3 images; targets: query 0 -> image 2, query 1 -> image 0.
    # round 1: q0 scores (0.9, 0.5, 0.1) -> target rank 3; q1 (0.2, 0.2, 0.3) -> target tied with image 1,
    #   below image 2 -> pessimistic rank 3.  R@1 = 0, meanR = 3, medR = 3.
    # round 2: q0 (0.1, 0.2, 0.9) -> rank 1; q1 (0.8, 0.1, 0.5) -> rank 1.  R@1 = 100, meanR = 1.
    # means over rounds: R@1 = 50, meanR = 2.
    scores = np.array([[[0.9, 0.5, 0.1], [0.2, 0.2, 0.3]], [[0.1, 0.2, 0.9], [0.8, 0.1, 0.5]]])
    got = M.multi_round(scores, [2, 0], ks=(1, 5))
    assert got["round1/R@1"] == 0.0 and got["round1/meanR"] == 3.0 and got["round1/medR"] == 3.0
    assert got["round2/R@1"] == 100.0 and got["round2/meanR"] == 1.0
    assert got["mean/R@1"] == 50.0 and got["mean/meanR"] == 2.0 and got["mean/R@5"] == 100.0


def test_multi_round_matches_retrieval_metrics_per_round():
    rng = np.random.default_rng(11)
    scores = rng.standard_normal((3, 12, 15))
    targets = rng.integers(0, 15, 12)
    got = M.multi_round(scores, targets, chunk_rows=5)
    for t in range(3):
        ref = reference(scores[t], np.arange(15)[None, :] == targets[:, None])
        for k in ("R@1", "R@5", "R@10", "medR", "meanR"):
            assert got[f"round{t + 1}/{k}"] == pytest.approx(ref[k])


def test_multi_round_errors():
    with pytest.raises(ValueError, match="query 1: target 7 is outside"):
        M.multi_round(np.zeros((1, 2, 3)), [0, 7])
    bad = np.zeros((2, 2, 3))
    bad[1, 1, 2] = np.nan
    with pytest.raises(ValueError, match="round 2: query row 1 contains a NaN"):
        M.multi_round(bad, [0, 1])


# ------------------------------------------------------------------------------------------ errors


def test_nan_and_inf_name_the_query_row():
    scores = np.zeros((5, 4))
    scores[3, 2] = np.nan
    rel = np.eye(5, 4, dtype=bool) | np.eye(5, 4, k=-1, dtype=bool)
    with pytest.raises(ValueError, match="query row 3 contains a NaN or inf"):
        M.retrieval_metrics(scores, rel, chunk_rows=2)
    scores[3, 2] = -np.inf
    with pytest.raises(ValueError, match="query row 3"):
        M.retrieval_metrics(scores, rel)


def test_huge_finite_scores_are_not_mistaken_for_inf():
    scores = np.full((2, 3), 3e38, dtype=np.float32)  # row sums overflow float32; the scores are finite
    scores[:, 0] = 3.4e38
    got = M.retrieval_metrics(scores, np.array([[1, 0, 0], [1, 0, 0]], dtype=bool))
    assert got["R@1"] == 100.0


def test_query_without_positive_is_an_error():
    rel = np.array([[1, 0], [0, 0]], dtype=bool)
    with pytest.raises(ValueError, match="query row 1 has no positive"):
        M.retrieval_metrics(np.zeros((2, 2)), rel)


def test_relevance_shape_and_dtype_mismatch():
    with pytest.raises(ValueError, match=r"relevance has shape \(3, 2\) but the scores are \(2, 3\)"):
        M.retrieval_metrics(np.zeros((2, 3)), np.ones((3, 2), dtype=bool))
    with pytest.raises(ValueError, match="bool matrix"):
        M.retrieval_metrics(np.zeros((2, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="precision@9"):
        M.retrieval_metrics(np.zeros((2, 3)), np.ones((2, 3), dtype=bool), precision_ks=(9,))


def test_truncated_rankings_are_refused():
    with pytest.raises(ValueError, match="truncated rankings are refused"):
        M.scores_from_rankings(np.array([[2, 0], [1, 2]]), n_gallery=3)
    with pytest.raises(ValueError, match="ranking of query 1 is not a permutation"):
        M.scores_from_rankings(np.array([[2, 0, 1], [1, 1, 0]]), n_gallery=3)


def test_scores_from_rankings_reproduce_the_ranking():
    rng = np.random.default_rng(2)
    rankings = np.stack([rng.permutation(7) for _ in range(4)])
    scores = M.scores_from_rankings(rankings, 7)
    assert np.array_equal(torch.argsort(scores, 1, descending=True).numpy(), rankings)


# ----------------------------------------------------------------------------------------- devices


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu():
    rng = np.random.default_rng(4)
    scores, rel = random_case(rng, 50, 80, 10, True)
    cpu = M.retrieval_metrics(scores, rel, precision_ks=(5,))
    gpu = M.retrieval_metrics(
        torch.from_numpy(scores).cuda(), torch.from_numpy(rel).cuda(), precision_ks=(5,)
    )
    assert_metrics_close(gpu, cpu)
    labels = (rng.random((50, 6)) < 0.3).astype(np.uint8)
    assert M.pmrp(torch.from_numpy(scores[:, :50]).cuda(), labels, labels) == pytest.approx(
        M.pmrp(scores[:, :50], labels, labels)
    )


def test_recall_by_bins_equal_count_bins_by_value():
    # 5 queries into 2 bins (array_split: 3 + 2), sorted by value (stable: ties keep query order)
    values = np.array([0.5, 0.1, 0.9, 0.1, 0.7], dtype=np.float32)
    ranks = torch.tensor([1, 3, 1, 1, 2])
    got = M.recall_by_bins(values, ranks, bins=2, value_name="sigma")
    # order: q1 (0.1), q3 (0.1), q0 (0.5) | q4 (0.7), q2 (0.9)
    assert got["bin"].tolist() == [1, 2]
    assert got["sigma"].tolist() == pytest.approx([(0.1 + 0.1 + 0.5) / 3, (0.7 + 0.9) / 2])
    assert got["R@1"].tolist() == pytest.approx([100 * 2 / 3, 50.0])  # ranks (3, 1, 1) and (2, 1)
    assert M.recall_by_bins(values, ranks, bins=1, k=2)["R@2"].tolist() == pytest.approx([80.0])
    with pytest.raises(ValueError):
        M.recall_by_bins(values, ranks, bins=6)
    with pytest.raises(ValueError):
        M.recall_by_bins(values[:4], ranks, bins=2)
