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
   Wang & Isola over all samples of the batch (both modalities together, as PCME's code does).
4. Sec. 3.2.1 "Measuring instance-wise uncertainty": the geometric mean of the sigmas.
5. Sec. 3.2.3 and Table 1: test-time similarities (mean only, ELK, JS, 2-Wasserstein, average L2, match
   probability), with the space each needs per gallery item.
6. The "mu only" variant (Tables 1-3): the same loss on deterministic embeddings (sigma = 0, J = 1).

Conventions and deviations, stated once: the sigmoid is the standard logistic s(x) = 1/(1+e^-x); PCME's
code uses 1/(1+e^-2x), so its CUB a = b = 5 is a = b = 10 here. The loss is reduced as in PCME's code: the
pair NLL is *summed* over the B^2 pairs, twice (its i2t and t2i terms are the same number, issue #3), the KL
is summed over the 2B items, and the uniformity loss is a log-mean; so `kl_weight` and `uniformity_weight`
are PCME's `vib_beta` and `uniform_lambda` as they are. A per-pair *mean* is not a harmless rescaling: it
shrinks every gradient by 2B^2 = 32768 (B = 128), down to the size of Adam's epsilon (1e-8) for the trunks'
weights, and on the scenes benchmark the model then did not learn (validation rSum 3 after 3 epochs against
27 with the sum; `docs/training.md`).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xmr_core.config import check_profile
from xmr_core.data.corpus import Corpus, Split
from xmr_core.data.scenes import ScenesConfig
from xmr_core.data.text import Vocabulary, load_word_vectors
from xmr_core.encoders.heads import GaussianHead, HeadOutput, LocalAttentionHead
from xmr_core.encoders.image import Features, ImageEncoder, ImageEncoderConfig
from xmr_core.encoders.text import BiGRUTextEncoder, TextEncoderConfig
from xmr_core.encoders.trunk import (
    PretrainedTrunk,
    attach_grid_features,
    imagenet_trunk,
    pretrained_trunk,
    trunk_config,
)
from xmr_core.losses import kl_to_standard_normal, soft_contrastive_loss, uniformity_loss
from xmr_core.methods.base import RetrievalModel, in_batch_positives
from xmr_core.similarity import (
    Gaussian,
    GaussianMethod,
    cosine,
    gaussian_scores,
    match_logits,
    sample_distances,
    sample_gaussian,
)
from xmr_core.train import TrainConfig

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
    kl_weight: float = 1e-3  # PCME's vib_beta (CUB): weight of KL(N(mu, sigma^2) || N(0, I)), summed over items
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


class PCME(RetrievalModel):
    """PCME (and its mu-only variant). Embeddings: a Gaussian `(mu, logvar)`, both (n, D); mu-only: mu (n, D)."""

    name = "pcme"

    def __init__(self, config: PCMEConfig, word_vectors: np.ndarray) -> None:
        super().__init__()
        self.config = config
        self.image_encoder = ImageEncoder(config.image, config.embed_dim)  # g_V (+ the global linear of h_V)
        self.text_encoder = BiGRUTextEncoder(word_vectors, config.embed_dim, config.text)  # g_T (+ that of h_T)
        self.image_head = build_head(self.image_encoder.local_dim, config)  # h_V = (h_V^mu, h_V^sigma)
        self.text_head = build_head(self.text_encoder.local_dim, config)  # h_T = (h_T^mu, h_T^sigma)
        self.scale = nn.Parameter(torch.tensor(float(config.init_scale)))  # a of Eq. (3)
        self.shift = nn.Parameter(torch.tensor(float(config.init_shift)))  # b of Eq. (3)

    # Eq. (4): p(v|i) = N(h_V^mu(z_v), diag(h_V^sigma(z_v))), p(t|c) likewise.
    def _embed(self, head: nn.Module, features: Features) -> Tensor | Gaussian:
        out = head(features)
        return out.emb if isinstance(out, HeadOutput) else out

    def encode_images(self, batch: dict[str, Tensor]) -> Tensor | Gaussian:
        return self._embed(self.image_head, self.image_encoder(batch))

    def encode_captions(self, batch: dict[str, Tensor]) -> Tensor | Gaussian:
        return self._embed(self.text_head, self.text_encoder(batch))

    def backbone_parameters(self) -> list[nn.Parameter]:
        """Frozen in the warm-up phase (Sec. 4.1): the trunks g_V and g_T, as in PCME's code."""
        return self.image_encoder.backbone_parameters() + self.text_encoder.backbone_parameters()

    def samples(self, emb: Tensor | Gaussian, n_samples: int, generator: torch.Generator | None = None) -> Tensor:
        """J reparametrised samples per item, (n, J, D); the mu-only variant is its own single sample."""
        if isinstance(emb, Tensor):
            return emb.unsqueeze(1)
        return sample_gaussian(*emb, n_samples, generator)

    def match_logits(self, img_samples: Tensor, cap_samples: Tensor) -> Tensor:
        """Eq. (3) logits -a ||v^j - t^j'|| + b for every image x caption x sample pair: (n, m, J, J')."""
        return match_logits(sample_distances(img_samples, cap_samples), self.scale, self.shift)

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


# ------------------------------------------------------------------------------ recipes per profile
def pcme_train_config(profile: str, seed: int = 0, finetune: bool = False, **overrides: object) -> TrainConfig:
    """Sec. 4.1 / C.2: AdamP (when installed, else Adam), cosine schedule, gradient clipping 2, Cutout-like
    erasing 0.2 and caption word dropping 0.1; training stops when validation rSum has not improved for
    more than `min_delta` for `patience` epochs (the best epoch is then not the last), at most `epochs`.

    Default (every profile): the image trunk is frozen (its grid features are precomputed), so there is one
    phase and erasing zeroes grid cells (`datasets.erase_cells`). finetune=True: PCME's two phases on pixels,
    the trunk (and word vectors) frozen for the warm-up epochs, then end to end at 0.1 x lr.
    paper: CUB's 10 + 50 epochs at lr 1e-4, batch 128, patience 10. cpu: a 20-epoch cosine at lr 1e-3,
    batch 128, stopping once validation rSum has not risen by more than 1 point (of ~450) for 3 epochs (the
    measurements behind it: docs/training.md). smoke: 2 epochs, batch 32.
    """
    optimizer = "adamp" if importlib.util.find_spec("adamp") is not None else "adam"
    sizes = {"smoke": (2, 1, 32, 5e-4, 0, 0.0), "cpu": (20, 1, 128, 1e-3, 3, 1.0),
             "paper": (60, 10, 128, 1e-4, 10, 0.0)}
    epochs, frozen, batch, lr, patience, min_delta = sizes[check_profile(profile)]
    base = {"epochs": epochs, "frozen_epochs": frozen if finetune else 0, "batch_size": batch, "lr": lr,
            "optimizer": optimizer, "scheduler": "cosine", "finetune_lr_mult": 0.1, "grad_clip": 2.0,
            "random_erasing_prob": 0.2, "word_dropout": 0.1, "seed": seed, "patience": patience,
            "min_delta": min_delta}
    return TrainConfig(**{**base, **overrides})  # type: ignore[arg-type]


def encoder_configs(profile: str, trunk: PretrainedTrunk, finetune: bool = False) -> dict[str, object]:
    """Encoder sizes shared by every model of the chapter (PCME, its variants and the baselines).

    Default: the frozen pretrained trunk's grid features (`ImageEncoder` kind "grid"). `finetune=True`: the
    same trunk on pixels, trained end to end after PCME's warm-up phase (`pcme_train_config(finetune=True)`).
    """
    if check_profile(profile) == "paper":  # CUB: ResNet-50 (ImageNet), D = 512, GloVe-300 + BiGRU 512
        image = ImageEncoderConfig(kind="resnet", arch="resnet50", pretrained=True) if finetune else \
            ImageEncoderConfig(kind="grid", grid_dim=trunk.channels, grid_cells=trunk.cells, grid_pool="mean",
                               trunk=trunk.key)
        return {"embed_dim": 512, "image": image, "text": TextEncoderConfig(hidden=512)}
    widths = tuple(trunk.meta["config"]["widths"])
    sizes = {"smoke": (64, 128, 32), "cpu": (256, 512, 128)}[profile]
    embed_dim, hidden, text_hidden = sizes
    if finetune:
        image = ImageEncoderConfig(kind="cnn", widths=widths, hidden=hidden, trunk=trunk.key)
    else:
        image = ImageEncoderConfig(kind="grid", widths=widths, hidden=hidden, grid_dim=trunk.channels,
                                   grid_cells=trunk.cells, trunk=trunk.key)
    return {"embed_dim": embed_dim, "image": image, "text": TextEncoderConfig(hidden=text_hidden)}


def pcme_config(encoders: dict[str, object], **overrides: object) -> PCMEConfig:
    """PCME on the chapter's encoders (`encoder_configs`), PCME's CUB weights (KL 1e-3, uniformity 10);
    `mu_only=True` gives the deterministic variant."""
    if overrides.get("mu_only"):
        overrides.setdefault("test_similarity", "mean_cosine")
    return PCMEConfig(**{**encoders, **overrides})  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ CUB-style zero-shot protocol
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


def chapter_trunk(profile: str, corpus: Corpus, progress: bool = True) -> PretrainedTrunk:
    """The frozen image trunk of a chapter: the scenes trunk pretrained on the corpus's pretraining set
    (cached), or, for the paper profile, torchvision's ImageNet ResNet-50 (PCME's CUB trunk)."""
    if check_profile(profile) == "paper":
        return imagenet_trunk("resnet50")
    scenes = ScenesConfig(**corpus.meta["config"])
    return pretrained_trunk(scenes, trunk_config(profile), progress)


def load_chapter_data(corpus: Corpus, word_vectors: str = "glove-6b-50d", trunk: PretrainedTrunk | None = None,
                      progress: bool = True) -> ChapterData:
    """Class-split the corpus (scenes: `meta["class_split"]`; CUB's reader already splits by class), build the
    vocabulary from the training captions only, and, with a `trunk`, attach its frozen grid features to
    every split (`Split.grid`, cached)."""
    if trunk is not None:
        attach_grid_features(corpus.splits.values(), trunk, progress)
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
