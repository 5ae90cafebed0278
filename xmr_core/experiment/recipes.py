"""The recipes every chapter shares: the encoders on the frozen pretrained trunk (`encoder_configs`), the
training recipe of each profile (`pcme_train_config`: PCME's Sec. 4.1 recipe, which every model of the
PCME chapter, and the later chapters' baselines, are trained with) and the pretrained text backbone of the
papers' BERT rows in each profile (`minilm_text`).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable

from xmr_core.config import budget, check_profile, recipe, select_device
from xmr_core.data.text import Vocabulary
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import BertEncoderConfig, FeatureTextEncoderConfig, TextEncoderConfig
from xmr_core.encoders.text_features import token_features
from xmr_core.encoders.trunk import PretrainedTrunk
from xmr_core.runs.train import TrainConfig

PretrainedText = BertEncoderConfig | FeatureTextEncoderConfig
LOADER_WORKERS = min(8, os.cpu_count() or 1)  # data-loader processes of a paper-profile run on CUDA
MINILM_FINETUNED = ("paper",)  # profiles whose BERT rows fine-tune the packaged MiniLM (the papers' protocol)
MINILM_FROZEN = ("cpu",)  # profiles whose BERT rows train a head on its frozen, cached token features


def pcme_train_config(profile: str, seed: int = 0, finetune: bool = False, **overrides: object) -> TrainConfig:
    """Sec. 4.1 / C.2: AdamP (when installed, else Adam), cosine schedule, gradient clipping 2, Cutout-like
    erasing 0.2 and caption word dropping 0.1; training stops when validation rSum has not improved for
    more than `min_delta` for `patience` epochs (the best epoch is then not the last), at most `epochs`; a
    schedule whose last epoch is its best goes on at its last lr until an epoch is no better, at most
    `extend_epochs` more (so a run is converged unless even those run out; not in smoke). A NaN/inf loss ends the
    run as diverged (`on_nonfinite="stop"`: its best epoch stands, it is not converged, so no claim is judged on
    it); in its first epoch it raises (the tuning protocol records that setting as diverged).

    Default (every profile): the image trunk is frozen (its grid features are precomputed), so there is one
    phase and erasing zeroes grid cells (`datasets.erase_cells`). finetune=True: PCME's two phases on pixels,
    the trunk (and word vectors) frozen for the warm-up epochs, then end to end at 0.1 x lr.
    paper: CUB's 10 + 50 epochs at lr 1e-4, batch 128, patience 10. cpu: a 20-epoch cosine at lr 1e-3,
    batch 128, stopping once validation rSum has not risen by more than 1 point (of ~450) for 3 epochs (the
    measurements behind it: docs/training.md). In both, patience never stops a run in the first half of its
    schedule (`patience_after` 0.5: a cpu run trains at least 13 epochs), where the plateau is that of a high
    learning rate: such stops left seeds 8 to 131 rSum below their siblings (docs/training.md, "Runs stopped early").
    smoke and paper-smoke: 2 epochs, batch 32. The paper profiles on CUDA load batches in `LOADER_WORKERS`
    worker processes (not part of a run's key); every profile trains in mixed precision on CUDA
    (`TrainConfig.amp`, PCME's code trains in fp16).
    """
    optimizer = "adamp" if importlib.util.find_spec("adamp") is not None else "adam"
    sizes = {"smoke": (2, 1, 32, 5e-4, 0, 0.0, 0), "cpu": (20, 1, 128, 1e-3, 3, 1.0, 10),
             "paper": (60, 10, 128, 1e-4, 10, 0.0, 10)}
    epochs, frozen, batch, lr, patience, min_delta, extend = sizes[budget(profile)]
    base = {"epochs": epochs, "frozen_epochs": frozen if finetune else 0, "batch_size": batch, "lr": lr,
            "optimizer": optimizer, "scheduler": "cosine", "finetune_lr_mult": 0.1, "grad_clip": 2.0,
            "random_erasing_prob": 0.2, "word_dropout": 0.1, "seed": seed, "patience": patience,
            "min_delta": min_delta, "patience_after": 0.5 if patience else 0.0, "extend_epochs": extend,
            "on_nonfinite": "stop"}
    if recipe(profile) == "paper" and select_device(str(overrides.get("device", "auto"))).type == "cuda":
        base["num_workers"] = LOADER_WORKERS  # on the GPU the images are decoded beside it, as the papers' loaders do
    return TrainConfig(**{**base, **overrides})  # type: ignore[arg-type]


def encoder_configs(profile: str, trunk: PretrainedTrunk, finetune: bool = False) -> dict[str, object]:
    """Encoder sizes shared by every model of the chapter (PCME, its variants and the baselines).

    Default: the frozen pretrained trunk's grid features (`ImageEncoder` kind "grid"). `finetune=True`: the
    same trunk on pixels, trained end to end after PCME's warm-up phase (`pcme_train_config(finetune=True)`).
    """
    if recipe(profile) == "paper":  # CUB: ResNet-50 (ImageNet), D = 512, BiGRU 512 over GloVe 300-d where
        # WORD_VECTORS names it, else the packaged 50-d (`paper_encoders`: the trunk and word vectors chosen)
        # fine-tuned: the trunk's backbone from the same weights file (its key, with their digest, in the config)
        embed_dim, text_hidden = (512, 512) if profile == "paper" else (64, 32)  # paper-smoke: smoke's sizes
        image = ImageEncoderConfig(kind="resnet", arch=trunk.meta["arch"], pretrained=trunk.meta["weights"] or False,
                                   trunk=trunk.key) if finetune else \
            ImageEncoderConfig(kind="grid", grid_dim=trunk.channels, grid_cells=trunk.cells, grid_pool="mean",
                               trunk=trunk.key)
        return {"embed_dim": embed_dim, "image": image, "text": TextEncoderConfig(hidden=text_hidden)}
    widths = tuple(trunk.meta["config"]["widths"])
    sizes = {"smoke": (64, 128, 32), "cpu": (256, 512, 128)}[profile]
    embed_dim, hidden, text_hidden = sizes
    if finetune:
        image = ImageEncoderConfig(kind="cnn", widths=widths, hidden=hidden, trunk=trunk.key)
    else:
        image = ImageEncoderConfig(kind="grid", widths=widths, hidden=hidden, grid_dim=trunk.channels,
                                   grid_cells=trunk.cells, trunk=trunk.key)
    return {"embed_dim": embed_dim, "image": image, "text": TextEncoderConfig(hidden=text_hidden)}


def hrem_encoders(profile: str, region_dim: int, text: PretrainedText | None = None) -> dict[str, object]:
    """Encoders of every model of the chapter: regions (region_dim D) projected to the embedding size, and the
    BiGRU over word vectors (or `text`, the BERT rows' `minilm_text`). Sizes: smoke 64 (BiGRU 32), cpu 256 (128),
    paper 1024 (1024, the papers' d), paper-smoke as smoke."""
    if region_dim <= 0:
        raise ValueError(f"hrem_encoders: region_dim must be > 0, got {region_dim}")
    embed_dim, hidden = {"smoke": (64, 32), "cpu": (256, 128), "paper": (1024, 1024)}[
        "paper" if profile == "paper" else budget(profile)]
    return {"embed_dim": embed_dim, "image": ImageEncoderConfig(kind="regions", region_dim=region_dim),
            "text": TextEncoderConfig(hidden=hidden) if text is None else text}


def minilm_not_run(profile: str) -> str | None:
    """Why a chapter's BERT rows are not trained in `profile`; None where they are (`minilm_text`)."""
    profile = check_profile(profile)
    if profile in MINILM_FINETUNED + MINILM_FROZEN:
        return None
    return f"not run on {profile} (MiniLM rows: cpu and paper profiles)"


def minilm_text(profile: str, vocab: Vocabulary, texts: Iterable[str], progress: bool = True
                ) -> PretrainedText | None:
    """The BERT rows' text encoder in `profile`: the packaged MiniLM fine-tuned (`MINILM_FINETUNED`), a head on
    its frozen token features of every text of `texts` (`MINILM_FROZEN`: each distinct text encoded once and
    cached, `encoders.text_features.token_features`; fine-tuning costs about 15 minutes an epoch on 2 cores), or
    None where they are not trained (`minilm_not_run`)."""
    profile = check_profile(profile)
    if profile in MINILM_FINETUNED:
        return BertEncoderConfig()
    if profile in MINILM_FROZEN:
        return FeatureTextEncoderConfig(features=token_features(vocab, texts, progress=progress).key)
    return None


def region_encoders(enc: dict, region_dim: int) -> dict:
    """`enc` with the image encoder on precomputed region features (the BUTD analogue, `Split.regions`,
    (N, R, region_dim)) instead of the trunk's grid; the text encoder and sizes unchanged."""
    if region_dim <= 0:
        raise ValueError(f"region_encoders: region_dim must be > 0, got {region_dim}")
    return {**enc, "image": ImageEncoderConfig(kind="regions", region_dim=region_dim)}
