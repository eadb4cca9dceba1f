"""Settings from the environment (prefix ``SAGA_``). Unset, everything is the embedded default:
SQLite files under ``.saga/`` in the working directory, no server needed."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_HOME = Path(".saga")


class SagaSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SAGA_", extra="ignore")

    home: Path = Field(DEFAULT_HOME, description="Folder of the embedded default's SQLite files.")
    journal_url: str | None = Field(
        None, description="SQLAlchemy URL of the journal (default: SQLite in home)."
    )
    broker_url: str | None = Field(
        None, description="Celery broker (default: SQLite via kombu's SQLAlchemy transport)."
    )
    result_backend: str | None = Field(
        None, description="Celery result backend (default: db+sqlite in home)."
    )
    redis_url: str | None = Field(
        None, description="Redis for step locks (default: none; the journal claim alone)."
    )
    tools: str | None = Field(
        None,
        description="'package.module:attribute', the tools the worker loads. Unset, every entry that "
        "needs tools (a worker, compensate --local or --dry-run, the console's plan) refuses: there is no "
        "fallback to sample tools (only `saga-worker demo` names its own).",
    )
    actor: str | None = Field(
        None, description="Who the audit trail names for this process's actions (default: the OS user)."
    )
    claim_ttl: float = Field(
        30.0, gt=0, description="Seconds a compensation claim or an execute lease lives without renewal."
    )
    sweep_interval: float = Field(
        5.0, gt=0, description="Seconds between beat sweeps for interrupted unwinds."
    )
    sweep_max_attempts: int = Field(8, ge=1, description="Re-drives before a run is flagged for a person.")
    parallel_max: int = Field(
        8,
        ge=1,
        description="Compensate hooks of one parallel unwind (parallel=True) run at once at most; a "
        "larger group runs in waves of at most this many, still one group in the report.",
    )
    max_deliveries: int = Field(
        3,
        ge=1,
        description="Deliveries of a saga task's message whose worker process is lost each time (a hook "
        "that kills it, the OOM killer) before the task is answered instead of run again: its step reads "
        "failed without its tool's code being called, and the run is flagged for a person.",
    )
    prune_older_than: str | None = Field(
        None,
        description="Beat prunes the journal (as `saga-worker db prune --older-than` would, without an "
        "archive) of runs last updated longer ago than this age, such as 90d. Unset (the default): beat "
        "never prunes. Every worker must know the saga.prune task before it is set.",
    )
    prune_interval: float = Field(3600.0, gt=0, description="Seconds between beat's prunes, when set.")
    sweep_backoff: float = Field(2.0, gt=0, description="First retry delay in seconds; doubles per attempt.")
    sweep_backoff_max: float = Field(300.0, gt=0, description="Longest retry delay in seconds.")
    queue: str = Field(
        "saga", min_length=1, description="Celery queue the saga tasks are sent to and consumed from."
    )
    visibility_timeout: float = Field(
        300.0,
        gt=0,
        description="Redis broker: seconds before an unacked message (its worker died) is delivered "
        "again. Must exceed the longest step.",
    )

    console_tokens: SecretStr | None = Field(
        None,
        description="The console's tokens, comma-separated 'name:role:sha256:<hex>' (role viewer or "
        "operator; `saga-worker token NAME` makes one). Unset, `saga-worker serve` refuses to start.",
    )
    console_host: str = Field("127.0.0.1", description="Address the console binds to.")
    console_port: int = Field(8350, ge=1, le=65535, description="Port of the console.")
    console_allowed_hosts: str = Field(
        "",
        description="Host names the console answers to, comma-separated (a leading '*.' allows "
        "subdomains); the loopback names and SAGA_CONSOLE_HOST are always allowed. Any other Host "
        "header is refused (DNS rebinding).",
    )
    console_trusted_proxies: str = Field(
        "",
        description="Addresses or networks (comma-separated) of the TLS proxies in front of the "
        "console: only their X-Forwarded-Proto/-For are believed (Secure cookies, the client's address).",
    )
    console_secret: SecretStr | None = Field(
        None,
        description="The key (at least 32 characters) the console signs its session cookies and "
        "notices with: every console process of a deployment shares it, so a login holds on any of "
        "them and across restarts. Unset, `saga-worker serve` refuses to start, except in the embedded "
        "default (no SAGA_BROKER_URL), where each start draws its own and a restart logs everyone out.",
    )
    console_session_ttl: float = Field(
        12 * 3600.0,
        gt=0,
        description="Seconds a console login lasts (the expiry is signed into its cookie).",
    )
    console_login_attempts: int = Field(
        10, ge=1, description="Failed logins a client may make in 5 minutes before it must wait."
    )
    redact_keys: str = Field(
        "password,passwd,secret,token,authorization,api_key,apikey,cookie",
        description="Key names (comma-separated, matched case-insensitively anywhere in a key) whose "
        "values the console and the CLI show as *** in tool inputs and outputs.",
    )
    flower_url: str | None = Field(
        None,
        description="Flower's address (such as http://flower.internal:5555): the console's run timeline "
        "links each step run on the workers to its task there. Unset: task ids without links.",
    )
    metrics_port: int | None = Field(
        None, ge=1, le=65535, description="Port on which `saga-worker worker` serves /metrics (unset: none)."
    )
    metrics_host: str = Field("127.0.0.1", description="Address the worker's metrics bind to.")
    log_format: Literal["text", "json"] = Field(
        "text",
        description="How `saga-worker worker`, `beat` and the other commands write log records: text, or "
        "json (one object a line, with the current span's trace_id and span_id).",
    )
    trace_values: bool = Field(
        False,
        description="Put tool inputs and outputs in span attributes (gen_ai.tool.call.arguments/result; "
        "values under keys named like secrets still read ***). Off: no input or output in any span.",
    )

    def secret_keys(self) -> tuple[str, ...]:
        return tuple(k.strip().lower() for k in self.redact_keys.split(",") if k.strip())

    def resolved_journal_url(self) -> str:
        return self.journal_url or f"sqlite:///{(self.home / 'journal.db').resolve()}"

    def resolved_broker_url(self) -> str:
        return self.broker_url or f"sqla+sqlite:///{(self.home / 'broker.db').resolve()}"

    def resolved_result_backend(self) -> str:
        return self.result_backend or f"db+sqlite:///{(self.home / 'results.db').resolve()}"

    @property
    def embedded(self) -> bool:
        return self.broker_url is None


# Where settings come from besides the environment, asked in order: ``saga_worker.contrib.django``
# adds Django's settings when it is imported. A source answers None when it has nothing to say.
_sources: list[Callable[[], SagaSettings | None]] = []


def add_settings_source(source: Callable[[], SagaSettings | None]) -> None:
    """Ask ``source`` for this process's settings before the environment (once per source)."""
    if source not in _sources:
        _sources.append(source)
        get_settings.cache_clear()


@lru_cache(maxsize=1)
def get_settings() -> SagaSettings:
    """This process's settings: the first a settings source gives (in a Django project with
    ``saga_worker.contrib.django`` installed, ``SAGA_*`` from Django's settings, the environment
    filling the rest); else the environment."""
    for source in _sources:
        found = source()
        if found is not None:
            return found
    return SagaSettings()
