"""Shapes, masks and gradients of every encoder and head (xmr_core.encoders)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from xmr_core.encoders.heads import GaussianHead, LocalAttentionHead, MultiHeadSelfAttention, SubEmbeddingHead
from xmr_core.encoders.image import (
    Features,
    ImageEncoder,
    ImageEncoderConfig,
    ResNetEncoder,
    SmallCNN,
    grid_to_sequence,
    load_pretrained_state,
)
from xmr_core.encoders.text import BiGRUTextEncoder, TextEncoderConfig


def _grads_reach(module: torch.nn.Module) -> bool:
    return all(p.grad is not None and torch.isfinite(p.grad).all() for p in module.parameters() if p.requires_grad)


def _text_batch(lengths: list[int], vocab: int = 12, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(2, vocab, (len(lengths), max(lengths)), generator=g)
    for b, n in enumerate(lengths):
        tokens[b, n:] = 0
    return {"tokens": tokens, "lengths": torch.tensor(lengths)}


def test_small_cnn_grid_and_global_shapes_and_gradients() -> None:
    cnn = SmallCNN(embed_dim=24)  # the prototype's 16/32/64/128 blocks on 64x64 -> 4x4x128 grid
    images = torch.randn(3, 3, 64, 64, requires_grad=True)
    grid, glob = cnn(images)
    assert grid.shape == (3, 128, 4, 4) and glob.shape == (3, 24)
    (grid.sum() + glob.sum()).backward()
    assert _grads_reach(cnn) and images.grad is not None


def test_small_cnn_global_feature_keeps_position() -> None:
    # Moving the grid's content to another cell keeps any pooled (GAP) summary the same; the global
    # feature flattens the grid, so it must change.
    cnn = SmallCNN(embed_dim=16).eval()
    grid = torch.zeros(1, 128, 4, 4)
    grid[..., 0, 0] = torch.rand(128)
    moved = torch.roll(grid, shifts=(3, 3), dims=(2, 3))
    assert torch.equal(grid.mean((2, 3)), moved.mean((2, 3)))
    with torch.no_grad():
        assert not torch.allclose(cnn.head(grid_to_sequence(grid)), cnn.head(grid_to_sequence(moved)), atol=1e-4)


def test_grid_to_sequence_is_row_major() -> None:
    grid = torch.arange(2 * 3 * 2 * 2, dtype=torch.float32).view(2, 3, 2, 2)
    seq = grid_to_sequence(grid)
    assert seq.shape == (2, 4, 3)
    # position (row 1, col 0) is sequence index 2; channel c there is grid[b, c, 1, 0]
    assert torch.equal(seq[1, 2], grid[1, :, 1, 0])


def test_resnet_encoder_grid_before_pooling() -> None:
    enc = ResNetEncoder(embed_dim=10, arch="resnet18")
    grid, glob = enc(torch.randn(2, 3, 64, 64))
    assert grid.shape == (2, 512, 2, 2) and glob.shape == (2, 10)  # 64 / 32 = 2
    glob.sum().backward()
    assert _grads_reach(enc)


def test_a_resnet_without_imagenet_weights_starts_its_residual_branches_zero_scaled(tmp_path) -> None:
    """As the trunk without weights does (`trunk.imagenet_trunk`), so the encoder fine-tuned from it starts finite (a
    plain ResNet-152's grid reaches ~1e8: tests/test_trunk.py); with weights, the file's scales stand."""
    import torchvision

    blocks = [b for b in ResNetEncoder(embed_dim=4, arch="resnet18").backbone.modules() if hasattr(b, "bn2")]
    assert len(blocks) == 8 and all(not b.bn2.weight.any() for b in blocks)
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), tmp_path / "r18.pth")
    loaded = ResNetEncoder(embed_dim=4, arch="resnet18", pretrained=str(tmp_path / "r18.pth"))
    assert all(b.bn2.weight.all() for b in loaded.backbone.modules() if hasattr(b, "bn2"))


def test_resnet_pretrained_missing_file_is_one_line_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    with pytest.raises(FileNotFoundError) as err:
        ResNetEncoder(embed_dim=4, arch="resnet18", pretrained=True)
    assert "resnet18" in str(err.value) and "\n" not in str(err.value)
    assert str(tmp_path) in str(err.value)


def test_resnet_pretrained_from_path_loads_the_weights(tmp_path) -> None:
    import torchvision

    reference = torchvision.models.resnet18(weights=None)
    torch.save(reference.state_dict(), tmp_path / "r18.pth")
    enc = ResNetEncoder(embed_dim=4, arch="resnet18", pretrained=str(tmp_path / "r18.pth"))
    assert torch.equal(enc.backbone[0].weight, reference.conv1.weight)
    (tmp_path / "bad.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(RuntimeError, match="bad.pth"):
        load_pretrained_state("resnet18", str(tmp_path / "bad.pth"))


def test_region_encoder_masked_mean() -> None:
    enc = ImageEncoder(ImageEncoderConfig(kind="regions", region_dim=6), embed_dim=5)
    regions = torch.randn(2, 4, 6)
    mask = torch.tensor([[True, True, False, False], [True, True, True, True]])
    out = enc({"regions": regions, "region_mask": mask})
    assert out.local.shape == (2, 4, 5) and out.global_.shape == (2, 5)
    projected = enc.net.fc(regions)
    assert torch.allclose(out.global_[0], projected[0, :2].mean(0), atol=1e-6)  # padding ignored
    assert torch.allclose(out.global_[1], projected[1].mean(0), atol=1e-6)


def test_image_encoder_wraps_cnn_and_names_missing_input() -> None:
    enc = ImageEncoder(ImageEncoderConfig(widths=(8, 16), image_size=16, hidden=20), embed_dim=7)
    out = enc({"images": torch.randn(2, 3, 16, 16)})
    assert out.local.shape == (2, 16, 16) and out.mask.all() and out.global_.shape == (2, 7)
    with pytest.raises(KeyError, match="images"):
        enc({"regions": torch.randn(2, 3, 4)})


def test_bigru_shapes_mask_and_padding_invariance() -> None:
    vectors = np.random.default_rng(0).normal(size=(12, 6)).astype(np.float32)
    enc = BiGRUTextEncoder(vectors, embed_dim=9, config=TextEncoderConfig(hidden=5)).eval()
    batch = _text_batch([4, 2, 3])
    out = enc(batch)
    assert out.local.shape == (3, 4, 10) and out.global_.shape == (3, 9)
    assert out.mask.tolist() == [[True] * 4, [True, True, False, False], [True, True, True, False]]
    assert (out.local[1, 2:] == 0).all()  # padded word states are zero
    # the same caption alone (no padding) gives the same sentence feature: packing ignores pads
    alone = enc({"tokens": batch["tokens"][1:2, :2], "lengths": torch.tensor([2])})
    assert torch.allclose(alone.global_, out.global_[1:2], atol=1e-6)


def test_bigru_frozen_or_finetuned_embeddings() -> None:
    vectors = np.random.default_rng(1).normal(size=(12, 6)).astype(np.float32)
    frozen = BiGRUTextEncoder(vectors, 8, TextEncoderConfig(hidden=4, finetune_embeddings=False))
    tuned = BiGRUTextEncoder(vectors, 8, TextEncoderConfig(hidden=4, finetune_embeddings=True))
    assert torch.equal(frozen.embed.weight, torch.from_numpy(vectors))
    for enc in (frozen, tuned):
        enc(_text_batch([3, 1])).global_.sum().backward()
    assert frozen.embed.weight.grad is None and tuned.embed.weight.grad is not None
    with torch.no_grad():
        tuned.embed.weight.add_(1.0)
    assert torch.equal(frozen.embed.weight, torch.from_numpy(vectors))  # the caller's array is not shared
    assert _grads_reach(frozen.rnn) and _grads_reach(tuned)


def test_bigru_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="row 3"):
        bad = np.zeros((5, 4), dtype=np.float32)
        bad[3, 1] = np.nan
        BiGRUTextEncoder(bad, 4)
    enc = BiGRUTextEncoder(np.ones((5, 4), dtype=np.float32), 4)
    with pytest.raises(ValueError, match="lengths"):
        enc({"tokens": torch.ones(2, 3, dtype=torch.int64), "lengths": torch.tensor([3, 0])})


def _features(b: int = 3, n: int = 5, c: int = 6, d: int = 8) -> Features:
    mask = torch.ones(b, n, dtype=torch.bool)
    mask[0, 3:] = False
    return Features(torch.randn(b, n, c, requires_grad=True), mask, torch.randn(b, d, requires_grad=True))


def test_self_attention_masks_padding_and_normalises() -> None:
    feats = _features()
    pooled, attn = MultiHeadSelfAttention(6, n_heads=2)(feats.local, feats.mask)
    assert pooled.shape == (3, 2, 6) and attn.shape == (3, 5, 2)
    assert torch.allclose(attn.sum(1), torch.ones(3, 2))
    assert (attn[0, 3:] == 0).all()
    # brute force: head k of item 0 is the attention-weighted sum of its local features
    assert torch.allclose(pooled[0, 1], (attn[0, :, 1:2] * feats.local[0]).sum(0), atol=1e-6)
    with pytest.raises(ValueError, match="all-False"):
        MultiHeadSelfAttention(6, 1)(feats.local, torch.zeros(3, 5, dtype=torch.bool))


def test_sub_embedding_head_shapes_norms_and_gradients() -> None:
    feats = _features()
    head = SubEmbeddingHead(6, 8, n_embeds=3)
    out = head(feats)
    assert out.emb.shape == (3, 3, 8) and out.residual.shape == (3, 3, 8) and out.attn.shape == (3, 5, 3)
    assert torch.allclose(out.emb.norm(dim=-1), torch.ones(3, 3), atol=1e-5)
    assert ((out.residual > 0) & (out.residual < 1)).all()  # sigmoid branch
    out.emb.sum().backward()
    assert _grads_reach(head) and feats.local.grad is not None and feats.global_.grad is not None


def test_local_attention_head_is_the_single_embedding_case() -> None:
    feats = _features()
    torch.manual_seed(3)
    single = LocalAttentionHead(6, 8)
    torch.manual_seed(3)
    multi = SubEmbeddingHead(6, 8, n_embeds=1)
    assert single(feats).emb.shape == (3, 8)
    assert torch.allclose(single(feats).emb, multi(feats).emb[:, 0])
    # without LN/L2/sigmoid the head is exactly global + fc(attended local)
    plain = LocalAttentionHead(6, 8, sigmoid=False, layer_norm=False, l2=False)
    out = plain(feats)
    pooled, _ = plain.attention(feats.local, feats.mask)
    assert torch.allclose(out.emb, feats.global_ + plain.fc(pooled[:, 0]), atol=1e-6)


def test_gaussian_head_mean_is_unit_and_logvar_unconstrained() -> None:
    feats = _features()
    head = GaussianHead(6, 8, 8)
    mu, logvar = head(feats)
    assert mu.shape == logvar.shape == (3, 8)
    assert torch.allclose(mu.norm(dim=-1), torch.ones(3), atol=1e-5)
    assert (logvar < 0).any() and (logvar > 0).any()  # log σ² takes both signs: no sigmoid / LN / L2
    (mu.sum() + logvar.exp().sum()).backward()
    assert _grads_reach(head)
    with pytest.raises(ValueError, match="global_dim"):
        GaussianHead(6, 7, 8)
