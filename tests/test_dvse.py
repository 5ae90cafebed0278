"""DVSE (xmr_core.methods.dvse): each equation against a hand-worked value or a float64 loop reference
written here; gradients, the training score = `score`, the Table V switches, and one tiny `fit` epoch."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from xmr_core.encoders.image import Features, ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.methods.dvse import (
    DVSE,
    TABLE_V,
    DVSEConfig,
    DynamicMask,
    dvse_ablation_config,
    dvse_config,
    orthogonal_loss,
    variance_weights,
)
from xmr_core.methods.vse import HingeSchedule
from xmr_core.similarity import fast_rerank

SMALL = {"embed_dim": 12, "image": ImageEncoderConfig(widths=(8, 16), hidden=16, image_size=16),
         "text": TextEncoderConfig(hidden=6)}
WORDS = np.random.default_rng(0).normal(size=(10, 5)).astype(np.float32)


def _batch(image_index: list[int]) -> dict[str, torch.Tensor]:
    b = len(image_index)
    tokens = torch.tensor([[2 + i % 8, 3] for i in range(b)])
    return {"images": torch.randn(b, 3, 16, 16, generator=torch.Generator().manual_seed(b)), "tokens": tokens,
            "lengths": torch.full((b,), 2), "image_index": torch.tensor(image_index), "caption_index": torch.arange(b)}


# ------------------------------------------------------------------------------------------ Eq. (3)


def test_dynamic_mask_matches_eq3_by_hand() -> None:
    # w² = [[1, 0], [0, -1]] (K = 2, C = 2). Regions z = (1, 2) and (-3, 4): w² z = (1, -2) and (-3, -4).
    # Both regions: h_V = mean = (-1, -3); s = (0.269, 0.047); round -> (0, 0).
    # First region only (region mask): h_V = (1, -2); s = (0.731, 0.119); round -> (1, 0).
    dm = DynamicMask(2, 2)
    dm.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, -1.0]]))
    local = torch.tensor([[[1.0, 2.0], [-3.0, 4.0]], [[1.0, 2.0], [-3.0, 4.0]]])
    mask = torch.tensor([[True, True], [True, False]])
    out = dm(Features(local, mask, torch.zeros(2, 2)))
    assert torch.equal(out, torch.tensor([[0.0, 0.0], [1.0, 0.0]]))
    assert "weight" not in dict(dm.named_parameters())  # w² is fixed (a buffer)


# ------------------------------------------------------------------------------------------ Eq. (4)


def test_orthogonal_loss_zero_for_orthogonal_positive_otherwise() -> None:
    orthogonal = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 3.0]]])
    assert orthogonal_loss(orthogonal, margin=0.0).item() == 0.0
    # K = 2: rows (1, 0) and (0.3, 0.4) -> cosine 0.6; Σ_{i≠j} = 1.2; [1.2 - 0.4]_+ = 0.8
    pair = torch.tensor([[[1.0, 0.0], [0.3, 0.4]]])
    assert orthogonal_loss(pair, margin=0.4).item() == pytest.approx(0.8)
    # below the margin β: [1.2 - 1.5]_+ = 0
    assert orthogonal_loss(pair, margin=1.5).item() == 0.0
    # the dynamic mask drops the second sub-embedding: no pair left -> [0 - 0.4]_+ = 0 (L_dc), and the sum
    # over two images: 0.8 (L_ort, no mask) + 0 (masked)
    two = torch.cat([pair, pair])
    assert orthogonal_loss(two, 0.4, torch.tensor([[1.0, 1.0], [1.0, 0.0]])).item() == pytest.approx(0.8)
    # |·|: a negative correlation counts too: rows (1, 0) and (-0.6, 0.8) -> |−0.6| · 2 = 1.2
    assert orthogonal_loss(torch.tensor([[[1.0, 0.0], [-0.6, 0.8]]]), 0.4).item() == pytest.approx(0.8)


# ------------------------------------------------------------------------------------------ Eq. (5)-(8)


def test_variance_weights_are_sample_std_plus_one_and_at_least_one() -> None:
    # K = 1, B = 3: row 0 others (0.2, 0.6): sample std = 0.4 / sqrt(2) = 0.28284 -> σ = 1.28284
    sims = torch.tensor([[[0.9, 0.2, 0.6], [0.1, 0.8, 0.1], [-0.5, 0.5, 0.7]]])
    sigma = variance_weights(sims)
    assert sigma[0, 0].item() == pytest.approx(1 + 0.4 / math.sqrt(2))
    assert sigma[0, 1].item() == pytest.approx(1.0)  # (0.1, 0.1): std 0
    assert sigma[0, 2].item() == pytest.approx(1 + statistics.stdev([-0.5, 0.5]))
    rand = torch.rand(4, 9, 9, generator=torch.Generator().manual_seed(0)) * 2 - 1
    assert (variance_weights(rand) >= 1.0).all()
    assert torch.equal(variance_weights(torch.rand(3, 2, 2)), torch.ones(3, 2))  # too short a batch: σ ≡ 1


# ------------------------------------------------------------------------------------------ Eq. (9)-(12)


def _loss_reference(v: torch.Tensor, t: torch.Tensor, alpha: float, beta: float, eta: float) -> float:
    """Eq. (11) + Eq. (4) + Eq. (12) in float64 loops: v (B, K, D) unit, t (B, D) unit; residuals = v, no mask."""
    b, k, _ = v.shape
    s = [[[float(v[i, a] @ t[j]) for j in range(b)] for i in range(b)] for a in range(k)]
    l_var = 0.0
    for a in range(k):
        for i in range(b):
            sigma = statistics.stdev([s[a][i][j] for j in range(b) if j != i]) + 1.0
            i2t = max(max(0.0, s[a][i][j] - s[a][i][i] + alpha) for j in range(b) if j != i)
            t2i = max(max(0.0, s[a][j][i] - s[a][i][i] + alpha) for j in range(b) if j != i)
            l_var += (i2t + t2i) / sigma**2 + 2 * math.log(sigma)
    l_dc = 0.0
    for i in range(b):
        corr = sum(abs(float(v[i, a] @ v[i, c])) for a in range(k) for c in range(k) if a != c)
        l_dc += max(0.0, corr - beta)
    return eta * l_var + (1 - eta) * l_dc


def test_loss_equals_loop_reference_of_eq11_eq4_eq12() -> None:
    g = torch.Generator().manual_seed(4)
    v = F.normalize(torch.randn(5, 3, 4, generator=g, dtype=torch.float64), dim=-1)
    t = F.normalize(torch.randn(5, 4, generator=g, dtype=torch.float64), dim=-1)
    model = DVSE(DVSEConfig(n_embeds=3, hinge=HingeSchedule(negatives="max", mask_positives=False), **SMALL), WORDS)
    ones = torch.ones(5, 3, dtype=torch.float64)
    loss, parts = model.loss((v, v, ones), t, _batch([0, 1, 2, 3, 4]))
    assert loss.item() == pytest.approx(_loss_reference(v, t, 0.2, 0.4, 0.6), rel=1e-9)
    assert {"var", "dc", "sigma", "mask_kept"} <= set(parts)


def test_loss_finite_with_gradients_for_every_trainable_parameter() -> None:
    torch.manual_seed(0)
    model = DVSE(dvse_config(n_embeds=3, paper_hinge=True, **SMALL), WORDS)
    batch = _batch([0, 1, 2, 3, 4])
    loss, parts = model.loss(*model(batch), batch)
    assert torch.isfinite(loss) and all(math.isfinite(x) for x in parts.values())
    loss.backward()
    for name, p in model.named_parameters():
        if p.requires_grad:
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert any(p.grad.abs().sum() > 0 for p in model.image_head.parameters())
    assert any(p.grad.abs().sum() > 0 for p in model.text_encoder.parameters())


def test_training_score_agrees_with_score() -> None:
    torch.manual_seed(1)
    model = DVSE(DVSEConfig(n_embeds=3, **SMALL), WORDS).eval()
    batch = _batch([0, 1, 2, 3])
    with torch.no_grad():
        img, cap = model(batch)
        assert img[0].shape == (4, 3, 12) and cap.shape == (4, 12) and img[2].shape == (4, 3)
        torch.testing.assert_close(model.sub_similarities(img, cap).amax(0), model.score(img, cap))
        brute = torch.tensor([[max(float(img[0][i, a] @ cap[j]) for a in range(3)) for j in range(4)] for i in range(4)])
        torch.testing.assert_close(model.score(img, cap), brute)
        mean_model = DVSE(DVSEConfig(n_embeds=3, pool="mean", **SMALL), WORDS)
        torch.testing.assert_close(mean_model.score(img, cap), model.sub_similarities(img, cap).mean(0))
        scores = model.score(img, cap)
        fr = model.reranker()  # Eq. (15): (γ1, γ2) for image queries, (λ1, λ2) for caption queries
        torch.testing.assert_close(fr(scores, "i2t"), fast_rerank(scores, model.config.fr_gamma))
        torch.testing.assert_close(fr(scores.T, "t2i"), fast_rerank(scores.T, model.config.fr_lambda))


def test_table_v_switches() -> None:
    base = DVSEConfig(n_embeds=3, hinge=HingeSchedule(negatives="max"), **SMALL)
    batch = _batch([0, 1, 2, 3])
    expected_terms = {1: "dc", 2: "ort", 3: "ort", 4: None, 5: None, 6: None, 7: "dc"}
    for combination, (dm, var, ort, se) in TABLE_V.items():
        cfg = dvse_ablation_config(combination, base)
        torch.manual_seed(0)
        model = DVSE(cfg, WORDS)
        img, cap = model(batch)
        assert img[0].shape[1] == (3 if se else 1)
        if not dm:
            assert torch.equal(img[2], torch.ones_like(img[2]))
        loss, parts = model.loss(img, cap, batch)
        term = expected_terms[combination]
        assert ("dc" in parts) == (term == "dc") and ("ort" in parts) == (term == "ort")
        if not var:
            assert parts["sigma"] == 1.0
        if term is None:  # no orthogonal term: L = L_var
            assert loss.item() == pytest.approx(parts["var"], rel=1e-6)
    with pytest.raises(ValueError, match="1-7"):
        dvse_ablation_config(8, base)


def test_dvse_fit_one_tiny_epoch(tmp_path) -> None:
    from xmr_core.data.corpus import Split
    from xmr_core.data.datasets import caption_loader, image_loader
    from xmr_core.data.text import Vocabulary
    from xmr_core.runs.train import TrainConfig, fit

    words = ["red", "blue", "green", "circle", "square", "star", "left", "right", "a", "and"]

    def split(name: str, n: int, seed: int) -> Split:
        rng = np.random.default_rng(seed)
        captions = [" ".join(rng.choice(words, 4)) for _ in range(2 * n)]
        return Split(name, f"synthetic-{name}", [f"{name}{i}" for i in range(n)],
                     [f"{name}c{j}" for j in range(2 * n)], captions, np.repeat(np.arange(n), 2),
                     images=rng.integers(0, 255, (n, 16, 16, 3), dtype=np.uint8))

    train, val = split("train", 24, 0), split("val", 8, 1)
    vocab = Vocabulary.build(train.captions)
    vectors = np.random.default_rng(2).normal(size=(len(vocab), 6)).astype(np.float32)

    def validate(model: DVSE, s: Split) -> dict[str, float]:
        with torch.no_grad():
            img = tuple(torch.cat(x) for x in zip(*[model.encode_images(b) for b in image_loader(s, 64)]))
            cap = torch.cat([model.encode_captions(b) for b in caption_loader(s, vocab, 64)])
            scores = model.score(img, cap)
        hits = [int(scores[:, j].argmax()) == int(s.caption_image[j]) for j in range(s.n_captions)]
        return {"rsum": 100.0 * float(np.mean(hits))}

    torch.manual_seed(0)
    model = DVSE(dvse_config(n_embeds=3, **SMALL), vectors)
    cfg = TrainConfig(epochs=1, batch_size=8, progress=False, device="cpu")
    result = fit(model, train, val, cfg, tmp_path / "run", vocab=vocab, validate=validate)
    assert len(result.history) == 1 and math.isfinite(result.history[0]["val/rsum"])
    assert math.isfinite(result.history[0]["train/var"])
