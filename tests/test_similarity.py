"""Pairwise scores: each against a brute-force loop, a closed form from another library, or a large-sample
Monte-Carlo estimate; chunked equals unchunked; bad input is refused."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.distributions import Independent, Normal, kl_divergence

from xmr_core import similarity as S

BIG = 10_000  # a chunk larger than any test matrix: the unchunked result


def gaussians(n: int, d: int, seed: int, dtype: torch.dtype = torch.float64) -> S.Gaussian:
    gen = torch.Generator().manual_seed(seed)
    mu = torch.randn(n, d, generator=gen, dtype=dtype)
    logvar = torch.rand(n, d, generator=gen, dtype=dtype) * 2.0 - 2.5  # variances in [e^-2.5, e^-0.5]
    return mu, logvar


def normal(g: S.Gaussian, i: int) -> Independent:
    return Independent(Normal(g[0][i], torch.exp(0.5 * g[1][i])), 1)


# ------------------------------------------------------------------------------------------ points


def test_dot_and_cosine_match_loops() -> None:
    a, b = torch.randn(5, 6, dtype=torch.float64), torch.randn(7, 6, dtype=torch.float64)
    ref_dot = torch.tensor([[float((a[i] * b[j]).sum()) for j in range(7)] for i in range(5)], dtype=torch.float64)
    ref_cos = torch.stack([F.cosine_similarity(a[i : i + 1], b, dim=1) for i in range(5)])
    torch.testing.assert_close(S.dot(a, b, chunk_size=2), ref_dot)
    torch.testing.assert_close(S.cosine(a, b, chunk_size=3), ref_cos)


def test_max_pair_cosine_is_best_of_k_by_k() -> None:
    a, b = torch.randn(4, 3, 5, dtype=torch.float64), torch.randn(6, 2, 5, dtype=torch.float64)
    ref = torch.empty(4, 6, dtype=torch.float64)
    for i in range(4):
        for j in range(6):
            ref[i, j] = max(float(F.cosine_similarity(a[i, k], b[j, l], dim=0)) for k in range(3) for l in range(2))
    torch.testing.assert_close(S.max_pair_cosine(a, b, chunk_size=2), ref)
    torch.testing.assert_close(S.max_pair_cosine(a, b, chunk_size=BIG), ref)


def test_squared_euclidean_matches_cdist() -> None:
    x, y = torch.randn(9, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    torch.testing.assert_close(S.squared_euclidean(x, y), torch.cdist(x, y) ** 2)
    assert (S.squared_euclidean(x, x).diagonal() >= 0).all()


# ------------------------------------------------------------------------------------------ samples


def test_sample_gaussian_moments_and_determinism() -> None:
    mu, logvar = torch.tensor([[1.0, -2.0]], dtype=torch.float64), torch.tensor([[0.0, math.log(0.25)]], dtype=torch.float64)
    z = S.sample_gaussian(mu, logvar, 40_000, torch.Generator().manual_seed(1))[0]
    assert z.shape == (40_000, 2)
    # Standard errors: mean sigma/sqrt(n) <= 0.005; variance ~ sigma^2 sqrt(2/n) <= 0.0071. Allow 5 SE.
    torch.testing.assert_close(z.mean(0), mu[0], atol=0.025, rtol=0)
    torch.testing.assert_close(z.var(0), logvar[0].exp(), atol=0.036, rtol=0)
    again = S.sample_gaussian(mu, logvar, 40_000, torch.Generator().manual_seed(1))[0]
    assert torch.equal(z, again)
    # The differentiable path (inputs that need gradients) draws the same samples as the in-place one.
    with_grad = S.sample_gaussian(mu.clone().requires_grad_(True), logvar, 40_000, torch.Generator().manual_seed(1))[0]
    torch.testing.assert_close(with_grad.detach(), z)


def test_expected_squared_distance_closed_form() -> None:
    """E||z1 - z2||^2 = ||mu1 - mu2||^2 + tr S1 + tr S2 (what `csd` returns, negated)."""
    q, g = gaussians(1, 6, seed=2), gaussians(1, 6, seed=3)
    n = 50_000
    gen = torch.Generator().manual_seed(4)
    z1, z2 = S.sample_gaussian(*q, n, gen)[0], S.sample_gaussian(*g, n, gen)[0]
    sq = ((z1 - z2) ** 2).sum(1)
    by_hand = float(((q[0] - g[0]) ** 2).sum() + q[1].exp().sum() + g[1].exp().sum())
    se = float(sq.std()) / math.sqrt(n)
    assert abs(float(sq.mean()) - by_hand) < 5 * se
    assert float(-S.csd(q, g)[0, 0]) == pytest.approx(by_hand, rel=1e-12)


def test_sample_distances_match_cdist_and_carry_gradient() -> None:
    mu = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    logvar = torch.zeros(3, 5, dtype=torch.float64, requires_grad=True)
    z = S.sample_gaussian(mu, logvar, 4)
    d = S.sample_distances(z, z[:2] + 1.0)
    assert d.shape == (3, 2, 4, 4)
    for i in range(3):
        for j in range(2):
            torch.testing.assert_close(d[i, j], torch.cdist(z[i], z[j] + 1.0))
    d.sum().backward()
    assert logvar.grad is not None and logvar.grad.abs().sum() > 0


# ------------------------------------------------------------------------------------------ Gaussians


def test_elk_matches_monte_carlo_expected_likelihood() -> None:
    """ELK = log E_{x~p}[q(x)]: compare with the mean of q's density over many samples of p."""
    q, g = gaussians(2, 3, seed=5), gaussians(2, 3, seed=6)
    g = (q[0] + 0.3 * g[0], g[1])  # nearby means, so the density is not vanishingly small
    ours = S.elk(q, g)
    n = 200_000
    for i in range(2):
        x = normal(q, i).sample((n,))
        for j in range(2):
            dens = normal(g, j).log_prob(x).exp()
            est, se = float(dens.mean()), float(dens.std()) / math.sqrt(n)
            assert abs(math.exp(float(ours[i, j])) - est) < 5 * se + 1e-12


def test_js_is_symmetrised_kl_of_torch_distributions() -> None:
    q, g = gaussians(3, 4, seed=7), gaussians(5, 4, seed=8)
    ref = torch.tensor(
        [[-0.5 * float(kl_divergence(normal(q, i), normal(g, j)) + kl_divergence(normal(g, j), normal(q, i))) for j in range(5)] for i in range(3)],
        dtype=torch.float64,
    )
    torch.testing.assert_close(S.js(q, g, chunk_size=2), ref)


def test_wasserstein_matches_general_covariance_formula_after_rotation() -> None:
    """W2^2 = ||mu1-mu2||^2 + tr(S1 + S2 - 2 (S2^1/2 S1 S2^1/2)^1/2) for full covariances; rotating both
    Gaussians by the same orthogonal matrix leaves W2 unchanged, so the diagonal closed form must agree."""

    def sqrtm(m: torch.Tensor) -> torch.Tensor:
        w, v = torch.linalg.eigh(m)
        return v @ torch.diag(w.clamp_min(0).sqrt()) @ v.T

    q, g = gaussians(3, 4, seed=9), gaussians(2, 4, seed=10)
    rot, _ = torch.linalg.qr(torch.randn(4, 4, dtype=torch.float64))
    ours = S.wasserstein(q, g, chunk_size=1)
    for i in range(3):
        for j in range(2):
            s1 = rot @ torch.diag(q[1][i].exp()) @ rot.T
            s2 = rot @ torch.diag(g[1][j].exp()) @ rot.T
            r2 = sqrtm(s2)
            w2 = ((rot @ (q[0][i] - g[0][j])) ** 2).sum() + torch.trace(s1 + s2 - 2 * sqrtm(r2 @ s1 @ r2))
            assert float(ours[i, j]) == pytest.approx(-float(w2), rel=1e-9, abs=1e-9)


def test_mean_only_l2_is_monotone_in_cosine_for_unit_means() -> None:
    mu_q, mu_g = F.normalize(torch.randn(4, 6, dtype=torch.float64), dim=1), F.normalize(torch.randn(5, 6, dtype=torch.float64), dim=1)
    q, g = (mu_q, torch.zeros_like(mu_q)), (mu_g, torch.zeros_like(mu_g))
    cos = S.mean_only(q, g, "cosine")
    # ||a - b||^2 = 2 - 2 cos(a, b) for unit vectors.
    torch.testing.assert_close(S.mean_only(q, g, "l2", chunk_size=2), -(2 - 2 * cos).clamp_min(0).sqrt())


def brute_sampled(zq: torch.Tensor, zg: torch.Tensor, fn) -> torch.Tensor:
    return torch.tensor([[float(fn(torch.cdist(zq[i], zg[j])).mean()) for j in range(len(zg))] for i in range(len(zq))], dtype=zq.dtype)


def test_sampled_scores_match_brute_force_loops() -> None:
    q, g = gaussians(4, 5, seed=11), gaussians(6, 5, seed=12)
    a, b = 3.0, 2.0
    gen = torch.Generator().manual_seed(0)
    zq, zg = S.sample_gaussian(*q, 3, gen), S.sample_gaussian(*g, 3, gen)
    ref_p = brute_sampled(zq, zg, lambda d: torch.sigmoid(-a * d + b))
    ref_l2 = brute_sampled(zq, zg, lambda d: -d)
    torch.testing.assert_close(S.match_probability_from_samples(zq, zg, a, b, chunk_size=2), ref_p)
    torch.testing.assert_close(S.average_l2_from_samples(zq, zg, chunk_size=5), ref_l2)
    # The Gaussian-level entry points draw the query side's J noise vectors, then the gallery side's, from
    # `generator`, shared by every item of a side (common random numbers): z = mu + sigma * eps_j.
    gen = torch.Generator().manual_seed(0)
    eps_q, eps_g = torch.randn((1, 3, 5), generator=gen), torch.randn((1, 3, 5), generator=gen)
    zq = q[0][:, None] + torch.exp(0.5 * q[1])[:, None] * eps_q
    zg = g[0][:, None] + torch.exp(0.5 * g[1])[:, None] * eps_g
    p = S.match_probability(q, g, a, b, n_samples=3, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(p, brute_sampled(zq, zg, lambda d: torch.sigmoid(-a * d + b)))
    # so scoring a slice of the queries gives the same rows as scoring all of them
    rows = S.match_probability((q[0][1:3], q[1][1:3]), g, a, b, n_samples=3, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(rows, p[1:3])


def test_match_probability_in_unit_interval_and_converges() -> None:
    q, g = gaussians(2, 4, seed=13), gaussians(3, 4, seed=14)
    g = (q[0][[0, 1, 0]] + 0.5 * g[0], g[1])
    a, b = 2.0, 3.0
    # Reference: 400,000 independent pairs (z_x, z_y) per entry, plain mean of s(-a||z_x - z_y|| + b).
    n = 400_000
    ref = torch.empty(2, 3, dtype=torch.float64)
    se = torch.empty(2, 3, dtype=torch.float64)
    for i in range(2):
        for j in range(3):
            p = torch.sigmoid(-a * (normal(q, i).sample((n,)) - normal(g, j).sample((n,))).norm(dim=1) + b)
            ref[i, j], se[i, j] = p.mean(), p.std() / math.sqrt(n)
    errors = []
    for j_samples in (2, 256):
        runs = torch.stack([
            S.match_probability(q, g, a, b, n_samples=j_samples, generator=torch.Generator().manual_seed(s)) for s in range(8)
        ])
        assert ((runs >= 0) & (runs <= 1)).all()
        errors.append(float((runs - ref).abs().mean()))
    assert errors[1] < errors[0]
    # The J x J estimate's error shrinks like 1/sqrt(J) (about 0.12 at J = 2 here), so about 0.01 at J = 256;
    # the reference's own standard error is negligible.
    assert errors[1] < 0.03 and float(se.max()) < 1e-3


@pytest.mark.parametrize("method", S.GAUSSIAN_METHODS)
def test_chunked_equals_unchunked(method: str) -> None:
    q, g = gaussians(7, 5, seed=15, dtype=torch.float32), gaussians(9, 5, seed=16, dtype=torch.float32)
    kw = {"a": 2.0, "b": 1.0, "n_samples": 3}
    full = S.gaussian_scores(q, g, method, chunk_size=BIG, generator=torch.Generator().manual_seed(3), **kw)
    for chunk in (1, 4):
        part = S.gaussian_scores(q, g, method, chunk_size=chunk, generator=torch.Generator().manual_seed(3), **kw)
        torch.testing.assert_close(part, full, rtol=1e-5, atol=1e-5)
    assert full.shape == (7, 9) and full.dtype == torch.float32


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("method", S.GAUSSIAN_METHODS)
def test_cuda_matches_cpu(method: str) -> None:
    q, g = gaussians(7, 5, seed=15, dtype=torch.float32), gaussians(9, 5, seed=16, dtype=torch.float32)
    kw = {"a": 2.0, "b": 1.0, "n_samples": 3, "chunk_size": 4}
    cpu = S.gaussian_scores(q, g, method, generator=torch.Generator().manual_seed(3), **kw)
    cuda = S.gaussian_scores(
        tuple(t.cuda() for t in q), tuple(t.cuda() for t in g), method, generator=torch.Generator().manual_seed(3), **kw
    )
    assert cuda.device.type == "cuda"
    torch.testing.assert_close(cuda.cpu(), cpu, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------------ bad input


def test_bad_input_is_refused() -> None:
    q, g = gaussians(3, 4, seed=0), gaussians(2, 4, seed=1)
    nan_mu = q[0].clone()
    nan_mu[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"query\.mu: non-finite .*\[1, 2\]"):
        S.gaussian_scores((nan_mu, q[1]), g, "elk")
    with pytest.raises(ValueError, match="embedding sizes differ"):
        S.cosine(torch.randn(2, 3), torch.randn(2, 4))
    with pytest.raises(ValueError, match="query.mu and query.logvar: embedding sizes differ"):
        S.gaussian_scores((q[0], q[1][:, :2]), g, "wasserstein")
    with pytest.raises(ValueError, match="gallery: mu .* and logvar .* differ in shape"):
        S.gaussian_scores(q, (g[0], g[1][:1]), "wasserstein")
    with pytest.raises(ValueError, match="unknown method"):
        S.gaussian_scores(q, g, "kl")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs the scale a"):
        S.gaussian_scores(q, g, "match_prob")
    with pytest.raises(ValueError, match="expected 3 dimensions"):
        S.max_pair_cosine(torch.randn(2, 3), torch.randn(2, 1, 3))


def test_benchmark_runs_and_ends_with_key_values(capsys: pytest.CaptureFixture[str]) -> None:
    from xmr_core.bench.similarity import main

    main(["--queries", "20", "--gallery", "30", "--dim", "8", "--samples", "2", "--chunk-size", "4", "--fraction", "0.5", "--repeats", "1", "--device", "cpu"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    values = dict(item.split("=") for item in last.split())
    assert {"wall_s", "peak_gb", "fraction_of_matmul"} <= values.keys()
    assert float(values["fraction"]) == 0.5 and float(values["flops"]) == 2.0 * (10 * 2) * (30 * 2) * 8


def test_point_scores_are_differentiable_for_training() -> None:
    a = torch.randn(3, 2, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, y: S.max_pair_cosine(x, y, chunk_size=2), (a, b))
    assert torch.autograd.gradcheck(lambda x, y: S.cosine(x, y, chunk_size=2), (a[:, 0], b[:, 0]))
