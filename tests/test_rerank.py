"""Re-rankers of a score matrix (DVSE Sec. III-D, Table IV): Fast Re-ranking against its closed form by hand
and a float64 brute force, chunked = unchunked in both directions; RR and MR against loop references written
here from the MTFN-RR and GaLR descriptions, and on a hand-worked matrix."""

from __future__ import annotations

import math

import pytest
import torch

from xmr_core import similarity as S

BIG = 10_000  # a chunk larger than any test matrix: the unchunked result
E = math.e


# ------------------------------------------------------------------------------------------ FR (Eq. 13-15)


def test_fast_rerank_closed_form_by_hand() -> None:
    # A = [[1, 0], [2, 3]], queries = rows. Column sums of exp(γ1 A) with γ1 = 1: col 0 e + e², col 1 1 + e³.
    # Eq. (14) with γ2 = 1: Ã_00 = e / (e + e²) = 1 / (1 + e) = 0.26894, Ã_10 = e² / (e + e²) = e / (1 + e),
    # Ã_01 = 1 / (1 + e³) = 0.04743, Ã_11 = e³ / (1 + e³).
    a = torch.tensor([[1.0, 0.0], [2.0, 3.0]], dtype=torch.float64)
    ratio = [[1 / (1 + E), 1 / (1 + E**3)], [E / (1 + E), E**3 / (1 + E**3)]]
    torch.testing.assert_close(S.fast_rerank(a, (1.0, 1.0), log=False), torch.tensor(ratio, dtype=torch.float64))
    torch.testing.assert_close(S.fast_rerank(a, (1.0, 1.0)), torch.tensor(ratio, dtype=torch.float64).log())
    # γ1 = 2, γ2 = 1: Ã_00 = e / (e² + e⁴), Ã_01 = 1 / (1 + e⁶), Ã_10 = e² / (e² + e⁴), Ã_11 = e³ / (1 + e⁶).
    ratio2 = [[E / (E**2 + E**4), 1 / (1 + E**6)], [E**2 / (E**2 + E**4), E**3 / (1 + E**6)]]
    torch.testing.assert_close(S.fast_rerank(a, (2.0, 1.0), log=False), torch.tensor(ratio2, dtype=torch.float64))
    # The other direction (Eq. 15's softmax1, normalised over A's rows), queries = captions = A's columns:
    # caption 0 vs image 1: e² / (e² + e³) = 1 / (1 + e); caption 1 vs image 0: 1 / (e + 1).
    t2i = S.fast_rerank(a.T, (1.0, 1.0), log=False)
    assert t2i.shape == (2, 2)
    assert float(t2i[0, 1]) == pytest.approx(1 / (1 + E)) and float(t2i[1, 0]) == pytest.approx(1 / (E + 1))


def _fr_brute(a: torch.Tensor, g1: float, g2: float) -> torch.Tensor:
    """Eq. (14) literally, float64 loops: exp(γ2 A_qg) / Σ_l exp(γ1 A_lg)."""
    n, m = a.shape
    out = torch.empty(n, m, dtype=torch.float64)
    for q in range(n):
        for g in range(m):
            out[q, g] = math.exp(g2 * float(a[q, g])) / sum(math.exp(g1 * float(a[l, g])) for l in range(n))
    return out


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, BIG])
@pytest.mark.parametrize("transpose", [False, True])
def test_fast_rerank_brute_force_and_chunked_equals_unchunked(chunk: int, transpose: bool) -> None:
    a = torch.rand(7, 11, dtype=torch.float64, generator=torch.Generator().manual_seed(3)) * 2 - 1
    a = a.T if transpose else a  # a transposed view: the other retrieval direction, not copied
    ref = _fr_brute(a, 3.0, 5.0)
    torch.testing.assert_close(S.fast_rerank(a, (3.0, 5.0), log=False, chunk_size=chunk), ref)
    torch.testing.assert_close(S.fast_rerank(a, (3.0, 5.0), chunk_size=chunk), ref.log())
    torch.testing.assert_close(S.fast_rerank(a, (3.0, 5.0), chunk_size=chunk),
                               S.fast_rerank(a, (3.0, 5.0), chunk_size=BIG), rtol=0, atol=1e-12)


def test_fast_rerank_pair_is_eq15() -> None:
    a = torch.rand(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    i2t, t2i = S.fast_rerank_pair(a, (3.0, 5.0), (2.0, 4.0), log=False, chunk_size=3)
    assert i2t.shape == (4, 6) and t2i.shape == (6, 4)
    for i in range(4):
        for j in range(6):
            col = sum(math.exp(3.0 * float(a[l, j])) for l in range(4))  # softmax0: over the column
            row = sum(math.exp(2.0 * float(a[i, l])) for l in range(6))  # softmax1: over the row
            assert float(i2t[i, j]) == pytest.approx(math.exp(5.0 * float(a[i, j])) / col)
            assert float(t2i[j, i]) == pytest.approx(math.exp(4.0 * float(a[i, j])) / row)


def test_fast_rerank_log_form_is_finite_at_large_scales_float32() -> None:
    a = torch.rand(50, 80, generator=torch.Generator().manual_seed(1)) * 2 - 1
    out = S.fast_rerank(a, (1500.0, 1500.0), chunk_size=16)
    assert torch.isfinite(out).all()
    # The float64 log form up to float32 rounding of 1500 A (values reach -3000; rounding ~1e-4 each).
    torch.testing.assert_close(out.double(), S.fast_rerank(a.double(), (1500.0, 1500.0)), rtol=0, atol=5e-3)


def test_fast_rerank_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="positive"):
        S.fast_rerank(torch.rand(3, 3), (0.0, 1.0))
    with pytest.raises(ValueError, match="non-finite"):
        S.fast_rerank(torch.tensor([[1.0, float("nan")]]), (1.0, 1.0))


# ------------------------------------------------------------------------------------------ RR and MR

# Hand-worked RR, k = 2 (rows = images = queries, columns = captions):
#   A = [[0.9,  0.8, 0.1, 0.0],
#        [0.2,  0.5, 0.3, 0.1],
#        [0.95, 0.2, 0.7, 0.6]]
# image 0: top 2 = c0 (.9), c1 (.8). Reverse rank of image 0 in c0's column [.9, .2, .95]: 1 (image 2 is
#   higher); in c1's column [.8, .5, .2]: 0  -> c1 before c0; the rest in the original order: c2, c3.
# image 1: top 2 = c1 (.5), c2 (.3); reverse ranks 1 ([.8, .5, .2]) and 1 ([.1, .3, .7]): a tie keeps c1, c2;
#   then c0 (.2), c3 (.1).
# image 2: top 2 = c0 (.95), c2 (.7); reverse ranks 0 and 0: c0, c2; then c3 (.6), c1 (.2).
# Output = minus the new rank.
HAND_A = torch.tensor([[0.9, 0.8, 0.1, 0.0], [0.2, 0.5, 0.3, 0.1], [0.95, 0.2, 0.7, 0.6]], dtype=torch.float64)
HAND_RR = torch.tensor([[-1, 0, -2, -3], [-2, 0, -1, -3], [0, -3, -1, -2]], dtype=torch.float64)


def test_reciprocal_rerank_hand_worked() -> None:
    torch.testing.assert_close(S.reciprocal_rerank(HAND_A, k=2), HAND_RR)
    torch.testing.assert_close(S.reciprocal_rerank(HAND_A, k=2, chunk_size=1), HAND_RR)


def _original_order(row: list[float]) -> list[int]:
    return sorted(range(len(row)), key=lambda j: (-row[j], j))


def _reverse_rank(a: list[list[float]], q: int, g: int) -> int:
    return sum(1 for l in range(len(a)) if a[l][g] > a[q][g])


def _rr_brute(a: list[list[float]], k: int) -> list[list[int]]:
    """MTFN-RR's i2t_rerank in loops: re-sort the top k by the query's rank in each candidate's column."""
    out = []
    for q, row in enumerate(a):
        order = _original_order(row)
        top = sorted(order[:k], key=lambda g: (_reverse_rank(a, q, g), order.index(g)))
        out.append(top + order[k:])
    return out


def _mr_brute(a: list[list[float]], k: int, w1: float, w2: float, decay: float) -> list[list[int]]:
    """GaLR's i2t_rerank_optim in loops: w1 · A_qg / Σ_l A_lg + exp(-decay (r+1)) + w2 · exp(-decay (r'+1))."""
    k = max(10, k)
    col_sum = [sum(a[l][g] for l in range(len(a))) for g in range(len(a[0]))]
    out = []
    for q, row in enumerate(a):
        order = _original_order(row)
        top = order[:k]
        by_reverse = sorted(top, key=lambda g: (_reverse_rank(a, q, g), top.index(g)))
        score = {g: w1 * row[g] / col_sum[g] + math.exp(-decay * (r + 1)) + w2 * math.exp(-decay * (by_reverse.index(g) + 1))
                 for r, g in enumerate(top)}
        out.append(sorted(top, key=lambda g: (-score[g], top.index(g))) + order[k:])
    return out


def _orders(reranked: torch.Tensor) -> list[list[int]]:
    return [_original_order(row) for row in reranked.tolist()]


@pytest.mark.parametrize("transpose", [False, True])
def test_reciprocal_rerank_matches_loop_reference(transpose: bool) -> None:
    a = torch.rand(9, 14, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    a = a.T if transpose else a
    for chunk in (1, 4, BIG):
        assert _orders(S.reciprocal_rerank(a, k=5, chunk_size=chunk)) == _rr_brute(a.tolist(), 5)


@pytest.mark.parametrize("transpose", [False, True])
def test_multivariate_rerank_matches_loop_reference(transpose: bool) -> None:
    a = torch.rand(12, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(6)) + 0.1
    a = a.T if transpose else a
    for chunk in (1, 5, BIG):
        got = S.multivariate_rerank(a, k=12, weights=(0.3, 1.1), chunk_size=chunk)
        assert _orders(got) == _mr_brute(a.tolist(), 12, 0.3, 1.1, 0.05)
    # k below 10 is raised to 10, as GaLR does
    assert _orders(S.multivariate_rerank(a, k=3)) == _mr_brute(a.tolist(), 3, 0.3, 1.1, 0.05)


def test_rerankers_keep_the_tail_below_the_top_k() -> None:
    a = torch.rand(6, 20, generator=torch.Generator().manual_seed(2))
    for out, k in ((S.reciprocal_rerank(a, k=4), 4), (S.multivariate_rerank(a, k=10), 10)):
        top = a.topk(k, dim=1).indices
        assert torch.equal(out.topk(k, dim=1).indices.sort(1).values, top.sort(1).values)
        # every row is a permutation of the ranks 0 .. m-1
        assert torch.equal((-out).sort(1).values, torch.arange(20.0).expand(6, 20))


def test_rerankers_on_a_subset_of_rows_equal_those_rows_of_the_full_call() -> None:
    a = torch.rand(10, 13, generator=torch.Generator().manual_seed(8))
    for fn in (S.reciprocal_rerank, S.multivariate_rerank):
        torch.testing.assert_close(fn(a, k=4, rows=slice(3, 8), chunk_size=2), fn(a, k=4)[3:8])


def test_rerank_benchmark_runs_and_ends_with_key_values(capsys: pytest.CaptureFixture[str]) -> None:
    from xmr_core.bench.rerank import main

    main(["--images", "20", "--captions", "60", "--chunk-size", "7", "--fraction", "0.5"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    values = dict(item.split("=") for item in last.split())
    assert {"fr_s", "fr_extra_gb", "rr_s_est", "mr_s_est"} <= values.keys() and values["images"] == "20"
