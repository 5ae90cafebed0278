"""The method contract (`xmr_core.methods.base`), run over every registered method (`create_method`):
embedding shapes, slicing, the training score (`batch_scores`) agreeing with `score`, `score_direction`,
chunked scoring over both axes, and one `fit` epoch on each visual input kind (pixels, grid, regions)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from fixtures.corpora import synthetic_split

from xmr_core.data.datasets import caption_loader, image_loader
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.evaluate import _rows, direction_scores, embed_split, score_matrix
from xmr_core.methods.registry import create_method, list_methods, method_entry, register_method
from xmr_core.runs.train import TrainConfig, fit

D = 16
IMAGE_KINDS = {
    "pixels": ImageEncoderConfig(kind="cnn", widths=(4, 8), hidden=16, image_size=16),
    "grid": ImageEncoderConfig(kind="grid", hidden=16, grid_dim=6, grid_cells=4),
    "regions": ImageEncoderConfig(kind="regions", region_dim=4),
}
# the variants of a method whose scoring differs (each gets the whole contract)
VARIANTS: dict[str, list[dict]] = {"pvse": [{"n_embeds": 1}, {"n_embeds": 3}],
                                   "pcme": [{}, {"mu_only": True, "test_similarity": "mean_cosine"}],
                                   "hmrn": [{"local": "I-T"}, {"local": "T-I"}]}
CASES = [(name, overrides) for name in list_methods() for overrides in VARIANTS.get(name, [{}])]
IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in o.items()) or 'default'}" for name, o in CASES]


def _split(name: str, n: int, seed: int):
    rng = np.random.default_rng(seed)
    split = synthetic_split(name, n, rng)
    return dataclasses.replace(split, images=rng.integers(0, 256, (n, 16, 16, 3), dtype=np.uint8),
                               grid=rng.standard_normal((n, 4, 6)).astype(np.float32)).validate()


TRAIN, VAL = _split("train", 8, 0), _split("val", 5, 1)
VOCAB = Vocabulary.build(TRAIN.captions + VAL.captions)
VECTORS = np.random.default_rng(2).standard_normal((len(VOCAB), 8)).astype(np.float32)


def _model(name: str, overrides: dict, kind: str = "grid"):
    torch.manual_seed(0)
    return create_method(name, VECTORS, embed_dim=D, image=IMAGE_KINDS[kind], text=TextEncoderConfig(hidden=8),
                         **overrides).eval()


def _embed(model):
    return embed_split(model, VAL, VOCAB, batch_size=4)


def test_the_book_methods_are_registered_and_unknown_names_are_refused() -> None:
    assert {"vse", "pvse", "pcme"} <= set(list_methods())
    with pytest.raises(KeyError, match="unknown method 'nope'"):
        create_method("nope", VECTORS)
    entry = method_entry("vse")
    with pytest.raises(ValueError, match="not both"):
        create_method("vse", VECTORS, entry.config(), embed_dim=D)
    with pytest.raises(ValueError, match="registered twice"):
        register_method(entry.config)(type("Other", (entry.model,), {}))


@pytest.mark.parametrize("name, overrides", CASES, ids=IDS)
def test_embeddings_slice_along_dim0_and_scores_have_the_split_shape(name, overrides) -> None:
    model = _model(name, overrides)
    img, cap = _embed(model)
    parts = img if isinstance(img, tuple) else (img,)
    assert all(p.shape[0] == VAL.n_images for p in parts)
    s = score_matrix(model, img, cap)
    assert s.shape == (VAL.n_images, VAL.n_captions) and torch.isfinite(s).all()
    # scoring a slice of the images gives the same rows (no hidden dependence on the other rows)
    rows = slice(1, 4)
    torch.testing.assert_close(score_matrix(model, _rows(img, rows), cap), s[rows])
    # blocks over both axes give the whole matrix
    torch.testing.assert_close(score_matrix(model, img, cap, chunk_size=2, caption_chunk=7), s)


@pytest.mark.parametrize("name, overrides", CASES, ids=IDS)
def test_score_direction_is_the_score_of_a_non_directional_method(name, overrides) -> None:
    model = _model(name, overrides)
    img, cap = _embed(model)
    i2t, t2i = direction_scores(model, img, cap)
    torch.testing.assert_close(i2t, score_matrix(model, img, cap))
    if not model.directional:
        torch.testing.assert_close(t2i, i2t)
    with pytest.raises(ValueError, match="direction"):
        model.score_direction(img, cap, "sideways")


@pytest.mark.parametrize("name, overrides", CASES, ids=IDS)
def test_the_training_score_agrees_with_the_test_score(name, overrides) -> None:
    model = _model(name, overrides)
    img_batch = next(iter(image_loader(VAL, batch_size=VAL.n_images, visual=model.visual)))
    cap_batch = next(iter(caption_loader(VAL, VOCAB, batch_size=VAL.n_captions)))
    with torch.no_grad():
        img, cap = model.encode_images(img_batch), model.encode_captions(cap_batch)
        train_scores = model.batch_scores(img, cap)
        test_scores = model.score(img, cap)  # the default test-time score (a directional method: both ways)
    assert train_scores.shape == test_scores.shape
    if name == "pcme" and not overrides.get("mu_only"):
        # both estimate Eq. (2)'s match probability by sampling (J = 7 and J = n_samples_test)
        torch.testing.assert_close(train_scores, test_scores, atol=0.05, rtol=0.0)
    else:
        # the same ranking of every image's captions (mu-only: s(-a d + b) is decreasing in the distance of
        # unit vectors, the test score the cosine, so the orders agree)
        assert torch.equal(train_scores.argsort(dim=1, stable=True), test_scores.argsort(dim=1, stable=True))


@pytest.mark.parametrize("kind", list(IMAGE_KINDS))
@pytest.mark.parametrize("name, overrides", CASES, ids=IDS)
def test_one_fit_epoch_on_each_visual_input(name, overrides, kind, tmp_path) -> None:
    model = _model(name, overrides, kind)
    assert model.visual == {"pixels": "pixels", "grid": "grid", "regions": "regions"}[kind]
    cfg = TrainConfig(epochs=1, batch_size=4, device="cpu", progress=False, seed=0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = fit(model, TRAIN, VAL, cfg, tmp_path / "run", vocab=VOCAB)
    assert len(result.history) == 1 and np.isfinite(result.best_score)
    assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items())
