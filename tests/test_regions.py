"""Region boxes and frozen region features of the scenes benchmark (the BUTD analogue)."""

from __future__ import annotations

import numpy as np
import pytest

from xmr_core.data.regions import RegionConfig
from xmr_core.data.scenes import ScenesConfig, load_scenes

TINY = ScenesConfig(seed=5, n_train=60, n_val=40, n_test=30)
FAST = RegionConfig(slots=7, steps=60, seed=1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("XMR_CACHE", str(tmp_path_factory.mktemp("regions")))
    yield load_scenes(TINY, progress=False, regions=FAST)
    mp.undo()


def test_shapes_and_geometry(tiny):
    for name, n in TINY.split_sizes().items():
        s = tiny[name]
        assert s.regions.shape == (n, 7, FAST.dim) and s.regions.dtype == np.float32
        assert s.region_boxes.shape == (n, 7, 4)
        assert np.isfinite(s.regions).all() and (s.regions[..., : FAST.feature_dim] >= 0).all()  # post-ReLU
        # the last four dims are the box normalised by the 64-px canvas
        assert np.allclose(s.regions[..., FAST.feature_dim :], s.region_boxes / 64.0)


def test_every_object_has_one_region_and_background_avoids_objects(tiny):
    s = tiny["test"]
    lay, obj_boxes, slot = s.meta["layout"], s.meta["object_boxes"], s.meta["region_object"]
    for i in range(s.n_images):
        k = int(lay.n_objects[i])
        assert sorted(slot[i][slot[i] >= 0].tolist()) == list(range(k))
        for r, j in enumerate(slot[i]):
            box = s.region_boxes[i, r]
            if j >= 0:  # contains its object's box
                ob = obj_boxes[i, j]
                assert box[0] <= ob[0] and box[1] <= ob[1] and box[2] >= ob[2] and box[3] >= ob[3]
            else:  # at most 30% of any object's area inside a background box
                for ob in obj_boxes[i, :k]:
                    w = max(0.0, min(box[2], ob[2]) - max(box[0], ob[0]))
                    h = max(0.0, min(box[3], ob[3]) - max(box[1], ob[1]))
                    assert w * h <= 0.3 * (ob[2] - ob[0]) * (ob[3] - ob[1]) + 1e-4


def test_features_carry_attributes(tiny):
    # nearest-centroid colour classification of object regions from the frozen features: the encoder
    # was trained to predict colour, so held-out regions must be separable by it
    feats, colours = {}, {}
    for name in ("train", "test"):
        s = tiny[name]
        slot, lay = s.meta["region_object"], s.meta["layout"]
        ii, rr = np.nonzero(slot >= 0)
        feats[name] = s.regions[ii, rr, : FAST.feature_dim]
        colours[name] = lay.colour[ii, slot[ii, rr]]
    cent = np.stack([feats["train"][colours["train"] == c].mean(0) for c in range(8)])
    pred = np.argmin(((feats["test"][:, None] - cent[None]) ** 2).sum(-1), 1)
    assert (pred == colours["test"]).mean() > 0.8


def test_deterministic_and_cached(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("XMR_CACHE", str(tmp_path))
    again = load_scenes(TINY, progress=False, regions=FAST)  # rebuilt from scratch, same seed
    hit = load_scenes(TINY, progress=False, regions=FAST)  # from the cache
    for other in (again, hit):
        for name in TINY.split_sizes():
            assert other[name].regions.tobytes() == tiny[name].regions.tobytes()
            assert np.array_equal(other[name].region_boxes, tiny[name].region_boxes)
    assert hit.meta["regions"] == again.meta["regions"]


def test_too_few_slots_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("XMR_CACHE", str(tmp_path))
    with pytest.raises(ValueError, match="slots"):
        load_scenes(TINY, progress=False, regions=RegionConfig(slots=3, steps=1))
