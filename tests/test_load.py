"""`load_corpus`: scenes through a cached export and the real readers; real layouts under DATA_ROOT; one-line
errors naming what is missing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fixtures.corpora import synthetic_corpus

import xmr_core.data.scenes as scenes_module
from xmr_core.data.corpus import Corpus, DataFormatError
from xmr_core.data.export import MANIFEST, content_diff
from xmr_core.data.formats.coco_instances import write_coco_instances
from xmr_core.data.formats.cub import write_cub
from xmr_core.data.formats.drilldown import write_drilldown
from xmr_core.data.formats.karpathy import write_karpathy
from xmr_core.data.formats.precomp import write_precomp_split
from xmr_core.data.load import load_corpus


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize(
    "dataset, fmt, expected",
    [
        ("coco", "karpathy", "missing dataset_coco.json, images;"),
        ("f30k", "karpathy", "missing dataset_flickr30k.json, flickr30k-images;"),
        ("coco", "precomp", "missing precomp/train_ims.npy, precomp/train_caps.txt, precomp/dev_ims.npy"),
        (
            "cub",
            "cub",
            "missing images, text_c10, trainvalclasses.txt, testclasses.txt, seen_test_images.txt;",
        ),
        (
            "vg",
            "drilldown",
            "missing caches/vg_train.txt, caches/vg_val.txt, caches/vg_test.txt, vg/rg_jsons",
        ),
    ],
)
def test_missing_files_are_named_at_once(tmp_path: Path, dataset: str, fmt: str, expected: str) -> None:
    with pytest.raises(DataFormatError, match=expected) as err:
        load_corpus(dataset, tmp_path, "paper", format=fmt)
    assert "\n" not in str(err.value) and "docs/data.md" in str(err.value)


def test_missing_root_and_bad_names(tmp_path: Path) -> None:
    for root in ("", tmp_path / "nowhere"):
        with pytest.raises(
            DataFormatError,
            match=r"coco \(karpathy\) at DATA_ROOT=.*missing the data root itself; see docs/data.md",
        ):
            load_corpus("coco", root, "paper")
    with pytest.raises(ValueError, match="unknown dataset 'mscoco'"):
        load_corpus("mscoco", tmp_path)
    with pytest.raises(ValueError, match=r"dataset 'cub' comes in formats \('cub',\), not 'precomp'"):
        load_corpus("cub", tmp_path, format="precomp")
    with pytest.raises(ValueError, match="unknown profile"):
        load_corpus("coco", tmp_path, "gpu")


def test_coco_karpathy_with_instances(tmp_path: Path) -> None:
    corpus = synthetic_corpus()
    write_karpathy(list(corpus.splits.values()), tmp_path / "dataset_coco.json", "coco")
    val_ids = corpus["val"].image_ids + corpus["test"].image_ids
    val_labels = np.concatenate([corpus["val"].image_labels, corpus["test"].image_labels])
    names = [f"c{i}" for i in range(7)]
    write_coco_instances(tmp_path / "annotations" / "instances_val2014.json", val_ids, val_labels, names)
    loaded = load_corpus("coco", tmp_path, "paper")
    assert (
        loaded.name == "coco" and loaded["train"].images is None and loaded["train"].image_paths is not None
    )
    np.testing.assert_array_equal(loaded["test"].image_labels, corpus["test"].image_labels)
    assert (
        loaded["train"].image_labels is None
        and "instances_train2014.json" in loaded["train"].meta["plausible"]
    )
    write_coco_instances(
        tmp_path / "annotations" / "instances_train2014.json",
        corpus["train"].image_ids,
        corpus["train"].image_labels,
        names,
    )
    loaded = load_corpus("coco", tmp_path, "paper", splits=["train"], load_images=True)
    np.testing.assert_array_equal(loaded["train"].image_labels, corpus["train"].image_labels)
    np.testing.assert_array_equal(loaded["train"].images, corpus["train"].images)


def test_f30k_precomp(tmp_path: Path) -> None:
    corpus = synthetic_corpus()
    for split in corpus.splits.values():
        write_precomp_split(split, tmp_path / "precomp")  # train / dev / test, as in SCAN's f30k_precomp
    with pytest.raises(DataFormatError, match=r"train_ims.npy: 3 regions per image, expected 36"):
        load_corpus("f30k", tmp_path, "paper", format="precomp")
    loaded = load_corpus("f30k", tmp_path, "paper", format="precomp", n_regions=3)
    np.testing.assert_array_equal(loaded["val"].regions, corpus["val"].regions)
    assert loaded["test"].caption_ids == corpus["test"].caption_ids


def test_cub_and_vg_layouts(tmp_path: Path) -> None:
    corpus = synthetic_corpus()
    write_cub(list(corpus.splits.values()), tmp_path / "cub")
    cub = load_corpus("cub", tmp_path / "cub", "paper", captions_per_image=5)
    assert cub["test"].image_class.tolist() == corpus["test"].image_class.tolist()
    assert cub["val"].image_ids == corpus["val"].image_ids  # via seen_test_images.txt
    write_drilldown(list(corpus.splits.values()), tmp_path / "vg")
    vg = load_corpus("vg", tmp_path / "vg", "paper", splits=["test"], n_regions=3, min_queries=1)
    assert vg["test"].queries == corpus["test"].queries
    np.testing.assert_array_equal(vg["test"].regions, corpus["test"].regions)
    assert list(
        (tmp_path / "cache" / "vg-regions").glob("*/vg_test_regions.npy")
    )  # assembled once, memory-mapped


def _fake_scenes(monkeypatch: pytest.MonkeyPatch) -> list:
    """Stand in for the generator: load_scenes returns the synthetic corpus (counting calls)."""
    calls: list = []
    marker = object()  # generator-only metadata (like logical forms) that no file format holds

    def load_scenes(cfg, progress: bool = True) -> Corpus:
        calls.append(cfg)
        corpus = synthetic_corpus(seed=cfg)
        corpus.name = "scenes-single"
        for split in corpus.splits.values():
            split.meta["logical_forms"] = marker
        return corpus

    monkeypatch.setattr(scenes_module, "load_scenes", load_scenes)
    monkeypatch.setattr(scenes_module, "scenes_config", lambda profile, variant="single", seed=0: seed)
    calls.append(marker)
    return calls


@pytest.mark.parametrize("fmt", ["karpathy", "precomp", "cub", "drilldown"])
def test_scenes_go_through_the_readers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    calls = _fake_scenes(monkeypatch)
    marker = calls.pop()
    corpus = load_corpus("scenes", profile="smoke", format=fmt, seed=3, progress=False)
    exports = list((tmp_path / "cache" / "scenes-export").iterdir())
    assert [p.name.startswith(f"scenes-single-{fmt}-") for p in exports] == [True]
    assert corpus.meta["format"] == fmt and corpus.meta["export_dir"] == str(exports[0])
    for name, split in synthetic_corpus(seed=3).splits.items():
        assert content_diff(split, corpus[name]) == []
        assert corpus[name].meta["logical_forms"] is marker
    stamp = (exports[0] / MANIFEST).stat().st_mtime_ns
    load_corpus("scenes", profile="smoke", format=fmt, seed=3, progress=False)
    assert (exports[0] / MANIFEST).stat().st_mtime_ns == stamp  # cached: not exported again
    load_corpus("scenes", profile="smoke", format=fmt, seed=4, progress=False)
    assert len(list((tmp_path / "cache" / "scenes-export").iterdir())) == 2  # another seed, another export
    assert calls == [3, 3, 4]


def test_scenes_export_damage_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_scenes(monkeypatch)
    corpus = load_corpus("scenes", format="precomp", seed=1, progress=False)
    caps = Path(corpus.meta["export_dir"]) / "test_caps.txt"
    caps.write_text(caps.read_text().replace("caption 0", "caption zero", 1))
    with pytest.raises(
        DataFormatError, match=r"split 'test' read back differs from the generated scenes in \['captions'\]"
    ):
        load_corpus("scenes", format="precomp", seed=1, progress=False)
    again = load_corpus("scenes", format="precomp", seed=1, refresh=True, progress=False)
    assert content_diff(synthetic_corpus(seed=1)["test"], again["test"]) == []
