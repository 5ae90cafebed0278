"""The CUB-style zero-shot data protocol of the PCME chapter, which MSRM and DVSE reuse: the seen-class
train / validation splits, the unseen-class test split (Table 2), the whole test split (Table 3), the
vocabulary of the training captions and the frozen trunk's grid features on every split.

`chapter_setup(run)` is every notebook's data preamble in one call: the corpus, the frozen trunk, the
chapter data and the encoder sizes.

In the run plan's trace (`xmr book plan`, `runs.trace`) of the paper profiles the setups do no work the plan
throws away: the test split is cut to its first `PLAN_TEST_IMAGES` images (`planned_corpus`: no run's key reads
it, and scoring untrained models on COCO's 5,000 images and 25,000 captions costs hours over a chapter), and the
trunk's features that are not cached are not extracted: zeros of their shape stand in (`trunk.stand_in_grid`), and
the runs asked for on them are marked so (`runs.trace.mark_stand_in`: their keys change once the features exist).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from xmr_core.config import RunConfig, recipe
from xmr_core.data.corpus import Corpus, Split
from xmr_core.data.load import load_corpus
from xmr_core.data.scenes import ScenesConfig
from xmr_core.data.text import GLOVE_PACKAGE, Vocabulary, load_word_vectors
from xmr_core.encoders.image import imagenet_weights_path
from xmr_core.encoders.trunk import (
    PretrainedTrunk,
    attach_grid_features,
    imagenet_trunk,
    pretrained_trunk,
    trunk_config,
)
from xmr_core.experiment.paper_encoders import (
    PAPER_BACKBONE,
    EncoderChoice,
    chosen_word_vectors,
    encoder_choice,
)
from xmr_core.experiment.recipes import encoder_configs, hrem_encoders
from xmr_core.runs.trace import mark_stand_in, tracing

PLAN_TEST_IMAGES = 1000  # trace mode: the test images untrained models are scored on (COCO's 1K folds: 5 x 200)


@dataclass
class ChapterData:
    """The splits and word vectors every PCME-chapter notebook uses (and MSRM / DVSE can reuse).

    train / val: the seen classes (CUB's trainval classes); test_unseen: the unseen classes of the test
    split (Table 2's zero-shot protocol); test: the whole test split (Table 3's COCO-style protocol).
    """

    train: Split
    val: Split
    test_unseen: Split
    test: Split
    vocab: Vocabulary
    word_vectors: np.ndarray  # (V, d) float32
    coverage: float  # share of the vocabulary found in the word vectors

    def with_test(self, test: Split) -> ChapterData:
        """This data with another version of its whole test split (its pixels decoded: `datasets.with_pixels`; its
        captions aligned to another format's); the unseen-class split too where it is the whole test split (real
        data has no class split of its own)."""
        return dataclasses.replace(self, test=test, test_unseen=test if self.test_unseen is self.test
                                   else self.test_unseen)



def word_table(data: ChapterData, bert: bool) -> np.ndarray:
    """What a chapter's text encoder reads: the word vectors (V, d) (BiGRU) or the vocabulary's words (V,)
    (`bert`: a BERT-style encoder such as the packaged MiniLM)."""
    return np.array(data.vocab.words) if bert else data.word_vectors

def chapter_trunk(profile: str, corpus: Corpus, progress: bool = True,
                  choice: EncoderChoice | None = None) -> PretrainedTrunk:
    """The frozen image trunk of a chapter: the scenes trunk pretrained on the corpus's pretraining set
    (cached), or, for the paper profile, the torchvision ResNet of `choice` with its weights (`imagenet_trunk`;
    default: the paper's on CUB, ResNet-50 with torchvision's ImageNet weights). paper-smoke: the same, and without
    torchvision's weights file installed (and no other named) the backbone's seeded initialisation, labelled; only
    there."""
    if recipe(profile) == "paper":
        choice = choice or EncoderChoice(PAPER_BACKBONE["cub"], "", GLOVE_PACKAGE)
        weights = choice.weights
        if profile == "paper-smoke" and weights == "" and not imagenet_weights_path(choice.backbone).is_file():
            weights = None
        return imagenet_trunk(choice.backbone, weights)
    scenes = ScenesConfig(**corpus.meta["config"])
    return pretrained_trunk(scenes, trunk_config(profile), progress)


def planned_corpus(corpus: Corpus, profile: str, limit: int = PLAN_TEST_IMAGES) -> Corpus:
    """`corpus` as the run plan's trace reads it (`runs.trace.tracing`) on the papers' data (the paper recipe): its
    test split cut to its first `limit` images and their captions; `corpus` itself outside trace mode, on the
    scenes profiles (whose plan lists its keys as the runs will have them, every test image included) or when the
    test split is no larger."""
    test = corpus["test"]
    if not tracing() or recipe(profile) != "paper" or test.n_images <= limit:
        return corpus
    return dataclasses.replace(corpus, splits={**corpus.splits, "test": test.subset(np.arange(limit), test.name)})


def load_chapter_data(corpus: Corpus, word_vectors: str = "glove-6b-50d", trunk: PretrainedTrunk | None = None,
                      progress: bool = True, device: str | torch.device = "cpu", stand_in: bool = False) -> ChapterData:
    """Class-split the corpus (scenes: `meta["class_split"]`; CUB's reader already splits by class), build the
    vocabulary from the training captions only, and, with a `trunk`, attach its frozen grid features to
    every split (`Split.grid`, memory-mapped, computed on `device` once and cached: `attach_grid_features`;
    `stand_in`: zeros for those not cached, in trace mode only, `runs.trace.mark_stand_in`)."""
    if trunk is not None:
        seconds = attach_grid_features(corpus.splits.values(), trunk, progress, device=device, stand_in=stand_in)
        missing = [name for name, s in seconds.items() if s is None]
        if missing:
            mark_stand_in()
            print(f"run plan: grid features of {', '.join(missing)} not extracted (trunk {trunk.key}); zeros of their "
                  "shape stand in, so the runs on them are listed under keys that change once they are extracted")
    split_classes = corpus.meta.get("class_split", {})
    if "seen" in split_classes:  # scenes: every split holds every class; the zero-shot split is applied here
        seen, unseen = split_classes["seen"], split_classes["unseen"]
        train = corpus["train"].class_subset(seen, "train-seen")
        val = corpus["val"].class_subset(seen, "val-seen")
        test_unseen = corpus["test"].class_subset(unseen, "test-unseen")
    else:  # CUB: train/val are the trainval classes, test the unseen classes
        train, val, test_unseen = corpus["train"], corpus["val"], corpus["test"]
    vocab = Vocabulary.build(train.captions)
    vectors = load_word_vectors(vocab, word_vectors, train_captions=train.captions)
    return ChapterData(train, val, test_unseen, corpus["test"], vocab, vectors.matrix, vectors.coverage)


class ChapterSetup(NamedTuple):
    """What every chapter notebook starts from (`corpus, trunk, data, enc = chapter_setup(run)`)."""

    corpus: Corpus
    trunk: PretrainedTrunk
    data: ChapterData
    enc: dict[str, object]  # `encoder_configs(profile, trunk)`: the sizes every compared model shares


def chapter_setup(run: RunConfig) -> ChapterSetup:
    """Load `run`'s data set (generated from `run.data_seed`), its frozen trunk (cached; the paper profile: the
    backbone and weights `run`'s parameters choose, `paper_encoders.encoder_choice`), the chapter data
    (`load_chapter_data`: its word vectors, grid features attached: the paper profile's computed on `run`'s device) and the encoder
    configs of `run.profile`; what was used goes to `run.encoders` (every result's provenance)."""
    choice = encoder_choice(run)
    corpus = planned_corpus(load_corpus(run.dataset, run.data_root, run.profile, progress=run.progress,
                                        seed=run.data_seed), run.profile)
    trunk = chapter_trunk(run.profile, corpus, progress=run.progress, choice=choice)
    # the paper profile's features on its device; the scenes book's on the CPU, one thread: the same bits, so the same
    # run keys, on any machine (docs/training.md, "Portable runs")
    paper = recipe(run.profile) == "paper"
    data = load_chapter_data(corpus, choice.word_vectors, trunk=trunk, progress=run.progress,
                             device=run.torch_device if paper else "cpu", stand_in=paper and tracing())
    run.encoders = {**run.encoders, **choice.describe(trunk, run.dataset)}
    return ChapterSetup(corpus, trunk, data, encoder_configs(run.profile, trunk))


# ------------------------------------------------------------------------ the region protocol (HREM's chapter)
DATA_FORMAT = "precomp"  # SCAN's precomputed BUTD regions, what HREM's code reads (scenes: its region features)


def hrem_data(corpus: Corpus, word_vectors: str = "glove-6b-50d") -> ChapterData:
    """The COCO-style protocol: train / val / test as the corpus splits them (every class in each), the
    vocabulary of the training captions and its word vectors; the splits must carry region features."""
    train, val, test = corpus["train"], corpus["val"], corpus["test"]
    missing = [s.name for s in (train, val, test) if s.regions is None]
    if missing:
        raise ValueError(f"{corpus.meta.get('name', 'this corpus')}: splits {missing} have no region features; HREM "
                         "reads regions (scenes: generated with them; real data: the precomp *_ims.npy)")
    vocab = Vocabulary.build(train.captions)
    vectors = load_word_vectors(vocab, word_vectors, train_captions=train.captions)
    return ChapterData(train, val, test, test, vocab, vectors.matrix, vectors.coverage)


class HREMSetup(NamedTuple):
    """What every HREM notebook (and the leaderboard's HREM rows) starts from: `corpus, data, enc = hrem_setup(run)`."""

    corpus: Corpus
    data: ChapterData  # `hrem_data`: every class in every split, region features
    enc: dict[str, object]  # `hrem_encoders(profile, region_dim)`


def hrem_setup(run: RunConfig) -> HREMSetup:
    """Load `run`'s data set in `DATA_FORMAT` (SCAN's precomp regions; generated from `run.data_seed`), the
    chapter's data protocol (`hrem_data`, the word vectors `run`'s parameters choose) and the encoders of
    `run.profile` on its region features; what was used goes to `run.encoders`."""
    corpus = planned_corpus(load_corpus(run.dataset, run.data_root, run.profile, format=DATA_FORMAT,
                                        progress=run.progress, seed=run.data_seed), run.profile)
    data = hrem_data(corpus, chosen_word_vectors(run))
    return HREMSetup(corpus, data, hrem_encoders(run.profile, data.test.regions.shape[2]))
