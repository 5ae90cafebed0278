"""SCAN t2i (`xmr_core.methods.scan`) against a brute-force reference that forms every attended vector a_j."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import TextEncoderConfig
from xmr_core.methods.scan import CAPTION_BLOCK, SCAN, SCANConfig, t2i_attention_scores


def _reference(regions, r_mask, words, w_mask, lam):
    """Eq. (1)-(4) of SCAN for one pair at a time, with explicit loops and the attended vectors a_j."""
    out = torch.zeros(len(regions), len(words))
    for i in range(len(regions)):
        v = regions[i][r_mask[i]]  # (n_r, d)
        for j in range(len(words)):
            e = words[j][w_mask[j]]  # (n_c, d)
            s = v @ e.T  # (n_r, n_c)
            s_bar = s.clamp_min(0) / s.clamp_min(0).square().sum(1, keepdim=True).sqrt().clamp_min(1e-12)
            values = []
            for w in range(len(e)):
                alpha = torch.softmax(lam * s_bar[:, w], 0)
                a = (alpha[:, None] * v).sum(0)
                values.append(F.cosine_similarity(a, e[w], dim=0))
            out[i, j] = torch.stack(values).mean()
    return out


def test_t2i_scores_equal_the_brute_force_reference_with_padding() -> None:
    torch.manual_seed(0)
    regions = F.normalize(torch.randn(3, 4, 5), dim=-1)
    words = F.normalize(torch.randn(2, 6, 5), dim=-1)
    r_mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    w_mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    got = t2i_attention_scores(regions, r_mask, words, w_mask, 9.0)
    torch.testing.assert_close(got, _reference(regions, r_mask, words, w_mask, 9.0), atol=1e-5, rtol=1e-5)


def test_the_model_scores_in_pair_chunks_as_in_one_block_and_pads_captions() -> None:
    torch.manual_seed(0)
    vectors = np.random.default_rng(0).standard_normal((10, 6)).astype(np.float32)
    cfg = SCANConfig(embed_dim=8, image=ImageEncoderConfig(kind="regions", region_dim=5),
                     text=TextEncoderConfig(hidden=4), max_words=5, pair_chunk=3)
    model = SCAN(cfg, vectors).eval()
    batch = {"regions": torch.randn(4, 3, 5), "region_mask": torch.ones(4, 3, dtype=torch.bool),
             "tokens": torch.tensor([[2, 3, 4], [5, 6, 0], [7, 0, 0], [8, 9, 0]]), "lengths": torch.tensor([3, 2, 1, 2])}
    img, cap = model.encode_images(batch), model.encode_captions(batch)
    assert cap[0].shape == (4, 5, 8) and cap[1].sum(1).tolist() == [3, 2, 1, 2]
    torch.testing.assert_close(model.score(img, cap), model.batch_scores(img, cap))
    long = {**batch, "tokens": torch.randint(2, 10, (4, 7)), "lengths": torch.full((4,), 7)}
    try:
        model.encode_captions(long)
    except ValueError as err:
        assert "max_words=5" in str(err)
    else:
        raise AssertionError("a caption longer than max_words was accepted")


def _einsum_scores(regions, r_mask, words, w_mask, lam):
    """The pre-issue-74 formulation of Eq. (1)-(4) (pairs laid out (N, M, n_r, n_c) by einsum), kept as a reference."""
    s = torch.einsum("ird,jwd->ijrw", regions, words)
    pair = r_mask[:, None, :, None] & w_mask[None, :, None, :]
    s_bar = F.normalize(s.clamp_min(0.0).masked_fill(~pair, 0.0), dim=3)
    alpha = (lam * s_bar).masked_fill(~r_mask[:, None, :, None], float("-inf")).softmax(2)
    dot_ea = (alpha * s).sum(2)
    gram = regions @ regions.transpose(1, 2)
    norm_a = torch.einsum("ijrw,irq,ijqw->ijw", alpha, gram, alpha).clamp_min(1e-12).sqrt()
    w = w_mask[None].to(dot_ea.dtype)
    return (dot_ea / norm_a * w).sum(-1) / w.sum(-1)


def _fragments(n_img: int, n_cap: int, seed: int) -> tuple[tuple, tuple]:
    """Random unit fragments: images of 2..6 real regions out of 6, captions of 1..12 real words out of 12."""
    g = torch.Generator().manual_seed(seed)
    regions = F.normalize(torch.randn(n_img, 6, 16, generator=g), dim=-1)
    words = F.normalize(torch.randn(n_cap, 12, 16, generator=g), dim=-1)
    r_mask = torch.arange(6)[None] < torch.randint(2, 7, (n_img, 1), generator=g)
    w_mask = torch.arange(12)[None] < torch.randint(1, 13, (n_cap, 1), generator=g)
    return (regions * r_mask[..., None], r_mask), (words * w_mask[..., None], w_mask)


def test_the_batched_scores_equal_the_einsum_formulation() -> None:
    (regions, r_mask), (words, w_mask) = _fragments(9, 300, 1)
    torch.testing.assert_close(t2i_attention_scores(regions, r_mask, words, w_mask, 9.0),
                               _einsum_scores(regions, r_mask, words, w_mask, 9.0), atol=1e-5, rtol=0)


def test_scoring_in_length_blocks_keeps_every_score_and_every_ranking() -> None:
    """Over CAPTION_BLOCK captions of mixed lengths (several length blocks, each cut to its own longest caption, and
    several image steps): the same scores as one einsum block over the padded captions, and the same rankings."""
    cfg = SCANConfig(embed_dim=16, image=ImageEncoderConfig(kind="regions", region_dim=16),
                     text=TextEncoderConfig(hidden=4), max_words=12, pair_chunk=2 * CAPTION_BLOCK)
    model = SCAN(cfg, np.zeros((4, 6), dtype=np.float32)).eval()
    img, cap = _fragments(5, 2 * CAPTION_BLOCK + 37, 2)
    got = model.score(img, cap)
    want = _einsum_scores(*img, *cap, cfg.lambda_softmax)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    assert torch.equal(got.argsort(1), want.argsort(1)) and torch.equal(got.argsort(0), want.argsort(0))
