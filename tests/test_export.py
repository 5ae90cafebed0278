"""Export -> read round trips: every format gives back identical content (ids, captions, pixels, features,
classes, labels, exact relevance, levels, queries), for a synthetic corpus and for a tiny scenes corpus."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest
from fixtures.corpora import synthetic_corpus

from xmr_core.data.corpus import Corpus, DataFormatError
from xmr_core.data.export import FORMATS, MANIFEST, content_diff, export_corpus, read_export
from xmr_core.data.formats.sidecar import read_sidecar, sidecar_path


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_synthetic(tmp_path: Path, fmt: str) -> None:
    corpus = synthetic_corpus()
    export_corpus(corpus, tmp_path / "out", fmt, progress=False)
    back = read_export(tmp_path / "out")
    assert list(back.splits) == list(corpus.splits)
    for name, split in corpus.splits.items():
        assert content_diff(split, back[name]) == [], (fmt, name)
        for view in split.views():  # the relevance every metric uses is the same
            np.testing.assert_array_equal(
                split.relevance(view, "i2t", zeta=1), back[name].relevance(view, "i2t", zeta=1)
            )
    assert back.name == "synthetic" and back.meta["seed"] == 0 and back.meta["format"] == fmt
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging directory left


def test_content_diff_sees_every_change() -> None:
    a, b = synthetic_corpus()["test"], synthetic_corpus()["test"]
    assert content_diff(a, b) == []
    b.captions[3] = "another caption"
    b.exact = b.exact.copy()
    b.exact[0, 1] = ~b.exact[0, 1]
    b.regions = b.regions.astype(np.float64)  # same values, other dtype
    b.queries[0][0] = "changed"
    b.image_labels = None
    assert content_diff(a, b) == ["captions", "regions", "image_labels", "exact", "queries"]


def test_sidecar_holds_only_what_the_format_cannot(tmp_path: Path) -> None:
    corpus = synthetic_corpus()
    export_corpus(corpus, tmp_path / "karpathy", "karpathy", progress=False)
    manifest = json.loads((tmp_path / "karpathy" / MANIFEST).read_text())
    # Karpathy json + PNGs + COCO instances carry ids, captions, pixels and concept labels natively
    assert manifest["sidecar_fields"]["test"] == [
        "class_names", "caption_level", "regions", "region_boxes", "image_class", "exact", "queries"
    ]  # fmt: skip
    assert (tmp_path / "karpathy" / "annotations" / "instances_test.json").is_file()
    export_corpus(corpus, tmp_path / "precomp", "precomp", progress=False)
    side = read_sidecar(tmp_path / "precomp", "train")
    assert "regions" not in side and "captions" not in side and side["images"].shape == (6, 8, 10, 3)
    assert (tmp_path / "precomp" / "dev_ims.npy").is_file()  # val is SCAN's dev


def test_cub_export_uses_pcme_split_when_classes_are_disjoint(tmp_path: Path) -> None:
    corpus = synthetic_corpus()  # test classes {3, 4} never occur in train / val
    export_corpus(corpus, tmp_path / "cub", "cub", progress=False)
    assert json.loads((tmp_path / "cub" / MANIFEST).read_text())["reader_args"]["image_lists"] is False
    seen = (tmp_path / "cub" / "seen_test_images.txt").read_text().splitlines()  # class dirs hold spaces
    assert [Path(p).stem for p in seen] == corpus["val"].image_ids
    mixed = synthetic_corpus()
    mixed["test"].image_class[0] = 0  # a seen class in test: splits are not class-disjoint
    export_corpus(mixed, tmp_path / "mixed", "cub", progress=False)
    assert (tmp_path / "mixed" / "test_images.txt").is_file()
    assert content_diff(mixed["test"], read_export(tmp_path / "mixed")["test"]) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_of_a_single_split_under_a_class_split(tmp_path: Path, fmt: str) -> None:
    corpus = synthetic_corpus()  # only the test split, but the corpus's class split names seen classes too
    only = Corpus(corpus.name, {"test": corpus["test"]}, {**corpus.meta, "class_split": {"seen": [0, 1, 2], "unseen": [3]}})
    only["test"].image_class[0] = 0  # a seen class in the test split: class files cannot reproduce it
    export_corpus(only, tmp_path / "out", fmt, progress=False)
    assert content_diff(only["test"], read_export(tmp_path / "out")["test"]) == []


def test_export_refuses_what_a_format_cannot_hold(tmp_path: Path) -> None:
    corpus = synthetic_corpus()
    corpus["val"].regions = None
    with pytest.raises(ValueError, match="no region features to write as precomp"):
        export_corpus(corpus, tmp_path / "a", "precomp", progress=False)
    corpus = synthetic_corpus()
    corpus["train"].caption_image = corpus["train"].caption_image[::-1].copy()
    with pytest.raises(ValueError, match="captions must be grouped by image"):
        export_corpus(corpus, tmp_path / "b", "karpathy", progress=False)
    corpus = synthetic_corpus()
    corpus["test"].captions[0] += " "
    with pytest.raises(ValueError, match="cannot be written"):
        export_corpus(corpus, tmp_path / "c", "cub", progress=False)
    with pytest.raises(ValueError, match="unknown format 'tsv'"):
        export_corpus(corpus, tmp_path / "d", "tsv")
    assert not (tmp_path / "c").exists() and not list(tmp_path.glob(".*"))  # nothing half-written


def test_reexport_replaces_and_damage_is_reported(tmp_path: Path) -> None:
    out = tmp_path / "out"
    export_corpus(synthetic_corpus(seed=1), out, "precomp", progress=False)
    export_corpus(synthetic_corpus(seed=2), out, "precomp", progress=False)
    assert content_diff(synthetic_corpus(seed=2)["val"], read_export(out)["val"]) == []
    np.savez(sidecar_path(out, "val"), caption_level=np.array(["full", "vague"]))
    with pytest.raises(
        DataFormatError, match=r"xmr_val.npz: field 'caption_level' has 2 entries for 15 captions"
    ):
        read_export(out)
    (out / MANIFEST).unlink()
    with pytest.raises(DataFormatError, match=r"xmr_export.json: missing"):
        read_export(out)


def test_round_trip_tiny_scenes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scenes = pytest.importorskip("xmr_core.data.scenes")
    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "cache"))
    cfg = scenes.ScenesConfig(0, 24, 8, 8)
    kwargs = {"regions": False} if "regions" in inspect.signature(scenes.load_scenes).parameters else {}
    corpus: Corpus = scenes.load_scenes(cfg, progress=False, **kwargs)
    rng = np.random.default_rng(0)
    for split in corpus.splits.values():  # stand-in region features: the frozen encoder is not under test
        if split.regions is None:
            split.regions = rng.standard_normal((split.n_images, 5, 6)).astype(np.float32)
            split.region_boxes = rng.uniform(0, 64, (split.n_images, 5, 4)).astype(np.float32)
    for fmt in FORMATS:
        export_corpus(corpus, tmp_path / fmt, fmt, progress=False)
        back = read_export(tmp_path / fmt)
        for name, split in corpus.splits.items():
            assert content_diff(split, back[name]) == [], (fmt, name)
        assert back.meta["class_split"] == corpus.meta["class_split"]
