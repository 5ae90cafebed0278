"""Run records: `run_evaluation.evaluate_run` scores a run once, its means over queries are `evaluate`'s metrics
(`query_values`), each query's values are a brute-force ranking's, and the record file round-trips, is compact and
deterministic, and refuses a damaged file in one line naming the file and the field."""

from __future__ import annotations

import dataclasses
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from fixtures.recorded_runs import TEST, VOCAB, trained, viewed_split
from test_metrics import reference

from xmr_core import evaluate as E
from xmr_core import records as R
from xmr_core.query_values import RANK_KEYS, QueryMetric, query_values, round_metrics, scoring_metrics
from xmr_core.run_evaluation import RANK_TOP, RANK_VIEWS, Scoring, evaluate_run
from xmr_core.runs.record import read_run_record, run_record, write_run_record
from xmr_core.similarity import FastReranker

FR = FastReranker((1.0, 0.5), (1.0, 0.5))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return trained(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def evaluation(run):
    model, _ = run
    return evaluate_run(model, TEST, VOCAB, rounds=2, short="hold",
                        scorings={"default": Scoring(), "FR": Scoring(rerank=FR, rerank_name="FR", views=("instance",))})


def assert_same_metrics(got: dict[str, float], want: dict[str, float], ap_views: tuple[str, ...] | None = None,
                        rank_views: tuple[str, ...] | None = None, rank_top: int | None = None) -> None:
    """Every key equal (mAP@R only of `ap_views`, R@K, medR and meanR only of `rank_views` and, with `rank_top`, R@K
    up to it only; None: all); exact but for AP@R (float32 in the record) and the float means of tiny folds."""
    def kept(key: str) -> bool:
        view, metric = key.split("/")[0], key.split("/")[-1].partition("_zeta")[0]
        top_ok = rank_top is None or (metric.startswith("R@") and int(metric[2:]) <= rank_top)
        return ((ap_views is None or metric != "mAP@R" or view in ap_views) and
                (not metric.startswith(RANK_KEYS) or ((rank_views is None or view in rank_views) and top_ok)))

    want = {k: v for k, v in want.items() if kept(k)}
    assert set(got) == set(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-9), key


def test_means_over_queries_are_evaluate_models_metrics(run, evaluation):
    model, _ = run
    kept = ("instance",)  # by default AP@R and the COCO 1K protocol in the instance view only, best ranks but in the
    # plausible view
    # plausible view, and up to R@10's rank (RANK_TOP): no medR or meanR
    assert_same_metrics(scoring_metrics(evaluation), E.evaluate_model(model, TEST, VOCAB), kept, RANK_VIEWS, RANK_TOP)
    assert "plausible/i2t/R@1_zeta0" not in scoring_metrics(evaluation) and "plausible/i2t/PMRP" in scoring_metrics(
        evaluation) and "class/t2i/R@10" in scoring_metrics(evaluation) and "instance/t2i/meanR" not in scoring_metrics(
        evaluation)
    assert_same_metrics(scoring_metrics(evaluation, protocol="coco1k"),
                        E.evaluate_model(model, TEST, VOCAB, protocol="coco1k", views=["instance"]), rank_top=RANK_TOP)
    assert_same_metrics(scoring_metrics(evaluation, "FR"), E.evaluate_model(model, TEST, VOCAB, views=["instance"],
                                                                            rerank=FR), rank_top=RANK_TOP)
    assert_same_metrics(round_metrics(evaluation), E.evaluate_multi_query(model, TEST, VOCAB, 2, short="hold"))
    blocks = evaluation.scorings["default"].blocks  # every view of the split, ζ 0..2, both directions
    assert len(blocks) == 2 * (3 + 3) + 2 and ("full", "plausible/zeta2", "t2i") in blocks
    assert set(evaluation.scorings["FR"].blocks) == {(p, "instance", d) for p in ("full", "coco1k") for d in ("i2t", "t2i")}
    # everything kept: every key of evaluate_model, under both protocols
    whole = evaluate_run(model, TEST, VOCAB, fold_views=None, ap_views=None, rank_views=None, rank_top=None)
    assert_same_metrics(scoring_metrics(whole), E.evaluate_model(model, TEST, VOCAB))
    assert_same_metrics(scoring_metrics(whole, protocol="coco1k"), E.evaluate_model(model, TEST, VOCAB,
                                                                                    protocol="coco1k"))
    assert len(whole.scorings["default"].blocks) == 2 * 2 * (3 + 3)
    # a capped rank is the exact one up to RANK_TOP, RANK_TOP + 1 beyond
    for block in (("full", "instance", "t2i"), ("coco1k", "instance", "i2t"), ("full", "class", "i2t")):
        np.testing.assert_array_equal(evaluation.scorings["default"].blocks[block].best_rank,
                                      np.minimum(whole.scorings["default"].blocks[block].best_rank, RANK_TOP + 1))


class TableModel(torch.nn.Module):
    """Scores read from a fixed (N, M) table: an image embeds as its index, a caption as its index."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table

    def encode_images(self, batch):
        return batch["image_index"].float()[:, None]

    def encode_captions(self, batch):
        return batch["caption_index"].float()[:, None]

    def score(self, img, cap):
        return self.table[img[:, 0].long()][:, cap[:, 0].long()]


def table_loaders(split):
    images = [{"image_index": torch.arange(i, min(i + 7, split.n_images))} for i in range(0, split.n_images, 7)]
    captions = [{"caption_index": torch.arange(c, min(c + 9, split.n_captions))} for c in range(0, split.n_captions, 9)]
    return images, captions


@pytest.mark.parametrize("ties", [False, True])
def test_each_querys_values_are_a_brute_force_rankings(ties):
    split = viewed_split(n=15, per=4, seed=int(ties))
    rng = np.random.default_rng(5)
    table = torch.from_numpy(rng.integers(0, 3, (15, 60)).astype(np.float32) if ties else rng.standard_normal((15, 60)))
    ev = evaluate_run(TableModel(table), split, loaders=table_loaders(split), precision_ks=(3,), ap_views=None,
                      rank_views=None, rank_top=None)
    for view in ("instance", "class", "exact", "plausible/zeta1"):
        for direction, scores in (("i2t", table.numpy()), ("t2i", table.numpy().T)):
            name, _, zeta = view.partition("/zeta")
            rel = split.relevance(name, direction, zeta=int(zeta or 0))
            per_query = [reference(scores[q:q + 1], rel[q:q + 1], precision_ks=(3,)) for q in range(len(scores))]
            for key in ("R@5", "R-P", "mAP@R", "P@3", "meanR"):
                metric = QueryMetric(f"{key}_zeta{zeta}" if zeta else key, name, (direction,))
                got, strata = query_values(ev, metric)
                assert strata is None
                np.testing.assert_allclose(got, [q[key] for q in per_query], rtol=1e-6, err_msg=f"{view} {direction}")


def test_query_values_average_to_the_metrics(evaluation):
    full, fold = scoring_metrics(evaluation), scoring_metrics(evaluation, protocol="coco1k")

    def mean(metric: QueryMetric) -> float:
        values, strata = query_values(evaluation, metric)
        if strata is None:
            return float(values.mean())
        return float(np.mean([values[strata == h].mean() for h in np.unique(strata)]))

    assert mean(QueryMetric("rsum")) == pytest.approx(full["rsum"])
    assert mean(QueryMetric("rsum", protocol="coco1k")) == pytest.approx(fold["rsum"])
    assert mean(QueryMetric("R-P", "class")) == pytest.approx((full["class/i2t/R-P"] + full["class/t2i/R-P"]) / 2)
    assert mean(QueryMetric("PMRP", "plausible", ("t2i",))) == pytest.approx(full["plausible/t2i/PMRP"])
    assert mean(QueryMetric("R@1", "exact", ("t2i",), level="vague")) == pytest.approx(full["exact/t2i@vague/R@1"])
    with pytest.raises(KeyError, match="best ranks up to 10 only .*: no meanR"):
        query_values(evaluation, QueryMetric("meanR", directions=("i2t",)))
    assert mean(QueryMetric("R@1,5")) == pytest.approx(np.mean([full[f"instance/{d}/R@{k}"] for d in ("i2t", "t2i")
                                                                for k in (1, 5)]))  # HREM's Table 3 claims
    assert mean(QueryMetric("rsum", "rounds")) == pytest.approx(round_metrics(evaluation)["rsum"])
    assert mean(QueryMetric("R@5", "rounds", round=2)) == pytest.approx(round_metrics(evaluation)["round2/R@5"])
    # joined values: each query's mean of them (MSRM's Table 4 claims: the mean of R-P and R@1)
    assert mean(QueryMetric("R-P,R@1", "class")) == pytest.approx(
        np.mean([full[f"class/{d}/{m}"] for d in ("i2t", "t2i") for m in ("R-P", "R@1")]))
    rounds = round_metrics(evaluation)
    assert mean(QueryMetric("R@1", "rounds", round=1, last_round=2)) == \
        pytest.approx((rounds["round1/R@1"] + rounds["round2/R@1"]) / 2)
    with pytest.raises(ValueError, match="no range of rounds"):
        QueryMetric("R@1", "rounds", round=3, last_round=2)
    with pytest.raises(ValueError, match="medR is not a mean"):
        QueryMetric("medR")
    with pytest.raises(ValueError, match="medR is not a mean"):
        QueryMetric("R@1,medR")
    with pytest.raises(ValueError, match="plausible view"):
        query_values(evaluation, QueryMetric("R-P", "plausible"))
    with pytest.raises(KeyError, match="no AP@R in the class view"):
        query_values(evaluation, QueryMetric("mAP@R", "class"))
    with pytest.raises(KeyError, match="no best ranks in the plausible view"):
        query_values(evaluation, QueryMetric("R@1_zeta1", "plausible"))


def test_record_round_trips_deterministically(run, evaluation, tmp_path):
    _, result = run
    path = write_run_record(result, evaluation, "smoke", {"lr": 2e-4, "chosen": True}, root=tmp_path)
    record = read_run_record("smoke", path.stem, root=tmp_path)
    assert record.name == path.stem and record.key.startswith(path.stem.split("-")[1])
    assert record.method == "vse" and record.seed == 0 and record.tuning == {"lr": 2e-4, "chosen": True}
    assert record.fit["history"] == result.history and record.fit["converged"] == result.converged
    assert set(record.timings) >= {"train_seconds", "embed_seconds", "scoring_seconds"}
    assert_same_metrics(scoring_metrics(record.evaluation), scoring_metrics(evaluation))
    assert scoring_metrics(record.evaluation, "FR") == scoring_metrics(evaluation, "FR")  # exact: read as written
    np.testing.assert_array_equal(record.evaluation.scorings["default"].rounds, evaluation.scorings["default"].rounds)
    assert (path.parent / evaluation.split.relative).is_file()
    # the same record gives the same bytes; ranks are stored as small unsigned integers
    again = write_run_record(result, evaluation, "smoke", {"lr": 2e-4, "chosen": True}, root=tmp_path / "again")
    assert again.read_bytes() == path.read_bytes()
    with np.load(path) as npz:
        assert npz["default/full/instance/t2i/best_rank"].dtype == np.uint8
        assert npz["default/full/instance/t2i/ap_at_r"].dtype == np.float32
        # the plausible view keeps its hit counts (R-P per ζ, PMRP), not its best ranks (`RANK_VIEWS`)
        assert "default/full/plausible/zeta1/i2t/rp_hits" in npz.files
        assert "default/full/plausible/zeta1/i2t/best_rank" not in npz.files
    with zipfile.ZipFile(path) as zf:
        assert {info.compress_type for info in zf.infolist()} == {zipfile.ZIP_LZMA}


def _rewrite(path: Path, change) -> None:
    """Re-pack a record with `change(header, arrays)` applied (the header's array list recomputed)."""
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    import json

    header = json.loads(arrays.pop("header").tobytes())
    header.pop("arrays")
    change(header, arrays)
    path.write_bytes(R._pack(header, arrays))


def test_a_damaged_record_is_a_one_line_error_naming_file_and_field(run, evaluation, tmp_path):
    _, result = run
    path = write_run_record(result, evaluation, "smoke", root=tmp_path)
    good = path.read_bytes()
    field = "default/full/instance/i2t/ap_at_r"

    def nan(header, arrays):
        arrays[field] = arrays[field].copy()
        arrays[field][3] = np.nan

    def short(header, arrays):
        arrays["default/full/exact/t2i/best_rank"] = arrays["default/full/exact/t2i/best_rank"][:-1]

    def newer(header, arrays):
        header["format"] = R.RECORD_FORMAT + 1

    for change, match in ((nan, f"field '{field}' has a NaN"), (short, "best_rank' is uint8 \\[99\\], expected"),
                          (newer, f"format {R.RECORD_FORMAT + 1}, this code reads format {R.RECORD_FORMAT}")):
        path.write_bytes(good)
        _rewrite(path, change)
        with pytest.raises(R.RecordError, match=match) as err:
            R.read_record(path)
        assert str(path) in str(err.value) and "\n" not in str(err.value)
    path.write_bytes(good[: len(good) // 2])  # truncated
    with pytest.raises(R.RecordError, match=f"{path}: not a readable run record"):
        R.read_record(path)
    # one member's bytes corrupted inside an intact zip
    with zipfile.ZipFile(path, "w") as zf, zipfile.ZipFile(__import__("io").BytesIO(good)) as src:
        for info in src.infolist():
            data = src.read(info)
            zf.writestr(info, data[:40] if info.filename == "default/full/class/i2t/rp_hits.npy" else data)
    with pytest.raises(R.RecordError, match="field 'default/full/class/i2t/rp_hits' is truncated or corrupt"):
        R.read_record(path)


def test_run_record_needs_a_finished_run(run, evaluation, tmp_path):
    _, result = run
    with pytest.raises(FileNotFoundError, match="no finished run to record"):
        run_record(dataclasses.replace(result, run_dir=tmp_path / "none"), evaluation)


def test_records_on_one_split_share_its_file_which_gains_their_blocks(run, evaluation, tmp_path):
    model, result = run
    first = write_run_record(result, evaluation, "smoke", root=tmp_path)
    split_file = first.parent / evaluation.split.relative
    assert ("coco1k", "exact", "t2i") not in R.read_split(split_file).n_positives
    whole = evaluate_run(model, TEST, VOCAB, fold_views=None)
    second = R.write_record(first.parent / "second.npz", dataclasses.replace(run_record(result, whole), name="second"))
    assert ("coco1k", "exact", "t2i") in R.read_split(split_file).n_positives
    assert set(R.read_record(first).evaluation.scorings) == {"default", "FR"}
    assert ("coco1k", "exact", "t2i") in R.read_record(second).evaluation.scorings["default"].blocks


def test_a_split_file_of_an_older_format_or_damaged_is_written_anew_with_the_record(run, evaluation, tmp_path):
    _, result = run
    path = write_run_record(result, evaluation, "smoke", root=tmp_path)
    split_file = path.parent / evaluation.split.relative
    split_file.write_bytes(b"not a zip: a split file of record format 1 reads as unreadable alike")
    with pytest.raises(R.RecordError, match=str(split_file.name)):
        R.read_record(path)
    again = write_run_record(result, evaluation, "smoke", root=tmp_path)
    assert R.read_split(split_file).fingerprint == evaluation.split.fingerprint
    assert set(R.read_record(again).evaluation.scorings) == set(evaluation.scorings)


def test_pmrp_of_a_scoring_without_the_plausible_view_is_a_clear_error_not_nan(run):
    model, _ = run
    instance_only = evaluate_run(model, TEST, VOCAB, scorings={"default": Scoring(views=("instance",))})
    with pytest.raises(KeyError, match="no plausible view"):
        query_values(instance_only, QueryMetric("PMRP", "plausible"))
