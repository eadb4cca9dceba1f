"""A documented import path (``SAGA_TOOLS=saga_worker.demo:TOOLS``, ``order_planner``): the demo's
tools live in ``contrib/demo.py``; this module only re-exports them."""

from .contrib.demo import TOOLS, FakeProvider, order_planner, provider

__all__ = ["TOOLS", "FakeProvider", "order_planner", "provider"]
