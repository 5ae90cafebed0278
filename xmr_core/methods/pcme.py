"""PCME: Probabilistic Cross-Modal Embedding (Chun et al., CVPR 2021), Section 3.

Read top to bottom, this file follows the paper's Section 3:

1. Sec. 3.2.1, Eq. (4), Fig. 2-3: each image i and caption c is a Gaussian `N(mu, diag(sigma^2))` in R^D.
   The visual trunk g_V (a CNN grid, `xmr_core.encoders.image`) and the textual trunk g_T (word vectors +
   BiGRU, `xmr_core.encoders.text`) feed a head per modality (`xmr_core.encoders.heads.GaussianHead`):
   the mean h^mu = L2(LN(global + s(w att(z) z))) with the local attention branch, the variance h^sigma
   the same structure without sigmoid, LN and L2. `local_attention=False` drops the branch (ablation).
   Gaussians are `(mu, logvar)` pairs, `logvar = log sigma^2` per dimension, as everywhere in xmr.
2. Sec. 3.1.2 / 3.2.1, Eq. (1)-(3): the soft cross-modal contrastive loss. J samples per item
   (reparametrised), the match probability `p(m|i, c) ~ 1/J^2 sum_jj' s(-a ||v^j - t^j'|| + b)` with
   learnable a, b, and the NLL `-log p` for matches / `-log(1 - p)` otherwise, over *every* pair of the
   batch: B matching pairs (plus in-batch duplicates, which are matches too) and the rest non-matching.
3. Sec. 3.2.1 "Additional regularization": KL(N(mu, sigma^2) || N(0, I)) and the uniformity loss of
   Wang & Isola over all samples of the batch (both modalities together, as PCME's code does), both as the
   paper states them; PCME's code computes each differently (see the conventions below).
4. Sec. 3.2.1 "Measuring instance-wise uncertainty": the geometric mean of the sigmas.
5. Sec. 3.2.3 and Table 1: test-time similarities (mean only, ELK, JS, 2-Wasserstein, average L2, match
   probability), with the space each needs per gallery item.
6. The "mu only" variant (Tables 1-3): the same loss on deterministic embeddings (sigma = 0, J = 1).

Conventions and deviations, stated once: the sigmoid is the standard logistic s(x) = 1/(1+e^-x); PCME's
code uses 1/(1+e^-2x), so its CUB a = b = 5 is a = b = 10 here. The loss is reduced as in PCME's code: the
pair NLL is *summed* over the B^2 pairs, twice (its i2t and t2i terms are the same number, issue #3), the KL
is summed over the 2B items, and the uniformity loss is a log-mean; so `kl_weight` and `uniformity_weight`
weigh their terms against the NLL as PCME's `vib_beta` and `uniform_lambda` do (the terms themselves differ
slightly, below). A per-pair *mean* is not a harmless rescaling: it
shrinks every gradient by 2B^2 = 32768 (B = 128), down to the size of Adam's epsilon (1e-8) for the trunks'
weights, and on the scenes benchmark the model then did not learn (validation rSum 3 after 3 epochs against
27 with the sum; `docs/training.md`).

Two regularisers differ from PCME's code, which computes other functions than the paper's (`docs/methods.md`):
- KL: the book's is the paper's KL(N(mu, sigma^2) || N(0, I)) (`losses.kl_to_standard_normal`). The code
  passes log sigma where its formula expects log sigma^2 (and the mean of the J samples for mu), so for small
  sigma the book's gradient on log sigma is about twice the code's (-1 against -1/2 per dimension), and 4x its
  curvature at sigma = 1: the tuned `kl_weight` is not directly comparable with the paper's `vib_beta`.
- Uniformity: the book's is exact over all 2 B J samples (`losses.uniformity_loss`); above 128 points the code
  estimates it on 128 points drawn with replacement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xmr_core.encoders.heads import GaussianHead, LocalAttentionHead
from xmr_core.encoders.image import Features, ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.losses import kl_to_standard_normal, soft_contrastive_loss, uniformity_loss
from xmr_core.methods.base import in_batch_positives
from xmr_core.methods.registry import register_method
from xmr_core.methods.two_tower import TwoTower
from xmr_core.similarity import (
    Gaussian,
    GaussianMethod,
    cosine,
    gaussian_scores,
    match_logits,
    sample_distances,
    sample_gaussian,
)

TestSimilarity = Literal["mean_cosine", "elk", "js", "wasserstein", "avg_l2", "match_prob"]

# Table 1: the test-time similarities, whether they sample, and the space a gallery item needs.
TEST_TIME_SIMILARITIES: dict[str, tuple[str, bool, str]] = {
    "mean_cosine": ("Mean only", False, "O(N)"),
    "elk": ("ELK", False, "O(2N)"),
    "js": ("JS-divergence", False, "O(2N)"),
    "wasserstein": ("2-Wasserstein", False, "O(2N)"),
    "avg_l2": ("Average L2", True, "O(J^2 N)"),
    "match_prob": ("Match prob", True, "O(J^2 N)"),
}


@dataclass
class PCMEConfig:
    """PCME hyperparameters (defaults: the CUB recipe, rescaled to this file's conventions)."""

    embed_dim: int = 256
    image: ImageEncoderConfig = field(default_factory=ImageEncoderConfig)
    text: TextEncoderConfig = field(default_factory=TextEncoderConfig)
    n_samples: int = 7  # J in training, Eq. (2)
    n_samples_test: int = 7  # J for the sampled test-time similarities
    init_scale: float = 10.0  # a of Eq. (3), learnable
    init_shift: float = 10.0  # b of Eq. (3), learnable
    init_logvar: float = -8.0  # initial log sigma^2 (bias of h^sigma): small noise, so early p(m) is not ~0
    kl_weight: float = 1e-3  # PCME's vib_beta (CUB) value: weight of KL(N(mu, sigma^2) || N(0, I)), summed over items
    uniformity_weight: float = 10.0  # PCME's uniform_lambda (CUB): weight of the uniformity loss
    local_attention: bool = True  # the local attention branch of Fig. 3(a)
    mu_only: bool = False  # deterministic "PCME mu only": sigma = 0, J = 1, no KL
    test_similarity: TestSimilarity = "match_prob"
    test_seed: int = 0  # seed of the test-time samples (sampled similarities are then deterministic)
    dropout: float = 0.0

    def __post_init__(self) -> None:
        if self.test_similarity not in TEST_TIME_SIMILARITIES:
            raise ValueError(f"PCMEConfig: unknown test_similarity {self.test_similarity!r}; "
                             f"choose one of {sorted(TEST_TIME_SIMILARITIES)}")
        if self.n_samples < 1 or self.n_samples_test < 1:
            raise ValueError(f"PCMEConfig: n_samples and n_samples_test must be >= 1, got "
                             f"{self.n_samples} and {self.n_samples_test}")
        if self.mu_only and self.test_similarity != "mean_cosine":
            raise ValueError("PCMEConfig: the mu-only variant has no sigma; its test similarity is 'mean_cosine'")


def pcme_mu_only_config(**overrides: object) -> PCMEConfig:
    """The deterministic variant of Tables 1-3 ("PCME mu only")."""
    return PCMEConfig(**{"mu_only": True, "test_similarity": "mean_cosine", **overrides})  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ 1. heads (Eq. 4, Fig. 3)
class GlobalHead(nn.Module):
    """Fig. 3 without the local attention branch (ablation): mu = L2(LN(g)) and, unless deterministic,
    logvar = linear(g). Features -> (mu, logvar), both (B, D), or mu alone."""

    def __init__(self, embed_dim: int, variance: bool = True) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(embed_dim)
        self.var = nn.Linear(embed_dim, embed_dim) if variance else None

    def forward(self, features: Features) -> Tensor | tuple[Tensor, Tensor]:
        mu = F.normalize(self.norm(features.global_), dim=-1)
        return mu if self.var is None else (mu, self.var(features.global_))


def build_head(local_dim: int, cfg: PCMEConfig) -> nn.Module:
    """h = (h^mu, h^sigma) of one modality: with or without the local attention branch, with or without sigma."""
    if cfg.mu_only:
        if cfg.local_attention:
            return LocalAttentionHead(local_dim, cfg.embed_dim, dropout=cfg.dropout)
        return GlobalHead(cfg.embed_dim, variance=False)
    head = GaussianHead(local_dim, cfg.embed_dim, cfg.embed_dim, dropout=cfg.dropout) if cfg.local_attention \
        else GlobalHead(cfg.embed_dim)
    sigma_bias = head.var_global.bias if isinstance(head, GaussianHead) else head.var.bias
    nn.init.constant_(sigma_bias, cfg.init_logvar)  # logvar starts near init_logvar
    return head


# ------------------------------------------------------------------------------ 2-6. the model
def uncertainty(logvar: Tensor) -> Tensor:
    """Sec. 3.2.1: instance-wise uncertainty = geometric mean of the sigmas, exp(mean_d logvar_d / 2). (N, D) -> (N,)."""
    return torch.exp(0.5 * logvar.mean(dim=-1))


@register_method(PCMEConfig)
class PCME(TwoTower):
    """PCME (and its mu-only variant). Embeddings: a Gaussian `(mu, logvar)`, both (n, D); mu-only: mu (n, D).
    The towers: g_V and g_T (each with the global linear of its h)."""

    name = "pcme"

    def __init__(self, config: PCMEConfig, word_vectors: np.ndarray) -> None:
        super().__init__(config, word_vectors)
        self.image_head = build_head(self.image_encoder.local_dim, config)  # h_V = (h_V^mu, h_V^sigma)
        self.text_head = build_head(self.text_encoder.local_dim, config)  # h_T = (h_T^mu, h_T^sigma)
        self.scale = nn.Parameter(torch.tensor(float(config.init_scale)))  # a of Eq. (3)
        self.shift = nn.Parameter(torch.tensor(float(config.init_shift)))  # b of Eq. (3)

    # Eq. (4): p(v|i) = N(h_V^mu(z_v), diag(h_V^sigma(z_v))), p(t|c) likewise: `TwoTower.encode_images` /
    # `encode_captions` through `image_head` / `text_head`.

    def samples(self, emb: Tensor | Gaussian, n_samples: int, generator: torch.Generator | None = None) -> Tensor:
        """J reparametrised samples per item, (n, J, D); the mu-only variant is its own single sample."""
        if isinstance(emb, Tensor):
            return emb.unsqueeze(1)
        return sample_gaussian(*emb, n_samples, generator)

    def match_logits(self, img_samples: Tensor, cap_samples: Tensor) -> Tensor:
        """Eq. (3) logits -a ||v^j - t^j'|| + b for every image x caption x sample pair: (n, m, J, J')."""
        return match_logits(sample_distances(img_samples, cap_samples), self.scale, self.shift)

    def batch_scores(self, img_emb: Tensor | Gaussian, cap_emb: Tensor | Gaussian) -> Tensor:
        """Eq. (2): the Monte-Carlo match probability of every image x caption pair of a batch from J fresh
        samples each (mu-only: s(-a ||mu_v - mu_t|| + b)), (B, B), differentiable."""
        v = self.samples(img_emb, self.config.n_samples)
        t = self.samples(cap_emb, self.config.n_samples)
        return torch.sigmoid(self.match_logits(v, t)).mean(dim=(2, 3))

    def loss(self, img_emb: Tensor | Gaussian, cap_emb: Tensor | Gaussian,
             batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        """Soft cross-modal contrastive loss (Eq. 1-3) over all B x B pairs + KL + uniformity regularisers."""
        cfg = self.config
        v = self.samples(img_emb, cfg.n_samples)  # (B, J, D)
        t = self.samples(cap_emb, cfg.n_samples)  # (B, J, D)
        matched = in_batch_positives(batch)  # (B, B): the B ground-truth pairs and in-batch duplicates
        distances = sample_distances(v, t)  # (B, B, J, J)
        # Eq. (1)-(3), summed over pairs; x 2 for the i2t and t2i terms of PCME's code (equal, issue #3).
        nll = 2.0 * soft_contrastive_loss(distances, matched, self.scale, self.shift, reduction="sum")
        total = nll
        logs: dict[str, float] = {"nll": nll.item(), "a": self.scale.item(), "b": self.shift.item()}
        if cfg.uniformity_weight > 0:
            unif = uniformity_loss(torch.cat([v, t], dim=0))  # all 2 B J samples of the batch
            total = total + cfg.uniformity_weight * unif
            logs["uniformity"] = unif.item()
        if not cfg.mu_only:
            kl = kl_to_standard_normal(*img_emb, reduction="sum") + kl_to_standard_normal(*cap_emb, reduction="sum")
            total = total + cfg.kl_weight * kl
            logs["kl"] = kl.item()
            logs["sigma_img"] = uncertainty(img_emb[1]).mean().item()
            logs["sigma_cap"] = uncertainty(cap_emb[1]).mean().item()
        with torch.no_grad():
            p = torch.sigmoid(match_logits(distances, self.scale, self.shift)).mean(dim=(2, 3))  # Eq. (2), (B, B)
            logs["p_pos"] = p[matched].mean().item()
            logs["p_neg"] = p[~matched].mean().item() if bool((~matched).any()) else float("nan")
        return total, logs

    @torch.no_grad()
    def score(self, img_emb: Tensor | Gaussian, cap_emb: Tensor | Gaussian,
              method: TestSimilarity | None = None) -> Tensor:
        """A Table 1 test-time similarity (default `config.test_similarity`): (n_img, n_cap), higher = closer.

        Sampled similarities draw their samples from a generator seeded with `config.test_seed`, so a
        score matrix is reproducible.
        """
        method = method or self.config.test_similarity
        if method not in TEST_TIME_SIMILARITIES:
            raise ValueError(f"PCME.score: unknown method {method!r}; choose one of {sorted(TEST_TIME_SIMILARITIES)}")
        if isinstance(img_emb, Tensor):
            if method != "mean_cosine":
                raise ValueError(f"PCME.score: the mu-only variant has no sigma, so {method!r} is undefined")
            return cosine(img_emb, cap_emb)
        generator = torch.Generator().manual_seed(self.config.test_seed)
        method_: GaussianMethod = method  # type: ignore[assignment]
        return gaussian_scores(img_emb, cap_emb, method_, a=self.scale.item(), b=self.shift.item(),
                               n_samples=self.config.n_samples_test, generator=generator)


# ------------------------------------------------------------------------------ configs on shared encoders
def pcme_config(encoders: dict[str, object], **overrides: object) -> PCMEConfig:
    """PCME on the chapter's encoders (`encoder_configs`), PCME's CUB weights (KL 1e-3, uniformity 10);
    `mu_only=True` gives the deterministic variant."""
    if overrides.get("mu_only"):
        overrides.setdefault("test_similarity", "mean_cosine")
    return PCMEConfig(**{**encoders, **overrides})  # type: ignore[arg-type]
