"""The pretrained scenes trunk (the ImageNet analogue) and its frozen grid features (`xmr_core.encoders.trunk`),
the "grid" visual input of the readers and the image encoder, and `erase_cells`."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest
import torch

from xmr_core.data import scene_grammar as g
from xmr_core.data.corpus import Split, split_fingerprint
from xmr_core.data.datasets import Augmentation, erase_cells, image_loader, pair_loader, resolve_visual
from xmr_core.data.scenes import Layout, ScenesConfig, generate_pretraining_set, generate_split, make_layout
from xmr_core.data.text import Vocabulary
from xmr_core.encoders import trunk as trunk_mod
from xmr_core.encoders.attributes import AttributeTraining
from xmr_core.encoders.image import ImageEncoder, ImageEncoderConfig, grid_to_sequence
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.encoders.trunk import (
    TrunkConfig,
    attach_grid_features,
    cell_targets,
    grid_features,
    imagenet_trunk,
    load_trunk_state,
    normalise,
    pretrained_trunk,
    trunk_config,
    trunk_dir,
    write_grid_features,
)
from xmr_core.methods.vse import VSE, vse0_config
from xmr_core.runs.train import TrainConfig, fit

SCENES = ScenesConfig(seed=3, n_train=20, n_val=4, n_test=4)
TINY = TrunkConfig(widths=(8, 16, 32, 64), n_images=120, held_out=20, hidden=32,
                   training=AttributeTraining(steps=5, batch_size=16))
CELLS, CHANNELS = (64 // 2**4) ** 2, 64  # 64-px images through four pooling blocks: a 4×4 grid of 64 channels
EMPTY = (len(g.SHAPES), len(g.COLOURS), len(g.SIZES))  # the extra "empty" class of each attribute
WORDS = ["red", "blue", "green", "circle", "square", "star", "left", "right", "top", "a", "and"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One tiny trunk, pretrained once into a private cache that stays XMR_CACHE for this module."""
    mp = pytest.MonkeyPatch()
    cache = tmp_path_factory.mktemp("trunk-cache")
    mp.setenv("XMR_CACHE", str(cache))
    trunk = pretrained_trunk(SCENES, TINY, progress=False)
    yield cache, trunk
    mp.undo()


def _split(name: str, n: int, seed: int, size: int = 64) -> Split:
    rng = np.random.default_rng(seed)
    captions = [" ".join(rng.choice(WORDS, 4)) for _ in range(2 * n)]
    return Split(name, f"synthetic-{name}", [f"{name}{i}" for i in range(n)], [f"{name}c{j}" for j in range(2 * n)],
                 captions, np.repeat(np.arange(n), 2),
                 images=rng.integers(0, 255, (n, size, size, 3), dtype=np.uint8)).validate()


def _layout(shape, colour, size, row, col, n_objects) -> Layout:
    i16 = lambda a: np.asarray(a, dtype=np.int16)
    zeros = np.zeros(np.shape(shape), np.float32)
    return Layout(shape=i16(shape), colour=i16(colour), size=i16(size), row=i16(row), col=i16(col),
                  pos=i16(np.zeros(np.shape(shape))), cx=zeros, cy=zeros, radius=zeros, n_objects=i16(n_objects))


# ---------------------------------------------------------------------------------------------- targets


def test_cell_targets_by_hand() -> None:
    # image 0: a small blue square at row 0 col 2 (cell 2), a large pink cross at row 2 col 1 (cell 7);
    # image 1: a large red circle at the centre (cell 4), its second slot padding (-1, as make_layout pads)
    lay = _layout(shape=[[1, 5], [0, -1]], colour=[[2, 7], [0, -1]], size=[[0, 1], [1, -1]],
                  row=[[0, 2], [1, -1]], col=[[2, 1], [1, -1]], n_objects=[2, 1])
    assert EMPTY == (6, 8, 2)
    expected = np.tile(np.asarray(EMPTY, np.int64), (2, 9, 1))
    expected[0, 2] = (1, 2, 0)
    expected[0, 7] = (5, 7, 1)
    expected[1, 4] = (0, 0, 1)
    out = cell_targets(lay, 3)
    assert out.dtype == torch.int64 and out.shape == (2, 9, 3)
    assert np.array_equal(out.numpy(), expected)
    # on generated layouts: exactly n_objects cells hold an object, each with its slot's attributes
    lay = make_layout(SCENES, 50, np.random.default_rng(0))
    y = cell_targets(lay, SCENES.grid).numpy()
    assert np.array_equal((y[..., 0] != EMPTY[0]).sum(1), lay.n_objects)
    assert ((y[..., 0] == EMPTY[0]) == (y[..., 1] == EMPTY[1])).all()
    for i in range(5):
        for k in range(int(lay.n_objects[i])):
            cell = int(lay.row[i, k]) * SCENES.grid + int(lay.col[i, k])
            assert tuple(y[i, cell]) == (lay.shape[i, k], lay.colour[i, k], lay.size[i, k])


def test_pretraining_set_is_deterministic_and_disjoint_from_train() -> None:
    n = SCENES.n_train
    pre, again = generate_pretraining_set(SCENES, n), generate_pretraining_set(SCENES, n)
    assert pre["images"].shape == (n, 64, 64, 3) and pre["images"].dtype == np.uint8
    assert np.array_equal(pre["images"], again["images"])
    for name, arr in pre["layout"].arrays().items():
        assert np.array_equal(arr, getattr(again["layout"], name)), name
    train = generate_split(SCENES, "train")
    train_images = {img.tobytes() for img in train["images"]}
    assert not train_images & {img.tobytes() for img in pre["images"]}  # no image shared
    assert not np.array_equal(pre["layout"].shape, train["layout"].shape[:n])
    assert not np.array_equal(pre["layout"].row, train["layout"].row[:n])
    # another seed, another pretraining set
    other = generate_pretraining_set(dataclasses.replace(SCENES, seed=4), n)
    assert not np.array_equal(other["images"], pre["images"])


def test_trunk_key_follows_the_images_not_the_split_sizes() -> None:
    base = TINY.key(SCENES)
    assert base.startswith("scenes-") and TINY.key(SCENES) == base
    changed = [
        TINY.key(dataclasses.replace(SCENES, seed=4)),
        TINY.key(dataclasses.replace(SCENES, image_size=96)),
        dataclasses.replace(TINY, training=AttributeTraining(steps=6, batch_size=16)).key(SCENES),
        dataclasses.replace(TINY, widths=(8, 16, 32, 32)).key(SCENES),
    ]
    assert base not in changed and len(set(changed)) == len(changed)
    for same in ({"n_train": 999, "n_val": 1, "n_test": 2}, {"captions_per_image": 6}, {"region_steps": 7}):
        assert TINY.key(dataclasses.replace(SCENES, **same)) == base, same
    assert trunk_config("cpu") == TrunkConfig() and trunk_config("smoke").key(SCENES) != TrunkConfig().key(SCENES)


# ---------------------------------------------------------------------------------------- trunk cache


def test_pretrained_trunk_is_frozen_cached_and_loaded(built, monkeypatch) -> None:
    cache, first = built
    root = trunk_dir(first.key)
    assert root == cache / "trunks" / TINY.key(SCENES) and first.key == TINY.key(SCENES)
    assert first.channels == CHANNELS and first.cells == CELLS
    assert not first.net.training and not any(p.requires_grad for p in first.net.parameters())
    state = torch.load(root / "trunk.pt", map_location="cpu", weights_only=True)
    assert state.keys() == first.net.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in first.net.state_dict().items())
    meta = json.loads((root / "meta.json").read_text())
    assert meta["key"] == first.key and meta["held_out_images"] == TINY.held_out
    assert set(meta["accuracy_every_cell"]) == {"shape", "colour", "size"}
    assert {"shape", "colour", "size", "empty"} <= set(meta["accuracy_objects"])
    for acc in (*meta["accuracy_every_cell"].values(), *meta["accuracy_objects"].values()):
        assert 0.0 <= acc <= 100.0

    def no_pretraining(*args, **kwargs):
        raise AssertionError("a cached trunk was pretrained again")

    monkeypatch.setattr(trunk_mod, "_pretrain", no_pretraining)
    mtime = (root / "trunk.pt").stat().st_mtime_ns
    second = pretrained_trunk(SCENES, TINY, progress=False)
    assert second.key == first.key and (root / "trunk.pt").stat().st_mtime_ns == mtime
    assert all(torch.equal(a, b) for a, b in zip(first.net.state_dict().values(), second.net.state_dict().values()))
    assert second.meta == json.loads(json.dumps(first.meta))
    assert not second.net.training and not any(p.requires_grad for p in second.net.parameters())


def test_corrupt_or_missing_trunk_file_is_named(built, tmp_path, monkeypatch) -> None:
    cache, trunk = built
    monkeypatch.setenv("XMR_CACHE", str(tmp_path))
    root = tmp_path / "trunks" / trunk.key
    shutil.copytree(cache / "trunks" / trunk.key, root)
    path = root / "trunk.pt"
    path.write_bytes(b"not a state dict")
    with pytest.raises(RuntimeError, match="not a readable trunk") as err:
        load_trunk_state(trunk.key)
    assert str(path) in str(err.value)
    with pytest.raises(RuntimeError) as err:  # meta.json says the cache is complete: the bad file is named
        pretrained_trunk(SCENES, TINY, progress=False)
    assert str(path) in str(err.value)
    path.unlink()
    with pytest.raises(FileNotFoundError) as err:
        load_trunk_state(trunk.key)
    assert str(path) in str(err.value)


# --------------------------------------------------------------------------------- frozen grid features


def test_attach_grid_features_matches_the_trunk_and_is_cached(built, monkeypatch) -> None:
    _, trunk = built
    split = _split("val", 6, 0)
    without = split_fingerprint(split)
    seconds = attach_grid_features([split], trunk, progress=False)
    assert set(seconds) == {"val"}
    assert split.grid.shape == (6, CELLS, CHANNELS) and split.grid.dtype == np.float32
    with torch.no_grad():
        direct = grid_to_sequence(trunk.net(normalise(split.images))).numpy()
    np.testing.assert_allclose(split.grid, direct, atol=1e-5, rtol=0)
    path = trunk_dir(trunk.key) / "features" / f"val-{without[:16]}.npy"
    assert path.is_file() and np.array_equal(np.load(path), split.grid)
    # the fingerprint names the grid too, so a run on grid features has another key
    assert split_fingerprint(split) != without
    assert split_fingerprint(dataclasses.replace(split, grid=None)) == without
    # a subset carries its images' grid features
    sub = split.subset([4, 1], "sub")
    assert np.array_equal(sub.grid, split.grid[[4, 1]])

    def no_features(*args, **kwargs):
        raise AssertionError("cached grid features were computed again")

    monkeypatch.setattr(trunk_mod, "write_grid_features", no_features)
    fresh = _split("val", 6, 0)
    attach_grid_features([fresh], trunk, progress=False)
    assert np.array_equal(fresh.grid, split.grid)
    attach_grid_features([split], trunk, progress=False)  # features already attached: same cache entry
    assert np.array_equal(split.grid, fresh.grid)
    other = _split("val", 6, 1)  # other pixels: another cache entry, so computed
    with pytest.raises(AssertionError, match="computed again"):
        attach_grid_features([other], trunk, progress=False)


def test_features_written_in_chunks_to_a_memory_mapped_file_match_the_in_memory_ones(built, tmp_path,
                                                                                     monkeypatch) -> None:
    _, trunk = built
    split = _split("train", 7, 2)
    monkeypatch.setattr(trunk_mod, "FEATURE_BATCHES", 1)  # chunks of one batch of 2: 4 chunks, the last of 1 image
    lines: list[str] = []
    written = write_grid_features(trunk, split, tmp_path / "f.npy", batch_size=2, progress=False, echo=lines.append)
    assert isinstance(written, np.memmap) and written.shape == (7, CELLS, CHANNELS)
    assert np.array_equal(written, grid_features(trunk, split, batch_size=2))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.npy"]  # the partial file renamed, its marker gone
    assert len(lines) == 1 and lines[0].startswith("grid features train: 7 images, 7 to compute on cpu with 0 loader "
                                                   "worker(s): ") and "s an image on the first chunk of 2" in lines[0]
    # the images decoded by loader worker processes (as on a GPU, `feature_workers`): the same features
    by_workers = write_grid_features(trunk, split, tmp_path / "w.npy", batch_size=2, workers=2, progress=False,
                                     echo=lines.append)
    assert np.array_equal(by_workers, written) and "with 2 loader worker(s)" in lines[1]


def test_a_killed_extraction_resumes_at_its_first_missing_chunk(built, tmp_path, monkeypatch) -> None:
    _, trunk = built
    split = _split("train", 7, 2)
    monkeypatch.setattr(trunk_mod, "FEATURE_BATCHES", 1)
    forward, calls = trunk_mod._forward, []

    def killed_at_the_third_chunk(net, split, rows, *args):
        calls.append(rows)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return forward(net, split, rows, *args)

    monkeypatch.setattr(trunk_mod, "_forward", killed_at_the_third_chunk)
    path = tmp_path / "f.npy"
    with pytest.raises(KeyboardInterrupt):
        write_grid_features(trunk, split, path, batch_size=2, progress=False, echo=lambda line: None)
    assert not path.exists() and json.loads((tmp_path / "f.partial.json").read_text())["done"] == 4
    calls.clear()
    monkeypatch.setattr(trunk_mod, "_forward", lambda net, split, rows, *args: calls.append(rows) or
                        forward(net, split, rows, *args))
    lines: list[str] = []
    resumed = write_grid_features(trunk, split, path, batch_size=2, progress=False, echo=lines.append)
    assert calls == [range(4, 6), range(6, 7)]
    assert np.array_equal(resumed, grid_features(trunk, split, batch_size=2))
    assert lines[0] == f"grid features train: resuming at image 4 of 7 ({tmp_path / 'f.partial.npy'})"
    assert "7 images, 3 to compute" in lines[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.npy"]


def _resnet18_file(path, seed: int):
    import torchvision

    torch.manual_seed(seed)
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), path)
    return path


def test_the_imagenet_trunk_key_names_the_weights_file_loaded(tmp_path) -> None:
    import hashlib

    a, b = _resnet18_file(tmp_path / "a.pth", 0), _resnet18_file(tmp_path / "b.pth", 1)
    ta, tb = imagenet_trunk("resnet18", str(a)), imagenet_trunk("resnet18", str(b))
    assert ta.key != tb.key
    digest = hashlib.sha256(a.read_bytes()).hexdigest()
    assert ta.key == f"resnet18-{digest[:16]}" and ta.meta["weights_sha256"] == digest
    assert ta.meta["channels"] == 512 and ta.meta["weights"] == str(a)
    assert torch.equal(ta.net[0].weight, torch.load(a, weights_only=True)["conv1.weight"])
    shutil.copy(a, tmp_path / "elsewhere.pth")  # the bytes name the weights, not where the file lies
    assert imagenet_trunk("resnet18", str(tmp_path / "elsewhere.pth")).key == ta.key
    # no ImageNet weights: torchvision's initialisation from a fixed seed, labelled so
    none, again = imagenet_trunk("resnet18", None), imagenet_trunk("resnet18", None)
    assert none.key == "resnet18-init0z" and none.meta["source"].startswith("no ImageNet weights")
    assert torch.equal(none.net[0].weight, again.net[0].weight) and none.meta["weights"] is None
    with pytest.raises(FileNotFoundError) as err:
        imagenet_trunk("resnet18", str(tmp_path / "absent.pth"))
    assert "set the notebook parameter IMAGE_WEIGHTS" in str(err.value) and "\n" not in str(err.value)


def test_an_untrained_resnet152_trunk_gives_finite_features_of_unit_scale() -> None:
    """Without ImageNet weights the residual branches start zero-scaled (`trunk.zero_residual_scales`): at the plain
    initialisation a ResNet-152's grid features reach ~1e8 and the heads above overflow; zeroed, each block starts
    as its shortcut, so the features stay O(1). The plain trunk is the reference the zeroed one is compared with."""
    import torchvision

    from xmr_core.encoders.trunk import imagenet_trunk

    images = torch.rand(2, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        zeroed = imagenet_trunk("resnet152", None).net(images)
        torch.manual_seed(0)
        plain = torchvision.models.resnet152(weights=None).eval()
        plain_out = torch.nn.Sequential(*list(plain.children())[:-2])(images)
    assert torch.isfinite(zeroed).all() and zeroed.abs().max() < 10.0
    assert plain_out.abs().max() > 1e3 * zeroed.abs().max()  # what the zeroing prevents


# ---------------------------------------------------------------------------------------- image encoder


def test_grid_image_encoder_reads_the_grid() -> None:
    enc = ImageEncoder(ImageEncoderConfig(kind="grid", grid_dim=CHANNELS, grid_cells=CELLS, hidden=16), 8)
    assert enc.visual == "grid" and enc.local_dim == CHANNELS and enc.backbone_parameters() == []
    grid = torch.randn(3, CELLS, CHANNELS)
    out = enc({"grid": grid})
    assert torch.equal(out.local, grid) and out.mask.shape == (3, CELLS) and out.mask.all()
    assert out.global_.shape == (3, 8)
    mean = ImageEncoder(ImageEncoderConfig(kind="grid", grid_dim=CHANNELS, grid_cells=CELLS, grid_pool="mean"), 8)
    assert mean({"grid": grid}).global_.shape == (3, 8)
    with pytest.raises(KeyError, match="grid"):
        enc({"images": torch.randn(3, 3, 64, 64)})
    with pytest.raises(ValueError, match="grid_dim"):
        ImageEncoder(ImageEncoderConfig(kind="grid"), 8)
    assert ImageEncoder(ImageEncoderConfig(widths=(4, 8), image_size=16, hidden=8), 8).visual == "pixels"


def test_cnn_starts_from_the_cached_trunk(built, tmp_path, monkeypatch) -> None:
    _, trunk = built
    cfg = ImageEncoderConfig(kind="cnn", widths=TINY.widths, hidden=16, image_size=64, trunk=trunk.key)
    enc = ImageEncoder(cfg, 8)
    got, want = enc.net.features.state_dict(), trunk.net.state_dict()
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert any(p.requires_grad for p in enc.backbone_parameters())  # fine-tuning: trainable again
    monkeypatch.setenv("XMR_CACHE", str(tmp_path))  # a trunk that is not in the cache is named
    with pytest.raises(FileNotFoundError, match=trunk.key):
        ImageEncoder(cfg, 8)


# ---------------------------------------------------------------------------------- readers, erasing


def test_erase_cells() -> None:
    grid = torch.arange(1, 16 * 2 + 1, dtype=torch.float32).view(16, 2)  # 4×4 cells, distinct non-zero values
    before = grid.clone()
    assert erase_cells(grid, 0.0) is grid
    shapes = set()
    for seed in range(30):
        torch.manual_seed(seed)
        out = erase_cells(grid, 1.0)
        assert torch.equal(grid, before)  # the input is not changed
        cells = out.view(4, 4, 2)
        zero = (cells == 0).all(-1)
        assert zero.any() and ((cells == 0).any(-1) == zero).all()  # whole cells only
        rows, cols = zero.any(1).nonzero().flatten(), zero.any(0).nonzero().flatten()
        h, w = len(rows), len(cols)
        assert 1 <= h <= 2 and 1 <= w <= 2 and int(zero.sum()) == h * w  # one rectangle of at most half a side
        assert (rows.diff() == 1).all() and (cols.diff() == 1).all()
        assert zero[rows[0]:rows[0] + h, cols[0]:cols[0] + w].all()
        assert torch.equal(out[~zero.flatten()], grid[~zero.flatten()])  # the rest is untouched
        shapes.add((h, w))
    assert len(shapes) > 1
    with pytest.raises(ValueError, match="square"):
        erase_cells(torch.ones(5, 2), 0.0)


def test_grid_batches_and_missing_grid() -> None:
    split = _split("train", 6, 0, size=16)
    vocab = Vocabulary.build(split.captions)
    with pytest.raises(ValueError, match="'train'") as err:
        resolve_visual(split, "grid")
    assert "grid" in str(err.value)
    split.grid = np.random.default_rng(0).normal(size=(6, 9, 5)).astype(np.float32) + 10.0  # never zero
    assert resolve_visual(split, "grid") == "grid" and resolve_visual(split, "auto") == "pixels"
    batches = list(pair_loader(split, vocab, 4, visual="grid"))
    assert [b["grid"].shape for b in batches] == [(4, 9, 5), (2, 9, 5)]
    assert all("images" not in b for b in batches)
    for b in batches:  # no augmentation: the stored features of each pair's image
        assert torch.equal(b["grid"], torch.from_numpy(split.grid[b["image_index"].numpy()]))
    whole = next(iter(image_loader(split, 6, visual="grid")))
    assert torch.equal(whole["grid"], torch.from_numpy(split.grid))
    # random erasing on grid features: some whole cells zeroed in every training item
    erased = next(iter(pair_loader(split, vocab, 6, visual="grid", augment=Augmentation(random_erasing_prob=1.0))))
    assert ((erased["grid"] == 0).all(-1).any(-1)).all()


def test_fit_trains_on_grid_features(built, tmp_path) -> None:
    _, trunk = built
    train, val = _split("train", 8, 0), _split("val", 4, 1)
    attach_grid_features([train, val], trunk, progress=False)
    vocab = Vocabulary.build(train.captions)
    vectors = np.random.default_rng(2).normal(size=(len(vocab), 6)).astype(np.float32)
    image = ImageEncoderConfig(kind="grid", grid_dim=trunk.channels, grid_cells=trunk.cells, hidden=16,
                               trunk=trunk.key)
    model = VSE(vse0_config(embed_dim=8, image=image, text=TextEncoderConfig(hidden=4)), vectors)
    assert model.visual == "grid"
    train.images = None  # no pixels at all: fit and validation must read the grid
    val.images = None
    result = fit(model, train, val, TrainConfig(epochs=1, batch_size=4, progress=False, device="cpu"),
                 tmp_path / "run", vocab=vocab)
    assert len(result.history) == 1 and "val/instance/t2i/R@1" in result.history[0]
    assert np.isfinite(result.history[0]["train/loss"])
