"""VSE0 and VSE++ (Faghri et al., BMVC 2018): one L2-normalised embedding per image and per caption,
cosine similarity, and the bidirectional hinge (triplet) loss with margin α = 0.2:

    VSE0  (sum of hinges, their Eq. 4):  Σ_c' [α − s(i, c) + s(i, c')]_+ + Σ_i' [α − s(i, c) + s(i', c)]_+
    VSE++ (max of hinges, their Eq. 5):  max_c' [α − s(i, c) + s(i, c')]_+ + max_i' [α − s(i, c) + s(i', c)]_+

summed over the B positive pairs of the batch (`xmr_core.losses.contrastive_hinge`).

Hardest negatives from scratch — the recipe (`HingeSchedule`, the default of `vse_pp_config`)
----------------------------------------------------------------------------------------------
RECIPE_PLACEHOLDER
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from xmr_core.encoders.image import ImageEncoder, ImageEncoderConfig
from xmr_core.encoders.text import BiGRUTextEncoder, TextEncoderConfig
from xmr_core.losses import contrastive_hinge
from xmr_core.methods.base import RetrievalModel, in_batch_positives
from xmr_core.similarity import cosine


@dataclass
class HingeSchedule:
    """Which negatives the hinge uses as training proceeds (shared by VSE++, PVSE and later methods).

    Before `warmup_epochs` the loss sums over all negatives (VSE0). Then the weight of the hardest
    negative(s) rises linearly from 0 to `final_max_weight` over `ramp_epochs`
    (loss = (1 − w)·sum + w·max, `contrastive_hinge(max_weight=w)`). `negatives="sum"` never mines;
    "topk" takes the mean over the `topk` hardest negatives instead of the single hardest.
    `mask_positives` removes other in-batch positives (same image, or the same caption word for word)
    from the negatives.
    """

    margin: float = 0.2
    negatives: Literal["sum", "max", "topk"] = "max"
    topk: int = 1
    warmup_epochs: float = 0.0
    ramp_epochs: float = 0.0
    final_max_weight: float = 1.0
    mask_positives: bool = True

    def max_weight(self, epoch: float) -> float:
        """Weight w of the hardest-negative term at training progress `epoch` (0 during warm-up)."""
        if self.negatives == "sum" or epoch < self.warmup_epochs:
            return 0.0
        if self.ramp_epochs <= 0:
            return self.final_max_weight
        return self.final_max_weight * min(1.0, (epoch - self.warmup_epochs) / self.ramp_epochs)

    def loss(self, scores: Tensor, batch: dict[str, Tensor], epoch: float) -> Tensor:
        """Hinge on (B, B) scores whose diagonal holds the positive pairs."""
        weight = self.max_weight(epoch)
        mask = in_batch_positives(batch) if self.mask_positives else None
        if weight == 0.0:
            return contrastive_hinge(scores, margin=self.margin, negatives="sum", positive_mask=mask)
        return contrastive_hinge(scores, margin=self.margin, negatives=self.negatives, topk=self.topk,
                                 max_weight=weight, positive_mask=mask)


RECIPE: dict[str, object] = {"negatives": "max", "warmup_epochs": 1.0, "ramp_epochs": 4.0}


@dataclass
class VSEConfig:
    """VSE0 / VSE++: encoders, embedding size and the hinge schedule."""

    embed_dim: int = 256
    image: ImageEncoderConfig = field(default_factory=ImageEncoderConfig)
    text: TextEncoderConfig = field(default_factory=TextEncoderConfig)
    hinge: HingeSchedule = field(default_factory=HingeSchedule)


def vse0_config(**overrides: object) -> VSEConfig:
    """VSE0: sum over negatives for the whole run."""
    return VSEConfig(hinge=HingeSchedule(negatives="sum"), **overrides)  # type: ignore[arg-type]


def vse_pp_config(**overrides: object) -> VSEConfig:
    """VSE++ with the recipe that trains hardest negatives from scratch (module docstring)."""
    return VSEConfig(hinge=HingeSchedule(**RECIPE), **overrides)  # type: ignore[arg-type]


class VSE(RetrievalModel):
    """Image global feature and caption sentence feature, each L2-normalised: emb (n, D)."""

    name = "vse"

    def __init__(self, config: VSEConfig, word_vectors: np.ndarray) -> None:
        super().__init__()
        self.config = config
        self.image_encoder = ImageEncoder(config.image, config.embed_dim)
        self.text_encoder = BiGRUTextEncoder(word_vectors, config.embed_dim, config.text)

    def encode_images(self, batch: dict[str, Tensor]) -> Tensor:
        return F.normalize(self.image_encoder(batch).global_, dim=-1)

    def encode_captions(self, batch: dict[str, Tensor]) -> Tensor:
        return F.normalize(self.text_encoder(batch).global_, dim=-1)

    def score(self, img_emb: Tensor, cap_emb: Tensor) -> Tensor:
        return cosine(img_emb, cap_emb)

    def loss(self, img_emb: Tensor, cap_emb: Tensor, batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        # (B, B) cosines of the unit embeddings, with gradients (the similarity module scores at test time)
        scores = img_emb @ cap_emb.T
        loss = self.config.hinge.loss(scores, batch, self.epoch)
        off = ~torch.eye(scores.shape[0], dtype=torch.bool, device=scores.device)
        return loss, {"hinge": loss.item(), "max_weight": self.config.hinge.max_weight(self.epoch),
                      "pos_sim": scores.diagonal().mean().item(), "neg_sim": scores[off].mean().item(),
                      "sim_std": scores.std().item()}

    def backbone_parameters(self) -> list:
        return self.image_encoder.backbone_parameters() + self.text_encoder.backbone_parameters()

