"""PCME (Chun et al., CVPR 2021): loss, encoders, test-time similarities; and the shared figure helpers."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from xmr_core import viz  # noqa: E402


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
