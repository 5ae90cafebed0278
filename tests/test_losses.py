"""Shared losses: hand-worked tiny batches (derivations in comments), brute-force loops, another library's
closed form, gradients, symmetry and masking."""

from __future__ import annotations

import math

import pytest
import torch
from torch.distributions import Independent, Normal, kl_divergence

from xmr_core import losses as L
from xmr_core.similarity import sample_distances, sample_gaussian

# Rows = images, columns = captions, positives on the diagonal.
HAND = torch.tensor([[0.9, 0.5, 0.1], [0.3, 0.8, 0.75], [0.5, 0.65, 0.4]], dtype=torch.float64)
# margin 0.2, cost = [0.2 + s(neg) - s(pos)]_+
# i2t (rows):    row0: 0.2+.5-.9=-.2 -> 0, 0.2+.1-.9 -> 0          sum 0     max 0
#                row1: 0.2+.3-.8 -> 0, 0.2+.75-.8 = .15             sum .15   max .15
#                row2: 0.2+.5-.4 = .3, 0.2+.65-.4 = .45             sum .75   max .45
# t2i (columns): col0: 0.2+.3-.9 -> 0, 0.2+.5-.9 -> 0               sum 0     max 0
#                col1: 0.2+.5-.8 -> 0, 0.2+.65-.8 = .05             sum .05   max .05
#                col2: 0.2+.1-.4 -> 0, 0.2+.75-.4 = .55             sum .55   max .55
# VSE0 (sum) = .9 + .6 = 1.5; VSE++ (max) = .6 + .6 = 1.2; mix w=.5: i2t .5*.9+.5*.6=.75, t2i .6 -> 1.35.
# With (image 2, caption 1) marked positive: row2 keeps only .3, col1 loses .05: sum = .45 + .55 = 1.0.


def test_hinge_hand_worked() -> None:
    assert float(L.contrastive_hinge(HAND, 0.2, "sum")) == pytest.approx(1.5)
    assert float(L.contrastive_hinge(HAND, 0.2, "max")) == pytest.approx(1.2)
    assert float(L.contrastive_hinge(HAND, 0.2, "max", max_weight=0.5)) == pytest.approx(1.35)
    assert float(L.contrastive_hinge(HAND, 0.2, "topk", topk=1)) == pytest.approx(1.2)
    assert float(L.contrastive_hinge(HAND, 0.2, "topk", topk=2)) == pytest.approx(1.5)  # B-1 = 2: all negatives
    assert float(L.contrastive_hinge(HAND, 0.2, "sum", reduction="mean")) == pytest.approx(1.5 / 3)
    mask = torch.zeros(3, 3, dtype=torch.bool)
    mask[2, 1] = True
    assert float(L.contrastive_hinge(HAND, 0.2, "sum", positive_mask=mask)) == pytest.approx(1.0)


def brute_hinge(s: torch.Tensor, margin: float, mode: str, k: int, w: float, mask: torch.Tensor) -> float:
    total = 0.0
    n = len(s)
    for q in range(n):
        for direction in ("i2t", "t2i"):
            costs = []
            for o in range(n):
                if o == q or (mask[q, o] if direction == "i2t" else mask[o, q]):
                    continue
                neg = s[q, o] if direction == "i2t" else s[o, q]
                costs.append(max(0.0, margin + float(neg) - float(s[q, q])))
            costs.sort(reverse=True)
            hard = {"sum": sum(costs), "max": max(costs, default=0.0), "topk": sum(costs[:k])}[mode]
            total += hard if mode == "sum" else (1 - w) * sum(costs) + w * hard
    return total


@pytest.mark.parametrize("mode,k,w", [("sum", 1, 1.0), ("max", 1, 1.0), ("max", 1, 0.3), ("topk", 3, 1.0), ("topk", 2, 0.6)])
def test_hinge_matches_brute_force(mode: str, k: int, w: float) -> None:
    gen = torch.Generator().manual_seed(1)
    s = torch.rand(6, 6, generator=gen, dtype=torch.float64)
    mask = torch.rand(6, 6, generator=gen) < 0.2
    ours = L.contrastive_hinge(s, 0.2, mode, topk=k, max_weight=w, positive_mask=mask)  # type: ignore[arg-type]
    assert float(ours) == pytest.approx(brute_hinge(s, 0.2, mode, k, w, mask))


def test_hinge_collapsed_scores_give_two_margin_b() -> None:
    # All similarities equal: every violation is exactly the margin; hardest per query = margin, 2 directions.
    b, margin = 5, 0.2
    assert float(L.contrastive_hinge(torch.full((b, b), 0.3), margin, "max")) == pytest.approx(2 * margin * b)


def test_hinge_gradient_reaches_only_violating_pairs() -> None:
    s = HAND.clone().requires_grad_(True)
    L.contrastive_hinge(s, 0.2, "max").backward()
    # Hardest violators: (1,2) in row1 and col2, (2,1) in row2 and col1; positives pushed down accordingly.
    assert float(s.grad[1, 2]) == pytest.approx(2.0) and float(s.grad[2, 1]) == pytest.approx(2.0)
    assert float(s.grad[0, 1]) == 0.0 and float(s.grad[0, 0]) == 0.0


def test_hinge_bad_input() -> None:
    with pytest.raises(ValueError, match="square"):
        L.contrastive_hinge(torch.zeros(2, 3))
    with pytest.raises(FloatingPointError, match="non-finite value at \\[0, 1\\]"):
        L.contrastive_hinge(torch.tensor([[0.0, float("nan")], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="topk"):
        L.contrastive_hinge(HAND, negatives="topk", topk=3)
    with pytest.raises(ValueError, match="max_weight"):
        L.contrastive_hinge(HAND, negatives="sum", max_weight=0.5)
    with pytest.raises(ValueError, match="positive_mask"):
        L.contrastive_hinge(HAND, positive_mask=torch.zeros(3, 3))


def test_soft_contrastive_hand_worked() -> None:
    # J = J' = 1, a = b = 1, logits = 1 - d = [[0, -1], [-2, 0.5]], diagonal matched.
    # NLL(match, l) = -log s(l) = log(1 + e^-l); NLL(non-match, l) = -log(1 - s(l)) = log(1 + e^l).
    d = torch.tensor([[1.0, 2.0], [3.0, 0.5]], dtype=torch.float64).view(2, 2, 1, 1)
    matched = torch.eye(2, dtype=torch.bool)
    by_hand = [math.log(2.0), math.log(1 + math.exp(-1)), math.log(1 + math.exp(-2)), math.log(1 + math.exp(-0.5))]
    assert float(L.soft_contrastive_loss(d, matched, 1.0, 1.0, "sum")) == pytest.approx(sum(by_hand))
    assert float(L.soft_contrastive_loss(d, matched, 1.0, 1.0)) == pytest.approx(sum(by_hand) / 4)


def test_soft_contrastive_matches_brute_force_probabilities() -> None:
    gen = torch.Generator().manual_seed(2)
    d = torch.rand(3, 4, 2, 3, generator=gen, dtype=torch.float64) * 3
    matched = torch.rand(3, 4, generator=gen) < 0.5
    a, b = 1.7, 2.2
    ref = 0.0
    for i in range(3):
        for j in range(4):
            p = float(torch.sigmoid(-a * d[i, j] + b).mean())  # Eq. (2) with plain probabilities
            ref += -math.log(p) if matched[i, j] else -math.log(1 - p)
    assert float(L.soft_contrastive_loss(d, matched, a, b, "sum")) == pytest.approx(ref)


def test_soft_contrastive_is_stable_for_extreme_logits() -> None:
    logits = torch.tensor([[[[200.0]]], [[[-200.0]]]], dtype=torch.float32)  # (2, 1, 1, 1)
    nll = L.soft_contrastive_nll(logits, torch.tensor([[False], [True]]))
    # -log(1 - s(200)) = log(1 + e^200) ~ 200; -log s(-200) = log(1 + e^200) ~ 200.
    torch.testing.assert_close(nll, torch.full((2, 1), 200.0))


def test_soft_contrastive_raises_a_floating_point_error_on_non_finite_logits() -> None:
    for bad in (float("nan"), float("inf")):  # a diverged forward pass, which `train.fit` handles as one
        with pytest.raises(FloatingPointError, match="non-finite logits"):
            L.soft_contrastive_nll(torch.tensor([[[[bad]]]]), torch.tensor([[True]]))


def test_soft_contrastive_symmetric_and_gradients() -> None:
    mu_i = torch.randn(4, 6, requires_grad=True)
    lv_i = torch.full((4, 6), -1.0, requires_grad=True)
    mu_t = torch.randn(4, 6, requires_grad=True)
    lv_t = torch.full((4, 6), -1.0, requires_grad=True)
    a, b = torch.tensor(2.0, requires_grad=True), torch.tensor(1.0, requires_grad=True)
    zi, zt = sample_gaussian(mu_i, lv_i, 5), sample_gaussian(mu_t, lv_t, 5)
    matched = torch.eye(4, dtype=torch.bool)
    matched[0, 2] = True
    i2t = L.soft_contrastive_loss(sample_distances(zi, zt), matched, a, b)
    t2i = L.soft_contrastive_loss(sample_distances(zt, zi), matched.T, a, b)
    torch.testing.assert_close(i2t, t2i)
    i2t.backward()
    for t in (lv_i, lv_t, mu_i, a, b):
        assert t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0


def test_kl_matches_torch_distributions() -> None:
    mu, logvar = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 3, dtype=torch.float64)
    std_normal = Independent(Normal(torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)), 1)
    ref = torch.stack([kl_divergence(Independent(Normal(mu[i], (0.5 * logvar[i]).exp()), 1), std_normal) for i in range(5)])
    torch.testing.assert_close(L.kl_to_standard_normal(mu, logvar), ref.mean())
    torch.testing.assert_close(L.kl_to_standard_normal(mu, logvar, "sum"), ref.sum())
    assert float(L.kl_to_standard_normal(torch.zeros(2, 3), torch.zeros(2, 3))) == 0.0


def test_kl_is_the_papers_and_pulls_log_sigma_twice_as_hard_as_pcme_code_for_small_sigma() -> None:
    # Hand-worked, one item, D = 2: mu = (0.6, 0), sigma = (e^-3, 1), i.e. logvar = (-6, 0):
    # KL = 1/2 [(.36 + e^-6 - 1 + 6) + (0 + 1 - 1 - 0)] = 1/2 (5.36 + e^-6).
    mu, logvar = torch.tensor([[0.6, 0.0]], dtype=torch.float64), torch.tensor([[-6.0, 0.0]], dtype=torch.float64)
    assert float(L.kl_to_standard_normal(mu, logvar, "sum")) == pytest.approx(0.5 * (5.36 + math.exp(-6.0)))
    # Gradient on log sigma = logvar / 2: d/d log sigma 1/2 (sigma^2 - 1 - 2 log sigma) = sigma^2 - 1 -> -1 as
    # sigma -> 0. PCME's code evaluates 1/2 (sigma - 1 - log sigma) (log sigma where log sigma^2 belongs):
    # its derivative (sigma - 1) / 2 -> -1/2. Both are 0 at sigma = 1.
    log_sigma = torch.tensor([[-6.0, 0.0]], dtype=torch.float64, requires_grad=True)
    L.kl_to_standard_normal(mu, 2.0 * log_sigma, "sum").backward()
    book = log_sigma.grad.clone()
    log_sigma.grad = None
    (-0.5 * (1 + log_sigma - mu.square() - log_sigma.exp()).sum()).backward()  # PCME's kl_divergence, transcribed
    code = log_sigma.grad
    assert book[0, 0].item() == pytest.approx(math.exp(-12.0) - 1.0)
    assert code[0, 0].item() == pytest.approx(0.5 * (math.exp(-6.0) - 1.0))
    assert book[0, 0].item() / code[0, 0].item() == pytest.approx(2.0, rel=1e-2)
    assert book[0, 1].item() == code[0, 1].item() == 0.0


def test_uniformity_is_exact_above_128_points() -> None:
    # PCME's code estimates the loss on 128 points drawn with replacement once there are more than 128; the book's
    # is the exact all-pairs value: equal to the pair loop, and the same on every call.
    z = torch.randn(150, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    sq = ((z[:, None] - z[None]) ** 2).sum(-1)
    pairs = [float(torch.exp(-2.0 * sq[i, j])) for i in range(150) for j in range(i + 1, 150)]
    assert len(pairs) == 150 * 149 // 2
    assert float(L.uniformity_loss(z)) == pytest.approx(math.log(sum(pairs) / len(pairs)), rel=1e-10)
    assert float(L.uniformity_loss(z)) == float(L.uniformity_loss(z))


def test_uniformity_matches_pairwise_loop() -> None:
    z = torch.randn(3, 2, 4, dtype=torch.float64)
    pts = z.reshape(6, 4)
    vals = [math.exp(-2.0 * float(((pts[i] - pts[j]) ** 2).sum())) for i in range(6) for j in range(i + 1, 6)]
    assert float(L.uniformity_loss(z, t=2.0)) == pytest.approx(math.log(sum(vals) / len(vals)))
    torch.testing.assert_close(L.uniformity_loss(z), L.uniformity_loss(pts))
    # its gradient is the pair loop's (autograd through the explicit i < j sum)
    leaf = pts.clone().requires_grad_(True)
    L.uniformity_loss(leaf, t=2.0).backward()
    ref_leaf = pts.clone().requires_grad_(True)
    pairs = [(-2.0 * ((ref_leaf[i] - ref_leaf[j]) ** 2).sum()).exp() for i in range(6) for j in range(i + 1, 6)]
    torch.log(torch.stack(pairs).mean()).backward()
    torch.testing.assert_close(leaf.grad, ref_leaf.grad)
    # Far-apart points: exp underflows in the loop but the logsumexp form stays finite.
    assert torch.isfinite(L.uniformity_loss(torch.tensor([[0.0], [100.0]]), t=2.0))


def test_info_nce_hand_worked_and_brute_force() -> None:
    # scores = I, scale 1: each row/column CE = -log(e / (e + 1)) = log(1 + e^-1).
    assert float(L.info_nce(torch.eye(2), scale=1.0)) == pytest.approx(math.log(1 + math.exp(-1)))
    gen = torch.Generator().manual_seed(3)
    s = torch.randn(5, 5, generator=gen, dtype=torch.float64)
    mask = torch.zeros(5, 5, dtype=torch.bool)
    mask[0, 3] = True
    ref = 0.0
    for q in range(5):
        for direction in ("i2t", "t2i"):
            others = [o for o in range(5) if o == q or not (mask[q, o] if direction == "i2t" else mask[o, q])]
            logits = [float(s[q, o] if direction == "i2t" else s[o, q]) / 0.1 for o in others]
            ref += -(float(s[q, q]) / 0.1 - math.log(sum(math.exp(x) for x in logits))) / 10
    assert float(L.info_nce(s, temperature=0.1, positive_mask=mask)) == pytest.approx(ref)
    torch.testing.assert_close(L.info_nce(s, temperature=0.1), L.info_nce(s, scale=10.0))
    with pytest.raises(ValueError, match="exactly one"):
        L.info_nce(s)
