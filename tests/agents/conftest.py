"""The agent tests' fixtures: no event loop outlives the test that made it (see loops.py)."""

from .loops import no_event_loop_left_behind

__all__ = ["no_event_loop_left_behind"]
