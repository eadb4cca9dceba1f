"""The text a worker writes for a task's result (its "succeeded" log line, the ``task-succeeded``
event Flower shows) is Celery's own, character for character, however it is made
(saga_worker/celery/result_text.py). What a real worker sends is in
tests/integration/test_celery_redis_postgres.py; the time saved is the bench's to show."""

from __future__ import annotations

import enum
import random
from typing import Any

import pytest
from celery.utils.saferepr import saferepr as celery_saferepr

from saga_worker.celery.result_text import saferepr

# Quotes, backslashes, control characters, spaces (where Celery cuts), accents, a bidi override,
# an emoji and a lone surrogate (a step's error text may hold any of them).
CHARACTERS = "ab' \"\\\n\t\x00é\u202e\U0001f600\ud800"
LIMITS = (None, 4096, 1024, 200, 64, 10, 1, 0, -1)


class Status(enum.IntEnum):
    DONE = 1


class Name(str):
    def __repr__(self) -> str:
        return "Name(...)"


def _text(rng: random.Random, longest: int) -> str:
    return "".join(rng.choice(CHARACTERS) for _ in range(rng.randrange(longest + 1)))


def _value(rng: random.Random) -> Any:
    return rng.choice(
        [
            None,
            True,
            False,
            rng.randrange(-(10**12), 10**12),
            rng.uniform(-1e6, 1e6),
            float("nan"),
            float("-inf"),
            _text(rng, 80),
        ]
    )


def test_a_flat_dict_reads_as_celery_writes_it_at_every_limit() -> None:
    rng = random.Random(26)
    for _ in range(5000):
        value = {_text(rng, 12): _value(rng) for _ in range(rng.randrange(16))}
        for limit in LIMITS:
            assert saferepr(value, limit) == celery_saferepr(value, limit), (value, limit)


def test_a_step_result_near_the_limit_reads_as_celery_writes_it() -> None:
    # A step's entry whose error text brings the whole to the limit, one character either side.
    entry = {"run_id": "r-1", "suffix": "call-1", "status": "failed", "error": "", "attempts": 1}
    for size in range(950, 1040):
        value = {**entry, "error": "x " * (size // 2)}
        assert saferepr(value, 1024) == celery_saferepr(value, 1024), size


def test_a_result_a_million_characters_long_reads_as_celery_cuts_it() -> None:
    values = (
        {"run_id": "r-1", "error": "x " * 500_000},
        {"x " * 500_000: "r-1"},
        {f"k{i}": "v" * 50 for i in range(20_000)},
    )
    for value in values:
        assert saferepr(value, 1024) == celery_saferepr(value, 1024)


@pytest.mark.parametrize(
    "value",
    [
        {"entries": [{"suffix": "call-1"}]},  # nested
        {1: "one"},  # a key that is not text
        {"when": b"bytes"},
        {"tags": ("a", "b")},
        {"status": Status.DONE},  # an int of another type: Celery writes its str()
        {"name": Name("call")},
        [1, 2, 3],
        "text",
        None,
        {},
    ],
)
def test_anything_else_reads_as_celery_writes_it(value: Any) -> None:
    assert saferepr(value, 1024) == celery_saferepr(value, 1024)
    assert saferepr(value, 1024, 1) == celery_saferepr(value, 1024, 1)
