"""The tuning protocol every compared method gets on the validation split: learning rate × main weight.

One rule for every method (`tune_many`; the reasons for hand-written search: docs/training.md):

- **Lattice.** Two log-spaced axes around the method's paper defaults (`Axis`): the learning rate (the recipe's
  lr, one shared step) and the method's own main weight or margin (a step and hard bounds declared with the
  method). A point is a pair of integer indices (i, j): value = default × step^index, clamped to a hard bound
  (the first step past a bound tries the bound itself, and nothing lies beyond it).
- **Search.** Round 0 trains the cross around the default, (0, 0), (∓1, 0), (0, ∓1). After every round the
  chosen point is the best validation score so far (ties keep the earlier run, the default first); the next
  round trains every untried neighbour (index ± 1 on one axis, the other axis held) of the chosen point. So a
  choice at an edge extends the search past it by the same step, and the search ends when the chosen point's
  neighbours have all been tried and none beat it (coordinate ascent to a bracketed point), or a neighbour would
  lie past a hard bound, or the method's cap on runs (`Search.max_runs`) is reached (then it is unbracketed).
- **Training length.** When the chosen run's last epoch is its best (`FitResult.converged` is False and it did
  not diverge), the same setting is trained on a longer schedule (`Search.longer` × the epochs) and adopted when
  its validation score beats the shorter one's by more than the recipe's `min_delta` (the noise threshold
  patience stopping already uses); repeated at the adopted schedule at most `Search.max_longer` times.
  `TuningResult.epochs` is the chosen schedule: every seed trains at it, so the tuning run at the chosen
  setting is the seed's own run (same run key).

Every round asks for all its runs (of every method tuned together) in one `runs.plan.fit_many` call, so an
executor may train them side by side. Every run is a row (`TuningResult.rows`, `tuning_frame`);
`tuning_summary` turns the rows into one line per method: the chosen setting, each axis 'bracketed' /
'hard bound' / 'unbracketed', the schedule, runs and epochs spent, and whether the chosen run converged.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pandas as pd
import torch

from xmr_core.data.corpus import Split
from xmr_core.data.text import Vocabulary
from xmr_core.methods.base import RetrievalModel
from xmr_core.runs.plan import fit_many
from xmr_core.runs.train import FitResult, RunRequest, TrainConfig

Trainer = Callable[[Sequence[RunRequest]], list[FitResult]]
Point = tuple[int, int]  # (learning-rate index, weight index) on the lattice

LR_STEP = 2.0  # the learning rate's step, the same for every method
MAX_RUNS = 24  # every method's cap on search runs: the first cross, then about six moves of the coordinate ascent
FIRST_ROUND = 5  # round 0: the default and its four neighbours (fewer where the default sits at a hard bound)
BRACKETED, HARD_BOUND, UNBRACKETED, SINGLE = "bracketed", "hard bound", "unbracketed", "not searched"


@dataclass(frozen=True)
class Axis:
    """One log-spaced axis: value(index) = default × step^index, clamped to the hard bounds [low, high].

    The first index past a bound gives the bound itself (e.g. a margin of 2, past which a hinge on cosine
    scores can no longer vanish); the indices beyond it give None. A bound of 0 is never reached by a log step:
    towards 0 the search stops where validation stops improving (or at the cap)."""

    name: str
    default: float
    step: float
    low: float = 0.0
    high: float = math.inf

    def __post_init__(self) -> None:
        if not (self.step > 1 and 0 <= self.low <= self.default <= self.high and self.default > 0):
            raise ValueError(f"Axis {self.name!r}: needs step > 1 and 0 <= low <= default <= high, default > 0; got "
                             f"default={self.default} step={self.step} low={self.low} high={self.high}")

    def _raw(self, index: int) -> float:
        return float(f"{self.default * self.step ** index:.12g}")  # 0.2 × 2^-1 = 0.1, not 0.1000000001

    def value(self, index: int) -> float | None:
        """The value at `index`, the bound at the first index past it, None beyond."""
        raw = self._raw(index)
        if self.low <= raw <= self.high:
            return raw
        inner = self._raw(index - 1 if index > 0 else index + 1)
        if raw > self.high and inner < self.high:
            return self.high
        if raw < self.low and inner > self.low:
            return self.low
        return None

    def describe(self) -> str:
        """E.g. "margin 0.2 x 2^k, at most 2": the default, the step and the hard bounds."""
        bounds = (f", at least {self.low:g}" if self.low > 0 else "") + (
            f", at most {self.high:g}" if self.high < math.inf else "")
        return f"{self.name} {self.default:g} x {self.step:g}^k{bounds}"

    def bound(self, index: int) -> str:
        """'low' / 'high' when the value at `index` is that hard bound (nothing lies past it), else ''."""
        value = self.value(index)
        return "high" if value == self.high else "low" if value == self.low else ""


@dataclass(frozen=True)
class Search:
    """What the protocol searches for one method: its learning-rate axis, its main weight axis, its cap on search
    runs, and the schedule check (a `longer` × epochs schedule, at most `max_longer` times)."""

    lr: Axis
    weight: Axis
    max_runs: int = MAX_RUNS
    longer: float = 2.0
    max_longer: int = 2
    single: bool = False  # smoke: train the default only, no search and no schedule check

    def __post_init__(self) -> None:
        if self.max_runs < 5 or self.longer <= 1 or self.max_longer < 0:
            raise ValueError(f"Search: needs max_runs >= 5 (the first cross), longer > 1, max_longer >= 0; got "
                             f"{self.max_runs}, {self.longer}, {self.max_longer}")


@dataclass
class Method:
    """One method to tune: build(weight) -> a fresh model whose main weight or margin is `weight`; recipe(lr) ->
    the training recipe at that learning rate (its epochs the starting schedule); the search; its train and
    validation splits and vocabulary; the seed."""

    name: str
    build: Callable[[float], RetrievalModel]
    recipe: Callable[[float], TrainConfig]
    search: Search
    train: Split
    val: Split
    vocab: Vocabulary
    seed: int = 0


@dataclass
class TuningResult:
    """The chosen learning rate, weight and schedule (epochs) of one method, and one row per run (`frame()`)."""

    method: str
    weight_name: str
    lr: float
    weight: float
    epochs: int
    rows: list[dict]

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)


@dataclass
class _State:
    """One method's search in progress: its runs by (point, epochs), in the order trained."""

    method: Method
    runs: dict[tuple[Point, int], FitResult] = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)
    chosen: tuple[Point, int] | None = None  # set once the search is over: the chosen point and schedule
    longer_tried: int = 0
    done: bool = False

    @property
    def base_epochs(self) -> int:
        return self.method.recipe(self.method.search.lr.default).epochs

    def score(self, key: tuple[Point, int]) -> tuple[float, int]:
        """Sort key: validation score, then earlier runs first (ties keep the default-first choice)."""
        order = list(self.runs).index(key)
        return self.runs[key].best_score, -order

    def best_point(self) -> Point:
        searched = [k for k in self.runs if k[1] == self.base_epochs]
        return max(searched, key=self.score)[0]

    def exists(self, point: Point) -> bool:
        s = self.method.search
        return s.lr.value(point[0]) is not None and s.weight.value(point[1]) is not None

    def neighbours(self, point: Point) -> list[Point]:
        i, j = point
        return [p for p in ((i - 1, j), (i + 1, j), (i, j - 1), (i, j + 1)) if self.exists(p)]

    def next_round(self) -> list[tuple[Point, int, str]]:
        """The runs of the next round, (point, epochs, stage); [] once the method is done."""
        s, epochs = self.method.search, self.base_epochs
        if self.done:
            return []
        if not self.runs:
            if s.single:
                return [((0, 0), epochs, "single")]
            return [(p, epochs, "search") for p in [(0, 0), *self.neighbours((0, 0))]]
        if self.chosen is None:
            if s.single:
                self.chosen = ((0, 0), epochs)
                self.done = True
                return []
            missing = [p for p in self.neighbours(self.best_point()) if (p, epochs) not in self.runs]
            room = s.max_runs - len(self.runs)
            if missing and room > 0:
                return [(p, epochs, "search") for p in missing[:room]]
            self.chosen = (self.best_point(), epochs)  # bracketed, at a bound, or capped: the summary says which
        return self._schedule_round()

    def _schedule_round(self) -> list[tuple[Point, int, str]]:
        """The longer schedule at the chosen point while its last epoch is its best (and the check may go on)."""
        assert self.chosen is not None
        point, epochs = self.chosen
        result, s = self.runs[self.chosen], self.method.search
        if result.converged or result.stopped == "diverged" or self.longer_tried >= s.max_longer:
            self.done = True
            return []
        return [(point, math.ceil(epochs * s.longer), "schedule")]

    def record(self, point: Point, epochs: int, stage: str, round_: int, cfg: TrainConfig, result: FitResult) -> None:
        s = self.method.search
        self.runs[(point, epochs)] = result
        lr, weight = s.lr.value(point[0]), s.weight.value(point[1])
        self.rows.append({
            "method": self.method.name, "stage": stage, "round": round_, "lr": lr, "lr index": point[0],
            "lr bound": s.lr.bound(point[0]), "weight": s.weight.name, "value": weight, "weight index": point[1],
            "weight bound": s.weight.bound(point[1]), "epochs": epochs, "seed": cfg.seed,
            f"val {cfg.select}": round(result.best_score, 2), "best epoch": result.best_epoch,
            "epochs run": len(result.history), "converged": result.converged, "stopped": result.stopped,
            "train s": round(result.train_seconds, 1),
            "cached": result.cached, "run": result.run_dir.name})
        if stage == "schedule":
            assert self.chosen is not None
            self.longer_tried += 1
            if result.best_score > self.runs[self.chosen].best_score + cfg.min_delta:
                self.chosen = (point, epochs)
            else:
                self.done = True

    def result(self) -> TuningResult:
        assert self.chosen is not None
        (point, epochs), s = self.chosen, self.method.search
        for row in self.rows:
            row["chosen"] = (row["lr index"], row["weight index"], row["epochs"]) == (*point, epochs)
        lr, weight = s.lr.value(point[0]), s.weight.value(point[1])
        assert lr is not None and weight is not None
        return TuningResult(self.method.name, s.weight.name, lr, weight, epochs, self.rows)


def _config(method: Method, lr: float, epochs: int) -> TrainConfig:
    """The recipe at `lr` for `epochs`; a NaN/inf loss ends the run as diverged (its best epoch stands)."""
    return dataclasses.replace(method.recipe(lr), epochs=epochs, on_nonfinite="stop")


def train_tuning_runs(requests: Sequence[RunRequest]) -> list[FitResult]:
    """The protocol's trainer: `runs.plan.fit_many`, a run that diverges in its first epoch returned as a result
    (score -inf: a tried setting that scored lower than any that learnt) rather than raised."""
    return fit_many(requests, diverged="result")


def tune_many(methods: Sequence[Method], trainer: Trainer = train_tuning_runs) -> dict[str, TuningResult]:
    """Tune every method of `methods` by the protocol (module docstring), their searches side by side: each round
    asks `trainer` (default `train_tuning_runs`) for every method's next runs in one call. Each run's model is built
    right after `torch.manual_seed(method.seed)` (its initial weights are part of the run key)."""
    names = [m.name for m in methods]
    if len(set(names)) != len(names):
        raise ValueError(f"tune_many: method names repeat: {names}")
    states = [_State(m) for m in methods]
    round_ = 0
    while True:
        plan = [(state, point, epochs, stage) for state in states for point, epochs, stage in state.next_round()]
        if not plan:
            break
        requests = []
        for state, point, epochs, stage in plan:
            m, s = state.method, state.method.search
            lr, weight = s.lr.value(point[0]), s.weight.value(point[1])
            assert lr is not None and weight is not None
            torch.manual_seed(m.seed)
            requests.append(RunRequest(m.build(weight), m.train, m.val, _config(m, lr, epochs), m.vocab,
                                       f"{m.name} tuning {stage} lr={lr:g} {s.weight.name}={weight:g} epochs={epochs}"))
        results = trainer(requests)
        if len(results) != len(requests):
            raise RuntimeError(f"tune_many: the trainer returned {len(results)} results for {len(requests)} runs")
        for (state, point, epochs, stage), request, result in zip(plan, requests, results):
            state.record(point, epochs, stage, round_, request.cfg, result)
        round_ += 1
    return {state.method.name: state.result() for state in states}


def tune(method: Method, trainer: Trainer = train_tuning_runs) -> TuningResult:
    """One method by the protocol (`tune_many` with one method)."""
    return tune_many([method], trainer)[method.name]


def tuning_frame(tuned: Mapping[str, TuningResult]) -> pd.DataFrame:
    """Every tuning run of every method (`TuningResult.frame`) in one table, methods in `tuned`'s order."""
    return pd.concat([t.frame() for t in tuned.values()], ignore_index=True)


RUN_COLUMNS = ("method", "stage", "lr index", "lr bound", "weight index", "weight bound", "epochs", "chosen")


def _sides(runs: pd.DataFrame, chosen: pd.Series, axis: str, other: str, score: str) -> list[str]:
    """The chosen point's two neighbours on `axis` (the `other` axis held, at the search schedule), low side first:
    'bound' (the chosen value is that hard bound), 'lower' (tried, scored lower), 'as good' (tried, scored the
    same or higher: a tie) or 'untried' (the cap on runs ended the search first)."""
    line = runs[(runs["stage"] == "search") & (runs[f"{other} index"] == chosen[f"{other} index"])]
    sides = []
    for side, offset in (("low", -1), ("high", 1)):
        neighbour = line[line[f"{axis} index"] == chosen[f"{axis} index"] + offset]
        sides.append("bound" if chosen[f"{axis} bound"] == side else "untried" if neighbour.empty
                     else "lower" if neighbour[score].max() < chosen["search score"] else "as good")
    return sides


def _status(sides: list[str]) -> str:
    """'bracketed' (both neighbours scored lower), 'hard bound' (a side is a bound, the other one too or lower),
    else 'unbracketed'."""
    if any(s not in ("lower", "bound") for s in sides):
        return UNBRACKETED
    return BRACKETED if sides == ["lower", "lower"] else HARD_BOUND


def tuning_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per method of a `tuning_frame` (its rows in order): the chosen learning rate and weight, each axis's status
    (`_status`; 'not searched' for a single setting), the chosen schedule (epochs), the runs and epochs spent
    (cached runs included: the epochs the method received), whether the cap on runs ended the search with a
    neighbour untried, and whether the
    chosen run converged: its best epoch was not its last, or a longer schedule at the setting was no better."""
    missing = [c for c in RUN_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"tuning_summary: the table has no {missing} columns: it predates the bracketing protocol "
                         f"(xmr_core.runs.tuning); retrain the chapter to regenerate it")
    score = next(c for c in frame.columns if c.startswith("val "))
    frame = frame.assign(**{c: frame[c].astype(object).fillna("") for c in ("lr bound", "weight bound")})  # CSV: NaN
    rows = []
    for method, runs in frame.groupby("method", sort=False):
        chosen_runs = runs[runs["chosen"].astype(bool)]
        if len(chosen_runs) != 1:
            raise ValueError(f"tuning_summary: method {method!r} has {len(chosen_runs)} chosen runs, expected 1")
        chosen = chosen_runs.iloc[0].copy()
        same = runs[(runs["lr index"] == chosen["lr index"]) & (runs["weight index"] == chosen["weight index"])]
        searched = same[same["stage"].isin(["search", "single"])]
        chosen["search score"] = searched[score].iloc[0]  # the point's score at the search schedule
        single = chosen["stage"] == "single"
        lr_sides, weight_sides = (_sides(runs, chosen, "lr", "weight", score),
                                  _sides(runs, chosen, "weight", "lr", score))
        lr_status, weight_status = (SINGLE, SINGLE) if single else (_status(lr_sides), _status(weight_sides))
        longer_tried = bool((same["epochs"] > chosen["epochs"]).any())
        rows.append({"method": method, "lr": chosen["lr"], "lr status": lr_status, "weight": chosen["weight"],
                     "value": chosen["value"], "weight status": weight_status, "epochs": int(chosen["epochs"]),
                     "runs": len(runs), "epochs spent": int(runs["epochs run"].sum()),
                     "cap reached": not single and "untried" in lr_sides + weight_sides,
                     "converged": bool(chosen["converged"]) or longer_tried})
    return pd.DataFrame(rows)


SUMMARY_CAPTION = (
    "Per method: the chosen learning rate and weight, each 'bracketed' (both neighbours tried and lower), at a "
    "'hard bound', 'unbracketed' (the optimum may lie past what was tried) or 'not searched' (smoke: the defaults "
    "once); the chosen schedule (epochs); the runs and epochs spent (cached runs included); whether the cap on runs "
    "ended the search; converged = the chosen run's best epoch is not its last, or a longer schedule did not "
    "improve it beyond the recipe's min_delta.")


def unbracketed(summary: pd.DataFrame) -> int:
    """How many chosen settings (method × axis) of a `tuning_summary` are unbracketed."""
    return int((summary["lr status"] == UNBRACKETED).sum() + (summary["weight status"] == UNBRACKETED).sum())
