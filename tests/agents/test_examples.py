"""examples/agents/ stay true: each runs as a newcomer runs it (its own process, no API key, any
network request pointed at a closed loopback port), and prints what its docstring promises."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .shop import require_framework

pytestmark = pytest.mark.slow  # three interpreters importing their framework
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "agents"
COMPENSATED = "compensated: charge order-7:comp:call-1 x1, notify order-7:comp:call-3 x1, reserve order-7:comp:call-2 x1"
EXECUTED = "executed: charge order-7:call-1 x1, notify order-7:call-3 x1, reserve order-7:call-2 x1"


def run_example(name: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "ANTHROPIC", "SAGA_"))}
    closed = "http://127.0.0.1:9"  # the discard port: nothing listens, a request fails at once
    env.update(HTTP_PROXY=closed, HTTPS_PROXY=closed, NO_PROXY="", OPENAI_AGENTS_DISABLE_TRACING="1")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)], env=env, capture_output=True, text=True, timeout=110
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout.splitlines()


def test_the_pydantic_ai_example_replays_after_the_crash_unwinds_and_refuses_a_new_run() -> None:
    require_framework("pydantic_ai")
    out = run_example("pydantic_ai_order.py")

    assert "first attempt: the process died after the second tool call" in out
    assert "re-run with the same run id: 'order placed'" in out
    assert EXECUTED in out and COMPENSATED in out
    assert [line.split()[1] for line in out if "comp:call-" in line and "compensated " in line] == [
        "notify",
        "reserve",
        "charge",
    ]
    assert out[-1].startswith("a new agent run on the unwound run id is refused: run 'order-7' is condemned")


def test_the_langchain_example_replays_a_thread_and_refuses_a_condemned_threads_next_call() -> None:
    require_framework("langchain")
    out = run_example("langchain_order.py")

    assert "thread order-7 invoked again: 'order placed'" in out
    assert out[out.index("thread order-7 invoked again: 'order placed'") + 1 :][:4] == [
        "  call-1   charge   succeeded  {'amount': 10}",
        "  call-2   reserve  succeeded  {'qty': 2, 'sku': 'A1'}",
        "  call-3   notify   succeeded  {'to': 'c@example.com'}",
        EXECUTED,
    ]
    refused = out.index(
        next(line for line in out if line.startswith("thread order-8: its next tool call was refused"))
    )
    assert out[refused + 1 :][:2] == [
        "  call-1   charge   succeeded  {'amount': 10}",
        "unwind of order-7 (condemned: True, complete: True):",
    ]
    assert out[-1] == COMPENSATED.replace(
        "charge order-7:comp:call-1 x1,", "charge order-7:comp:call-1 x1, charge order-8:comp:call-1 x1,"
    )


def test_the_openai_agents_example_executes_an_approved_call_once_over_two_resumes() -> None:
    require_framework("agents")
    out = run_example("openai_agents_order.py")

    assert "waiting for approval: ['reserve']" in out
    assert "approved and resumed: the process died right after reserve executed" in out
    assert "resumed again: 'order placed'" in out
    assert EXECUTED in out and COMPENSATED in out
    assert [line.split()[1] for line in out if "compensated " in line and "key" in line] == [
        "reserve",
        "notify",
        "charge",
    ]
    assert out[-1].startswith("a new agent run on the unwound run id is refused")
