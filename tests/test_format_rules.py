"""Every format rule of every reader (docs/data.md, "Rules each reader enforces") against one malformed input: each
must end in one `DataFormatError` line naming the file and the record. Cases are grouped by kind (issue 32):

- `dropped`: a record that would be dropped or moved between splits without a word;
- `leak`: an image (or class) on both sides of a split, or twice in one;
- `coerced`: a value that would silently become another one (42.0 -> "42.0", 6.9 -> 6, "007" -> 7);
- `absent`: a request for something that does not exist (a split name with a typo, an empty split);
- `crash`: what used to end in a bare exception naming no file (a directory for a file, a field missing its pair,
  features that are strings, an inconsistent shape);
- `malformed`: the other syntax rules (bad JSON or UTF-8, empty or missing records, wrong counts).

The inputs are the hand-written fixture trees of `fixtures.trees` with one change each."""

from __future__ import annotations

import json
import pickle
import re
import shutil
from collections import Counter
from collections.abc import Callable
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
from xmr_core.data.formats.coco_instances import coco_image_labels, read_coco_instances
from xmr_core.data.formats.cub import read_cub
from xmr_core.data.formats.drilldown import read_drilldown, read_drilldown_split
from xmr_core.data.formats.karpathy import read_karpathy
from xmr_core.data.formats.precomp import read_precomp, read_precomp_split

READERS = ("precomp", "karpathy", "coco_instances", "cub", "drilldown", "sidecar")
KINDS = ("dropped", "leak", "coerced", "absent", "crash", "malformed")
Build = Callable[[Path], Callable[[], object]]
CASES: list = []


def case(reader: str, kind: str, expected: str) -> Callable[[Build], Build]:
    """Register `build(tmp_path) -> read`: `read()` must raise one line matching `expected` (file and record)."""
    assert reader in READERS and kind in KINDS

    def register(build: Build) -> Build:
        CASES.append(pytest.param(reader, kind, build, expected, id=f"{reader}-{kind}-{build.__name__}"))
        return build

    return register


def edit_json(path: Path, change: Callable[[dict], object]) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


# ------------------------------------------------------------------------------------------ precomp
def precomp(tmp: Path, **kw) -> Callable[[], object]:
    make_precomp(tmp, ids=["391895", "522418"])
    return lambda: read_precomp_split(tmp, "test", "test", **kw)


@case("precomp", "crash", r"test_caps.txt: not a file")
def caps_is_a_directory(tmp):
    read = precomp(tmp)
    (tmp / "test_caps.txt").unlink()
    (tmp / "test_caps.txt").mkdir()
    return read


@case("precomp", "crash", r"test_ims.npy: not a file")
def features_are_a_directory(tmp):
    read = precomp(tmp)
    (tmp / "test_ims.npy").unlink()
    (tmp / "test_ims.npy").mkdir()
    return read


@case("precomp", "crash", r"test_ims.npy: features of dtype <U3, expected float")
def features_are_strings(tmp):
    read = precomp(tmp)
    np.save(tmp / "test_ims.npy", np.full((2, 3, 4), "abc"))
    return read


@case("precomp", "crash", r"test_ims.npy: features of shape \(2, 3, 4, 1\), expected \(N, R, D\)")
def features_of_four_dims(tmp):
    read = precomp(tmp)
    np.save(tmp / "test_ims.npy", np.zeros((2, 3, 4, 1), np.float32))
    return read


@case("precomp", "coerced", r"test_ims.npy: features of dtype int64, expected float")
def features_are_integers(tmp):
    read = precomp(tmp)
    np.save(tmp / "test_ims.npy", np.zeros((2, 3, 4), np.int64))
    return read


@case("precomp", "malformed", r"test_ims.npy: image '522418' \(row 1\): features contain NaN")
def features_with_nan(tmp):
    feats = make_precomp(tmp, ids=["391895", "522418"])
    feats[1, 0, 0] = np.inf
    np.save(tmp / "test_ims.npy", feats)
    return lambda: read_precomp_split(tmp, "test", "test")


@case("precomp", "dropped", r"test_caps.txt: line 11: caption beyond 5 per image")
def extra_caption(tmp):
    read = precomp(tmp)
    with open(tmp / "test_caps.txt", "a") as fh:
        fh.write("one caption too many\n")
    return read


@case("precomp", "dropped", r"test_ids.txt: line 3: image id '391895' repeats line 1")
def image_id_twice(tmp):
    read = precomp(tmp)
    np.save(tmp / "test_ims.npy", np.zeros((3, 3, 4), np.float32))
    (tmp / "test_caps.txt").write_text("".join(f"c{j}\n" for j in range(15)))
    (tmp / "test_ids.txt").write_text("391895\n522418\n391895\n")
    return read


@case("precomp", "dropped", r"test_capids.txt: line 4: caption id 'c1' repeats line 2")
def caption_id_twice(tmp):
    read = precomp(tmp)
    (tmp / "test_capids.txt").write_text("".join(f"c{j}\n" for j in [0, 1, 2, 1, 4, 5, 6, 7, 8, 9]))
    return read


@case("precomp", "malformed", r"test_capids.txt: 9 caption ids for 10 captions")
def caption_ids_short(tmp):
    read = precomp(tmp)
    (tmp / "test_capids.txt").write_text("".join(f"c{j}\n" for j in range(9)))
    return read


@case("precomp", "malformed", r"test_ids.txt: line 10: ids of image row 1 differ across its captions")
def ids_per_caption_differ(tmp):
    read = precomp(tmp)
    (tmp / "test_ids.txt").write_text("".join(f"{i}\n" for i in ["a"] * 5 + ["b"] * 4 + ["c"]))
    return read


@case("precomp", "leak", r"dev_ids.txt: image '522418' \(row 0\) of split 'val' is also in split 'test'")
def same_id_in_val_and_test(tmp):
    make_precomp(tmp, ids=["391895", "522418"])
    for f in ("ims.npy", "caps.txt"):
        shutil.copy(tmp / f"test_{f}", tmp / f"dev_{f}")
    (tmp / "dev_ids.txt").write_text("522418\n7\n")
    return lambda: read_precomp(tmp, ["test", "val"])


@case("precomp", "absent", r"tset_ims.npy: missing \(precomp region features of split 'tset'\)")
def split_name_typo(tmp):
    make_precomp(tmp)
    return lambda: read_precomp(tmp, ["tset"])


@case("precomp", "absent", r"test_ims.npy: no images in split 'test'")
def empty_split(tmp):
    read = precomp(tmp)
    np.save(tmp / "test_ims.npy", np.zeros((0, 3, 4), np.float32))
    (tmp / "test_caps.txt").write_text("")
    (tmp / "test_ids.txt").write_text("")
    return read


@case("precomp", "malformed", r"test_caps.txt: line 3: not valid UTF-8")
def caption_not_utf8(tmp):
    read = precomp(tmp)
    (tmp / "test_caps.txt").write_bytes(b"a\nb\ncaf\xe9\n" + b"c\n" * 7)
    return read


@case("precomp", "malformed", r"test_caps.txt: line 2: empty caption")
def empty_caption(tmp):
    read = precomp(tmp)
    (tmp / "test_caps.txt").write_text("a\n \n" + "c\n" * 8)
    return read


@case("precomp", "malformed", r"test_ims.npy: unreadable feature array")
def features_pickled(tmp):
    read = precomp(tmp)
    np.save(tmp / "test_ims.npy", np.array([{"a": 1}, {"b": 2}], dtype=object), allow_pickle=True)
    return read


@case("precomp", "malformed", r"test_ims.npy: 3 regions per image, expected 36")
def wrong_region_count(tmp):
    return precomp(tmp, n_regions=36)


# ----------------------------------------------------------------------------------------- karpathy
def karpathy(
    tmp: Path, change: Callable[[dict], object] | None = None, name: str = "dataset_coco.json", **kw
):
    path = karpathy_tree(tmp, name)
    if change is not None:
        edit_json(path, change)
    return lambda: read_karpathy(path, tmp / "images", **kw)


def set_image(i: int, key: str, value: object) -> Callable[[dict], None]:
    return lambda d: d["images"][i].__setitem__(key, value)


def set_sentence(i: int, j: int, key: str, value: object) -> Callable[[dict], None]:
    return lambda d: d["images"][i]["sentences"][j].__setitem__(key, value)


@case("karpathy", "crash", r"dataset_coco.json: not a file")
def json_is_a_directory(tmp):
    (tmp / "dataset_coco.json").mkdir()
    return lambda: read_karpathy(tmp / "dataset_coco.json", tmp)


@case("karpathy", "coerced", r"dataset_coco.json: images\[1\]: cocoid 7.0 is not an integer")
def cocoid_float(tmp):
    return karpathy(tmp, set_image(1, "cocoid", 7.0))


@case("karpathy", "coerced", r"dataset_coco.json: images\[1\]: cocoid nan is not an integer")
def cocoid_nan(tmp):
    return karpathy(tmp, set_image(1, "cocoid", float("nan")))


@case("karpathy", "coerced", r"dataset_coco.json: images\[1\]: cocoid True is not an integer")
def cocoid_bool(tmp):
    return karpathy(tmp, set_image(1, "cocoid", True))


@case("karpathy", "coerced", r"dataset_coco.json: images\[1\]: cocoid '7' is not an integer")
def cocoid_text(tmp):
    return karpathy(tmp, set_image(1, "cocoid", "7"))


@case(
    "karpathy",
    "coerced",
    r"dataset_coco.json: image 7: sentences\[1\]: sentid 21.0 is not an integer or text",
)
def sentid_float(tmp):
    return karpathy(tmp, set_sentence(1, 1, "sentid", 21.0))


@case(
    "karpathy",
    "leak",
    r"dataset_coco.json: image 42: images\[1\] \(split 'train'\) has the id of images\[0\]",
)
def same_image_in_train_and_test(tmp):
    return karpathy(tmp, set_image(1, "cocoid", 42))


@case(
    "karpathy",
    "leak",
    r"dataset_flickr30k.json: image 1000092795: images\[1\] \(split 'train'\) has the id of",
)
def same_file_stem_twice(tmp):
    return karpathy(
        tmp, set_image(1, "filename", "1000092795.png"), "dataset_flickr30k.json", splits=["train"]
    )


@case("karpathy", "dropped", r"dataset_coco.json: image 7: sentence 10: sentid already used by image 42")
def sentid_twice(tmp):
    return karpathy(tmp, set_sentence(1, 0, "sentid", 10))


@case("karpathy", "dropped", r"dataset_coco.json: image 7: sentence 21: imgid 0 is not the image's imgid 1")
def sentence_of_another_image(tmp):
    return karpathy(tmp, set_sentence(1, 1, "imgid", 0))


@case("karpathy", "dropped", r"dataset_coco.json: image 7: sentids \[20, 21, 22, 23\] are not its sentences'")
def sentids_disagree(tmp):
    return karpathy(tmp, set_image(1, "sentids", [20, 21, 22, 23]))


@case(
    "karpathy", "dropped", r"dataset_coco.json: restval='trian' is not a split \(train, val, test, restval\)"
)
def restval_typo(tmp):
    return karpathy(tmp, restval="trian")


@case("karpathy", "dropped", r"dataset_coco.json: images\[3\]: unknown split 'dev'")
def unknown_split_value(tmp):
    return karpathy(tmp, set_image(3, "split", "dev"))


@case(
    "karpathy", "absent", r"dataset_coco.json: no split 'tset' \(Karpathy splits: train, val, test, restval\)"
)
def requested_split_typo(tmp):
    return karpathy(tmp, splits=["train", "tset"])


@case("karpathy", "absent", r"dataset_coco.json: no image has split 'val'")
def requested_split_empty(tmp):
    return karpathy(tmp, set_image(3, "split", "test"))


@case(
    "karpathy",
    "absent",
    r"COCO_val2014_000000000005.jpg: missing image file of image 5 \(dataset_coco.json\)",
)
def image_file_missing(tmp):
    read = karpathy(tmp)
    (tmp / "images" / "val2014" / "COCO_val2014_000000000005.jpg").unlink()
    return read


@case("karpathy", "malformed", r"dataset_coco.json: image 42: 6 captions, expected 5")
def caption_count(tmp):
    return karpathy(tmp, captions_per_image=5)


@case("karpathy", "malformed", r"dataset_coco.json: image 7: sentence 21: caption is not text")
def raw_not_text(tmp):
    return karpathy(tmp, set_sentence(1, 1, "raw", 5))


@case("karpathy", "malformed", r"dataset_coco.json: image 7: sentence 21: empty caption")
def raw_empty(tmp):
    return karpathy(tmp, set_sentence(1, 1, "raw", " "))


@case("karpathy", "malformed", r"dataset_coco.json: images\[2\]: no 'filename'")
def filename_missing(tmp):
    return karpathy(tmp, lambda d: d["images"][2].pop("filename"))


@case("karpathy", "malformed", r"dataset_coco.json: images\[2\]: filename '' is not a file name")
def filename_empty(tmp):
    return karpathy(tmp, set_image(2, "filename", ""))


@case("karpathy", "malformed", r"dataset_coco.json: images\[1\]: not a record")
def image_not_a_record(tmp):
    return karpathy(tmp, lambda d: d["images"].__setitem__(1, "COCO_train2014_000000000007.jpg"))


@case("karpathy", "malformed", r"dataset_coco.json: image 7: sentences\[0\]: not a record")
def sentence_not_a_record(tmp):
    return karpathy(tmp, set_image(1, "sentences", ["A cat."] * 5))


@case("karpathy", "malformed", r"dataset_coco.json: line 35: invalid JSON")
def invalid_json(tmp):
    path = karpathy_tree(tmp)
    path.write_text(path.read_text()[:-3])
    return lambda: read_karpathy(path, tmp / "images")


@case("karpathy", "malformed", r"dataset_coco.json: images\[1\]: filepath 5 is not a directory name")
def filepath_not_text(tmp):
    return karpathy(tmp, set_image(1, "filepath", 5))


@case("karpathy", "malformed", r"dataset_coco.json: image 7: sentences is not a list")
def sentences_not_a_list(tmp):
    return karpathy(tmp, set_image(1, "sentences", "A cat."))


@case("karpathy", "malformed", r"dataset_coco.json: no 'images' list \(not a Karpathy split file\)")
def no_images_list(tmp):
    return karpathy(tmp, lambda d: d.pop("images"))


@case(
    "karpathy",
    "absent",
    r"dataset_coco.json: split 'restval' asked for, but restval='train' moves its images",
)
def restval_split_moved(tmp):
    return karpathy(tmp, splits=["train", "restval"])


# ---------------------------------------------------------------------------------- COCO instances
def instances(tmp: Path, change: Callable[[dict], object] | None = None, copies: int = 1):
    paths = []
    for c in range(copies):
        path = tmp / f"instances_{c}.json"
        shutil.copy(FIXTURES / "karpathy" / "instances_val2014.json", path)
        if change is not None and c == copies - 1:
            edit_json(path, change)
        paths.append(path)
    return lambda: read_coco_instances(paths)


def set_record(part: str, i: int, key: str, value: object) -> Callable[[dict], None]:
    return lambda d: d[part][i].__setitem__(key, value)


@case("coco_instances", "crash", r"instances_0.json: not a file")
def instances_is_a_directory(tmp):
    (tmp / "instances_0.json").mkdir()
    return lambda: read_coco_instances([tmp / "instances_0.json"])


@case("coco_instances", "crash", r"instances_0.json: not a COCO instances file \(a list, not a record\)")
def instances_top_level_list(tmp):
    (tmp / "instances_0.json").write_text("[]")
    return lambda: read_coco_instances([tmp / "instances_0.json"])


@case("coco_instances", "crash", r"instances_0.json: annotations\[2\]: not a record")
def annotation_not_a_record(tmp):
    return instances(tmp, lambda d: d["annotations"].__setitem__(2, 42))


@case("coco_instances", "coerced", r"instances_0.json: categories\[0\]: id 6.9 is not an integer")
def category_id_float(tmp):
    return instances(tmp, set_record("categories", 0, "id", 6.9))


@case("coco_instances", "coerced", r"instances_0.json: categories\[0\]: id '6' is not an integer")
def category_id_text(tmp):
    return instances(tmp, set_record("categories", 0, "id", "6"))


@case("coco_instances", "coerced", r"instances_0.json: annotation 504: category_id 6.9 is not an integer")
def annotation_category_float(tmp):
    return instances(tmp, set_record("annotations", 3, "category_id", 6.9))


@case("coco_instances", "coerced", r"instances_0.json: images\[0\]: id 42.0 is not an integer or text")
def image_id_float(tmp):
    return instances(tmp, set_record("images", 0, "id", 42.0))


@case("coco_instances", "coerced", r"instances_0.json: images\[2\]: id nan is not an integer or text")
def image_id_nan(tmp):
    return instances(tmp, set_record("images", 2, "id", float("nan")))


@case(
    "coco_instances", "coerced", r"instances_0.json: annotation 504: image '99' is not in the file's images"
)
def annotation_image_id_as_text(tmp):
    return instances(tmp, set_record("annotations", 3, "image_id", "99"))


@case("coco_instances", "dropped", r"instances_0.json: categories\[2\]: id 6 repeats categories\[0\]")
def category_id_twice(tmp):
    return instances(tmp, set_record("categories", 2, "id", 6))


@case("coco_instances", "dropped", r"instances_0.json: categories\[2\]: name 'bus' repeats categories\[0\]")
def category_name_twice(tmp):
    return instances(tmp, set_record("categories", 2, "name", "bus"))


@case("coco_instances", "leak", r"instances_1.json: image 42 listed twice")
def image_in_two_files(tmp):
    return instances(tmp, copies=2)


@case("coco_instances", "leak", r"instances_0.json: image 5 listed twice")
def image_twice_in_a_file(tmp):
    return instances(tmp, set_record("images", 1, "id", 5))


@case("coco_instances", "absent", r"instances_0.json: image 7 \(and 0 more\) not found")
def labels_of_an_unknown_image(tmp):
    shutil.copy(FIXTURES / "karpathy" / "instances_val2014.json", tmp / "instances_0.json")
    return lambda: coco_image_labels([tmp / "instances_0.json"], ["42", "7"])


@case("coco_instances", "absent", r"instances_0.json: annotation 504: unknown category id 7")
def unknown_category(tmp):
    return instances(tmp, set_record("annotations", 3, "category_id", 7))


@case("coco_instances", "malformed", r"instances_0.json: no 'categories' list")
def no_categories(tmp):
    return instances(tmp, lambda d: d.pop("categories"))


@case("coco_instances", "malformed", r"instances_0.json: categories\[1\]: no 'name'")
def category_without_name(tmp):
    return instances(tmp, lambda d: d["categories"][1].pop("name"))


@case("coco_instances", "malformed", r"instances_1.json: categories differ from those of .*instances_0.json")
def categories_differ(tmp):
    return instances(tmp, set_record("categories", 2, "name", "cat"), copies=2)


@case("coco_instances", "malformed", r"instances_0.json: images\[1\]: not a record")
def instances_image_not_a_record(tmp):
    return instances(tmp, lambda d: d["images"].__setitem__(1, 99))


@case("coco_instances", "malformed", r"instances_0.json: annotation 503: no 'category_id'")
def annotation_without_category(tmp):
    return instances(tmp, lambda d: d["annotations"][2].pop("category_id"))


# ---------------------------------------------------------------------------------------------- CUB
def cub(tmp: Path, splits=("train", "val", "test"), **kw):
    cub_tree(tmp)
    return lambda: read_cub(tmp, splits, **kw)


def rel(c: int, i: int) -> str:
    return f"{CUB_CLASSES[c]}/{CUB_IMAGES[c][i]}.jpg"


def listing(tmp: Path, rels: list[str]) -> None:
    (tmp / "images.txt").write_text("".join(f"{i + 1} {r}\n" for i, r in enumerate(rels)))


ALL_CUB = [rel(c, i) for c, stems in CUB_IMAGES.items() for i in range(len(stems))]


@case("cub", "crash", r"trainvalclasses.txt: not a file")
def class_file_is_a_directory(tmp):
    read = cub(tmp)
    (tmp / "trainvalclasses.txt").unlink()
    (tmp / "trainvalclasses.txt").mkdir()
    return read


@case("cub", "crash", r"images: not a directory")
def images_is_a_file(tmp):
    read = cub(tmp)
    shutil.rmtree(tmp / "images")
    (tmp / "images").write_text("")
    return read


@case("cub", "crash", r"Laysan_Albatross_0001_545.txt: not a file")
def caption_file_is_a_directory(tmp):
    read = cub(tmp)
    (tmp / "text_c10" / CUB_CLASSES[1] / f"{CUB_IMAGES[1][0]}.txt").unlink()
    (tmp / "text_c10" / CUB_CLASSES[1] / f"{CUB_IMAGES[1][0]}.txt").mkdir()
    return read


@case("cub", "dropped", r"002.Laysan_Albatross: class of image Laysan_Albatross_0001_545 is in neither")
def class_in_neither_file(tmp):
    read = cub(tmp)
    (tmp / "trainvalclasses.txt").write_text(f"{CUB_CLASSES[0]}\n")
    return read


@case("cub", "dropped", r"images.txt: image 002.Laysan_Albatross/Laysan_Albatross_0001_545.jpg is not listed")
def image_not_in_listing(tmp):
    read = cub(tmp)
    listing(tmp, [r for r in ALL_CUB if "Laysan" not in r])
    return read


@case("cub", "dropped", r"images/001.Black_footed_Albatross/notes.txt: not an image")
def non_image_file(tmp):
    read = cub(tmp)
    (tmp / "images" / CUB_CLASSES[0] / "notes.txt").write_text("x")
    return read


@case(
    "cub",
    "dropped",
    r"seen_test_images.txt: line 2: image .*Sooty_Albatross_0001_1071.jpg is of a test class",
)
def seen_test_image_of_a_test_class(tmp):
    read = cub(tmp)
    (tmp / "seen_test_images.txt").write_text(f"{rel(0, 1)}\n{rel(2, 0)}\n")
    return read


@case("cub", "dropped", r"testclasses.txt: line 2: class '003.Sooty_Albatross' repeats line 1")
def class_twice_in_a_file(tmp):
    read = cub(tmp)
    (tmp / "testclasses.txt").write_text(f"{CUB_CLASSES[2]}\n{CUB_CLASSES[2]}\n")
    return read


@case("cub", "dropped", r"seen_test_images.txt: line 2: image '.*_0002_55.jpg' repeats line 1")
def seen_test_image_twice(tmp):
    read = cub(tmp)
    (tmp / "seen_test_images.txt").write_text(f"{rel(0, 1)}\n{rel(0, 1)}\n")
    return read


@case("cub", "leak", r"testclasses.txt: line 1: class '002.Laysan_Albatross' is also a trainval class")
def class_on_both_sides(tmp):
    read = cub(tmp)
    (tmp / "testclasses.txt").write_text(f"{CUB_CLASSES[1]}\n{CUB_CLASSES[2]}\n")
    return read


@case(
    "cub",
    "leak",
    r"003.Sooty_Albatross/Laysan_Albatross_0001_545.jpg: image id Laysan_Albatross_0001_545 is also",
)
def same_stem_in_two_classes(tmp):
    read = cub(tmp)
    shutil.copy(tmp / "images" / rel(1, 0), tmp / "images" / CUB_CLASSES[2] / f"{CUB_IMAGES[1][0]}.jpg")
    shutil.copy(
        tmp / "text_c10" / CUB_CLASSES[1] / f"{CUB_IMAGES[1][0]}.txt",
        tmp / "text_c10" / CUB_CLASSES[2] / f"{CUB_IMAGES[1][0]}.txt",
    )
    return read


@case(
    "cub",
    "leak",
    r"test_images.txt: line 1: image .*Sooty_Albatross_0001_1071.jpg is also in train_images.txt",
)
def image_in_two_split_lists(tmp):
    read = cub(tmp, image_lists=True)
    (tmp / "train_images.txt").write_text(f"{ALL_CUB[0]}\n{ALL_CUB[1]}\n{ALL_CUB[3]}\n")
    (tmp / "val_images.txt").write_text(f"{ALL_CUB[2]}\n")
    (tmp / "test_images.txt").write_text(f"{ALL_CUB[3]}\n{ALL_CUB[4]}\n")
    return read


@case("cub", "dropped", r"images.txt: image .*Sooty_Albatross_0002_796.jpg is in no split list")
def image_in_no_split_list(tmp):
    read = cub(tmp, image_lists=True)
    (tmp / "train_images.txt").write_text("".join(f"{r}\n" for r in ALL_CUB[:3]))
    (tmp / "val_images.txt").write_text(f"{ALL_CUB[3]}\n")
    (tmp / "test_images.txt").write_text("")
    return read


@case("cub", "coerced", r"images/002.Laysan_Albatross: class number 2 repeats 002.Black_footed_Albatross")
def class_number_twice(tmp):
    read = cub(tmp)
    (tmp / "images" / "002.Black_footed_Albatross").mkdir()
    return read


@case("cub", "coerced", r"images.txt: line 2: '7 .*' is not '<line number> <class>/<image>'")
def listing_misnumbered(tmp):
    read = cub(tmp)
    (tmp / "images.txt").write_text(f"1 {ALL_CUB[0]}\n7 {ALL_CUB[1]}\n")
    return read


@case("cub", "absent", r"CUB_.*: no split 'tset' \(CUB splits: train, val, test\)")
def cub_split_typo(tmp):
    root = tmp / "CUB_200_2011"
    cub_tree(root)
    return lambda: read_cub(root, ["train", "tset"])


@case("cub", "absent", r"seen_test_images.txt: no images in split 'val'")
def empty_val_split(tmp):
    read = cub(tmp)
    (tmp / "seen_test_images.txt").write_text("")
    return read


@case("cub", "absent", r"seen_test_images.txt: line 1: unknown image '001.Black_footed_Albatross/Nope.jpg'")
def seen_test_image_unknown(tmp):
    read = cub(tmp)
    (tmp / "seen_test_images.txt").write_text(f"{CUB_CLASSES[0]}/Nope.jpg\n")
    return read


@case("cub", "malformed", r"Laysan_Albatross_0001_545.txt: 9 captions for image Laysan_Albatross_0001_545")
def cub_caption_count(tmp):
    read = cub(tmp)
    (tmp / "text_c10" / CUB_CLASSES[1] / f"{CUB_IMAGES[1][0]}.txt").write_text("c\n" * 9)
    return read


@case("cub", "malformed", r"testclasses.txt: line 1: unknown class '200.Common_Yellowthroat'")
def unknown_class(tmp):
    read = cub(tmp)
    (tmp / "testclasses.txt").write_text("200.Common_Yellowthroat\n")
    return read


@case("cub", "dropped", r"images/stray.jpg: not in a class directory")
def image_outside_class_directories(tmp):
    read = cub(tmp)
    (tmp / "images" / "stray.jpg").write_bytes(b"")
    return read


@case("cub", "leak", r"images.txt: line 6: image .*Sooty_Albatross_0002_796.jpg repeats line 5")
def image_listed_twice(tmp):
    read = cub(tmp)
    listing(tmp, ALL_CUB + [ALL_CUB[-1]])
    return read


@case("cub", "malformed", r"images.txt: line 2: unknown class in '2 004.Nope/x.jpg'")
def listing_unknown_class(tmp):
    read = cub(tmp)
    (tmp / "images.txt").write_text(f"1 {ALL_CUB[0]}\n2 004.Nope/x.jpg\n")
    return read


@case(
    "cub",
    "absent",
    r"images/001.Black_footed_Albatross/Nope.jpg: missing image file \(listed at images.txt line 2\)",
)
def listing_missing_file(tmp):
    read = cub(tmp)
    (tmp / "images.txt").write_text(f"1 {ALL_CUB[0]}\n2 {CUB_CLASSES[0]}/Nope.jpg\n")
    return read


# ---------------------------------------------------------------------------------------- Drill-down
def drilldown(tmp: Path, split: str = "test", **kw):
    drilldown_tree(tmp)
    return lambda: read_drilldown_split(tmp, split, n_regions=4, min_queries=3, **kw)


def edit_regions(tmp: Path, index: int, change: Callable[[list], object]) -> None:
    edit_json(tmp / "vg" / "rg_jsons" / f"{index}.json", lambda d: change(d["regions"]))


def write_pickle(tmp: Path, index: int, data: object) -> None:
    (tmp / "vg" / "region_36_final" / f"{index:012d}.npy").write_bytes(pickle.dumps(data, protocol=2))


FEATS = np.ones((4, 3), np.float32)
BOXES = np.zeros((4, 4), np.float32)


@case("drilldown", "crash", r"vg_test.txt: not a file")
def split_file_is_a_directory(tmp):
    read = drilldown(tmp)
    (tmp / "caches" / "vg_test.txt").unlink()
    (tmp / "caches" / "vg_test.txt").mkdir()
    return read


@case("drilldown", "crash", r"rg_jsons/3.json: not a file")
def region_graph_is_a_directory(tmp):
    read = drilldown(tmp)
    (tmp / "vg" / "rg_jsons" / "3.json").unlink()
    (tmp / "vg" / "rg_jsons" / "3.json").mkdir()
    return read


@case("drilldown", "crash", r"000000000003.npy: not a file")
def region_pickle_is_a_directory(tmp):
    read = drilldown(tmp)
    (tmp / "vg" / "region_36_final" / f"{3:012d}.npy").unlink()
    (tmp / "vg" / "region_36_final" / f"{3:012d}.npy").mkdir()
    return read


@case("drilldown", "crash", r"000000000003.npy: region_feats of dtype <U1, expected numbers")
def region_features_are_strings(tmp):
    read = drilldown(tmp)
    write_pickle(tmp, 3, {"region_feats": np.full((4, 3), "x"), "region_boxes": BOXES})
    return read


@case("drilldown", "crash", r"000000000003.npy: region_boxes of dtype <U1, expected numbers")
def region_boxes_are_strings(tmp):
    read = drilldown(tmp)
    write_pickle(tmp, 3, {"region_feats": FEATS, "region_boxes": np.full((4, 4), "x")})
    return read


@case("drilldown", "crash", r"000000000003.npy: region_feats of shape \(4, 2\), expected \(4, 3\)")
def region_features_of_another_width(tmp):
    read = drilldown(tmp)
    write_pickle(tmp, 3, {"region_feats": np.ones((4, 2), np.float32), "region_boxes": BOXES})
    return read


@case("drilldown", "malformed", r"000000000003.npy: region_boxes contain NaN or inf")
def region_boxes_nan(tmp):
    read = drilldown(tmp)
    write_pickle(tmp, 3, {"region_feats": FEATS, "region_boxes": np.full((4, 4), np.nan, np.float32)})
    return read


@case("drilldown", "malformed", r"000000000003.npy: region_boxes present in some region files")
def region_boxes_in_some_files(tmp):
    read = drilldown(tmp)
    write_pickle(tmp, 3, {"region_feats": FEATS})
    return read


@case("drilldown", "coerced", r"vg_test.txt: line 2: '03' is not an image index")
def index_with_leading_zero(tmp):
    read = drilldown(tmp)
    (tmp / "caches" / "vg_test.txt").write_text("11\n03\n")
    return read


@case("drilldown", "coerced", r"vg_test.txt: line 2: '³' is not an image index")
def index_unicode_digit(tmp):
    read = drilldown(tmp)
    (tmp / "caches" / "vg_test.txt").write_text("11\n³\n")
    return read


@case("drilldown", "coerced", r"rg_jsons/3.json: regions\[1\]: region_id 12.9 is not an integer")
def region_id_float(tmp):
    read = drilldown(tmp)
    edit_regions(tmp, 3, lambda r: r[1].__setitem__("region_id", 12.9))
    return read


@case("drilldown", "coerced", r"rg_jsons/3.json: regions\[1\]: region_id '12' is not an integer")
def region_id_text(tmp):
    read = drilldown(tmp)
    edit_regions(tmp, 3, lambda r: r[1].__setitem__("region_id", "12"))
    return read


@case("drilldown", "dropped", r"rg_jsons/3.json: regions\[3\]: region_id 12 repeats regions\[1\]")
def region_id_twice(tmp):
    read = drilldown(tmp)
    edit_regions(tmp, 3, lambda r: r[3].__setitem__("region_id", 12))
    return read


@case("drilldown", "dropped", r"rg_jsons/3.json: image_id 11 is not the file's image 3")
def region_graph_of_another_image(tmp):
    read = drilldown(tmp)
    edit_json(tmp / "vg" / "rg_jsons" / "3.json", lambda d: d.__setitem__("image_id", 11))
    return read


@case("drilldown", "dropped", r"vg_test.txt: line 3: image 11 repeats line 1")
def index_twice(tmp):
    read = drilldown(tmp)
    (tmp / "caches" / "vg_test.txt").write_text("11\n3\n11\n")
    return read


@case("drilldown", "leak", r"vg_val.txt: image '11' \(row 0\) of split 'val' is also in split 'test'")
def same_index_in_val_and_test(tmp):
    drilldown_tree(tmp)
    (tmp / "caches" / "vg_val.txt").write_text("11\n")
    return lambda: read_drilldown(tmp, ["test", "val"], n_regions=4, min_queries=3)


@case("drilldown", "absent", r"vg_tset.txt: missing \(image index of split 'tset'\)")
def drilldown_split_typo(tmp):
    return drilldown(tmp, "tset")


@case("drilldown", "absent", r"vg_test.txt: no images in split 'test'")
def empty_split_file(tmp):
    read = drilldown(tmp)
    (tmp / "caches" / "vg_test.txt").write_text("")
    return read


@case("drilldown", "malformed", r"rg_jsons/11.json: 3 region captions, expected at least 10")
def too_few_queries(tmp):
    drilldown_tree(tmp)
    return lambda: read_drilldown_split(tmp, "test", n_regions=4)


@case("drilldown", "malformed", r"rg_jsons/3.json: region 17: caption is not text")
def phrase_not_text(tmp):
    read = drilldown(tmp)
    edit_regions(tmp, 3, lambda r: r[2].__setitem__("phrase", 17))
    return read


@case("drilldown", "malformed", r"rg_jsons/3.json: region 30: no 'phrase'")
def phrase_missing(tmp):
    read = drilldown(tmp)
    edit_regions(tmp, 3, lambda r: r[0].pop("phrase"))
    return read


@case("drilldown", "malformed", r"rg_jsons/3.json: no 'regions' list")
def region_graph_is_a_list(tmp):
    read = drilldown(tmp)
    (tmp / "vg" / "rg_jsons" / "3.json").write_text("[]")
    return read


@case("drilldown", "crash", r"000000000003.npy: region_boxes of shape \(4, 5\), expected \(4, 4\)")
def region_boxes_of_another_shape(tmp):
    read = drilldown(tmp)
    write_pickle(tmp, 3, {"region_feats": FEATS, "region_boxes": np.zeros((4, 5), np.float32)})
    return read


@case("drilldown", "malformed", r"000000000003.npy: no 'region_feats' in the region pickle")
def region_pickle_without_features(tmp):
    read = drilldown(tmp)
    write_pickle(tmp, 3, {"region_boxes": BOXES})
    return read


@case("drilldown", "malformed", r"vg_test.txt: line 1: '-3' is not an image index")
def negative_index(tmp):
    read = drilldown(tmp)
    (tmp / "caches" / "vg_test.txt").write_text("-3\n11\n")
    return read


# ------------------------------------------------------------------------------------------ sidecar
def sidecar(tmp: Path, **arrays) -> Callable[[], object]:
    """A precomp test split (2 images, 5 captions each) with `xmr_test.npz` holding `arrays`, written by hand."""
    make_precomp(tmp, ids=["391895", "522418"])
    with open(tmp / "xmr_test.npz", "wb") as fh:
        np.savez(fh, **arrays)
    return lambda: read_precomp_split(tmp, "test", "test")


QUERIES = {"queries_flat": np.array(["a", "b", "c"]), "queries_offsets": np.array([0, 1, 3])}
EXACT = np.ones((10, 2), bool)


@case("sidecar", "crash", r"xmr_test.npz: exact_bits without exact_shape")
def exact_bits_alone(tmp):
    return sidecar(tmp, exact_bits=np.packbits(EXACT, axis=1))


@case("sidecar", "crash", r"xmr_test.npz: queries_offsets without queries_flat")
def offsets_alone(tmp):
    return sidecar(tmp, queries_offsets=QUERIES["queries_offsets"])


@case("sidecar", "dropped", r"xmr_test.npz: queries_flat without queries_offsets")
def flat_alone(tmp):
    return sidecar(tmp, queries_flat=QUERIES["queries_flat"])


@case("sidecar", "crash", r"xmr_test.npz: exact_bits of shape \(10, 1\) for exact_shape \[5, 2\]")
def exact_shape_inconsistent(tmp):
    return sidecar(tmp, exact_bits=np.packbits(EXACT, axis=1), exact_shape=np.array([5, 2]))


@case("sidecar", "crash", r"xmr_test.npz: field 'regions' of dtype <U1, expected float")
def sidecar_features_are_strings(tmp):
    return sidecar(tmp, regions=np.full((2, 3, 4), "x"))


@case("sidecar", "crash", r"xmr_test.npz: field 'images' of shape \(2, 4, 4\), expected \(N, H, W, 3\)")
def images_of_three_dims(tmp):
    return sidecar(tmp, images=np.zeros((2, 4, 4), np.uint8))


@case("sidecar", "dropped", r"xmr_test.npz: queries_offsets\[2\] = 1: the offsets must rise from 0 to 3")
def offsets_overlap(tmp):
    return sidecar(tmp, queries_flat=QUERIES["queries_flat"], queries_offsets=np.array([0, 2, 1, 3]))


@case("sidecar", "dropped", r"xmr_test.npz: queries_offsets\[2\] = 2: the offsets must rise from 0 to 3")
def offsets_short_of_the_end(tmp):
    return sidecar(tmp, queries_flat=QUERIES["queries_flat"], queries_offsets=np.array([0, 1, 2]))


@case("sidecar", "dropped", r"xmr_test.npz: field 'caption_level' has 9 entries for 10 captions")
def per_caption_field_short(tmp):
    return sidecar(tmp, caption_level=np.array(["full"] * 9))


@case("sidecar", "coerced", r"xmr_test.npz: field 'image_ids' of dtype int64, expected text")
def image_ids_not_text(tmp):
    return sidecar(tmp, image_ids=np.array([391895, 522418]))


@case("sidecar", "coerced", r"xmr_test.npz: field 'image_class' of dtype float64, expected integers")
def image_class_float(tmp):
    return sidecar(tmp, image_class=np.array([0.0, 1.5]), class_names=np.array(["a", "b"]))


@case("sidecar", "coerced", r"xmr_test.npz: image '522418': image_labels are not 0/1")
def labels_not_binary(tmp):
    return sidecar(tmp, image_labels=np.array([[0, 1], [2, 0]], np.uint8))


@case("sidecar", "malformed", r"xmr_test.npz: image '391895': region_boxes contain NaN or inf")
def boxes_nan(tmp):
    return sidecar(tmp, region_boxes=np.full((2, 3, 4), np.nan, np.float32))


@case("sidecar", "leak", r"xmr_test.npz: image_ids\[1\] 'x' repeats image_ids\[0\]")
def sidecar_image_id_twice(tmp):
    return sidecar(tmp, image_ids=np.array(["x", "x"]))


@case("sidecar", "leak", r"xmr_val.npz: image 'x' \(row 0\) of split 'val' is also in split 'test'")
def sidecar_image_in_two_splits(tmp):
    make_precomp(tmp)
    for f in ("ims.npy", "caps.txt"):
        shutil.copy(tmp / f"test_{f}", tmp / f"dev_{f}")
    np.savez(tmp / "xmr_test.npz", image_ids=np.array(["x", "y"]))
    np.savez(tmp / "xmr_val.npz", image_ids=np.array(["x", "z"]))
    return lambda: read_precomp(tmp, ["test", "val"])


@case("sidecar", "absent", r"xmr_test.npz: image '522418': image_class 2 is not one of the 2 class_names")
def class_that_does_not_exist(tmp):
    return sidecar(tmp, image_class=np.array([0, 2]), class_names=np.array(["a", "b"]))


@case("sidecar", "malformed", r"xmr_test.npz: unknown sidecar field 'colour'")
def unknown_field(tmp):
    return sidecar(tmp, colour=np.zeros(2))


@case("sidecar", "malformed", r"xmr_test.npz: unreadable sidecar")
def sidecar_not_a_zip(tmp):
    make_precomp(tmp)
    (tmp / "xmr_test.npz").write_text("not a zip")
    return lambda: read_precomp_split(tmp, "test", "test")


@case("sidecar", "absent", r"xmr_test.npz: caption '7': caption_image 2 is not one of 2 images")
def caption_of_no_image(tmp):
    return sidecar(tmp, caption_image=np.array([0] * 5 + [1, 1, 2, 1, 1]))


@case("sidecar", "dropped", r"xmr_test.npz: caption_ids\[3\] 'b' repeats caption_ids\[1\]")
def sidecar_caption_id_twice(tmp):
    return sidecar(tmp, caption_ids=np.array(["a", "b", "c", "b", "e", "f", "g", "h", "i", "j"]))


@case("sidecar", "crash", r"xmr_test.npz: exact relevance of 3 images for 2")
def exact_of_other_images(tmp):
    return sidecar(tmp, exact_bits=np.packbits(np.ones((10, 3), bool), axis=1), exact_shape=np.array([10, 3]))


@pytest.mark.parametrize("reader, kind, build, expected", CASES)
def test_malformed_input_is_one_line_naming_the_file_and_the_record(
    tmp_path: Path, reader: str, kind: str, build: Build, expected: str
) -> None:
    read = build(tmp_path)
    with pytest.raises(DataFormatError) as err:
        read()
    message = str(err.value)
    assert "\n" not in message
    assert re.search(expected, message), message


def test_every_reader_is_tried_with_every_kind() -> None:
    tried = Counter((p.values[0], p.values[1]) for p in CASES)
    assert [(r, k) for r in READERS for k in KINDS if not tried[r, k]] == []
