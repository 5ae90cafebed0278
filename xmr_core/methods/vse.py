"""VSE0 and VSE++ (Faghri et al., BMVC 2018): one L2-normalised embedding per image and per caption,
cosine similarity, and the bidirectional hinge (triplet) loss with margin α = 0.2:

    VSE0  (sum of hinges, their Eq. 2):  Σ_c' [α − s(i, c) + s(i, c')]_+ + Σ_i' [α − s(i, c) + s(i', c)]_+
    VSE++ (max of hinges, their Eq. 4):  max_c' [α − s(i, c) + s(i, c')]_+ + max_i' [α − s(i, c) + s(i', c)]_+

summed over the B positive pairs of the batch (`xmr_core.losses.contrastive_hinge`).

Hardest negatives from scratch — the recipe (`HingeSchedule`, the default of `vse_pp_config`)
----------------------------------------------------------------------------------------------
Recipe: one epoch of summed negatives (VSE0), then a linear ramp over two epochs
(loss = (1 − w)·sum + w·hard, w: 0 → 1) to the sum of the hardest QUARTER of the in-batch negatives
(k = round((B − 1)/4), 32 of 127 at B = 128), each direction; other in-batch positives (same image, or
the same caption word for word) are masked out. `scratch_hard_negatives()`; `paper_hard_negatives()` is
the published switch to the single hardest negative, kept for pretrained encoders (paper profile).

Why: on scenes the single hardest in-batch negative is almost always a false negative. Vague captions
("something red") are true of hundreds of images: the prototype measured that 16.8% of off-diagonal
in-batch pairs are exact positives, about 21 of the 127 "negatives" of each image at B = 128. The max-hinge
then asks to separate pairs that cannot be separated, and its minimum over them is reached when all
similarities are equal (loss 2·margin per pair, a stationary point of L2-normalised embeddings). Summing the
k hardest with k above the typical number of false negatives keeps true negatives in every gradient.

Evidence (scenes `cpu`: 8,000 training images, one caption each per epoch, B = 128, Adam 2e-4, clip 2,
GloVe fine-tuned, the prototype CNN + BiGRU; val = 1,000 images, rSum of instance R@1/5/10; "std" is the
std of the val score matrix, 0 when collapsed):
- single hardest after 1 summed epoch: epoch 2 loss 59.0 (2·0.2·128 = 51.2), std 0.004, rSum 28.3 -> 19.0
  (collapsed, as in 3 of 3 prototype runs, which also tried 10 summed epochs and exact-positive masking);
- ramp over 4 epochs to the single hardest: healthy while w < 1 (rSum 28 / 44 / 66 / 78 / 86, std
  0.17-0.20), collapsed in the first epoch at w = 1 (loss 55.9, std 0.005, rSum 41.5);
- single hardest with the lr ×0.1 after the switch: decays instead (std 0.049 -> 0.041, rSum 22.8 -> 22.5,
  below the summed epoch's 28.3);
- this recipe: rSum 27.9 / 43.2 / 75.8 / 103.7 (epoch 4, first epoch at w = 1, std 0.136) / 127.0 (epoch 5, std 0.156):
  no collapse, still rising. Through `fit` (cosine lr, 8 epochs) val rSum 21.9 / 38.1 / 73.7 / 95.2 / 113.2 /
  122.3 / 128.4 / 129.6 (std 0.13-0.15 at w = 1); test rSum 133.7, i2t R@1 11.9, t2i R@1 5.2.
On the smoke set (300 images, B = 32, the collapse guard in tests/test_baselines.py), final std / rSum:
single hardest 0.02 / 68, ramp to the single hardest 0.023 / 61, top-5 0.04 / 119, top-8 (this recipe)
0.061 / 123, top-10 0.10 / 117, a fixed 0.1·sum + 0.9·max mix 0.12 / 107.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.losses import contrastive_hinge, hinge_per_query
from xmr_core.methods.base import in_batch_positives
from xmr_core.methods.registry import register_method
from xmr_core.methods.two_tower import TwoTower
from xmr_core.similarity import cosine


@dataclass
class HingeSchedule:
    """Which negatives the hinge uses as training proceeds (shared by VSE++, PVSE and later methods).

    Before `warmup_epochs` the loss sums over all negatives (VSE0). Then the weight of the hardest
    negative(s) rises linearly from 0 to `final_max_weight` over `ramp_epochs`
    (loss = (1 − w)·sum + w·max, `contrastive_hinge(max_weight=w)`). `negatives="sum"` never mines;
    "topk" sums the hinges of the `topk` hardest negatives instead of taking the single hardest.
    `mask_positives` removes other in-batch positives (same image, or the same caption word for word)
    from the negatives. With `topk_fraction` > 0, k = max(1, round(topk_fraction · (B − 1))) for a batch
    of B pairs (so the recipe scales with the batch size) instead of the fixed `topk`.
    """

    margin: float = 0.2
    negatives: Literal["sum", "max", "topk"] = "max"
    topk: int = 1
    topk_fraction: float = 0.0
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
        return contrastive_hinge(scores, margin=self.margin, negatives=self.negatives, topk=self.k(len(scores)),
                                 max_weight=weight, positive_mask=mask)

    def per_query(self, scores: Tensor, batch: dict[str, Tensor], epoch: float) -> tuple[Tensor, Tensor]:
        """The hinge of `loss` per query: (i2t (B,), t2i (B,)); their sums are `loss`."""
        weight = self.max_weight(epoch)
        mask = in_batch_positives(batch) if self.mask_positives else None
        if weight == 0.0:
            return hinge_per_query(scores, margin=self.margin, negatives="sum", positive_mask=mask)
        return hinge_per_query(scores, margin=self.margin, negatives=self.negatives, topk=self.k(len(scores)),
                               max_weight=weight, positive_mask=mask)

    def k(self, batch_size: int) -> int:
        """How many hardest negatives "topk" sums for a batch of `batch_size` pairs."""
        if self.topk_fraction > 0:
            return max(1, round(self.topk_fraction * (batch_size - 1)))
        return self.topk


def scratch_hard_negatives(**overrides: object) -> HingeSchedule:
    """The from-scratch hard-negative recipe (module docstring): 1 epoch of summed negatives, then a linear
    ramp over 2 epochs to the sum of the hardest quarter of the batch's negatives."""
    recipe: dict[str, object] = {"negatives": "topk", "topk_fraction": 0.25, "warmup_epochs": 1.0,
                                 "ramp_epochs": 2.0, "final_max_weight": 1.0}
    return HingeSchedule(**{**recipe, **overrides})  # type: ignore[arg-type]


def paper_hard_negatives() -> HingeSchedule:
    """VSE++ as published (VSE∞'s code): summed negatives for 1 epoch, then the single hardest negative.
    For pretrained encoders (the paper profile); it collapses from scratch on scenes (module docstring)."""
    return HingeSchedule(negatives="max", warmup_epochs=1.0)


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
    """VSE++ with the recipe that trains hard negatives from scratch (`scratch_hard_negatives`)."""
    return VSEConfig(hinge=scratch_hard_negatives(), **overrides)  # type: ignore[arg-type]


@register_method(VSEConfig)
class VSE(TwoTower):
    """Image global feature and caption sentence feature, each L2-normalised: emb (n, D)."""

    name = "vse"

    def __init__(self, config: VSEConfig, word_vectors: np.ndarray) -> None:
        super().__init__(config, word_vectors)

    def encode_images(self, batch: dict[str, Tensor]) -> Tensor:
        return F.normalize(self.image_encoder(batch).global_, dim=-1)

    def encode_captions(self, batch: dict[str, Tensor]) -> Tensor:
        return F.normalize(self.text_encoder(batch).global_, dim=-1)

    def score(self, img_emb: Tensor, cap_emb: Tensor) -> Tensor:
        return cosine(img_emb, cap_emb)

    def batch_scores(self, img_emb: Tensor, cap_emb: Tensor) -> Tensor:
        """(B, B) cosines of the unit embeddings, with gradients (`score` is the chunked test-time twin)."""
        return img_emb @ cap_emb.T

    def loss(self, img_emb: Tensor, cap_emb: Tensor, batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        scores = self.batch_scores(img_emb, cap_emb)
        loss = self.config.hinge.loss(scores, batch, self.epoch)
        off = ~torch.eye(scores.shape[0], dtype=torch.bool, device=scores.device)
        return loss, {"hinge": loss.item(), "max_weight": self.config.hinge.max_weight(self.epoch),
                      "pos_sim": scores.diagonal().mean().item(), "neg_sim": scores[off].mean().item(),
                      "sim_std": scores.std().item()}

