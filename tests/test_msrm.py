"""MSRM (Wang et al., CVPR 2023): each equation against a hand-worked or brute-force float64 reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from fixtures.batches import tiny_batch
from fixtures.corpora import word_split
from fixtures.msrm import D, tiny_config

from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.methods.msrm import (
    HGNN,
    MSRM,
    HypergraphConv,
    MSRMConfig,
    hypergraph_operator,
    log_batch_probability,
    log_cosine_probability,
    mahalanobis,
    msrm_config,
    soft_contrastive,
    soft_incidence,
)

VOCAB, WORD_DIM = 20, 8


def tiny_model(cfg: MSRMConfig | None = None) -> MSRM:
    vectors = np.random.default_rng(0).standard_normal((VOCAB, WORD_DIM)).astype(np.float32)
    return MSRM(cfg or tiny_config(), vectors)


def random_gaussian(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, D, generator=g), torch.randn(n, D, generator=g) * 0.5


# ---------------------------------------------------------------------------------------- config
def test_config_has_the_paper_defaults_and_builds_on_chapter_encoders() -> None:
    cfg = MSRMConfig()
    assert (cfg.gamma, cfg.init_lambda, cfg.init_tau, cfg.hgnn_layers, cfg.init_alpha) == (0.8, 5.0, 10.0, 2, 2.0)
    enc = {"embed_dim": 32, "image": ImageEncoderConfig(kind="cnn"), "text": TextEncoderConfig(hidden=8)}
    built = msrm_config(enc, gamma=0.5)
    assert built.embed_dim == 32 and built.text.hidden == 8 and built.gamma == 0.5
    assert built.head_config().embed_dim == 32 and not built.head_config().mu_only
    with pytest.raises(ValueError, match="alpha"):
        MSRMConfig(init_alpha=-1.0)
    with pytest.raises(ValueError, match="direction"):
        MSRMConfig(test_direction="sideways")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------- Eq. (4)
def test_mahalanobis_matches_a_dense_covariance_reference() -> None:
    mu, logvar = random_gaussian(4, 0)
    cands = torch.randn(5, D, generator=torch.Generator().manual_seed(1))
    d2 = mahalanobis((mu, logvar), cands)
    # Reference, float64: the covariance as an explicit dense diagonal matrix, inverted by torch.linalg.
    ref = torch.empty(4, 5, dtype=torch.float64)
    for q in range(4):
        cov = torch.diag(torch.exp(logvar[q].double()))  # Sigma_q = diag(sigma^2)
        inv = torch.linalg.inv(cov)
        for c in range(5):
            diff = cands[c].double() - mu[q].double()
            ref[q, c] = diff @ inv @ diff
    torch.testing.assert_close(d2.double(), ref, rtol=1e-4, atol=1e-4)
    # chunked over candidates: the same numbers
    torch.testing.assert_close(mahalanobis((mu, logvar), cands, chunk_size=2), d2)


def test_mahalanobis_under_autocast_is_computed_in_fp32() -> None:
    """Under autocast (bf16 on the CPU here; fp16 on CUDA in training) d^2 is a near-cancelling sum of terms far larger
    than itself, and w = exp(-logvar) passes fp16's 65504 below a log-variance of -11: in half precision the result is
    noise or inf. The reference is float64, by hand: sum_d (u_d - mu_d)^2 / sigma_d^2 = 4 x 0.01 x e^12 = 6510."""
    mu = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
    logvar = torch.full_like(mu, -12.0)
    cands = mu + torch.tensor([[0.1, -0.1, 0.1, -0.1]])
    ref = ((cands.double() - mu.double()).square() * torch.exp(-logvar.double())).sum(-1, keepdim=True)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        d2 = mahalanobis((mu, logvar), cands)
    assert d2.dtype == torch.float32
    torch.testing.assert_close(d2.double(), ref, rtol=1e-3, atol=0.0)


def test_mahalanobis_with_unit_variance_is_the_squared_euclidean_distance() -> None:
    mu = torch.tensor([[0.0, 0.0], [1.0, 2.0]])
    cands = torch.tensor([[3.0, 4.0]])
    d2 = mahalanobis((mu, torch.zeros_like(mu)), cands)
    torch.testing.assert_close(d2, torch.tensor([[25.0], [8.0]]))  # 3^2 + 4^2; 2^2 + 2^2
    # variance 4 in the first dimension: (3 - 0)^2 / 4 + 4^2 / 1 = 2.25 + 16
    d2 = mahalanobis((mu[:1], torch.log(torch.tensor([[4.0, 1.0]]))), cands)
    torch.testing.assert_close(d2, torch.tensor([[18.25]]))


# ---------------------------------------------------------------------------------------- Eq. (5)-(7)
def test_batch_probabilities_sum_to_one_over_candidates_and_follow_the_distance() -> None:
    d2 = torch.rand(5, 7) * 4
    log_p = log_batch_probability(d2, 10.0)
    torch.testing.assert_close(log_p.exp().sum(1), torch.ones(5))
    # brute force, float64: exp(-tau d) / sum exp(-tau d)
    e = np.exp(-10.0 * d2.double().numpy())
    np.testing.assert_allclose(log_p.exp().double().numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_soft_contrastive_loss_against_a_hand_computed_example() -> None:
    # P = [[0.5, 0.25, 0.25], [0.2, 0.6, 0.2]]; matches: (0, 0), (1, 1) and (0, 1) (a duplicate).
    p = torch.tensor([[0.5, 0.25, 0.25], [0.2, 0.6, 0.2]])
    matched = torch.tensor([[True, True, False], [False, True, False]])
    # -log .5 - log .25 - log .75 - log .8 - log .6 - log .8, over 6 pairs
    expected = -(np.log(0.5) + np.log(0.25) + np.log(0.75) + np.log(0.8) + np.log(0.6) + np.log(0.8))
    assert soft_contrastive(p.log(), matched).item() == pytest.approx(expected / 6, rel=1e-6)
    assert soft_contrastive(p.log(), matched, "sum").item() == pytest.approx(expected, rel=1e-6)
    # stays finite where a non-match has P ~ 1
    assert torch.isfinite(soft_contrastive(torch.tensor([[0.0, -50.0]]), torch.tensor([[False, True]])))


# ---------------------------------------------------------------------------------------- Eq. (8)
def test_incidence_is_bipolar_at_alpha_zero_and_soft_in_zero_one_otherwise() -> None:
    d2 = torch.tensor([[0.0, 1.0, 4.0], [2.0, 0.5, 3.0]])
    matched = torch.tensor([[True, False, False], [False, True, True]])
    s0 = soft_incidence(d2, matched, 0.0)
    torch.testing.assert_close(s0, matched.float())  # Eq. (9): 1 for v in e, 0 otherwise
    s2 = soft_incidence(d2, matched, 2.0)
    expected = torch.tensor([[1.0, np.exp(-0.5), np.exp(-2.0)], [np.exp(-1.0), 1.0, 1.0]], dtype=torch.float32)
    torch.testing.assert_close(s2, expected)  # exp(-d^2 / alpha) off the matches
    assert bool(((s2 >= 0) & (s2 <= 1)).all())
    # the sign-flipped form exp(-alpha d^2): alpha = 0 connects everything
    torch.testing.assert_close(soft_incidence(d2, matched, 0.0, "rate"), torch.ones(2, 3))
    torch.testing.assert_close(soft_incidence(d2, matched, 1.0, "rate")[0, 2], torch.tensor(np.exp(-4.0), dtype=torch.float32))


# ---------------------------------------------------------------------------------------- Eq. (10)
def test_one_hgnn_step_against_a_hand_computed_hypergraph() -> None:
    # 3 vertices, 2 hyperedges: e1 = {v1, v2}, e2 = {v2, v3} with weight 0.5 on v3.
    H = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.5]])
    # d(v) = row sums = (1, 2, 0.5); delta(e) = column sums = (2, 1.5).
    # G = Dv^-1/2 H De^-1 H^T Dv^-1/2; (H De^-1 H^T)_{ij} = sum_e h_ie h_je / delta_e:
    #   (1,1) = 1/2           (1,2) = 1/2            (1,3) = 0
    #   (2,2) = 1/2 + 1/1.5   (2,3) = 0.5/1.5        (3,3) = 0.25/1.5
    # then divide entry (i, j) by sqrt(d_i d_j):
    #   G11 = 0.5 / 1 = 0.5, G12 = 0.5 / sqrt(2), G13 = 0, G22 = (0.5 + 2/3) / 2 = 7/12,
    #   G23 = (1/3) / sqrt(2 * 0.5) = 1/3, G33 = (1/6) / 0.5 = 1/3
    r2 = np.sqrt(2.0)
    G = torch.tensor([[0.5, 0.5 / r2, 0.0], [0.5 / r2, 7 / 12, 1 / 3], [0.0, 1 / 3, 1 / 3]], dtype=torch.float32)
    torch.testing.assert_close(hypergraph_operator(H), G)
    # One layer with Theta = I (2-d features): X' = sigmoid(G X).
    X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    # G X: row 1 = (0.5, 0.5/sqrt2); row 2 = (0.5/sqrt2 + 1/3, 7/12 + 1/3); row 3 = (1/3, 2/3)
    GX = torch.tensor([[0.5, 0.5 / r2], [0.5 / r2 + 1 / 3, 7 / 12 + 1 / 3], [1 / 3, 2 / 3]], dtype=torch.float32)
    layer = HypergraphConv(2)
    with torch.no_grad():
        layer.theta.weight.copy_(torch.eye(2))
    torch.testing.assert_close(layer(X, hypergraph_operator(H)), torch.sigmoid(GX))
    # and a 2-layer HGNN is the layer applied twice (sigmoid after each, as Eq. 10 prints)
    net = HGNN(2, layers=2)
    with torch.no_grad():
        for conv in net.layers:
            conv.theta.weight.copy_(torch.eye(2))
    torch.testing.assert_close(net(X, H), torch.sigmoid(G @ torch.sigmoid(GX)))
    last_linear = HGNN(2, layers=2, final_activation=False)
    with torch.no_grad():
        for conv in last_linear.layers:
            conv.theta.weight.copy_(torch.eye(2))
    torch.testing.assert_close(last_linear(X, H), G @ torch.sigmoid(GX))


# ---------------------------------------------------------------------------------------- Eq. (11)
def test_cosine_probability_ranks_the_most_similar_candidate_first() -> None:
    mu_q = torch.tensor([[1.0, 0.0]])
    u = torch.tensor([[2.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])  # cos = 1, 0, -1
    p = log_cosine_probability(mu_q, u, 5.0).exp()
    e = np.exp(5.0 * np.array([1.0, 0.0, -1.0]))
    np.testing.assert_allclose(p.numpy()[0], e / e.sum(), rtol=1e-5)


# ---------------------------------------------------------------------------------------- the model
def test_encoders_give_gaussians_and_the_mu_only_variant_gives_means() -> None:
    model, batch = tiny_model(), tiny_batch()
    mu, logvar = model.encode_images(batch)
    assert mu.shape == logvar.shape == (6, D)
    torch.testing.assert_close(logvar.mean(), torch.tensor(0.0), atol=0.5, rtol=0)  # init_logvar = 0
    emb = tiny_model(tiny_config(mu_only=True)).encode_captions(batch)
    assert isinstance(emb, torch.Tensor) and emb.shape == (6, D)


@pytest.mark.parametrize("overrides", [{}, {"init_alpha": 0.0}, {"final_activation": False, "share_hgnn": True},
                                       {"incidence": "rate"}])
def test_loss_is_finite_and_every_trainable_parameter_gets_a_gradient(overrides) -> None:
    model, batch = tiny_model(tiny_config(**overrides)), tiny_batch()
    loss, logs = model.loss(model.encode_images(batch), model.encode_captions(batch), batch)
    assert torch.isfinite(loss) and {"L_d", "L_h", "tau", "lambda", "alpha"} <= set(logs)
    loss.backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or not torch.isfinite(p.grad).all())]
    assert not missing, missing
    assert model.tau.grad != 0 and model.lam.grad != 0
    if overrides.get("init_alpha", 2.0) > 0:
        assert model.alpha.grad != 0
    else:
        assert "alpha" not in dict(model.named_parameters())


def test_table4_ablations_build_and_train() -> None:
    batch = tiny_batch()
    no_h = tiny_model(tiny_config(hypergraph=False))  # "w/o L_h": gamma L_d alone, no HGNN, lambda or alpha
    assert not any(n.startswith(("hgnn", "lam", "alpha")) for n, _ in no_h.named_parameters())
    loss, logs = no_h.loss(no_h.encode_images(batch), no_h.encode_captions(batch), batch)
    assert "L_h" not in logs and loss.item() == pytest.approx(0.8 * logs["L_d"], rel=1e-6)
    mu_only = tiny_model(tiny_config(mu_only=True))  # "mu only": unit covariance, no variance module
    assert not any("var" in n for n, _ in mu_only.named_parameters())
    img, cap = mu_only.encode_images(batch), mu_only.encode_captions(batch)
    loss, _ = mu_only.loss(img, cap, batch)
    loss.backward()
    assert all(p.grad is not None for p in mu_only.parameters() if p.requires_grad)
    # its score is minus the squared Euclidean distance of the means, in both directions
    torch.testing.assert_close(mu_only.score(img, cap, "t2i"), -torch.cdist(img, cap).square(), rtol=1e-4, atol=1e-4)


def test_without_l_d_the_loss_is_l_h_even_when_l_d_is_not_finite(monkeypatch) -> None:
    # "w/o L_d" (gamma = 0): L_d is left out, not multiplied by 0 (0 * NaN = NaN would end the run)
    model, batch = tiny_model(tiny_config(gamma=0.0)), tiny_batch()
    original = model.direction_losses

    def nan_l_d(*args, **kwargs):
        loss_d, loss_h, p = original(*args, **kwargs)
        return loss_d * float("nan"), loss_h, p

    monkeypatch.setattr(model, "direction_losses", nan_l_d)
    loss, logs = model.loss(model.encode_images(batch), model.encode_captions(batch), batch)
    assert math.isnan(logs["L_d"]) and torch.isfinite(loss) and loss.item() == pytest.approx(logs["L_h"], rel=1e-6)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    with pytest.raises(ValueError, match="gamma = 0 without the hypergraph leaves no loss"):
        tiny_config(gamma=0.0, hypergraph=False)


def test_loss_is_eq12_of_the_four_direction_terms() -> None:
    # Brute-force float64 reference of Eq. (4)-(8), (10)-(12) on the model's own embeddings and HGNN.
    model, batch = tiny_model(), tiny_batch(b=5)
    img, cap = model.encode_images(batch), model.encode_captions(batch)
    loss, _ = model.loss(img, cap, batch)
    tau, lam, alpha = 10.0, 5.0, 2.0

    def nll(p: np.ndarray, m: np.ndarray) -> float:
        return float(np.where(m, -np.log(p), -np.log(1 - p)).mean())

    def softmax(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    def direction(q: tuple, c_mu: torch.Tensor, hgnn: HGNN) -> tuple[float, float]:
        mq, lq = (t.detach().double().numpy() for t in q)
        mc = c_mu.detach().double().numpy()
        m = np.eye(len(mq), dtype=bool)
        d2 = np.array([[np.sum((mc[c] - mq[i]) ** 2 / np.exp(lq[i])) for c in range(len(mc))] for i in range(len(mq))])
        l_d = nll(softmax(-tau * d2), m)
        s = np.where(m, 1.0, np.exp(-d2 / alpha))  # Eq. (8), queries x candidates
        h = s.T  # vertices = candidates
        dv, de = h.sum(1), h.sum(0)
        g = np.diag(dv ** -0.5) @ h @ np.diag(1 / de) @ h.T @ np.diag(dv ** -0.5)
        u = mc
        for conv in hgnn.layers:
            u = 1 / (1 + np.exp(-(g @ u @ conv.theta.weight.detach().double().numpy().T)))
        cos = (mq / np.linalg.norm(mq, axis=1, keepdims=True)) @ (u / np.linalg.norm(u, axis=1, keepdims=True)).T
        return l_d, nll(softmax(lam * cos), m)

    d1, h1 = direction(img, cap[0], model.hgnn_cap)
    d2_, h2 = direction(cap, img[0], model.hgnn_img)
    assert loss.item() == pytest.approx(0.8 * (d1 + d2_) + h1 + h2, rel=1e-4)


def test_in_batch_duplicates_are_positives() -> None:
    model, batch = tiny_model(), tiny_batch(b=4)
    batch["image_index"] = torch.tensor([0, 0, 1, 2])  # captions 0 and 1 describe the same image
    img, cap = model.encode_images(batch), model.encode_captions(batch)
    loss_dup, _ = model.loss(img, cap, batch)
    batch["image_index"] = torch.arange(4)
    loss_plain, _ = model.loss(img, cap, batch)
    assert loss_dup.item() != pytest.approx(loss_plain.item())


def test_test_time_scores_by_direction_and_chunked_equal_unchunked() -> None:
    model = tiny_model()
    img, cap = random_gaussian(7, 3), random_gaussian(11, 4)
    i2t, t2i = model.score(img, cap, "i2t"), model.score(img, cap, "t2i")
    assert i2t.shape == t2i.shape == (7, 11)
    # brute force: i2t uses the image's variance, t2i the caption's
    ref_i2t = -(((cap[0][None] - img[0][:, None]) ** 2) / img[1].exp()[:, None]).sum(-1)
    ref_t2i = -(((img[0][:, None] - cap[0][None]) ** 2) / cap[1].exp()[None]).sum(-1)
    torch.testing.assert_close(i2t, ref_i2t, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(t2i, ref_t2i, rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(model.score(img, cap), 0.5 * (i2t + t2i))  # default "both"
    torch.testing.assert_close(model.score_direction(img, cap, "t2i"), t2i)
    for direction in ("i2t", "t2i", "both"):
        torch.testing.assert_close(model.score(img, cap, direction, chunk_size=3), model.score(img, cap, direction))
    with pytest.raises(ValueError, match="direction"):
        model.score(img, cap, "sideways")  # type: ignore[arg-type]


def test_a_1000_by_5000_score_matrix_in_chunks() -> None:
    g = torch.Generator().manual_seed(5)
    img = (torch.randn(1000, 32, generator=g), torch.randn(1000, 32, generator=g))
    cap = (torch.randn(5000, 32, generator=g), torch.randn(5000, 32, generator=g))
    model = tiny_model()
    full = model.score(img, cap, "t2i", chunk_size=5000)
    chunked = model.score(img, cap, "t2i", chunk_size=999)
    assert full.shape == (1000, 5000)
    torch.testing.assert_close(chunked, full)


# ---------------------------------------------------------------------------------------- fit


def test_one_fit_epoch_on_a_tiny_split(tmp_path) -> None:
    from xmr_core.evaluate import embed_split, evaluate_model, evaluate_scores, score_matrix
    from xmr_core.runs.train import TrainConfig, fit

    train, val = word_split("train", 16, 0), word_split("val", 6, 1)
    vocab = Vocabulary.build(train.captions)
    vectors = np.random.default_rng(2).normal(size=(len(vocab), 6)).astype(np.float32)
    model = MSRM(tiny_config(text=TextEncoderConfig(hidden=4)), vectors)
    cfg = TrainConfig(epochs=1, batch_size=8, progress=False, device="cpu")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = fit(model, train, val, cfg, tmp_path / "run", vocab=vocab)
    assert len(result.history) == 1 and np.isfinite(result.history[0]["val/rsum"])
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    # evaluate ranks each direction by that direction's scores (the query's own covariance)
    out = evaluate_model(model, val, vocab, views=["instance"])
    img, cap = embed_split(model, val, vocab)
    i2t = evaluate_scores(val, score_matrix(model, img, cap, direction="i2t"), views=["instance"])
    t2i = evaluate_scores(val, score_matrix(model, img, cap, direction="t2i"), views=["instance"])
    assert {k: v for k, v in out.items() if "/i2t/" in k} == {k: v for k, v in i2t.items() if "/i2t/" in k}
    assert {k: v for k, v in out.items() if "/t2i" in k} == {k: v for k, v in t2i.items() if "/t2i" in k}
