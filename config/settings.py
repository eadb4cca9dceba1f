"""Settings come from the environment (prefix ``SAGA_``); unset, the embedded SQLite default."""

from saga_worker.settings import SagaSettings, get_settings

__all__ = ["SagaSettings", "get_settings"]
