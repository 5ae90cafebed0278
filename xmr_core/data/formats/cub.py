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
from pathlib import Path

import numpy as np
from tqdm import tqdm

from xmr_core.data.corpus import Corpus, DataFormatError, Split
from xmr_core.data.formats.common import (
    IMAGE_SUFFIXES,
    load_pixels,
    read_lines,
    require,
    write_lines,
    write_png,
)
from xmr_core.data.formats.sidecar import apply_sidecar

TRAINVAL_CLASSES = "trainvalclasses.txt"
TEST_CLASSES = "testclasses.txt"
SEEN_TEST_IMAGES = "seen_test_images.txt"
CLASS_DIR = re.compile(r"^(\d+)\.(.+)$")


def _classes(images_dir: Path) -> list[str]:
    """Class directory names in numeric order; any other directory is an error."""
    dirs = sorted(p.name for p in images_dir.iterdir() if p.is_dir())
    for d in dirs:
        if not CLASS_DIR.match(d):
            raise DataFormatError(f"{images_dir / d}: unknown class directory (expected NNN.Class_Name)")
    return sorted(dirs, key=lambda d: int(CLASS_DIR.match(d).group(1)))


def _image_list(root: Path, images_dir: Path, class_dirs: list[str]) -> list[str]:
    """Relative image paths `<class dir>/<file>`, in `images.txt` order when it exists."""
    listing = root / "images.txt"
    if not listing.exists():
        return [
            f"{d}/{f.name}"
            for d in class_dirs
            for f in sorted((images_dir / d).iterdir())
            if f.suffix.lower() in IMAGE_SUFFIXES
        ]
    known = set(class_dirs)
    rels = []
    for i, line in enumerate(read_lines(listing, "image listing")):
        parts = line.split(maxsplit=1)
        rel = parts[-1]
        if len(parts) != 2 or "/" not in rel or rel.split("/", 1)[0] not in known:
            raise DataFormatError(f"{listing}: line {i + 1}: unknown class in {line!r}")
        if not (images_dir / rel).is_file():
            raise DataFormatError(
                f"{images_dir / rel}: missing image file (listed at {listing.name} line {i + 1})"
            )
        rels.append(rel)
    return rels


def _class_file(path: Path, known: set[str]) -> set[str]:
    names = read_lines(path, "class name")
    for i, name in enumerate(names):
        if name not in known:
            raise DataFormatError(f"{path}: line {i + 1}: unknown class {name!r}")
    return set(names)


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
    images_dir = require(root / "images", "CUB-200-2011 images/<class>/<image>.jpg")
    text_dir = require(text_dir or root / "text_c10", "CUB captions text_c10/<class>/<image>.txt")
    class_dirs = _classes(images_dir)
    known = set(class_dirs)
    trainval = _class_file(root / TRAINVAL_CLASSES, known)
    test = _class_file(root / TEST_CLASSES, known)
    rels = _image_list(root, images_dir, class_dirs)
    seen: set[str] = set()
    if not image_lists and ("val" in splits or "train" in splits):
        seen_path = root / SEEN_TEST_IMAGES
        if "val" in splits or seen_path.exists():
            seen = set(read_lines(require(seen_path, "seen-class test images (PCME)"), "image path"))
            unknown = seen - set(rels)
            if unknown:
                raise DataFormatError(f"{seen_path}: image {min(unknown)!r} is not a CUB image")
    class_index = {d: i for i, d in enumerate(class_dirs)}
    class_names = [CLASS_DIR.match(d).group(2) for d in class_dirs]
    members = {
        "train": lambda cls, rel: cls in trainval and rel not in seen,
        "val": lambda cls, rel: cls in trainval and rel in seen,
        "test": lambda cls, rel: cls in test,
    }
    out = {}
    for s in splits:
        if s not in members:
            raise ValueError(f"CUB has splits train / val / test, not {s!r}")
        if image_lists:
            chosen = read_lines(root / f"{s}_images.txt", f"image path of split {s!r}")
            unknown = set(chosen) - set(rels)
            if unknown:
                raise DataFormatError(
                    f"{root / f'{s}_images.txt'}: image {min(unknown)!r} is not a listed CUB image"
                )
        else:
            chosen = [rel for rel in rels if members[s](rel.split("/", 1)[0], rel)]
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
            meta={"format": "cub"},
        )
        if load_images:
            split.images = load_pixels(split.image_paths, progress=progress)
        out[s] = apply_sidecar(split, root, s).validate()
    return Corpus(
        name="cub",
        splits=out,
        meta={"format": "cub", "class_split": {"trainval": sorted(trainval), "test": sorted(test)}},
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
    `class_split` ({"trainval": [...], "test": [...]} class indices) sets the class files; by default
    the classes of the train/val and of the test split."""
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
    seen_classes, test_classes = used_seen, used_test
    if class_split is not None:
        seen_classes, test_classes = set(class_split["trainval"]), set(class_split["test"])
    # The class files reproduce the splits only when each split's classes sit on its side of a disjoint
    # class split; otherwise every split is listed image by image.
    image_lists = bool(seen_classes & test_classes) or not (used_seen <= seen_classes and used_test <= test_classes)
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
