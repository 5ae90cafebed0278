"""CUB Captions: CUB-200-2011 images, Reed et al.'s `text_c10` captions, Xian et al.'s zero-shot class split.

Layout under `root` (the `CUB_200_2011` directory):

- `images/<NNN.Class_Name>/<image>.jpg` and optionally `images.txt` (`<n> <NNN.Class_Name>/<image>.jpg`,
  which fixes the image order; without it, images are sorted by class, then file name);
- `text_c10/<NNN.Class_Name>/<image>.txt`: `captions_per_image` (10) captions, one per line;
- `trainvalclasses.txt` (150 classes), `testclasses.txt` (50 unseen classes): one class directory name
  per line (Xian et al., CVPR 2017, `xlsa17/data/CUB/`);
- `seen_test_images.txt` (from PCME's repository): `<NNN.Class_Name>/<image>.jpg` of trainval classes
  held out of training.

Splits as in PCME: `train` = trainval classes minus the seen test images, `val` = the seen test images
(PCME's `val_in`), `test` = the unseen test classes (PCME's evaluation split). With `image_lists`, split
`s` is instead the images listed in `<s>_images.txt` (like PCME's `ids` file): how a corpus whose splits
are not class-disjoint (the scenes benchmark) is written; the class files then only record the class split. An image is named by its
file stem, its class index is the position of its class directory in numeric order (NNN - 1 for CUB),
and `class_names` drops the `NNN.` prefix. Relevance: the class view (same class = positive).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from xmr_core.data.corpus import Corpus, DataFormatError, Split
from xmr_core.data.formats.common import (
    IMAGE_SUFFIXES,
    check_disjoint,
    first_repeat,
    load_pixels,
    read_lines,
    require,
    require_dir,
    write_lines,
    write_png,
)
from xmr_core.data.formats.sidecar import apply_sidecar

TRAINVAL_CLASSES = "trainvalclasses.txt"
TEST_CLASSES = "testclasses.txt"
SEEN_TEST_IMAGES = "seen_test_images.txt"
CLASS_DIR = re.compile(r"^([0-9]+)\.(.+)$")
SPLITS = ("train", "val", "test")


@dataclass
class _Layout:
    """A checked CUB tree: class directories in numeric order, image paths `<class dir>/<file>` in order,
    the class split, the seen-class test images (PCME) and, with `image_lists`, each split's image list."""

    class_dirs: list[str]
    rels: list[str]
    trainval: set[str]
    test: set[str]
    seen: list[str] | None
    lists: dict[str, list[str]]


def _checked(root: Path, images_dir: Path, image_lists: bool, splits: Sequence[str]) -> _Layout:
    """Every rule of the layout (docs/data.md) except the caption files, which are checked as they are read."""
    for s in splits:
        if s not in SPLITS:
            raise DataFormatError(f"{root}: no split {s!r} (CUB splits: {', '.join(SPLITS)})")
    class_dirs = []
    for p in sorted(images_dir.iterdir()):
        if not p.is_dir():
            raise DataFormatError(f"{p}: not in a class directory (expected images/NNN.Class_Name/<image>)")
        if not CLASS_DIR.match(p.name):
            raise DataFormatError(f"{p}: unknown class directory (expected NNN.Class_Name)")
        class_dirs.append(p.name)
    class_dirs.sort(key=lambda d: int(CLASS_DIR.match(d).group(1)))
    numbers = [int(CLASS_DIR.match(d).group(1)) for d in class_dirs]
    repeat = first_repeat(numbers)
    if repeat is not None:
        raise DataFormatError(
            f"{images_dir / class_dirs[repeat[0]]}: class number {numbers[repeat[0]]} repeats {class_dirs[repeat[1]]}"
        )
    on_disk = []
    for d in class_dirs:
        for f in sorted((images_dir / d).iterdir()):
            if f.name.startswith("."):
                continue
            if not f.is_file() or f.suffix.lower() not in IMAGE_SUFFIXES:
                raise DataFormatError(f"{f}: not an image ({', '.join(IMAGE_SUFFIXES)})")
            on_disk.append(f"{d}/{f.name}")
    rels = (
        _image_listing(root / "images.txt", set(class_dirs), on_disk)
        if (root / "images.txt").exists()
        else on_disk
    )
    stems = [Path(r).stem for r in rels]
    repeat = first_repeat(stems)
    if repeat is not None:
        raise DataFormatError(
            f"{images_dir / rels[repeat[0]]}: image id {stems[repeat[0]]} is also {rels[repeat[1]]}"
        )

    known = set(class_dirs)
    trainval = set(_listed(root / TRAINVAL_CLASSES, "class", known))
    test_lines = _listed(root / TEST_CLASSES, "class", known)
    test = set(test_lines)
    for i, name in enumerate(test_lines):
        if name in trainval:
            raise DataFormatError(
                f"{root / TEST_CLASSES}: line {i + 1}: class {name!r} is also a trainval class ({TRAINVAL_CLASSES})"
            )
    for rel in rels:
        d = rel.split("/", 1)[0]
        if d not in trainval and d not in test:
            raise DataFormatError(
                f"{images_dir / d}: class of image {Path(rel).stem} is in neither {TRAINVAL_CLASSES} nor {TEST_CLASSES}"
            )

    seen = None
    seen_path = root / SEEN_TEST_IMAGES
    if not image_lists and ("val" in splits or ("train" in splits and seen_path.exists())):
        seen = _listed(require(seen_path, "seen-class test images (PCME)"), "image", set(rels))
        for i, rel in enumerate(seen):
            if rel.split("/", 1)[0] in test:
                raise DataFormatError(
                    f"{seen_path}: line {i + 1}: image {rel} is of a test class ({TEST_CLASSES})"
                )
    lists: dict[str, list[str]] = {}
    if image_lists:
        owner: dict[str, str] = {}
        for s in SPLITS:
            path = root / f"{s}_images.txt"
            if s not in splits and not path.exists():
                continue
            lists[s] = _listed(path, "image", set(rels))
            for i, rel in enumerate(lists[s]):
                if rel in owner:
                    raise DataFormatError(f"{path}: line {i + 1}: image {rel} is also in {owner[rel]}")
                owner[rel] = path.name
        for rel in rels:
            if rel not in owner:
                raise DataFormatError(
                    f"{root / 'images.txt'}: image {rel} is in no split list ({', '.join(owner.values())})"
                )
    return _Layout(class_dirs, rels, trainval, test, seen, lists)


def _image_listing(listing: Path, known: set[str], on_disk: list[str]) -> list[str]:
    """`images.txt`: line i is `i <class dir>/<file>`, every image under images/ exactly once."""
    rels = []
    exists = set(on_disk)
    for i, line in enumerate(read_lines(listing, "image listing")):
        parts = line.split(maxsplit=1)
        if len(parts) != 2 or "/" not in parts[1] or parts[1].split("/", 1)[0] not in known:
            raise DataFormatError(f"{listing}: line {i + 1}: unknown class in {line!r}")
        if parts[0] != str(i + 1):
            raise DataFormatError(f"{listing}: line {i + 1}: {line!r} is not '<line number> <class>/<image>'")
        if parts[1] not in exists:
            raise DataFormatError(
                f"{listing.parent / 'images' / parts[1]}: missing image file (listed at {listing.name} line {i + 1})"
            )
        rels.append(parts[1])
    repeat = first_repeat(rels)
    if repeat is not None:
        raise DataFormatError(
            f"{listing}: line {repeat[0] + 1}: image {rels[repeat[0]]} repeats line {repeat[1] + 1}"
        )
    missing = sorted(exists - set(rels))
    if missing:
        raise DataFormatError(
            f"{listing}: image {missing[0]} is not listed ({len(missing)} images under images/ are not)"
        )
    return rels


def _listed(path: Path, what: str, known: set[str]) -> list[str]:
    """The lines of a class list (`what` "class") or an image list ("image"): each known, none twice."""
    names = read_lines(path, {"class": "class name", "image": "image path"}[what])
    for i, name in enumerate(names):
        if name not in known:
            raise DataFormatError(f"{path}: line {i + 1}: unknown {what} {name!r}")
    repeat = first_repeat(names)
    if repeat is not None:
        i, j = repeat
        raise DataFormatError(f"{path}: line {i + 1}: {what} {names[i]!r} repeats line {j + 1}")
    return names


def read_cub(
    root: str | Path,
    splits: Sequence[str] = ("train", "val", "test"),
    *,
    text_dir: str | Path | None = None,
    captions_per_image: int = 10,
    image_lists: bool = False,
    load_images: bool = False,
    progress: bool = False,
) -> Corpus:
    """Read the requested CUB splits (image paths, captions, classes); pixels too when `load_images`."""
    root = Path(root)
    images_dir = require_dir(root / "images", "CUB-200-2011 images/<class>/<image>.jpg")
    text_dir = require_dir(text_dir or root / "text_c10", "CUB captions text_c10/<class>/<image>.txt")
    layout = _checked(root, images_dir, image_lists, splits)
    seen = set(layout.seen or ())
    class_index = {d: i for i, d in enumerate(layout.class_dirs)}
    class_names = [CLASS_DIR.match(d).group(2) for d in layout.class_dirs]
    members = {
        "train": lambda cls, rel: cls in layout.trainval and rel not in seen,
        "val": lambda cls, rel: cls in layout.trainval and rel in seen,
        "test": lambda cls, rel: cls in layout.test,
    }
    out = {}
    for s in splits:
        if image_lists:
            chosen, source = layout.lists[s], root / f"{s}_images.txt"
        else:
            chosen = [rel for rel in layout.rels if members[s](rel.split("/", 1)[0], rel)]
            source = root / {"train": TRAINVAL_CLASSES, "val": SEEN_TEST_IMAGES, "test": TEST_CLASSES}[s]
        if not chosen:
            raise DataFormatError(f"{source}: no images in split {s!r}")
        stems = [Path(rel).stem for rel in chosen]
        captions, caption_ids = [], []
        for rel, stem in zip(chosen, tqdm(stems, desc=f"read {s} captions", disable=not progress)):
            path = text_dir / rel.split("/", 1)[0] / f"{stem}.txt"
            lines = read_lines(path, "caption")
            if len(lines) != captions_per_image:
                raise DataFormatError(
                    f"{path}: {len(lines)} captions for image {stem}, expected {captions_per_image}"
                )
            captions.extend(lines)
            caption_ids.extend(f"{stem}#{j}" for j in range(len(lines)))
        split = Split(
            name=s,
            source=str(root),
            image_ids=stems,
            caption_ids=caption_ids,
            captions=captions,
            caption_image=np.repeat(np.arange(len(stems), dtype=np.int64), captions_per_image),
            image_paths=[str(images_dir / rel) for rel in chosen],
            image_class=np.array([class_index[rel.split("/", 1)[0]] for rel in chosen], dtype=np.int64),
            class_names=list(class_names),
            meta={"format": "cub", "image_ids_file": str(source)},
        )
        if load_images:
            split.images = load_pixels(split.image_paths, progress=progress)
        out[s] = apply_sidecar(split, root, s).validate()
    check_disjoint(out)
    return Corpus(
        name="cub",
        splits=out,
        meta={
            "format": "cub",
            "class_split": {"trainval": sorted(layout.trainval), "test": sorted(layout.test)},
        },
    )


def write_cub(
    splits: Sequence[Split],
    root: str | Path,
    *,
    class_split: dict[str, list[int]] | None = None,
    progress: bool = False,
) -> tuple[int, bool]:
    """Write splits named train / val / test in the CUB layout; return (k captions per image, image_lists).

    Needs pixels, classes shared by all splits (`class_names`) and k captions per image in image order.
    When test classes are disjoint from train and val classes, `val` becomes `seen_test_images.txt`;
    otherwise every split is listed in `<split>_images.txt` (read back with `image_lists=True`).
    `class_split` ({"trainval": [...], "test": [...]} class indices, disjoint) sets the class files; a class
    it leaves out (all of them by default) joins trainval if train or val has it, else test."""
    root = Path(root)
    names = splits[0].class_names
    for split in splits:
        if split.name not in ("train", "val", "test"):
            raise ValueError(f"{split.source}: CUB has splits train / val / test, not {split.name!r}")
        if split.images is None or split.image_class is None or split.class_names != names:
            raise ValueError(
                f"{split.source}: split {split.name!r} needs pixels and the classes of the other splits"
            )
    if names is None or any(not n or n != n.strip() or "/" in n for n in names):
        raise ValueError(f"{splits[0].source}: class names cannot be written as directory names")
    class_dirs = [f"{i + 1:03d}.{n}" for i, n in enumerate(names)]
    by_split = {s.name: s for s in splits}
    used_seen = {int(c) for s in splits if s.name != "test" for c in np.unique(s.image_class)}
    used_test = {int(c) for c in np.unique(by_split["test"].image_class)} if "test" in by_split else set()
    seen_classes, test_classes = set(), set()
    if class_split is not None:
        seen_classes, test_classes = set(class_split["trainval"]), set(class_split["test"])
    if seen_classes & test_classes:
        raise ValueError(
            f"{splits[0].source}: classes {sorted(seen_classes & test_classes)} on both sides of the class split"
        )
    # A class the class split leaves out joins trainval if train or val has it, else test (disjoint)
    left_out = (used_seen | used_test) - seen_classes - test_classes
    seen_classes |= left_out & used_seen
    test_classes |= left_out - used_seen
    # The class files reproduce the splits only when each split's classes sit on its side of the class
    # split; otherwise every split is listed image by image.
    image_lists = not (used_seen <= seen_classes and used_test <= test_classes)
    for d in class_dirs:
        (root / "images" / d).mkdir(parents=True, exist_ok=True)
    listing, lists = [], {}
    k = splits[0].n_captions // max(splits[0].n_images, 1)
    for split in splits:
        n, m = split.n_images, split.n_captions
        if n == 0 or m != k * n or not np.array_equal(split.caption_image, np.repeat(np.arange(n), k)):
            raise ValueError(
                f"{split.source}: split {split.name!r}: CUB needs {k} captions per image, in image order"
            )
        for row, image_id in enumerate(
            tqdm(split.image_ids, desc=f"write {split.name}", disable=not progress)
        ):
            d = class_dirs[int(split.image_class[row])]
            rel = f"{d}/{image_id}.png"
            write_png(root / "images" / rel, split.images[row])
            write_lines(
                root / "text_c10" / d / f"{image_id}.txt", split.captions[row * k : (row + 1) * k], "caption"
            )
            listing.append(f"{len(listing) + 1} {rel}")
            lists.setdefault(split.name, []).append(rel)
    write_lines(root / "images.txt", listing, "image listing")
    write_lines(root / TRAINVAL_CLASSES, [class_dirs[c] for c in sorted(seen_classes)], "class name")
    write_lines(root / TEST_CLASSES, [class_dirs[c] for c in sorted(test_classes)], "class name")
    if image_lists:
        for name, rels in lists.items():
            write_lines(root / f"{name}_images.txt", rels, "image path")
    elif "val" in lists:
        write_lines(root / SEEN_TEST_IMAGES, lists["val"], "image path")
    return k, image_lists
