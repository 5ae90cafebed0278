"""PCME (Chun et al., CVPR 2021): loss, encoders, test-time similarities; and the shared figure helpers."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from fixtures.batches import tiny_batch

from xmr_core import viz


# ---------------------------------------------------------------------------------------------- viz
def test_chi2_radius_covers_the_requested_mass() -> None:
    # Monte-Carlo reference: the share of 2-D standard normal draws with norm <= r(level) is `level`.
    rng = np.random.default_rng(0)
    norms = np.linalg.norm(rng.standard_normal((200_000, 2)), axis=1)
    for level in (0.5, 0.9, 0.99):
        assert abs((norms <= viz.chi2_radius(level)).mean() - level) < 0.005


def test_confidence_ellipses_scale_with_sigma_and_reject_bad_input() -> None:
    fig, ax = plt.subplots()
    mu = np.array([[0.0, 0.0], [3.0, 1.0]])
    logvar = np.log(np.array([[1.0, 4.0], [0.25, 0.25]]))  # sigma = (1, 2) and (0.5, 0.5)
    patches = viz.confidence_ellipses(ax, mu, logvar, colors=["C0", "C1"], level=0.5)
    r = viz.chi2_radius(0.5)
    assert patches[0].width == pytest.approx(2 * r * 1.0) and patches[0].height == pytest.approx(2 * r * 2.0)
    assert patches[1].width == pytest.approx(2 * r * 0.5)
    with pytest.raises(ValueError, match="NaN"):
        viz.confidence_ellipses(ax, np.array([[np.nan, 0.0]]), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="shape"):
        viz.confidence_ellipses(ax, np.zeros((3,)), np.zeros((3,)))
    plt.close(fig)


def test_gallery_and_heatmap_check_shapes() -> None:
    images = np.zeros((2, 3, 8, 8, 3), dtype=np.uint8)
    fig = viz.retrieval_gallery(["a red circle", "two shapes"], images, np.array([[1, 0, 0], [1, 1, 0]], bool))
    assert len(fig.axes) == 2 * 4
    plt.close(fig)
    with pytest.raises(ValueError, match="queries"):
        viz.retrieval_gallery(["only one"], images, np.ones((2, 3), bool))
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="labels"):
        viz.heatmap(ax, np.zeros((2, 2)), ["a"], ["x", "y"])
    plt.close(fig)


# --------------------------------------------------------------------------------------------- PCME
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.methods.pcme import (
    PCME,
    TEST_TIME_SIMILARITIES,
    PCMEConfig,
    pcme_mu_only_config,
    uncertainty,
)

VOCAB, WORD_DIM, D = 20, 8, 16


def tiny_config(**overrides) -> PCMEConfig:
    small = {"embed_dim": D, "image": ImageEncoderConfig(widths=(4, 8), hidden=16, image_size=16),
             "text": TextEncoderConfig(hidden=8)}
    return PCMEConfig(**{**small, **overrides})


def tiny_model(cfg: PCMEConfig | None = None) -> PCME:
    vectors = np.random.default_rng(0).standard_normal((VOCAB, WORD_DIM)).astype(np.float32)
    return PCME(cfg or tiny_config(), vectors)


def test_encoders_give_gaussians_with_unit_means() -> None:
    model, batch = tiny_model(), tiny_batch()
    for mu, logvar in (model.encode_images(batch), model.encode_captions(batch)):
        assert mu.shape == logvar.shape == (6, D)
        torch.testing.assert_close(mu.norm(dim=-1), torch.ones(6))  # Fig. 3(b): L2 projection of the mean
        assert logvar.abs().sum() > 0 and torch.isfinite(logvar).all()
    no_attention = tiny_model(tiny_config(local_attention=False))
    mu, logvar = no_attention.encode_images(batch)
    assert mu.shape == logvar.shape == (6, D)
    mu_only = tiny_model(pcme_mu_only_config(**{k: getattr(tiny_config(), k) for k in ("embed_dim", "image", "text")}))
    emb = mu_only.encode_captions(batch)
    assert isinstance(emb, torch.Tensor) and emb.shape == (6, D)
    # the mu-only model has no variance module at all
    assert not any("var" in name for name, _ in mu_only.named_parameters())


def test_uncertainty_is_the_geometric_mean_of_sigma() -> None:
    logvar = torch.randn(5, 7)
    sigma = np.exp(0.5 * logvar.numpy().astype(np.float64))
    expected = np.prod(sigma, axis=1) ** (1 / 7)  # brute force: (prod_d sigma_d)^(1/D)
    np.testing.assert_allclose(uncertainty(logvar).numpy(), expected, rtol=1e-5)


def test_match_probability_is_a_probability_and_converges_to_a_large_sample_reference() -> None:
    model = tiny_model(tiny_config(n_samples_test=64))
    g = torch.Generator().manual_seed(1)
    mu_i, mu_c = torch.randn(3, D, generator=g) * 0.3, torch.randn(4, D, generator=g) * 0.3
    lv_i, lv_c = torch.randn(3, D, generator=g) - 3.0, torch.randn(4, D, generator=g) - 3.0
    p = model.score((mu_i, lv_i), (mu_c, lv_c), method="match_prob")
    assert p.shape == (3, 4) and bool(((p >= 0) & (p <= 1)).all())
    # Independent reference, numpy float64: 200k independent draws of (v, t) per pair, Eq. (2)-(3).
    rng = np.random.default_rng(0)
    a, b = model.scale.item(), model.shift.item()
    ref = np.empty((3, 4))
    for i in range(3):
        for c in range(4):
            v = mu_i[i].double().numpy() + np.exp(0.5 * lv_i[i].double().numpy()) * rng.standard_normal((200_000, D))
            t = mu_c[c].double().numpy() + np.exp(0.5 * lv_c[c].double().numpy()) * rng.standard_normal((200_000, D))
            ref[i, c] = np.mean(1 / (1 + np.exp(a * np.linalg.norm(v - t, axis=1) - b)))
    assert np.abs(p.numpy() - ref).max() < 0.02
    coarse = tiny_model(tiny_config(n_samples_test=1)).score((mu_i, lv_i), (mu_c, lv_c), method="match_prob")
    assert np.abs(p.numpy() - ref).mean() < np.abs(coarse.numpy() - ref).mean()  # more samples, closer


def test_loss_is_finite_and_sends_gradients_to_sigma_and_to_a_b() -> None:
    model, batch = tiny_model(), tiny_batch()
    img, cap = model.encode_images(batch), model.encode_captions(batch)
    loss, logs = model.loss(img, cap, batch)
    assert torch.isfinite(loss) and 0.0 <= logs["p_neg"] <= 1.0 and 0.0 <= logs["p_pos"] <= 1.0
    loss.backward()
    for head in (model.image_head, model.text_head):
        grads = [p.grad for name, p in head.named_parameters() if name.startswith("var")]
        assert grads and all(gr is not None for gr in grads) and sum(gr.abs().sum() for gr in grads) > 0
    assert model.scale.grad is not None and model.scale.grad != 0 and model.shift.grad != 0


def test_loss_gradient_reaches_logvar_through_the_samples_alone() -> None:
    # With no KL, sigma is trained only through the MC match probability (reparametrised samples).
    model, batch = tiny_model(tiny_config(kl_weight=0.0, uniformity_weight=0.0)), tiny_batch()
    mu, logvar = model.encode_images(batch)
    logvar = logvar.detach().requires_grad_(True)
    loss, _ = model.loss((mu, logvar), model.encode_captions(batch), batch)
    loss.backward()
    assert logvar.grad is not None and logvar.grad.abs().sum() > 0


def test_loss_is_symmetric_in_images_and_captions() -> None:
    cfg = pcme_mu_only_config(**{k: getattr(tiny_config(), k) for k in ("embed_dim", "image", "text")})
    model, batch = tiny_model(cfg), tiny_batch()
    img, cap = model.encode_images(batch), model.encode_captions(batch)
    i2t, _ = model.loss(img, cap, batch)
    t2i, _ = model.loss(cap, img, batch)
    torch.testing.assert_close(i2t, t2i)
    v, t = torch.randn(4, 3, D), torch.randn(5, 2, D)
    torch.testing.assert_close(model.match_logits(v, t), model.match_logits(t, v).permute(1, 0, 3, 2))


def test_loss_is_summed_as_in_pcme_code_against_a_brute_force_reference() -> None:
    # PCME's code: i2t + t2i NLL summed over all B^2 pairs, + vib_beta * KL summed over items + lambda * uniformity.
    # A per-pair mean would shrink every gradient by 2 B^2 (to Adam-epsilon size on the trunks).
    model = tiny_model(tiny_config(kl_weight=0.5, uniformity_weight=0.0))
    batch = tiny_batch()
    mu_i, lv_i = model.encode_images(batch)
    mu_c, lv_c = model.encode_captions(batch)
    torch.manual_seed(3)
    loss, logs = model.loss((mu_i, lv_i), (mu_c, lv_c), batch)
    torch.manual_seed(3)  # the same reparametrised draws, taken in the same order as the model does
    v = model.samples((mu_i, lv_i), model.config.n_samples).double()
    t = model.samples((mu_c, lv_c), model.config.n_samples).double()
    a, b = model.scale.item(), model.shift.item()
    nll = 0.0
    for i in range(6):
        for c in range(6):
            d = np.linalg.norm(v[i].detach().numpy()[:, None] - t[c].detach().numpy()[None], axis=-1)  # (J, J)
            p = np.mean(1.0 / (1.0 + np.exp(a * d - b)))  # Eq. (2)-(3)
            nll += -np.log(p) if i == c else -np.log(1.0 - p)  # Eq. (1)
    kl = sum(0.5 * float((m.detach().double() ** 2 + lv.detach().double().exp() - 1 - lv.detach().double()).sum())
             for m, lv in ((mu_i, lv_i), (mu_c, lv_c)))
    assert logs["nll"] == pytest.approx(2 * nll, rel=1e-4)
    assert loss.item() == pytest.approx(2 * nll + 0.5 * kl, rel=1e-4)


def test_duplicate_images_in_a_batch_are_positives() -> None:
    # Two pairs share image 0: with the pair swapped between them the loss must not change (both are matches).
    model = tiny_model(pcme_mu_only_config(**{k: getattr(tiny_config(), k) for k in ("embed_dim", "image", "text")}))
    batch = tiny_batch()
    batch["image_index"] = torch.tensor([0, 0, 1, 2, 3, 4])
    batch["images"][1] = batch["images"][0]
    img, cap = model.encode_images(batch), model.encode_captions(batch)
    loss, _ = model.loss(img, cap, batch)
    swapped = cap.clone()
    swapped[[0, 1]] = cap[[1, 0]]
    loss_swapped, _ = model.loss(img, swapped, {**batch, "tokens": batch["tokens"][[1, 0, 2, 3, 4, 5]],
                                                "lengths": batch["lengths"][[1, 0, 2, 3, 4, 5]]})
    torch.testing.assert_close(loss, loss_swapped)


def test_every_test_time_similarity_scores_and_sampled_ones_are_reproducible() -> None:
    model, batch = tiny_model(), tiny_batch()
    with torch.no_grad():
        img, cap = model.encode_images(batch), model.encode_captions(batch)
    for method in TEST_TIME_SIMILARITIES:
        s = model.score(img, cap, method=method)
        assert s.shape == (6, 6) and torch.isfinite(s).all(), method
        torch.testing.assert_close(s, model.score(img, cap, method=method))
    with pytest.raises(ValueError, match="unknown"):
        model.score(img, cap, method="cosine")
    with pytest.raises(ValueError, match="mu-only"):
        PCMEConfig(mu_only=True)


def test_a_few_steps_separate_positives_from_negatives() -> None:
    model, batch = tiny_model(), tiny_batch(b=8)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    eye = torch.eye(8, dtype=torch.bool)

    def gap() -> float:  # mean cosine of matching means minus that of non-matching ones
        with torch.no_grad():
            s = model.score(model.encode_images(batch), model.encode_captions(batch), method="mean_cosine")
        return (s[eye].mean() - s[~eye].mean()).item()

    start_gap, losses = gap(), []
    for _ in range(20):
        loss, _ = model.loss(model.encode_images(batch), model.encode_captions(batch), batch)
        losses.append(loss.item())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert losses[-1] < losses[0]
    assert gap() > start_gap + 0.1


def test_projected_gaussians_match_a_sampled_projection() -> None:
    rng = np.random.default_rng(0)
    mu, logvar = rng.standard_normal((3, 6)), rng.standard_normal((3, 6))
    centre, basis = viz.pca_basis(rng.standard_normal((50, 6)))
    np.testing.assert_allclose(basis @ basis.T, np.eye(2), atol=1e-10)
    pmu, plv = viz.project_gaussians(mu, logvar, centre, basis)
    # Monte-Carlo reference: project 200k samples of each Gaussian and take their mean and variance.
    for n in range(3):
        z = mu[n] + np.exp(0.5 * logvar[n]) * rng.standard_normal((200_000, 6))
        proj = (z - centre) @ basis.T
        np.testing.assert_allclose(proj.mean(0), pmu[n], atol=0.02)
        np.testing.assert_allclose(proj.var(0), np.exp(plv[n]), rtol=0.02)
