"""The method registry: `create_method(name, word_vectors, config=None, **overrides)`, like timm's and
open_clip's factories. A method file registers its model class and its config class with
`@register_method`; `list_methods()` names them all.

The method modules are imported on the first look-up (not at package import), so `xmr_core.runs.train`, which
the method modules' users import, never imports a method module back.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from xmr_core.methods.base import RetrievalModel

METHOD_MODULES: tuple[str, ...] = ("vse", "pvse", "pcme", "msrm", "dvse", "hrem", "gpo", "scan", "hmrn",
                                   "recurrent_sets", "drilldown")  # imported on demand


@dataclass(frozen=True)
class MethodEntry:
    """A registered method: its model class and the dataclass of its config."""

    name: str
    model: type[RetrievalModel]
    config: Callable[..., Any]


_REGISTRY: dict[str, MethodEntry] = {}


def register_method(config: Callable[..., Any]) -> Callable[[type[RetrievalModel]], type[RetrievalModel]]:
    """Class decorator: register a `RetrievalModel` subclass under its `name` with its config class."""

    def add(cls: type[RetrievalModel]) -> type[RetrievalModel]:
        if cls.name in _REGISTRY and _REGISTRY[cls.name].model is not cls:
            raise ValueError(f"method {cls.name!r} is registered twice ({_REGISTRY[cls.name].model.__name__}, "
                             f"{cls.__name__})")
        _REGISTRY[cls.name] = MethodEntry(cls.name, cls, config)
        return cls

    return add


def _load_all() -> None:
    for module in METHOD_MODULES:
        importlib.import_module(f"xmr_core.methods.{module}")


def list_methods() -> list[str]:
    """Names of every registered method, sorted."""
    _load_all()
    return sorted(_REGISTRY)


def method_entry(name: str) -> MethodEntry:
    _load_all()
    if name not in _REGISTRY:
        raise KeyError(f"unknown method {name!r}; registered: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def create_method(name: str, word_vectors: np.ndarray, config: Any = None, **overrides: Any) -> RetrievalModel:
    """A fresh model of method `name`: from `config`, or from its config class built with `overrides`."""
    entry = method_entry(name)
    if config is not None and overrides:
        raise ValueError(f"create_method({name!r}): give a config or overrides, not both")
    return entry.model(config if config is not None else entry.config(**overrides), word_vectors)
