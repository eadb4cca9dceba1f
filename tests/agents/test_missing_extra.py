"""Without its framework, an adapter's import fails with the extra to install (the rest of
saga_worker.integrations imports without any framework)."""

from __future__ import annotations

import importlib
import sys

import pytest

ADAPTERS = [
    # adapter module, the first module it imports from its framework, the extra that installs it
    ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ("langchain", "langchain.agents.middleware", "langchain"),
    ("openai_agents", "agents", "openai-agents"),
]


@pytest.mark.parametrize(("adapter", "framework", "extra"), ADAPTERS)
def test_importing_an_adapter_without_its_framework_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, adapter: str, framework: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, framework, None)  # None in sys.modules: the import fails, as if absent
    monkeypatch.delitem(sys.modules, f"saga_worker.integrations.{adapter}", raising=False)

    with pytest.raises(
        ImportError, match=rf"needs the {extra} package: pip install 'saga-worker\[{extra}\]'"
    ):
        importlib.import_module(f"saga_worker.integrations.{adapter}")


def test_the_shared_part_imports_without_any_framework(monkeypatch: pytest.MonkeyPatch) -> None:
    for _, framework, _ in ADAPTERS:
        monkeypatch.setitem(sys.modules, framework, None)
    for name in ("saga_worker.integrations", "saga_worker.integrations._agent"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    integrations = importlib.import_module("saga_worker.integrations")

    assert callable(integrations.hooks) and callable(integrations.call_options)
