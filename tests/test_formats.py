"""Readers of the real formats, on small files laid out as the real data sets are (tests/fixtures/ and files
written here by hand, not by the library's writers), and every malformed-input case of issue 3 item 6."""

from __future__ import annotations

import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from fixtures.trees import (
    CUB_CLASSES,
    CUB_IMAGES,
    FIXTURES,
    cub_tree,
    drilldown_tree,
    karpathy_tree,
    make_precomp,
)

from xmr_core.data.corpus import DataFormatError
from xmr_core.data.formats.coco_instances import coco_image_labels, read_coco_instances, write_coco_instances
from xmr_core.data.formats.cub import read_cub
from xmr_core.data.formats.drilldown import read_drilldown, read_drilldown_split
from xmr_core.data.formats.karpathy import read_karpathy
from xmr_core.data.formats.precomp import read_precomp, read_precomp_split
from xmr_core.liveness import Owner, host_tag


def one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg
    return msg


# ------------------------------------------------------------------------------------------ precomp


def test_precomp_reads_scan_layout(tmp_path: Path) -> None:
    feats = make_precomp(tmp_path, ids=["391895", "522418"])
    split = read_precomp(tmp_path, ["test"])["test"]
    assert split.image_ids == ["391895", "522418"]
    assert split.caption_ids == [str(j) for j in range(10)]  # no capids file: line numbers
    assert split.captions[7] == "caption 7 of image 1"
    assert split.caption_image.tolist() == [0] * 5 + [1] * 5  # im_div = 5: caption j -> image j // 5
    np.testing.assert_array_equal(split.regions, feats)
    assert split.views() == ["instance"]


def test_precomp_ids_per_caption_and_capids(tmp_path: Path) -> None:
    make_precomp(tmp_path, ids=["a"] * 5 + ["b"] * 5)  # CxC style: one id line per caption
    (tmp_path / "test_capids.txt").write_text("".join(f"c{j}\n" for j in range(10)))
    split = read_precomp_split(tmp_path, "test", "test")
    assert split.image_ids == ["a", "b"]
    assert split.caption_ids[9] == "c9"
    (tmp_path / "test_ids.txt").write_text("".join(f"{i}\n" for i in ["a"] * 4 + ["b"] * 6))
    with pytest.raises(DataFormatError, match=r"test_ids.txt: line 5: ids of image row 0 differ"):
        read_precomp_split(tmp_path, "test", "test")


def test_precomp_two_dim_features_are_one_region(tmp_path: Path) -> None:
    make_precomp(tmp_path, shape=(6,))
    assert read_precomp_split(tmp_path, "test", "test").regions.shape == (2, 1, 6)


@pytest.mark.parametrize(
    "lines, expected",
    [
        (9, r"test_caps.txt: 9 captions for 2 images .*image '1' \(row 1\) has 4 of its 5 captions"),
        (11, r"test_caps.txt: line 11: caption beyond 5 per image"),
    ],
)
def test_precomp_wrong_caption_count(tmp_path: Path, lines: int, expected: str) -> None:
    make_precomp(tmp_path)
    (tmp_path / "test_caps.txt").write_text("".join(f"c{j}\n" for j in range(lines)))
    with pytest.raises(DataFormatError, match=expected) as err:
        read_precomp_split(tmp_path, "test", "test")
    one_line(err)


def test_precomp_bad_input(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match=r"test_ims.npy: missing .*docs/data.md"):
        read_precomp_split(tmp_path, "test", "test")
    make_precomp(tmp_path)
    with pytest.raises(DataFormatError, match=r"test_ims.npy: 3 regions per image, expected 36"):
        read_precomp_split(tmp_path, "test", "test", n_regions=36)
    np.save(tmp_path / "test_ims.npy", np.zeros((2, 3, 4, 5), np.float32))
    with pytest.raises(
        DataFormatError, match=r"test_ims.npy: features of shape \(2, 3, 4, 5\), expected \(N, R, D\)"
    ):
        read_precomp_split(tmp_path, "test", "test")
    feats = make_precomp(tmp_path, ids=["x", "y"])
    feats[1, 2, 0] = np.nan
    np.save(tmp_path / "test_ims.npy", feats)
    with pytest.raises(DataFormatError, match=r"test_ims.npy: image 'y' \(row 1\): features contain NaN"):
        read_precomp_split(tmp_path, "test", "test")
    make_precomp(tmp_path)
    caps = (tmp_path / "test_caps.txt").read_bytes().split(b"\n")
    caps[2] = b"caf\xe9 latin-1"
    (tmp_path / "test_caps.txt").write_bytes(b"\n".join(caps))
    with pytest.raises(DataFormatError, match=r"test_caps.txt: line 3: not valid UTF-8"):
        read_precomp_split(tmp_path, "test", "test")
    caps[2] = b"   "
    (tmp_path / "test_caps.txt").write_bytes(b"\n".join(caps))
    with pytest.raises(DataFormatError, match=r"test_caps.txt: line 3: empty caption"):
        read_precomp_split(tmp_path, "test", "test")


# ----------------------------------------------------------------------------------------- karpathy


def test_karpathy_coco(tmp_path: Path) -> None:
    corpus = read_karpathy(karpathy_tree(tmp_path), tmp_path / "images", load_images=True)
    train, val, test = corpus["train"], corpus["val"], corpus["test"]
    assert corpus.name == "coco"
    assert train.image_ids == ["7", "99"]  # restval (cocoid 99) joins train, in file order
    assert val.image_ids == ["5"] and test.image_ids == ["42"]
    assert test.n_captions == 6  # the sixth caption is kept, not truncated
    assert test.caption_ids == ["10", "11", "12", "13", "14", "15"]
    assert test.captions[1] == "A brown dog sleeps."  # stripped
    assert train.captions[3] == "Café cat."
    assert train.caption_image.tolist() == [0] * 5 + [1] * 5
    assert train.image_paths[1].endswith("val2014/COCO_val2014_000000000099.jpg")
    assert (train.images[1] == 80).all() and train.images.shape == (
        2,
        4,
        6,
        3,
    )  # the 3rd file written: 40 * 2
    alone = read_karpathy(tmp_path / "dataset_coco.json", tmp_path / "images", ["train"], restval="val")
    assert alone["train"].image_ids == ["7"]


def test_karpathy_flickr_ids_are_file_stems(tmp_path: Path) -> None:
    corpus = read_karpathy(
        karpathy_tree(tmp_path, "dataset_flickr30k.json"), tmp_path / "images", ["train", "test"]
    )
    assert corpus["test"].image_ids == ["1000092795"] and corpus["train"].caption_ids == ["2", "3"]


def test_karpathy_bad_input(tmp_path: Path) -> None:
    path = karpathy_tree(tmp_path)
    with pytest.raises(DataFormatError, match=r"dataset_coco.json: image 42: 6 captions, expected 5"):
        read_karpathy(path, tmp_path / "images", captions_per_image=5)
    (tmp_path / "images" / "val2014" / "COCO_val2014_000000000005.jpg").unlink()
    with pytest.raises(
        DataFormatError, match=r"COCO_val2014_000000000005.jpg: missing image file of image 5"
    ) as err:
        read_karpathy(path, tmp_path / "images")
    one_line(err)
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('"raw": "A cat again."', '"raw": "  "'), encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"image 7: sentence 21: empty caption"):
        read_karpathy(path, tmp_path / "images", ["train"])
    path.write_text(text.replace('"split": "val"', '"split": "dev"'), encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"images\[3\]: unknown split 'dev'"):
        read_karpathy(path, tmp_path / "images", ["train"])
    path.write_bytes(text.encode("utf-8").replace("Café".encode(), b"Caf\xe9"))
    with pytest.raises(
        DataFormatError, match=r"dataset_coco.json: line 16: not valid UTF-8"
    ):  # grep -n Café: line 16
        read_karpathy(path, tmp_path / "images")
    path.write_text(text[:-5], encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"dataset_coco.json: line \d+: invalid JSON"):
        read_karpathy(path, tmp_path / "images")
    with pytest.raises(DataFormatError, match=r"dataset_f30k.json: missing"):
        read_karpathy(tmp_path / "dataset_f30k.json", tmp_path)


# ---------------------------------------------------------------------------------- COCO instances


def test_coco_instances_labels() -> None:
    labels, names = read_coco_instances([FIXTURES / "karpathy" / "instances_val2014.json"])
    assert names == ["person", "bus", "dog"]  # category ids 1, 6, 18 in increasing order
    # image 42: two dogs and a person -> person and dog set once each; 99: a (crowd) bus; 5: nothing
    np.testing.assert_array_equal(labels["42"], [1, 0, 1])
    np.testing.assert_array_equal(labels["99"], [0, 1, 0])
    np.testing.assert_array_equal(labels["5"], [0, 0, 0])
    out, _ = coco_image_labels([FIXTURES / "karpathy" / "instances_val2014.json"], ["5", "42"])
    assert out.dtype == np.uint8 and out.tolist() == [[0, 0, 0], [1, 0, 1]]


def test_coco_instances_bad_input(tmp_path: Path) -> None:
    src = (FIXTURES / "karpathy" / "instances_val2014.json").read_text()
    with pytest.raises(DataFormatError, match=r"instances_val2014.json: image 7 \(and 0 more\) not found"):
        coco_image_labels([FIXTURES / "karpathy" / "instances_val2014.json"], ["42", "7"])
    bad = tmp_path / "instances.json"
    bad.write_text(src.replace('"category_id": 6', '"category_id": 7'))
    with pytest.raises(DataFormatError, match=r"instances.json: annotation 504: unknown category id 7"):
        read_coco_instances([bad])
    bad.write_text(src.replace('"image_id": 99', '"image_id": 100'))
    with pytest.raises(DataFormatError, match=r"annotation 504: image 100 is not in the file's images"):
        read_coco_instances([bad])


def test_coco_instances_write_read(tmp_path: Path) -> None:
    labels = np.array([[1, 0, 1, 0], [0, 0, 0, 0], [0, 1, 1, 1]], np.uint8)
    write_coco_instances(tmp_path / "i.json", ["a", "b", "c"], labels, ["w", "x", "y", "z"])
    out, names = coco_image_labels([tmp_path / "i.json"], ["c", "a", "b"])
    assert names == ["w", "x", "y", "z"]
    np.testing.assert_array_equal(out, labels[[2, 0, 1]])
    with pytest.raises(ValueError, match="must be 0/1"):
        write_coco_instances(tmp_path / "j.json", ["a"], np.array([[2, 0, 0, 0]]), ["w", "x", "y", "z"])


# ---------------------------------------------------------------------------------------------- CUB


def test_cub_pcme_split(tmp_path: Path) -> None:
    corpus = read_cub(cub_tree(tmp_path), load_images=True)
    train, val, test = corpus["train"], corpus["val"], corpus["test"]
    # train = trainval classes minus the seen test image; val = that image (PCME's val_in); test = class 003
    assert train.image_ids == ["Black_Footed_Albatross_0001_796111", "Laysan_Albatross_0001_545"]
    assert val.image_ids == ["Black_Footed_Albatross_0002_55"]
    assert test.image_ids == CUB_IMAGES[2]
    assert train.image_class.tolist() == [0, 1] and test.image_class.tolist() == [2, 2]
    assert test.class_names == ["Black_footed_Albatross", "Laysan_Albatross", "Sooty_Albatross"]
    assert test.n_captions == 20 and test.captions[11] == "Sooty_Albatross_0002_796 says 1"
    assert test.images[:, 0, 0, 0].tolist() == [2, 2]
    assert test.relevance("class", "t2i").sum() == 20 * 2  # every caption matches both images of its class


def test_cub_images_txt_sets_order(tmp_path: Path) -> None:
    cub_tree(tmp_path)
    rels = [f"{CUB_CLASSES[c]}/{stem}.jpg" for c in (0, 1) for stem in CUB_IMAGES[c]]
    rels += [f"{CUB_CLASSES[2]}/{CUB_IMAGES[2][1]}.jpg", f"{CUB_CLASSES[2]}/{CUB_IMAGES[2][0]}.jpg"]
    (tmp_path / "images.txt").write_text("".join(f"{i + 1} {r}\n" for i, r in enumerate(rels)))
    assert read_cub(tmp_path, ["test"])["test"].image_ids == CUB_IMAGES[2][::-1]


def test_cub_bad_input(tmp_path: Path) -> None:
    cub_tree(tmp_path)
    txt = tmp_path / "text_c10" / CUB_CLASSES[1] / f"{CUB_IMAGES[1][0]}.txt"
    txt.write_text("".join(f"c{j}\n" for j in range(9)))
    with pytest.raises(
        DataFormatError,
        match=r"Laysan_Albatross_0001_545.txt: 9 captions for image Laysan_Albatross_0001_545, expected 10",
    ):
        read_cub(tmp_path, ["train"])
    txt.write_bytes(b"".join(b"c%d\n" % j for j in range(9)) + b"\xff\xfe\n")
    with pytest.raises(DataFormatError, match=r"Laysan_Albatross_0001_545.txt: line 10: not valid UTF-8"):
        read_cub(tmp_path, ["train"])
    txt.write_text("".join(f"c{j}\n" for j in range(4)) + "\n" + "".join(f"c{j}\n" for j in range(5)))
    with pytest.raises(DataFormatError, match=r"Laysan_Albatross_0001_545.txt: line 5: empty caption"):
        read_cub(tmp_path, ["train"])
    (tmp_path / "testclasses.txt").write_text("003.Sooty_Albatross\n200.Common_Yellowthroat\n")
    with pytest.raises(
        DataFormatError, match=r"testclasses.txt: line 2: unknown class '200.Common_Yellowthroat'"
    ):
        read_cub(tmp_path, ["test"])
    (tmp_path / "images" / "Misc").mkdir()
    with pytest.raises(DataFormatError, match=r"images/Misc: unknown class directory"):
        read_cub(tmp_path, ["test"])
    shutil.rmtree(tmp_path / "text_c10")
    with pytest.raises(DataFormatError, match=r"text_c10: missing"):
        read_cub(tmp_path, ["test"])


def test_cub_missing_caption_file(tmp_path: Path) -> None:
    cub_tree(tmp_path)
    (tmp_path / "text_c10" / CUB_CLASSES[2] / f"{CUB_IMAGES[2][1]}.txt").unlink()
    with pytest.raises(DataFormatError, match=r"Sooty_Albatross_0002_796.txt: missing"):
        read_cub(tmp_path, ["test"])


# ---------------------------------------------------------------------------------------- Drill-down


def test_drilldown_reads_vg_layout(tmp_path: Path) -> None:
    feats = drilldown_tree(tmp_path)
    split = read_drilldown(tmp_path, ["test"], n_regions=4, min_queries=3)["test"]
    assert split.image_ids == ["11", "3"]  # split-file order
    # region-id order; "Green Grass" (region 17) repeats "green grass" (12) once lower-cased: dropped as in Drill-down
    assert split.queries == [
        ["blue sky", "a red kite", "a kite string"],
        ["green grass", "a brown horse", "a man on a horse"],
    ]
    assert split.caption_ids == ["11/1", "11/2", "11/3", "3/12", "3/25", "3/30"]
    assert split.caption_image.tolist() == [0, 0, 0, 1, 1, 1]
    np.testing.assert_array_equal(split.regions[1], feats[3])
    assert split.region_boxes[0, 0].tolist() == [0, 11, 22, 33]
    kept = read_drilldown_split(tmp_path, "test", n_regions=4, min_queries=3, dedupe=False)
    assert kept.queries[1] == ["green grass", "Green Grass", "a brown horse", "a man on a horse"]


def test_drilldown_feature_cache(tmp_path: Path) -> None:
    feats = drilldown_tree(tmp_path / "vg_root")
    cache = tmp_path / "cache" / "test.npy"
    cache.parent.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    debris = cache.parent / f".test.npy.{host_tag(Owner.current().host)}-{dead}-0.0badcafe.tmp"  # a killed reader's
    debris.write_bytes(b"half")
    first = read_drilldown_split(
        tmp_path / "vg_root", "test", n_regions=4, min_queries=3, features_cache=cache
    )
    shutil.rmtree(tmp_path / "vg_root" / "vg" / "region_36_final")  # the second read needs only the cache
    again = read_drilldown_split(
        tmp_path / "vg_root", "test", n_regions=4, min_queries=3, features_cache=cache
    )
    np.testing.assert_array_equal(again.regions[0], feats[11])
    np.testing.assert_array_equal(again.region_boxes, first.region_boxes)
    assert sorted(p.name for p in cache.parent.iterdir()) == ["test.boxes.npy", "test.npy"]  # no debris


def test_drilldown_bad_input(tmp_path: Path) -> None:
    drilldown_tree(tmp_path)
    with pytest.raises(
        DataFormatError, match=r"000000000011.npy: region_feats of shape \(4, 3\), expected \(36, D\)"
    ):
        read_drilldown_split(tmp_path, "test", min_queries=3)
    with pytest.raises(DataFormatError, match=r"rg_jsons/11.json: 3 region captions, expected at least 10"):
        read_drilldown_split(tmp_path, "test", n_regions=4)
    rg = tmp_path / "vg" / "rg_jsons" / "11.json"
    rg.write_text(rg.read_text().replace('"blue sky"', '" "'))
    with pytest.raises(DataFormatError, match=r"rg_jsons/11.json: region 1: empty caption"):
        read_drilldown_split(tmp_path, "test", n_regions=4, min_queries=3)
    rg.write_bytes(rg.read_bytes().replace(b'" "', b'"caf\xe9"'))
    with pytest.raises(DataFormatError, match=r"rg_jsons/11.json: line 3: not valid UTF-8"):
        read_drilldown_split(tmp_path, "test", n_regions=4, min_queries=3)
    (tmp_path / "caches" / "vg_val.txt").write_text("12\nimage13\n")
    with pytest.raises(DataFormatError, match=r"vg_val.txt: line 2: 'image13' is not an image index"):
        read_drilldown_split(tmp_path, "val", n_regions=4, min_queries=3)


def test_drilldown_nan_and_unsafe_pickles(tmp_path: Path) -> None:
    drilldown_tree(tmp_path)
    path = tmp_path / "vg" / "region_36_final" / f"{3:012d}.npy"
    f = np.ones((4, 3), np.float32)
    f[2, 1] = np.nan
    path.write_bytes(pickle.dumps({"region_feats": f}, protocol=2))
    with pytest.raises(DataFormatError, match=r"000000000003.npy: image '3' \(row 0\): features contain NaN"):
        read_drilldown_split(tmp_path, "test", n_regions=4, min_queries=3)
    path.write_bytes(pickle.dumps({"region_feats": np.ones((4, 3), np.float32)}, protocol=2))
    with pytest.raises(DataFormatError, match=r"region_boxes present in some region files and not in others"):
        read_drilldown_split(tmp_path, "test", n_regions=4, min_queries=3)
    path.write_bytes(pickle.dumps(shutil.rmtree, protocol=2))  # a pickle that would call a function
    with pytest.raises(DataFormatError, match=r"000000000003.npy: unreadable region pickle .*not allowed"):
        read_drilldown_split(tmp_path, "test", n_regions=4, min_queries=3)
