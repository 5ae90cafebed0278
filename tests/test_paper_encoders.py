"""The encoders a run uses against the papers' (`experiment.paper_encoders`): the notebook parameters BACKBONE,
IMAGE_WEIGHTS and WORD_VECTORS, the papers' choices as defaults, and the substitutes named in every result's
provenance."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
import torchvision

from xmr_core.book import results
from xmr_core.config import RunConfig
from xmr_core.encoders.trunk import imagenet_trunk
from xmr_core.experiment.paper_encoders import EncoderChoice, chosen_word_vectors, encoder_choice
from xmr_core.experiment.protocols import chapter_trunk


def test_the_papers_choices_are_the_defaults_and_the_parameters_override_them() -> None:
    paper = lambda dataset, **kw: encoder_choice(RunConfig(profile="paper", dataset=dataset, **kw))
    assert paper("coco") == EncoderChoice("resnet152", "", "glove-6b-50d")  # PCME Sec. 4.1: ResNet-152 on COCO
    assert paper("cub").backbone == "resnet50"  # and ResNet-50 on CUB
    assert paper("f30k", backbone="resnet18", image_weights="none", word_vectors="/g/glove.840B.300d.txt") == \
        EncoderChoice("resnet18", None, "/g/glove.840B.300d.txt")
    with pytest.raises(ValueError, match=r"^BACKBONE 'vgg16': not a torchvision ResNet; choose one of resnet18"):
        paper("coco", backbone="vgg16")


def test_a_notebook_parameter_chooses_the_trunk_and_its_weights(tmp_path: Path) -> None:
    torch.manual_seed(0)
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), tmp_path / "r18.pth")
    run = RunConfig.from_params(PROFILE="paper", DATASET="cub", BACKBONE="resnet18",
                                IMAGE_WEIGHTS=str(tmp_path / "r18.pth"))
    trunk = chapter_trunk("paper", None, choice=encoder_choice(run))  # type: ignore[arg-type]
    assert trunk.key == imagenet_trunk("resnet18", str(tmp_path / "r18.pth")).key
    described = encoder_choice(run).describe(trunk, "cub")
    assert described["image"].startswith(f"resnet18, ImageNet weights {tmp_path / 'r18.pth'} (sha256 ")
    assert described["image"].endswith("(substitute for the paper's resnet50 with ImageNet weights)")
    none = RunConfig.from_params(PROFILE="paper", DATASET="cub", BACKBONE="resnet18", IMAGE_WEIGHTS="none")
    trunk = chapter_trunk("paper", None, choice=encoder_choice(none))  # type: ignore[arg-type]
    assert "no ImageNet weights" in encoder_choice(none).describe(trunk, "cub")["image"]


def test_the_substitute_is_named_in_every_results_provenance(tmp_path: Path) -> None:
    run = RunConfig(profile="paper", dataset="coco", results_dir=str(tmp_path))
    assert chosen_word_vectors(run) == "glove-6b-50d"
    path = results.write_table(pd.DataFrame({"a": [1.0]}), "hmrn/t", run=run)
    encoders = json.loads(path.with_suffix(".json").read_text())["encoders"]
    assert encoders["word vectors"].startswith("glove-6b-50d (the packaged GloVe 6B 50-d: substitute for the paper's "
                                               "GloVe 840B 300-d")
    assert "WORD_VECTORS" in encoders["word vectors"]
