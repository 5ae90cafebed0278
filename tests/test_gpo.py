"""GPO / VSE∞ (`xmr_core.methods.gpo`) against brute-force references: the per-dimension sort, the positional
encoding, the weights generated per sample length, and the pooled feature as Σ_k θ_k max_k(φ)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.methods.gpo import GPO, GPOConfig, GPOModel, positional_encoding, sorted_features


def test_positional_encoding_matches_the_transformer_formula_from_index_zero() -> None:
    pe = positional_encoding(3, 4)
    for k in range(3):
        for j in range(2):
            w = 10000.0 ** (-2 * j / 4)
            assert pe[k, 2 * j].item() == pytest.approx(math.sin(k * w), abs=1e-6)
            assert pe[k, 2 * j + 1].item() == pytest.approx(math.cos(k * w), abs=1e-6)


def test_each_dimension_is_sorted_over_the_real_features_and_padding_goes_last_as_zero() -> None:
    x = torch.tensor([[[1.0, -5.0], [3.0, 2.0], [9.0, 9.0]]])  # the third feature is padding
    mask = torch.tensor([[True, True, False]])
    out = sorted_features(x, mask)[0]
    assert out.tolist() == [[3.0, 2.0], [1.0, -5.0], [0.0, 0.0]]


def _brute_force_pool(gpo: GPO, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per sample: run the GRU on its own n positional encodings (no padding), average the directions, score,
    softmax / temperature, then Σ_k θ_k · (k-th largest of each dimension)."""
    out = []
    for b in range(len(x)):
        real = x[b][mask[b]]  # (n, d)
        n = len(real)
        h, _ = gpo.gru(positional_encoding(n, gpo.d_pe)[None])  # (1, n, 2 h)
        half = h.shape[-1] // 2
        theta = (gpo.linear((h[..., :half] + h[..., half:]) / 2)[0, :, 0] / gpo.temperature).softmax(0)
        pooled = torch.zeros(real.shape[1])
        for i in range(real.shape[1]):
            column = sorted(real[:, i].tolist(), reverse=True)
            pooled[i] = sum(theta[k] * column[k] for k in range(n))
        out.append(pooled)
    return torch.stack(out)


def test_pooling_equals_the_brute_force_reference_for_samples_of_different_lengths() -> None:
    torch.manual_seed(0)
    gpo = GPO(d_pe=8, d_hidden=6, temperature=0.1)
    x = torch.randn(3, 5, 4)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False], [True, True, True, True, False]])
    pooled, theta = gpo(x, mask)
    torch.testing.assert_close(pooled, _brute_force_pool(gpo, x, mask), atol=1e-5, rtol=1e-5)
    assert torch.allclose(theta.sum(1), torch.ones(3)) and bool((theta[~mask] == 0).all())
    # the weights depend only on a sample's number of features: the same length gives the same θ
    _, theta_again = gpo(torch.randn(3, 5, 4), mask)
    torch.testing.assert_close(theta, theta_again)


def test_one_hot_weights_give_max_pooling_and_uniform_weights_give_average_pooling() -> None:
    x = torch.randn(2, 4, 3)
    mask = torch.ones(2, 4, dtype=torch.bool)
    ranked = sorted_features(x, mask)
    one_hot = torch.tensor([1.0, 0.0, 0.0, 0.0])
    torch.testing.assert_close((ranked * one_hot[None, :, None]).sum(1), x.amax(1))
    torch.testing.assert_close((ranked * 0.25).sum(1), x.mean(1))


def test_a_sample_without_features_and_bad_configs_are_refused() -> None:
    with pytest.raises(ValueError, match="no real feature"):
        GPO()(torch.randn(2, 3, 4), torch.tensor([[True, False, False], [False, False, False]]))
    with pytest.raises(ValueError, match="even d_pe"):
        GPOConfig(d_pe=7)


def test_the_model_embeds_unit_vectors_and_scores_by_dot_product() -> None:
    torch.manual_seed(0)
    vectors = np.random.default_rng(0).standard_normal((10, 6)).astype(np.float32)
    model = GPOModel(GPOConfig(embed_dim=8, image=ImageEncoderConfig(kind="regions", region_dim=5),
                               text=TextEncoderConfig(hidden=4)), vectors).eval()
    batch = {"regions": torch.randn(3, 4, 5), "region_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]]),
             "tokens": torch.tensor([[2, 3, 4], [5, 6, 0], [7, 0, 0]]), "lengths": torch.tensor([3, 2, 1])}
    img, cap = model.encode_images(batch), model.encode_captions(batch)
    torch.testing.assert_close(img.norm(dim=1), torch.ones(3))
    torch.testing.assert_close(model.score(img, cap), img @ cap.T)
