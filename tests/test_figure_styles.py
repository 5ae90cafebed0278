"""Figures whose colours mean what their labels say, with σ visible: `viz.class_styles`, `viz.sigma_scale`, the
`scale` of `viz.confidence_ellipses`, and PCME's Figure 5 drawn with them."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.colors import to_rgb

from xmr_core import viz
from xmr_core.data.scenes import RGB


def test_a_class_is_drawn_in_the_colour_and_shape_its_name_says() -> None:
    styles = viz.class_styles(["red circle", "green square", "orange diamond", "class 7"], RGB)
    assert styles[0] == ((215 / 255, 35 / 255, 35 / 255), "o")  # scenes' red, as the images draw it
    assert styles[1] == ((40 / 255, 165 / 255, 55 / 255), "s")
    assert styles[2] == ((245 / 255, 135 / 255, 25 / 255), "D")
    assert styles[3] == (to_rgb("C3"), "o")  # a name with no colour: a tab colour by position


def test_sigma_scale_makes_the_median_ellipse_visible_and_says_by_how_much() -> None:
    mu = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 4.0]])  # span 10
    tiny = np.log(np.full((3, 2), 0.01 ** 2))  # σ = 0.01: a 50% semi-axis of 0.0118, 0.12% of the span
    # needs 0.03 * 10 / (1.1774 * 0.01) = 25.5: the next of 1, 2, 5 x 10^k is 50
    assert viz.sigma_scale(mu, tiny) == 50.0
    assert viz.sigma_scale(mu, np.log(np.full((3, 2), 1.0))) == 1.0  # σ = 1 is visible as drawn
    fig, ax = plt.subplots()
    patch = viz.confidence_ellipses(ax, mu[:1], tiny[:1], level=0.5, scale=50.0)[0]
    assert patch.width == pytest.approx(2 * viz.chi2_radius(0.5) * 0.01 * 50.0)
    plt.close(fig)
