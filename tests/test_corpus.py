"""The common split form: relevance views against brute-force loops, validation errors."""

from __future__ import annotations

import numpy as np
import pytest

from xmr_core.data.corpus import DataFormatError, Split, split_fingerprint


def make_split(n: int = 7, per: int = 3, c: int = 5, seed: int = 0) -> Split:
    rng = np.random.default_rng(seed)
    m = n * per
    cap_img = np.repeat(np.arange(n), per)
    exact = rng.random((m, n)) < 0.3
    exact[np.arange(m), cap_img] = True
    return Split(
        name="test", source="memory", image_ids=[f"i{i}" for i in range(n)],
        caption_ids=[f"c{j}" for j in range(m)], captions=[f"caption {j}" for j in range(m)],
        caption_image=cap_img, image_class=rng.integers(0, 3, n),
        image_labels=(rng.random((n, c)) < 0.5).astype(np.uint8), exact=exact,
    )


def test_views_match_brute_force() -> None:
    s = make_split().validate()
    assert s.views() == ["instance", "class", "plausible", "exact"]
    m, n = s.n_captions, s.n_images
    for zeta in (0, 1, 2):
        want = np.array([[sum(abs(int(a) - int(b)) for a, b in zip(s.image_labels[s.caption_image[j]], s.image_labels[i])) <= zeta
                          for i in range(n)] for j in range(m)])
        assert (s.relevance("plausible", "t2i", zeta) == want).all()
        assert (s.relevance("plausible", "i2t", zeta) == want.T).all()
    inst = np.array([[s.caption_image[j] == i for i in range(n)] for j in range(m)])
    cls = np.array([[s.image_class[s.caption_image[j]] == s.image_class[i] for i in range(n)] for j in range(m)])
    assert (s.relevance("instance") == inst).all() and (s.relevance("class", "i2t") == cls.T).all()
    assert (s.relevance("exact") == s.exact).all()


def test_validation_names_the_record() -> None:
    s = make_split()
    s.captions[4] = "  "
    with pytest.raises(DataFormatError, match="memory: split 'test': caption 'c4' is empty"):
        s.validate()
    s = make_split()
    s.exact[5, s.caption_image[5]] = False
    with pytest.raises(DataFormatError, match="caption 'c5' does not hold in its own image"):
        s.validate()
    s = make_split()
    s.regions = np.zeros((s.n_images, 4, 3), np.float32)
    s.regions[2, 1, 0] = np.nan
    with pytest.raises(DataFormatError, match="image 'i2'"):
        s.validate()
    s = make_split()
    s.image_labels[3, 0] = 2
    with pytest.raises(DataFormatError, match="image_labels of image 'i3' are not 0/1"):
        s.validate()
    s = make_split()
    s.caption_image[0] = 99
    with pytest.raises(DataFormatError, match="caption 'c0' points at image index 99"):
        s.validate()
    with pytest.raises(ValueError, match="has no 'class' relevance"):
        Split("x", "memory", ["a"], ["c"], ["a cap"], np.zeros(1, np.int64)).relevance("class")


def test_class_subset_keeps_images_captions_and_exact_relevance_aligned() -> None:
    # 4 images of classes 0,1,0,2; 2 captions each; exact[c, i] = caption c holds in image i.
    exact = np.array([[1, 0, 1, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 1, 0, 1],
                      [1, 0, 1, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0, 1, 0, 1]], dtype=bool)
    split = Split("test", "mem", ["a", "b", "c", "d"], [f"c{i}" for i in range(8)], [f"cap {i}" for i in range(8)],
                  np.repeat(np.arange(4), 2), image_class=np.array([0, 1, 0, 2]), exact=exact).validate()
    sub = split.class_subset([0], "class0")
    assert sub.image_ids == ["a", "c"] and sub.caption_ids == ["c0", "c1", "c4", "c5"]
    np.testing.assert_array_equal(sub.caption_image, [0, 0, 1, 1])
    np.testing.assert_array_equal(sub.exact, exact[np.ix_([0, 1, 4, 5], [0, 2])])  # rows c0 c1 c4 c5, cols a c
    with pytest.raises(ValueError, match="empty"):
        split.class_subset([7], "none")


def test_fingerprint_ignores_where_pixels_came_from_but_not_what_they_are() -> None:
    """Run keys hash `split_fingerprint`: the same pixels read from another cache (other image paths) keep the
    key; other pixels, or other paths of a split without pixels, change it."""
    import dataclasses

    a = make_split()
    a.images = np.random.default_rng(1).integers(0, 256, (a.n_images, 4, 4, 3), dtype=np.uint8)
    a.image_paths = [f"/home/a/.cache/xmr/scenes-export/x/{i}.png" for i in range(a.n_images)]
    b = dataclasses.replace(a, image_paths=[p.replace("/home/a", "/tmp/b") for p in a.image_paths])
    assert a.images is not None and split_fingerprint(a) == split_fingerprint(b)
    other = a.images.copy()
    other[0, 0, 0, 0] ^= 1
    assert split_fingerprint(dataclasses.replace(a, images=other)) != split_fingerprint(a)
    paths_only = [dataclasses.replace(s, images=None) for s in (a, b)]
    assert split_fingerprint(paths_only[0]) != split_fingerprint(paths_only[1])
