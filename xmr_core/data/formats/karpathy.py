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
from pathlib import Path

import numpy as np
from tqdm import tqdm

from xmr_core.data.corpus import Corpus, DataFormatError, Split
from xmr_core.data.formats.coco_instances import coco_image_labels
from xmr_core.data.formats.common import decode_utf8, load_pixels, require, write_png, write_text
from xmr_core.data.formats.sidecar import apply_sidecar

KARPATHY_SPLITS = ("train", "val", "test", "restval")


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
    json_path = require(json_path, "Karpathy split file")
    image_dir = Path(image_dir)
    try:
        data = json.loads(decode_utf8(json_path.read_bytes(), json_path))
    except json.JSONDecodeError as e:
        raise DataFormatError(f"{json_path}: line {e.lineno}: invalid JSON ({e.msg})") from None
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise DataFormatError(f"{json_path}: no 'images' list (not a Karpathy split file)")
    parts: dict[str, dict[str, list]] = {
        s: {"ids": [], "paths": [], "cids": [], "caps": [], "cimg": []} for s in splits
    }
    for i, img in enumerate(data["images"]):
        where = f"{json_path}: images[{i}]"
        try:
            split = img["split"]
            if split not in KARPATHY_SPLITS:
                raise DataFormatError(f"{where}: unknown split {split!r}")
            part = parts.get(restval if split == "restval" else split)
            if part is None:
                continue
            image_id = str(img["cocoid"]) if "cocoid" in img else Path(img["filename"]).stem
            where = f"{json_path}: image {image_id}"
            sentences = img["sentences"]
            if not sentences or (captions_per_image is not None and len(sentences) != captions_per_image):
                want = captions_per_image if captions_per_image is not None else "at least 1"
                raise DataFormatError(f"{where}: {len(sentences)} captions, expected {want}")
            row = len(part["ids"])
            for sent in sentences:
                raw = sent["raw"]
                if not isinstance(raw, str) or not raw.strip():
                    raise DataFormatError(f"{where}: sentence {sent.get('sentid')}: empty caption")
                part["caps"].append(raw.strip())
                part["cids"].append(str(sent["sentid"]))
            part["cimg"].extend([row] * len(sentences))
            part["ids"].append(image_id)
            part["paths"].append(str(image_dir / img.get("filepath", "") / img["filename"]))
        except (KeyError, TypeError) as e:
            raise DataFormatError(f"{where}: malformed record ({type(e).__name__}: {e})") from None
    out = {}
    for s, part in parts.items():
        if check_images:
            for image_id, p in zip(
                part["ids"], tqdm(part["paths"], desc=f"check {s} images", disable=not progress)
            ):
                if not Path(p).is_file():
                    raise DataFormatError(
                        f"{p}: missing image file of image {image_id} ({json_path.name}); see docs/data.md"
                    )
        split = Split(
            name=s,
            source=str(json_path),
            image_ids=part["ids"],
            caption_ids=part["cids"],
            captions=part["caps"],
            caption_image=np.asarray(part["cimg"], dtype=np.int64),
            image_paths=part["paths"],
            meta={"format": "karpathy"},
        )
        if instances:
            split.image_labels, split.meta["label_names"] = coco_image_labels(instances, split.image_ids)
        if load_images:
            split.images = load_pixels(split.image_paths, progress=progress)
        out[s] = apply_sidecar(split, json_path.parent, s).validate()
    return Corpus(name=str(data.get("dataset", json_path.stem)), splits=out, meta={"format": "karpathy"})


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
