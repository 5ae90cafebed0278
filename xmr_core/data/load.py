"""`load_corpus`: the one front door chapters call to get data, scenes or real, as a `Corpus`.

- `dataset="scenes"`: the embedded benchmark (`xmr_core.data.scenes`, sized by `profile`) is exported
  once to a cached directory in the requested real format (`xmr_core.data.export`) and read back
  through the same reader as real data; the read-back content is checked against the generated corpus,
  and the generator's own split metadata (logical forms, layout) is kept.
- `dataset="coco" | "f30k" | "cub" | "vg"`: the real data set under `data_root`, in the layout of
  `docs/data.md`; anything missing stops at once with one line naming it.

Formats: scenes any of `FORMATS`; coco and f30k `karpathy` (raw images; default) or `precomp` (BUTD
region features); cub `cub`; vg `drilldown`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from xmr_core.config import cache_dir, check_profile
from xmr_core.data.corpus import Corpus, DataFormatError
from xmr_core.data.export import (
    EXPORT_VERSION,
    FORMATS,
    MANIFEST,
    content_diff,
    export_corpus,
    jsonable_meta,
    read_export,
)
from xmr_core.data.formats.coco_instances import coco_image_labels
from xmr_core.data.formats.cub import SEEN_TEST_IMAGES, TEST_CLASSES, TRAINVAL_CLASSES, read_cub
from xmr_core.data.formats.drilldown import read_drilldown
from xmr_core.data.formats.karpathy import read_karpathy
from xmr_core.data.formats.precomp import read_precomp

DATASETS: tuple[str, ...] = ("scenes", "coco", "f30k", "cub", "vg")
DATASET_FORMATS: dict[str, tuple[str, ...]] = {
    "scenes": FORMATS,
    "coco": ("karpathy", "precomp"),
    "f30k": ("karpathy", "precomp"),
    "cub": ("cub",),
    "vg": ("drilldown",),
}
DEFAULT_FORMAT = {
    "scenes": "karpathy",
    "coco": "karpathy",
    "f30k": "karpathy",
    "cub": "cub",
    "vg": "drilldown",
}
KARPATHY_FILES = {
    "coco": ("dataset_coco.json", "images"),
    "f30k": ("dataset_flickr30k.json", "flickr30k-images"),
}
PRECOMP_PREFIXES = {
    "coco": {"train": "train", "val": "dev", "test": "testall"},  # testall = the 5K test set (1K = its folds)
    "f30k": {"train": "train", "val": "dev", "test": "test"},
}
COCO_INSTANCES = ("annotations/instances_train2014.json", "annotations/instances_val2014.json")


def load_corpus(
    dataset: str,
    data_root: str | Path = "",
    profile: str = "cpu",
    *,
    format: str | None = None,
    splits: Sequence[str] | None = None,
    variant: str = "single",
    seed: int = 0,
    scenes: Any = None,
    load_images: bool | None = None,
    refresh: bool = False,
    progress: bool = True,
    **reader_args: Any,
) -> Corpus:
    """Load `dataset` in `format` (default `DEFAULT_FORMAT[dataset]`).

    scenes: `profile`, `variant` ("single" | "multi") and `seed` pick `scenes_config` (or pass a
    `ScenesConfig` as `scenes`); `refresh` rewrites the cached export. Real data: `data_root` is the
    data set's directory; `reader_args` go to the reader (e.g. `captions_per_image`, `n_regions`).
    `load_images` decodes pixels into `Split.images` (default: scenes yes, real data no: paths only).
    """
    check_profile(profile)
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose one of {', '.join(DATASETS)}")
    fmt = format or DEFAULT_FORMAT[dataset]
    if fmt not in DATASET_FORMATS[dataset]:
        raise ValueError(f"dataset {dataset!r} comes in formats {DATASET_FORMATS[dataset]}, not {fmt!r}")
    if dataset == "scenes":
        return _load_scenes(
            fmt, profile, variant, seed, scenes, splits, load_images is not False, refresh, progress
        )
    root = Path(data_root).expanduser() if str(data_root) else None
    wanted = tuple(splits) if splits is not None else ("train", "val", "test")
    missing = (
        _missing(dataset, fmt, root, wanted)
        if root is not None and root.is_dir()
        else ["the data root itself"]
    )
    if missing:
        raise DataFormatError(
            f"{dataset} ({fmt}) at DATA_ROOT={str(data_root)!r}: missing {', '.join(missing)}; "
            f"see docs/data.md for where to download it and the expected layout"
        )
    return _read_real(dataset, fmt, root, wanted, bool(load_images), progress, reader_args)


def _load_scenes(
    fmt: str, profile: str, variant: str, seed: int, cfg: Any, splits: Sequence[str] | None,
    load_images: bool, refresh: bool, progress: bool,
) -> Corpus:  # fmt: skip
    from xmr_core.data.scenes import load_scenes, scenes_config  # the generator imports torch models

    generated = load_scenes(
        cfg if cfg is not None else scenes_config(profile, variant=variant, seed=seed), progress=progress
    )
    identity = json.dumps(
        {"meta": jsonable_meta(generated.meta), "format": fmt, "version": EXPORT_VERSION}, sort_keys=True
    )
    out = (
        cache_dir()
        / "scenes-export"
        / f"{generated.name}-{fmt}-{hashlib.sha1(identity.encode()).hexdigest()[:12]}"
    )
    if refresh or not (out / MANIFEST).is_file():
        export_corpus(generated, out, fmt, progress=progress)
    corpus = read_export(out, splits, load_images=load_images, progress=progress)
    for name, split in corpus.splits.items():
        differ = [f for f in content_diff(generated[name], split) if load_images or f != "images"]
        if differ:
            raise DataFormatError(
                f"{out}: split {name!r} read back differs from the generated scenes in {differ}"
            )
        split.meta = {**generated[name].meta, **split.meta}
    corpus.meta = {**generated.meta, **corpus.meta}
    return corpus


def _missing(dataset: str, fmt: str, root: Path, splits: Sequence[str]) -> list[str]:
    """Paths under `root` the reader needs that do not exist (relative, for the error line)."""
    if fmt == "karpathy":
        need = list(KARPATHY_FILES[dataset])
    elif fmt == "precomp":
        prefixes = PRECOMP_PREFIXES[dataset]
        need = [f"precomp/{prefixes[s]}_{part}" for s in splits for part in ("ims.npy", "caps.txt")]
    elif fmt == "cub":
        need = ["images", "text_c10", TRAINVAL_CLASSES, TEST_CLASSES] + (
            [SEEN_TEST_IMAGES] if "val" in splits else []
        )
    else:
        need = [f"caches/vg_{s}.txt" for s in splits] + ["vg/rg_jsons", "vg/region_36_final"]
    return [p for p in need if not (root / p).exists()]


def _read_real(
    dataset: str, fmt: str, root: Path, splits: Sequence[str], load_images: bool, progress: bool, args: dict
) -> Corpus:
    if fmt == "precomp":
        args = {"n_regions": 36, **args}
        return read_precomp(
            root / "precomp", splits, prefixes=PRECOMP_PREFIXES[dataset], name=dataset, **args
        )
    if fmt == "cub":
        return read_cub(root, splits, load_images=load_images, progress=progress, **args)
    if fmt == "drilldown":
        features = cache_dir() / "vg-regions" / hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:12]
        args = {"features_cache_dir": features, **args}
        return read_drilldown(root, splits, load_images=load_images, progress=progress, **args)
    json_name, image_dir = KARPATHY_FILES[dataset]
    corpus = read_karpathy(
        root / json_name, root / image_dir, splits, load_images=load_images, progress=progress, **args
    )
    corpus.name = dataset
    if dataset == "coco":
        have = [root / p for p in COCO_INSTANCES if (root / p).is_file()]
        for split in corpus.splits.values():
            # Karpathy's val / test (and restval) images are all COCO val2014 images; train needs both files
            if len(have) == 2 or (split.name in ("val", "test") and root / COCO_INSTANCES[1] in have):
                split.image_labels, split.meta["label_names"] = coco_image_labels(have, split.image_ids)
            else:
                split.meta["plausible"] = (
                    f"no concept labels: {' and '.join(COCO_INSTANCES)} not both under {root}"
                )
    return corpus
