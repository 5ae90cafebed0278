"""xmr_core.grounding: attention on the named objects and the precision of links, each checked by hand and
against a brute-force loop over pixels or subsets written here."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from xmr_core.data import scene_grammar as g
from xmr_core.data.corpus import DataFormatError
from xmr_core.data.scenes import ScenesConfig, load_scenes
from xmr_core.grounding import (
    attention_share,
    box_fractions,
    link_precision,
    named_boxes,
    sub_embedding_grounding,
)

TINY = ScenesConfig(seed=5, n_train=20, n_val=10, n_test=12)


@pytest.fixture(scope="module")
def test_split(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("XMR_CACHE", str(tmp_path_factory.mktemp("scenes")))
    yield load_scenes(TINY, progress=False, regions=False)["test"]
    mp.undo()


def pixel_mask(box: np.ndarray, size: int) -> np.ndarray:
    """(S, S) bool: the pixels whose centre lies in `box`, one pixel at a time."""
    out = np.zeros((size, size), dtype=bool)
    for y in range(size):
        for x in range(size):
            out[y, x] = box[0] <= x + 0.5 < box[2] and box[1] <= y + 0.5 < box[3]
    return out


def test_box_fractions_by_hand_on_a_two_by_two_grid():
    grid = np.array([[0, 0, 4, 4], [4, 0, 8, 4], [0, 4, 4, 8], [4, 4, 8, 8]])
    assert box_fractions(grid, np.array([[0, 0, 4, 4]]), 8).tolist() == [1, 0, 0, 0]
    assert box_fractions(grid, np.array([[2, 0, 6, 4]]), 8).tolist() == [0.5, 0.5, 0, 0]
    # two overlapping targets count their union once: cells 0 and 1 fully, nothing else
    assert box_fractions(grid, np.array([[0, 0, 6, 4], [2, 0, 8, 4]]), 8).tolist() == [1, 1, 0, 0]
    assert box_fractions(grid, np.zeros((0, 4)), 8).tolist() == [0, 0, 0, 0]


def test_box_fractions_match_a_pixel_loop_on_random_boxes():
    rng = np.random.default_rng(0)
    size = 12
    corners = np.sort(rng.uniform(0, size, size=(7, 2, 2)), axis=1)
    boxes = np.stack([corners[:, 0, 0], corners[:, 0, 1], corners[:, 1, 0], corners[:, 1, 1]], 1)  # x0 y0 x1 y1
    targets, features = boxes[:3], boxes[3:]
    union = np.any([pixel_mask(t, size) for t in targets], axis=0)
    expected = [(pixel_mask(b, size) & union).sum() / max(pixel_mask(b, size).sum(), 1) for b in features]
    np.testing.assert_allclose(box_fractions(features, targets, size), expected)


def test_attention_share_by_hand_and_against_painted_pixels():
    share, chance = attention_share(np.array([0.5, 0.25, 0.25, 0.0]), np.array([1.0, 0.5, 0.0, 0.0]))
    assert share == pytest.approx(0.625) and chance == pytest.approx(0.375)
    # a grid's attention painted over its pixels (each pixel gets its cell's weight): the share of the painted
    # mass inside the targets is the share computed from the cells' fractions
    rng = np.random.default_rng(1)
    size, side = 12, 3
    step = size / side
    grid = np.array([[c * step, r * step, (c + 1) * step, (r + 1) * step] for r in range(side) for c in range(side)])
    weights = rng.dirichlet(np.ones(len(grid)))
    targets = np.array([[1.0, 2.0, 7.5, 6.0], [5.0, 5.0, 11.0, 12.0]])
    union = pixel_mask(targets[0], size) | pixel_mask(targets[1], size)
    painted = sum(w * pixel_mask(b, size) for w, b in zip(weights, grid))
    share, chance = attention_share(weights, box_fractions(grid, targets, size))
    assert share == pytest.approx(float((painted * union).sum() / painted.sum()))
    assert chance == pytest.approx(float(union.mean()))  # uniform attention over a grid: the targets' area share
    with pytest.raises(ValueError, match="sum to zero"):
        attention_share(np.zeros(3), np.ones(3))


def test_named_objects_of_each_kind_of_logical_form_by_hand():
    red, blue = g.COLOURS.index("red"), g.COLOURS.index("blue")
    circle, square, triangle = (g.SHAPES.index(s) for s in ("circle", "square", "triangle"))
    attrs = np.array([[[circle, red, 0, 0], [square, blue, 1, 2], [triangle, red, 0, 6], [-1, -1, -1, -1]]])
    scene = g.SceneArrays(attrs.astype(np.int16), np.array([[0, 0, 2, -1]], np.int16),
                          np.array([[0, 2, 0, -1]], np.int16), np.array([[True, True, True, False]]))
    cases = [
        (g.LogicalForm(counts=((g.Desc(colour=red), 2),)), [1, 0, 1, 0]),  # "two red shapes"
        (g.LogicalForm(counts=((g.Desc(), 3),)), [1, 1, 1, 0]),  # "three shapes": every object, never the padding
        (g.LogicalForm(objects=(g.Desc(shape=triangle),)), [0, 0, 1, 0]),
        (g.LogicalForm(relations=((g.Desc(shape=circle), 0, g.Desc(colour=blue)),)), [1, 1, 0, 0]),
    ]
    for lf, expected in cases:
        assert g.named(lf, scene)[0].tolist() == [bool(e) for e in expected]


def test_named_boxes_of_a_full_caption_are_every_object_of_its_image(test_split):
    full = [c for c, level in enumerate(test_split.caption_level) if level == "full"]
    images = np.asarray(test_split.caption_image)[full]
    n_objects = test_split.meta["layout"].n_objects
    for boxes, i in zip(named_boxes(test_split, np.array(full), images), images):
        np.testing.assert_array_equal(boxes, test_split.meta["object_boxes"][i][: n_objects[i]])
    own = named_boxes(test_split, np.arange(test_split.n_captions), test_split.caption_image)
    assert all(len(b) > 0 for b in own)  # a caption names at least one object of the image it was written for


def test_sub_embedding_grounding_uniform_attention_is_chance_and_mask_drops(test_split):
    n, size, k = test_split.n_images, test_split.images.shape[1], 2
    side = 4
    step = size / side
    grid = np.array([[c * step, r * step, (c + 1) * step, (r + 1) * step] for r in range(side) for c in range(side)])
    best = np.stack([np.flatnonzero(np.asarray(test_split.caption_image) == i)[:k] for i in range(n)])
    uniform = np.full((n, len(grid), k), 1.0 / len(grid))
    share, chance = sub_embedding_grounding(uniform, np.ones((n, k)), best, grid, test_split)
    np.testing.assert_allclose(share, chance)
    # sub-embedding 0 all on the cells its caption's objects cover most, but masked: only sub-embedding 1 counts
    targets = named_boxes(test_split, best[:, 0], np.arange(n))
    focused = uniform.copy()
    for i in range(n):
        f = box_fractions(grid, targets[i], size)
        focused[i, :, 0] = (f == f.max()) / (f == f.max()).sum()
    share0, _ = sub_embedding_grounding(focused, np.tile([0, 1], (n, 1)), best, grid, test_split)
    np.testing.assert_allclose(share0, sub_embedding_grounding(uniform[:, :, 1:], np.ones((n, 1)), best[:, 1:], grid,
                                                               test_split)[0])
    # and unmasked it lifts the share above chance by hand: (max fraction + chance of sub-embedding 1) / 2
    share_on, chance_on = sub_embedding_grounding(focused, np.ones((n, k)), best, grid, test_split)
    for i in range(n):
        f0 = box_fractions(grid, targets[i], size)
        f1 = box_fractions(grid, named_boxes(test_split, best[i:i + 1, 1], [i])[0], size)
        assert share_on[i] == pytest.approx((f0.max() + f1.mean()) / 2)
        assert chance_on[i] == pytest.approx((f0.mean() + f1.mean()) / 2)


def test_grounding_needs_the_scenes_meta(test_split):
    bare = dataclasses.replace(test_split, meta={})
    with pytest.raises(DataFormatError, match="logical_forms"):
        named_boxes(bare, np.array([0]), np.array([0]))


def test_link_precision_by_hand_and_chance_is_the_mean_over_every_choice_of_links():
    links = np.array([[1, 1, 0], [0, 0, 1]], dtype=bool)
    relevant = np.array([[1, 0, 0], [0, 0, 1]], dtype=bool)
    precision, chance = link_precision(links, relevant)
    np.testing.assert_allclose(precision, [0.5, 1.0])
    np.testing.assert_allclose(chance, [1 / 3, 1 / 3])
    row = np.array([1, 0, 1, 1, 0, 0], dtype=bool)
    for k in (1, 2, 4):  # every k-subset of links, equally likely: the mean precision is the chance
        precisions = [row[list(s)].mean() for s in itertools.combinations(range(len(row)), k)]
        assert np.mean(precisions) == pytest.approx(link_precision(np.ones((1, 6), bool), row[None])[1][0])
    with pytest.raises(ValueError, match="row 1 has no links"):
        link_precision(np.array([[1, 0], [0, 0]], bool), np.ones((2, 2), bool))
