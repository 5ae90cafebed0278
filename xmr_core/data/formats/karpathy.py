"""Raw COCO / Flickr30K images with Karpathy's split file `dataset_{coco,flickr30k}.json` (VSE++, PCME).

The json holds `{"images": [{"filepath"?, "filename", "imgid", "split", "cocoid"?, "sentids",
"sentences": [{"raw", "tokens", "imgid", "sentid"}]}], "dataset"}`; `split` is train / val / test /
restval (COCO's restval joins train by default, giving the usual 113,287 training images). An image is
named by its `cocoid` (COCO) or its file stem (Flickr30K), a caption by its `sentid` (Karpathy's running
number, not COCO's caption annotation id). Image files live at `image_dir/filepath/filename`. All of an
image's sentences are kept (some COCO images have 6 or 7); `captions_per_image` makes any other count an
error. COCO `instances_*.json` files, when given, add the concept labels of the plausible view.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from xmr_core.data.corpus import Corpus, DataFormatError, Split
from xmr_core.data.formats.coco_instances import coco_image_labels
from xmr_core.data.formats.common import (
    check_disjoint,
    json_field,
    json_id,
    json_int,
    json_record,
    json_text,
    load_pixels,
    read_json,
    write_png,
    write_text,
)
from xmr_core.data.formats.sidecar import apply_sidecar

KARPATHY_SPLITS = ("train", "val", "test", "restval")


@dataclass
class _Image:
    """One checked record of the json."""

    index: int
    image_id: str
    split: str
    path: str
    caption_ids: list[str]
    captions: list[str]


def read_karpathy(
    json_path: str | Path,
    image_dir: str | Path,
    splits: Sequence[str] = ("train", "val", "test"),
    *,
    restval: str = "train",
    captions_per_image: int | None = None,
    instances: Sequence[str | Path] = (),
    load_images: bool = False,
    check_images: bool = True,
    progress: bool = False,
) -> Corpus:
    """Read the requested splits; `image_paths` always, pixels too when `load_images` (equal sizes only)."""
    json_path = Path(json_path)
    for s in splits:
        if s not in KARPATHY_SPLITS:
            raise DataFormatError(
                f"{json_path}: no split {s!r} (Karpathy splits: {', '.join(KARPATHY_SPLITS)})"
            )
    if restval not in KARPATHY_SPLITS:
        raise DataFormatError(
            f"{json_path}: restval={restval!r} is not a split ({', '.join(KARPATHY_SPLITS)})"
        )
    if "restval" in splits and restval != "restval":
        raise DataFormatError(
            f"{json_path}: split 'restval' asked for, but restval={restval!r} moves its images to {restval!r}"
        )
    data = read_json(json_path, "Karpathy split file")
    images = _checked(data, json_path, Path(image_dir), captions_per_image)
    out = {}
    for s in splits:
        chosen = [im for im in images if (restval if im.split == "restval" else im.split) == s]
        if not chosen:
            raise DataFormatError(f"{json_path}: no image has split {s!r}")
        if check_images:
            for im in tqdm(chosen, desc=f"check {s} images", disable=not progress):
                if not Path(im.path).is_file():
                    raise DataFormatError(
                        f"{im.path}: missing image file of image {im.image_id} ({json_path.name}); see docs/data.md"
                    )
        split = Split(
            name=s,
            source=str(json_path),
            image_ids=[im.image_id for im in chosen],
            caption_ids=[c for im in chosen for c in im.caption_ids],
            captions=[c for im in chosen for c in im.captions],
            caption_image=np.repeat(
                np.arange(len(chosen), dtype=np.int64), [len(im.captions) for im in chosen]
            ),
            image_paths=[im.path for im in chosen],
            meta={"format": "karpathy", "image_ids_file": str(json_path)},
        )
        if instances:
            split.image_labels, split.meta["label_names"] = coco_image_labels(instances, split.image_ids)
        if load_images:
            split.images = load_pixels(split.image_paths, progress=progress)
        out[s] = apply_sidecar(split, json_path.parent, s).validate()
    check_disjoint(out)
    return Corpus(name=str(data.get("dataset", json_path.stem)), splits=out, meta={"format": "karpathy"})


def _checked(data: object, json_path: Path, image_dir: Path, captions_per_image: int | None) -> list[_Image]:
    """Every image record of the file (all splits) checked against the format rules (docs/data.md)."""
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise DataFormatError(f"{json_path}: no 'images' list (not a Karpathy split file)")
    images: list[_Image] = []
    first_image: dict[str, _Image] = {}
    sentence_image: dict[str, str] = {}
    for i, img in enumerate(data["images"]):
        where = f"{json_path}: images[{i}]"
        img = json_record(img, where)
        split = json_field(img, "split", where)
        if split not in KARPATHY_SPLITS:
            raise DataFormatError(f"{where}: unknown split {split!r}")
        filename = json_field(img, "filename", where)
        if not isinstance(filename, str) or not Path(filename).stem:
            raise DataFormatError(f"{where}: filename {filename!r} is not a file name")
        filepath = img.get("filepath", "")
        if not isinstance(filepath, str):
            raise DataFormatError(f"{where}: filepath {filepath!r} is not a directory name")
        image_id = str(json_int(img["cocoid"], where, "cocoid")) if "cocoid" in img else Path(filename).stem
        if image_id in first_image:
            other = first_image[image_id]
            raise DataFormatError(
                f"{json_path}: image {image_id}: images[{i}] (split {split!r}) has the id of "
                f"images[{other.index}] (split {other.split!r})"
            )
        where = f"{json_path}: image {image_id}"
        sentences = json_field(img, "sentences", where)
        if not isinstance(sentences, list):
            raise DataFormatError(f"{where}: sentences is not a list")
        if not sentences or (captions_per_image is not None and len(sentences) != captions_per_image):
            want = captions_per_image if captions_per_image is not None else "at least 1"
            raise DataFormatError(f"{where}: {len(sentences)} captions, expected {want}")
        caption_ids, captions = [], []
        for j, sent in enumerate(sentences):
            sent = json_record(sent, f"{where}: sentences[{j}]")
            sid = json_id(
                json_field(sent, "sentid", f"{where}: sentences[{j}]"), f"{where}: sentences[{j}]", "sentid"
            )
            if sid in sentence_image:
                raise DataFormatError(
                    f"{where}: sentence {sid}: sentid already used by image {sentence_image[sid]}"
                )
            sentence_image[sid] = image_id
            if "imgid" in sent and "imgid" in img and sent["imgid"] != img["imgid"]:
                raise DataFormatError(
                    f"{where}: sentence {sid}: imgid {sent['imgid']!r} is not the image's imgid {img['imgid']!r}"
                )
            captions.append(
                json_text(
                    json_field(sent, "raw", f"{where}: sentence {sid}"), f"{where}: sentence {sid}", "caption"
                )
            )
            caption_ids.append(sid)
        if "sentids" in img and img["sentids"] != [s["sentid"] for s in sentences]:
            raise DataFormatError(
                f"{where}: sentids {img['sentids']!r} are not its sentences' sentids {[s['sentid'] for s in sentences]!r}"
            )
        image = _Image(i, image_id, split, str(image_dir / filepath / filename), caption_ids, captions)
        first_image[image_id] = image
        images.append(image)
    return images


def write_karpathy(
    splits: Sequence[Split], json_path: str | Path, dataset: str, *, progress: bool = False
) -> Path:
    """Write the splits' pixels as `images/<split>/<image id>.png` beside `json_path`, and the json.

    Needs in-memory `images` and captions in image order (the order the reader produces)."""
    json_path = Path(json_path)
    images, imgid = [], 0
    for split in splits:
        if split.images is None:
            raise ValueError(f"{split.source}: split {split.name!r} has no pixels to write as image files")
        if split.name not in KARPATHY_SPLITS:
            raise ValueError(f"{split.source}: split name {split.name!r} is not one of {KARPATHY_SPLITS}")
        cimg = np.asarray(split.caption_image)
        if np.any(np.diff(cimg) < 0) or len(np.unique(cimg)) != split.n_images:
            raise ValueError(
                f"{split.source}: split {split.name!r}: captions must be grouped by image, in image order"
            )
        bad = [c for c in split.captions if c != c.strip()] + [
            i for i in split.image_ids if "/" in i or not i
        ]
        if bad:
            raise ValueError(f"{split.source}: split {split.name!r}: {bad[0]!r} cannot be written unchanged")
        starts = np.searchsorted(cimg, np.arange(split.n_images + 1))
        for row, image_id in enumerate(
            tqdm(split.image_ids, desc=f"write {split.name} images", disable=not progress)
        ):
            filename = f"{image_id}.png"
            write_png(json_path.parent / "images" / split.name / filename, split.images[row])
            sentences = [
                {
                    "tokens": split.captions[j].lower().split(),
                    "raw": split.captions[j],
                    "imgid": imgid,
                    "sentid": split.caption_ids[j],
                }
                for j in range(starts[row], starts[row + 1])
            ]
            images.append(
                {"filepath": split.name, "filename": filename, "imgid": imgid, "split": split.name,
                 "sentids": [s["sentid"] for s in sentences], "sentences": sentences}
            )  # fmt: skip
            imgid += 1
    return write_text(json_path, json.dumps({"images": images, "dataset": dataset}))
