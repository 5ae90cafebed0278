"""PVSE: Polysemous Visual-Semantic Embedding (Song & Soleymani, CVPR 2019).

Each image and each caption gets K embeddings from a PIE-Net (PCME Sec. 3.1.1 restates it):
v^k = LN(h_V(z_v) + s(w¹ att^k_V(z_v) z_v)), t^k = LN(h_T(z_t) + s(w² att^k_T(z_t) z_t)), L2-normalised
(`xmr_core.encoders.heads.SubEmbeddingHead`). Images attend over the CNN grid / regions, captions over the
BiGRU word states.

Objective (PVSE Sec. 3.3; official `loss.py`):
- MIL ranking loss: the pair score is the best of the K×K embedding pairs, s(i, c) = max_{k,k'} v^k·t^k'
  (`xmr_core.similarity.max_pair_cosine` at test time), inside the bidirectional hinge with margin ρ,
  with all negatives summed or the hardest negative only ("PVSE-HNM"; the hinge schedule of
  `xmr_core.methods.vse.HingeSchedule`, so the same from-scratch recipe applies);
- diversity regulariser: L_div = ‖Ṽ Ṽᵀ − I‖_F / K² (and the same for captions), Ṽ the (K, D) L2-normalised
  local residuals s(w att^k z z) of one item, averaged over the batch;
- domain-discrepancy regulariser: L_mmd = MMD² between all image and all caption embeddings with the
  kernel k(x, y) = exp(−γ‖x − y‖), γ = 0.5 (this is the kernel of the official `loss.py`: the Euclidean
  distance is not squared);
- total L = L_mil + λ_div L_div + λ_mmd L_mmd (official COCO run: λ_div 0.1, λ_mmd 0.01, margin 0.1,
  K = 2, hardest negatives). As in the official code the regularisers are off when K = 1.

Reductions, as the official `loss.py` (`PVSELoss(reduction="mean")`, what its `train.py` builds): L_div is
averaged over the items, L_mmd over the kernel entries, and the ranking loss is *averaged* too (`mil_ranking_loss`):
over the B hardest-negative hinges of each direction (`--max_violation`, its COCO setting), over the B² entries
of the cost matrix when all negatives are summed. So λ_div and λ_mmd weigh the regularisers against the ranking
term as in the paper's recipe. Until issue 33 the book summed the ranking loss over the batch (as VSE++'s code
does), which at B = 128 weighed it 128x (16,384x with summed negatives) more against the regularisers than the
paper tuned λ_div, λ_mmd for: the regularisers were nearly off. `ranking_reduction="sum"` keeps that form.
The divisor follows the hinge's configured negatives (B for "max" / "topk", B² for "sum"), so it stays the same
through the warm-up and the ramp of the book's from-scratch schedule (which the official code does not have).
Measured once on the smoke set (K = 2, B = 32, 5 epochs, constant lr 2e-4, seed 0; a check, not a result): val
rSum 35.8 / 37.6 / 84.0 / 106.6 / 98.4 with the mean against 37.2 / 37.4 / 84.0 / 107.8 / 101.6 with the sum, val
score std >= 0.045 in both (no collapse); L_div stayed at 0.705 in both, near its maximum 0.707 for K = 2 (the
two residuals of an item nearly parallel).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from xmr_core.encoders.heads import SubEmbeddingHead
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.methods.registry import register_method
from xmr_core.methods.two_tower import TwoTower
from xmr_core.methods.vse import HingeSchedule, scratch_hard_negatives
from xmr_core.similarity import max_pair_cosine


@dataclass
class PVSEConfig:
    """PVSE: K embeddings per item, the hinge schedule of the MIL loss and the two regulariser weights."""

    embed_dim: int = 256
    n_embeds: int = 2
    image: ImageEncoderConfig = field(default_factory=ImageEncoderConfig)
    text: TextEncoderConfig = field(default_factory=TextEncoderConfig)
    hinge: HingeSchedule = field(default_factory=lambda: HingeSchedule(negatives="sum"))
    div_weight: float = 0.1
    mmd_weight: float = 0.01
    mmd_gamma: float = 0.5
    dropout: float = 0.0
    ranking_reduction: Literal["mean", "sum"] = "mean"  # `mil_ranking_loss`: "mean" as PVSE's code

    def __post_init__(self) -> None:
        if self.ranking_reduction not in ("mean", "sum"):
            raise ValueError(f"PVSEConfig: unknown ranking_reduction {self.ranking_reduction!r}; choose 'mean' or 'sum'")


def pvse_config(n_embeds: int = 2, hard_negatives: bool = True, **overrides: object) -> PVSEConfig:
    """PVSE with K = `n_embeds`; `hard_negatives` ("PVSE-HNM", the official COCO setting) uses the
    from-scratch hardest-negative recipe of `xmr_core.methods.vse`, otherwise all negatives are summed."""
    hinge = scratch_hard_negatives() if hard_negatives else HingeSchedule(negatives="sum")
    return PVSEConfig(n_embeds=n_embeds, hinge=hinge, **overrides)  # type: ignore[arg-type]


def mil_ranking_loss(hinge: HingeSchedule, scores: Tensor, batch: dict[str, Tensor], epoch: float,
                     reduction: Literal["mean", "sum"] = "mean") -> Tensor:
    """The bidirectional hinge of `hinge` on the MIL scores (B, B) -> scalar. "sum": summed over the B queries of
    each direction (`HingeSchedule.loss`); "mean": PVSE's code, divided by B² when `hinge` sums all negatives
    (its mean over the (B, B) cost matrix, masked entries included) and by B when it keeps hard negatives (its
    mean over the B hardest hinges of each direction), whatever the schedule's weight at `epoch`."""
    total = hinge.loss(scores, batch, epoch)
    if reduction == "sum":
        return total
    b = len(scores)
    return total / (b * b if hinge.negatives == "sum" else b)


def diversity_loss(residuals: Tensor) -> Tensor:
    """(B, K, D) -> scalar: mean over items of ‖R̃ R̃ᵀ − I‖_F / K², R̃ = rows L2-normalised."""
    r = F.normalize(residuals, dim=-1)
    k = r.shape[1]
    gram = r @ r.transpose(1, 2)  # (B, K, K), ones on the diagonal
    off_diagonal = gram - torch.eye(k, dtype=gram.dtype, device=gram.device)
    return (off_diagonal.flatten(1).norm(dim=1) / k**2).mean()


def mmd_loss(x: Tensor, y: Tensor, gamma: float = 0.5) -> Tensor:
    """MMD² estimate between samples x (N, D) and y (M, D) with k(a, b) = exp(−γ‖a − b‖) (biased, V-statistic)."""

    def kernel(a: Tensor, b: Tensor) -> Tensor:
        return torch.exp(-gamma * torch.cdist(a, b))

    return kernel(x, x).mean() - 2 * kernel(x, y).mean() + kernel(y, y).mean()


@register_method(PVSEConfig)
class PVSE(TwoTower):
    """emb = (embeddings (n, K, D) L2-normalised, residuals (n, K, D)); score = max over the K×K pairs."""

    name = "pvse"

    def __init__(self, config: PVSEConfig, word_vectors: np.ndarray) -> None:
        super().__init__(config, word_vectors)
        self.image_head = SubEmbeddingHead(self.image_encoder.local_dim, config.embed_dim, config.n_embeds,
                                           dropout=config.dropout)
        self.text_head = SubEmbeddingHead(self.text_encoder.local_dim, config.embed_dim, config.n_embeds,
                                          dropout=config.dropout)

    def encode_images(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        out = self.image_head(self.image_encoder(batch))
        return out.emb, out.residual

    def encode_captions(self, batch: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        out = self.text_head(self.text_encoder(batch))
        return out.emb, out.residual

    def score(self, img_emb: tuple[Tensor, Tensor], cap_emb: tuple[Tensor, Tensor]) -> Tensor:
        return max_pair_cosine(img_emb[0], cap_emb[0])

    def batch_scores(self, img_emb: tuple[Tensor, Tensor], cap_emb: tuple[Tensor, Tensor]) -> Tensor:
        """MIL score: the best of the K×K cosines, (B, B), differentiable."""
        return max_pair_cosine(img_emb[0], cap_emb[0])

    def loss(self, img_emb: tuple[Tensor, Tensor], cap_emb: tuple[Tensor, Tensor],
             batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        (v, v_res), (t, t_res) = img_emb, cap_emb
        b, k, d = v.shape
        scores = self.batch_scores(img_emb, cap_emb)
        mil = mil_ranking_loss(self.config.hinge, scores, batch, self.epoch, self.config.ranking_reduction)
        loss, parts = mil, {"mil": mil.item(), "max_weight": self.config.hinge.max_weight(self.epoch)}
        if k > 1 and self.config.div_weight > 0:
            div = diversity_loss(v_res) + diversity_loss(t_res)
            loss = loss + self.config.div_weight * div
            parts["div"] = div.item()
        if k > 1 and self.config.mmd_weight > 0:
            mmd = mmd_loss(v.reshape(b * k, d), t.reshape(b * k, d), self.config.mmd_gamma)
            loss = loss + self.config.mmd_weight * mmd
            parts["mmd"] = mmd.item()
        parts["sim_std"] = scores.std().item()
        return loss, parts
