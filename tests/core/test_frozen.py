"""``frozen.quick``: a frozen dataclass whose ``__init__`` stores its fields at once makes the same
values as the dataclass's own ``__init__``, and stays frozen; a class it cannot serve is refused."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from saga_worker.compensation.attempt import Pretaken, Unwinding
from saga_worker.compensation.carry import HeldOutcome
from saga_worker.compensation.engine import UnwindRequest
from saga_worker.compensation.recovery import Settled
from saga_worker.core.frozen import quick
from saga_worker.journal import records
from saga_worker.recording.tools import CallOptions, RecoverResult

QUICK = [
    records.RunInfo,
    records.ToolRecord,
    records.CompensationClaim,
    records.ClaimAttempt,
    records.FinishedClaim,
    records.FirstClaim,
    records.NewAudit,
    records.WorklistView,
    HeldOutcome,
    Unwinding,
    Pretaken,
    Settled,
    UnwindRequest,
    CallOptions,
    RecoverResult,
]


@dataclasses.dataclass(frozen=True)
class Plain:
    a: str
    b: int = 2
    c: Any = None


@quick
@dataclasses.dataclass(frozen=True)
class Quick:
    a: str
    b: int = 2
    c: Any = None


CASES: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    (("x",), {}),
    (("x", 3), {"c": [1]}),
    ((), {"a": "y", "c": {"k": 1}}),
]


def test_a_quick_value_is_the_value_the_dataclass_makes() -> None:
    for args, kwargs in CASES:
        plain, fast = Plain(*args, **kwargs), Quick(*args, **kwargs)
        assert dataclasses.astuple(plain) == dataclasses.astuple(fast)
        assert list(vars(fast)) == ["a", "b", "c"]
    assert Quick("x") == Quick(a="x", b=2) and hash(Quick("x")) == hash(Quick("x", 2, None))
    assert repr(Quick("x")) == "Quick(a='x', b=2, c=None)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        Quick("x").a = "y"  # type: ignore[misc]  # (frozen: refused, which is what is checked)
    with pytest.raises(TypeError):
        Quick()  # type: ignore[call-arg]  # (the same arguments are required)
    with pytest.raises(TypeError):
        Quick("x", d=1)  # type: ignore[call-arg]  # (and no others)
    assert pickle.loads(pickle.dumps(Quick("x", 3))) == Quick("x", 3)
    assert dataclasses.replace(Quick("x"), b=5) == Quick("x", 5)


@pytest.mark.parametrize("cls", QUICK, ids=lambda cls: cls.__qualname__)
def test_each_quick_class_takes_the_arguments_its_fields_say(cls: type[Any]) -> None:
    """The classes made quick keep their dataclass ``__init__``'s signature, field for field."""
    params = list(inspect.signature(cls).parameters.values())
    fields = dataclasses.fields(cls)
    assert [p.name for p in params] == [f.name for f in fields]
    for param, field in zip(params, fields, strict=True):
        expected = inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default
        assert param.default is expected or param.default == expected
        assert param.annotation == field.type  # help() and signature() show the field's type


def test_a_class_quick_cannot_serve_is_refused() -> None:
    @dataclasses.dataclass
    class Mutable:
        a: int

    @dataclasses.dataclass(frozen=True)
    class Factory:
        a: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True, slots=True)
    class Slotted:
        a: int

    for cls in (Mutable, Factory, Checked, Slotted):
        with pytest.raises(TypeError):
            quick(cls)
