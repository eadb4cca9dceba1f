"""Frozen dataclasses made at the cost of a plain object (``quick``)."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")


def quick(cls: type[T]) -> type[T]:
    """Give the frozen dataclass ``cls`` an ``__init__`` that stores all its fields in one step.

    Why: a frozen dataclass's own ``__init__`` sets each field through ``object.__setattr__`` (the
    class's ``__setattr__`` refuses), a call per field; the journal and the engine make such values
    for every step (a tool record, a claim, a run row: about 50 fields per step read), and those
    calls were 5% of an in-process compensation's instructions. This ``__init__`` takes the same
    arguments (names, order, defaults) and fills the instance's ``__dict__`` at once: the value is the
    same, compares, hashes and prints the same, and stays frozen (``tests/core/test_frozen.py``). The
    generated ``__init__`` checked nothing either. Only for a class whose every field ``__init__``
    sets, with no default factory, keyword-only field or ``__post_init__``, and no ``__slots__``:
    anything else is refused here, at import."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"quick: {cls.__qualname__} is not a frozen dataclass")
    if hasattr(cls, "__post_init__") or "__slots__" in cls.__dict__:
        raise TypeError(f"quick: {cls.__qualname__} has a __post_init__ or __slots__")
    scope: dict[str, Any] = {}
    args: list[str] = []
    names: list[str] = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]  # (checked above: a dataclass)
        if not f.init or f.kw_only is True or f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"quick: field {cls.__qualname__}.{f.name} is not a plain __init__ argument")
        names.append(f.name)
        if f.default is dataclasses.MISSING:
            args.append(f.name)
        else:
            scope[f"_default_{f.name}"] = f.default
            args.append(f"{f.name}=_default_{f.name}")
    fields = ", ".join(f"{name!r}: {name}" for name in names)
    source = f"def __init__(self, {', '.join(args)}):\n    self.__dict__.update({{{fields}}})\n"
    exec(source, scope)  # noqa: S102 - as dataclasses itself writes __init__: from field names only
    init = scope["__init__"]
    init.__annotations__ = dict(cls.__init__.__annotations__)  # what help() and signature() show
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    cls.__init__ = init  # type: ignore[method-assign]  # (replacing the generated one is the point)
    return cls
