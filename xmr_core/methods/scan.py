"""SCAN, text-to-image stacked cross attention (Lee et al., "Stacked Cross Attention for Image-Text Matching",
ECCV 2018, Sec. 3.1 and 3.3): the score-based matcher that HREM's Figure 5 sets against embedding-based
retrieval. Its score needs every (image, caption) pair: each word attends over the image's regions.

1. Fragments: region features (the BUTD analogue) through the region projector's FC layer to d, the BiGRU's
   (or BERT's) word features through a linear layer to d; both L2-normalised per fragment (SCAN's
   `precomp_enc_type="basic"` and `no_txtnorm=False`).
2. Their Eq. (1)-(2), t2i: s_ij = cos(v_i, e_j) of region i and word j; s̄_ij = [s_ij]_+ / sqrt(Σ_j [s_ij]_+²)
   (normalised over the words); α_ij = softmax_i(λ₁ s̄_ij) over the image's real regions; the attended image
   vector of word j is a_j = Σ_i α_ij v_i.
3. Their Eq. (3)-(4): R(e_j, a_j) = cos(e_j, a_j); S(I, T) = the mean of R over the caption's real words
   (LogSumExp pooling is SCAN's other option, not built).
4. Loss: the VSE++ hinge on the (B, B) pair scores of a batch (SCAN: the hardest negative, margin 0.2); the
   schedule is the library's from-scratch recipe (`scratch_hard_negatives`) unless given.

Open choices: λ₁ = 9 (SCAN's t2i value on Flickr30K and COCO); a caption's words are padded to `max_words` so
that its embedding is one fixed-size tensor (a longer caption is an error); `score` takes the captions in blocks
of similar length, each cut to its longest caption (a test split's captions are mostly far shorter than the
longest), and bounds its memory by `pair_chunk` pairs at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import BertEncoderConfig, FeatureTextEncoderConfig, TextEncoderConfig
from xmr_core.methods.registry import register_method
from xmr_core.methods.two_tower import TwoTower
from xmr_core.methods.vse import HingeSchedule, scratch_hard_negatives

Fragments = tuple[Tensor, Tensor]  # (features (n, L, d) unit, mask (n, L) bool)
CAPTION_BLOCK = 128  # captions of similar length scored together (`SCAN.score`)


@dataclass
class SCANConfig:
    """SCAN t2i: λ₁ of the attention softmax, the words each caption is padded to, and the hinge schedule."""

    embed_dim: int = 1024
    image: ImageEncoderConfig = field(default_factory=ImageEncoderConfig)
    text: TextEncoderConfig | BertEncoderConfig | FeatureTextEncoderConfig = field(default_factory=TextEncoderConfig)
    lambda_softmax: float = 9.0  # λ₁
    max_words: int = 40
    pair_chunk: int = 4096  # (image, caption) pairs scored at once
    hinge: HingeSchedule = field(default_factory=scratch_hard_negatives)

    def __post_init__(self) -> None:
        if not self.lambda_softmax > 0 or self.max_words < 1 or self.pair_chunk < 1:
            raise ValueError(f"SCANConfig: need lambda_softmax > 0, max_words >= 1, pair_chunk >= 1, got "
                             f"{self.lambda_softmax}, {self.max_words}, {self.pair_chunk}")


def scan_config(encoders: dict, **overrides: object) -> SCANConfig:
    """SCAN on a chapter's encoders (`embed_dim`, `image`, `text`), SCAN's defaults unless overridden."""
    return SCANConfig(**{**encoders, **overrides})  # type: ignore[arg-type]


def t2i_attention_scores(regions: Tensor, region_mask: Tensor, words: Tensor, word_mask: Tensor,
                         lam: float) -> Tensor:
    """SCAN t2i score of every pair, Eq. (1)-(4): regions (N, n_r, d) + mask (N, n_r), words (M, n_c, d) +
    mask (M, n_c), all fragments unit -> S (N, M). The pairs are laid out (N, n_r, M, n_c), the layout of one
    matrix product of all regions with all words, so that no (pairs, d) operand is ever copied."""
    n, n_r, d = regions.shape
    m, n_c, _ = words.shape
    s = (regions.reshape(n * n_r, d) @ words.reshape(m * n_c, d).T).view(n, n_r, m, n_c)  # cosines
    real_region = region_mask[:, :, None, None]
    s_bar = F.normalize(s.clamp_min(0.0).masked_fill(~(real_region & word_mask), 0.0), dim=3)  # over words, Eq. (1)
    alpha = (lam * s_bar).masked_fill(~real_region, float("-inf")).softmax(1)  # over the image's regions
    # Eq. (2)-(3) without forming a_j (N, M, n_c, d): e_j . a_j = sum_i α_ij s_ij, and
    # |a_j|² = α_jᵀ G α_j with the Gram matrix G (N, n_r, n_r) of each image's regions (e_j is unit)
    dot_ea = (alpha * s).sum(1)  # (N, M, n_c)
    gram = regions @ regions.transpose(1, 2)
    g_alpha = torch.bmm(gram, alpha.reshape(n, n_r, m * n_c)).view_as(alpha)
    norm_a = (alpha * g_alpha).sum(1).clamp_min(1e-12).sqrt()
    relevance = dot_ea / norm_a  # R(e_j, a_j) = cos(e_j, a_j) (N, M, n_c), Eq. (3)
    w = word_mask[None].to(relevance.dtype)
    return (relevance * w).sum(-1) / w.sum(-1)  # mean over the real words, Eq. (4)


def _trimmed(cap_emb: Fragments) -> Fragments:
    """The captions' words cut to the longest caption among them: the padding beyond it changes no score."""
    words, mask = cap_emb
    width = max(1, int(mask.sum(1).max()))
    return words[:, :width], mask[:, :width]


def _length_blocks(word_mask: Tensor, size: int) -> list[Tensor]:
    """The captions' indices in blocks of `size` captions of similar length (ascending), so that each block is
    trimmed to its own longest caption (`_trimmed`) and scores few padded words."""
    order = torch.argsort(word_mask.sum(1), stable=True)
    return list(order.split(size))


@register_method(SCANConfig)
class SCAN(TwoTower):
    """Embeddings are the unit fragments and their masks: images ((n, n_r, d), (n, n_r)), captions
    ((m, max_words, d), (m, max_words)); the score attends each caption's words over each image's regions."""

    name = "scan"

    def __init__(self, config: SCANConfig, word_vectors: np.ndarray) -> None:
        super().__init__(config, word_vectors)
        d = config.embed_dim
        self.image_fc = nn.Identity() if config.image.kind == "regions" else nn.Linear(self.image_encoder.local_dim, d)
        self.text_fc = nn.Linear(self.text_encoder.local_dim, d)

    def encode_images(self, batch: dict[str, Tensor]) -> Fragments:
        features = self.image_encoder(batch)
        return F.normalize(self.image_fc(features.local), dim=-1), features.mask

    def encode_captions(self, batch: dict[str, Tensor]) -> Fragments:
        features = self.text_encoder(batch)
        words, mask = F.normalize(self.text_fc(features.local), dim=-1), features.mask
        width = self.config.max_words
        if words.shape[1] > width:
            raise ValueError(f"SCAN: a caption has {words.shape[1]} word features, more than max_words={width}")
        return F.pad(words, (0, 0, 0, width - words.shape[1])), F.pad(mask, (0, width - mask.shape[1]))

    def score(self, img_emb: Fragments, cap_emb: Fragments) -> Tensor:
        """(n_img, n_cap) t2i attention scores: the captions in blocks of `CAPTION_BLOCK` of similar length, each
        trimmed to its longest (`_length_blocks`), against `pair_chunk // CAPTION_BLOCK` images at a time."""
        (regions, r_mask), (words, w_mask) = img_emb, cap_emb
        out = regions.new_empty(len(regions), len(words))
        step = max(1, self.config.pair_chunk // CAPTION_BLOCK)
        for block in _length_blocks(w_mask, CAPTION_BLOCK):
            b_words, b_mask = _trimmed((words[block], w_mask[block]))
            out[:, block] = torch.cat([t2i_attention_scores(regions[i:i + step], r_mask[i:i + step], b_words, b_mask,
                                                            self.config.lambda_softmax)
                                       for i in range(0, len(regions), step)])
        return out

    def batch_scores(self, img_emb: Fragments, cap_emb: Fragments) -> Tensor:
        (regions, r_mask), (words, w_mask) = img_emb, _trimmed(cap_emb)
        return t2i_attention_scores(regions, r_mask, words, w_mask, self.config.lambda_softmax)

    def loss(self, img_emb: Fragments, cap_emb: Fragments, batch: dict[str, Tensor]
             ) -> tuple[Tensor, dict[str, float]]:
        scores = self.batch_scores(img_emb, cap_emb)
        loss = self.config.hinge.loss(scores, batch, self.epoch)
        off = ~torch.eye(len(scores), dtype=torch.bool, device=scores.device)
        return loss, {"hinge": loss.item(), "pos_sim": scores.diagonal().mean().item(),
                      "neg_sim": scores[off].mean().item() if bool(off.any()) else float("nan")}
