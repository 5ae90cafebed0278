"""A trained run's test scores, computed once and kept next to the run.

Notebooks score runs that another notebook, or their own last execution, scored before: HMRN's ablate.py re-scores
train.py's models (Table 8, the sweeps' tuned points) and visualise.py its ensemble; a notebook executed again with
nothing to train re-scores every run (HMRN's ablate.py: about 30 minutes for 168 runs). `cached_scores(fn, trained,
*args)` returns `[fn(model, *args) for model, fit in trained]`, reading each result that was computed before from
`<fit.run_dir>/scores/<key>.pt` and computing the others with `compute` (default: serially), then storing them there
(atomically, `io.atomic_write`). The key (`score_key`) is:

- the run's best weights: `FitResult.best_state`, the state fingerprint its result.json records (a run without one,
  e.g. a planned run in trace mode, is never cached);
- the scoring code: the training sources of the model's method (`runs.identity.method_fingerprint`: its method
  file, `evaluate`, `metrics`, `similarity`, the encoders and data; every training source for a model that is not a
  registered method), and the source of `fn` with every function and plain constant of the package it names, followed
  through the functions it names (`code_key`): editing a chapter elsewhere keeps its scores, editing what scores them
  does not;
- `fn`'s arguments (`value_key`): a split by its content (`corpus.split_fingerprint`) and its region queries, a
  vocabulary by its words, arrays and tensors by their bytes, a device by its type, dataclasses, named tuples and
  containers by their parts, plain values by their repr; any other argument is an error (nothing is keyed on an
  object's identity);
- torch's thread count (CPU kernels round differently with another).

A cached result is returned as it was stored: a time inside it (`SplitScores.seconds`, HMRN's `RoundScores.seconds`)
is the one measured when the scores were computed, by the same code on as many threads, not a time measured now.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import pickle
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from xmr_core import sources
from xmr_core.data.corpus import Split, split_fingerprint
from xmr_core.data.text import Vocabulary
from xmr_core.io import atomic_write
from xmr_core.runs import log as runlog
from xmr_core.runs.identity import method_fingerprint
from xmr_core.runs.train import FitResult

T = TypeVar("T")
SCORES = "scores"  # the folder of a run's cached scores, beside its result.json
_PLAIN = (str, int, float, bool, type(None))


def value_key(value: Any) -> str:
    """A stable text that names `value`'s content (module docstring); TypeError for a value it cannot name."""
    if isinstance(value, Split):
        return f"Split({split_fingerprint(value)},{_digest(repr(value.queries).encode())})"
    if isinstance(value, Vocabulary):
        return f"Vocabulary({_digest(chr(0).join(value.words).encode())})"
    if isinstance(value, torch.device):
        return f"device({value.type})"
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return f"array({value.dtype},{value.shape},{_digest(np.ascontiguousarray(value).tobytes())})"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return f"{type(value).__qualname__}({value_key(parts)})"
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        return f"{type(value).__qualname__}({value_key(value._asdict())})"
    if isinstance(value, list | tuple):
        return f"{type(value).__name__}[{','.join(value_key(v) for v in value)}]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{value_key(k)}:{value_key(v)}" for k, v in sorted(value.items(), key=repr)) + "}"
    if isinstance(value, _PLAIN):
        return repr(value)
    raise TypeError(f"cached_scores: cannot key an argument of type {type(value).__name__} by its content")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def code_key(fn: Callable[..., Any]) -> str:
    """The source of `fn` and of every package function it names, followed through the functions they name, with the
    repr of the plain constants (and tuples of them) they name: the code that runs inside `fn`'s module before it
    calls into the training sources (`method_fingerprint` covers those)."""
    seen: dict[str, str] = {}
    pending = [fn]
    while pending:
        f = inspect.unwrap(pending.pop())
        name = f"{f.__module__}.{f.__qualname__}"
        if name in seen:
            continue
        seen[name] = inspect.getsource(f)
        for ref in f.__code__.co_names:
            value = f.__globals__.get(ref)
            if isinstance(value, types.FunctionType) and value.__module__.startswith(f"{sources.PACKAGE}."):
                pending.append(value)
            elif isinstance(value, _PLAIN) or (isinstance(value, tuple | dict) and _plain(value)):
                seen[f"{f.__module__}.{ref}"] = repr(value)
    return _digest("\0".join(f"{k}\0{v}" for k, v in sorted(seen.items())).encode())


def _plain(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_plain(k) and _plain(v) for k, v in value.items())
    if isinstance(value, tuple | list):
        return all(_plain(v) for v in value)
    return isinstance(value, _PLAIN)


def _scoring_code(model: torch.nn.Module) -> str:
    """The training sources that score `model`: its registered method's, or all of them."""
    try:
        return method_fingerprint(getattr(model, "name", ""))
    except KeyError:
        return runlog.source_fingerprint()


def score_key(fn: Callable[..., Any], model: torch.nn.Module, fit: FitResult, args: Sequence[Any]) -> str:
    """The key of `fn(model, *args)`'s result for the run `fit` (module docstring); "" when the run has no
    `best_state` (never cached)."""
    if not fit.best_state:
        return ""
    parts = [fit.best_state, f"{fn.__module__}.{fn.__qualname__}", code_key(fn), _scoring_code(model),
             value_key(list(args)), f"threads={torch.get_num_threads()}"]
    return _digest("\n".join(parts).encode())[:32]


def _path(fit: FitResult, key: str) -> Path:
    return Path(fit.run_dir) / SCORES / f"{key}.pt"


def _read(path: Path) -> tuple[bool, Any]:
    """(found, the stored result) of a cache file."""
    if not path.is_file():
        return False, None
    with path.open("rb") as fh:
        return True, pickle.load(fh)


def cached_scores(fn: Callable[..., T], trained: Sequence[tuple[torch.nn.Module, FitResult]], *args: Any,
                  compute: Callable[[Sequence[torch.nn.Module]], list[T]] | None = None) -> list[T]:
    """`[fn(model, *args) for model, fit in trained]`: each read from its run's cache when it was computed before, the
    others computed by `compute(models)` (`[fn(model, *args) ...]` of those models; default: one after the other
    here) and stored (module docstring)."""
    keys = [score_key(fn, model, fit, args) for model, fit in trained]
    out: list[Any] = [None] * len(trained)
    missing = []
    for i, ((_, fit), key) in enumerate(zip(trained, keys)):
        found, value = _read(_path(fit, key)) if key else (False, None)
        if found:
            out[i] = value
        else:
            missing.append(i)
    if missing:
        models = [trained[i][0] for i in missing]
        computed = compute(models) if compute is not None else [fn(model, *args) for model in models]
        for i, value in zip(missing, computed):
            out[i] = value
            if keys[i]:
                _path(trained[i][1], keys[i]).parent.mkdir(parents=True, exist_ok=True)
                atomic_write(_path(trained[i][1], keys[i]), lambda fh, v=value: pickle.dump(v, fh, protocol=5))
    return out
