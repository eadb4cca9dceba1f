"""The tools of ``tests.integration.worker_tools``, loaded by a worker that also reports its alerts
(``SAGA_TOOLS=tests.integration.alert_tools:tools``): what the ``unwind_halted`` signal carried is
written to ``{control}/{run_id}.signal-{status}``, and Sentry's SDK (its Celery and logging
integrations, a transport that writes each event to ``{control}/sentry-{event id}.json``) is set
up in each process that loads the tools."""

from __future__ import annotations

import json
import logging
from typing import Any

import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.integrations.celery import CeleryIntegration
from sentry_sdk.integrations.logging import LoggingIntegration
from sentry_sdk.transport import Transport

from saga_worker import unwind_halted

from .worker_tools import control_dir
from .worker_tools import tools as order

tools = order


class ToFiles(Transport):
    def capture_envelope(self, envelope: Envelope) -> None:
        for item in envelope.items:
            event = item.payload.json
            if item.type == "event" and event is not None:
                (control_dir() / f"sentry-{event['event_id']}.json").write_text(json.dumps(event))


@unwind_halted.connect
def noted(sender: Any, run_id: str, status: str, signal: Any = None, **fields: Any) -> None:
    (control_dir() / f"{run_id}.signal-{status}").write_text(json.dumps({"run_id": run_id, **fields}))


sentry_sdk.init(
    dsn="https://public@sentry.invalid/1",
    transport=ToFiles,
    integrations=[CeleryIntegration(), LoggingIntegration(event_level=logging.ERROR)],
    default_integrations=False,
)
