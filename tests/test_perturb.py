"""Image and caption perturbations (xmr_core.perturb)."""

import numpy as np
import pytest

from xmr_core.data.corpus import Split
from xmr_core.perturb import GREY, erase_centre, erase_words, mix_halves, with_captions, with_images


def _split(n: int = 2) -> Split:
    return Split(name="s", source="mem", image_ids=[str(i) for i in range(n)], caption_ids=[f"c{i}" for i in range(n)],
                 captions=["a red cube", "two blue balls"][:n], caption_image=np.arange(n, dtype=np.int64),
                 images=np.zeros((n, 8, 8, 3), dtype=np.uint8))


def test_erase_centre_square():
    imgs = np.zeros((2, 8, 8, 3), dtype=np.uint8)
    out = erase_centre(imgs, 0.25)  # side round(0.5 * 8) = 4, from (8 - 4) // 2 = 2
    expected = np.zeros_like(imgs)
    expected[:, 2:6, 2:6] = GREY
    np.testing.assert_array_equal(out, expected)
    assert imgs.max() == 0  # the input is not changed
    np.testing.assert_array_equal(erase_centre(imgs, 0.0), imgs)
    assert (erase_centre(imgs, 1.0) == GREY).all()
    with pytest.raises(ValueError):
        erase_centre(imgs, 1.5)


def test_mix_halves():
    a, b = np.zeros((1, 4, 6, 3), dtype=np.uint8), np.full((1, 4, 6, 3), 7, dtype=np.uint8)
    out = mix_halves(a, b)
    assert (out[:, :, :3] == 0).all() and (out[:, :, 3:] == 7).all()
    assert a.max() == 0
    with pytest.raises(ValueError):
        mix_halves(a, b[:, :2])


def test_erase_words_count_and_draws():
    caps = ["a b c d", "e f", ""]
    out = erase_words(caps, 0.5, np.random.default_rng(0), unknown="?")
    assert [c.split().count("?") for c in out] == [2, 1, 0]
    assert [len(c.split()) for c in out] == [4, 2, 0]
    # the same draws as choosing positions caption by caption from the same generator
    rng = np.random.default_rng(0)
    first, second = set(rng.choice(4, size=2, replace=False).tolist()), set(rng.choice(2, size=1, replace=False).tolist())
    assert out[0] == " ".join("?" if i in first else w for i, w in enumerate(["a", "b", "c", "d"]))
    assert out[1] == " ".join("?" if i in second else w for i, w in enumerate(["e", "f"]))
    assert erase_words(caps, 0.0, np.random.default_rng(0)) == ["a b c d", "e f", ""]


def test_with_images_and_captions_replace_only_their_field():
    s = _split()
    s.grid = np.ones((2, 4, 3), dtype=np.float32)
    new = with_images(s, np.full_like(s.images, 5), "other")
    assert new.name == "other" and new.grid is None and (new.images == 5).all() and new.captions == s.captions
    assert (s.images == 0).all() and s.grid is not None
    caps = with_captions(s, ["x", "y"], "caps")
    assert caps.captions == ["x", "y"] and caps.images is s.images and s.captions[0] == "a red cube"
    with pytest.raises(ValueError):
        with_captions(s, ["x"], "bad")
    with pytest.raises(ValueError):
        with_images(s, s.images[:1], "bad")
