"""The console as it is deployed: `saga-worker serve` in its own process, real workers started by
`saga-worker worker` (Redis broker and locks, PostgreSQL journal), and headless Chromium.

The browser is Debian's ``chromium`` package driven by Playwright (no browser download happens
here). Locally a missing browser skips the browser tests with the reason; under CI=true it fails.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from saga_worker import Journal
from saga_worker.console.auth import Role, new_token
from saga_worker.settings import SagaSettings
from tests.conftest import fresh_pg_database
from tests.console.clients import Sent, client_for
from tests.integration.conftest import REPO, Setup, make_setup, redis_db
from tests.integration.worker_tools import approval_tools
from tests.ledger import Ledger, MemoryLedger, order_tools
from tests.services import REDIS_URL, require
from tests.worker_process import WorkerProcess

CHROMIUM = os.environ.get("SAGA_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
# The README's screenshots: written to docs/ when asked (`make screenshots`), else to a scratch folder,
# so an ordinary test run leaves the work tree as it found it.
DOCS = (
    REPO / "docs"
    if os.environ.get("SAGA_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.mkdtemp(prefix="saga-screenshots-"))
)
READY_TIMEOUT_S = 60.0
# The key every console process of a deployment signs its session cookies with (SAGA_CONSOLE_SECRET).
CONSOLE_SECRET = "test-console-secret-" + "0123456789abcdef" * 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; under CI=true a missing browser is a failure, not a skip")
    pytest.skip(reason)


@dataclass(frozen=True)
class Tokens:
    operator: str
    viewer: str
    spec: str  # the SAGA_CONSOLE_TOKENS value: digests only


@pytest.fixture(scope="session")
def tokens() -> Tokens:
    operator, operator_entry = new_token("alice", Role.OPERATOR)
    viewer, viewer_entry = new_token("bob", Role.VIEWER)
    return Tokens(operator, viewer, f"{operator_entry},{viewer_entry}")


@pytest.fixture
def ledger() -> MemoryLedger:
    """The effects of the tools the console runs in-process (the journal is the settings' SQLite)."""
    return MemoryLedger()


@pytest.fixture
def tools(ledger: MemoryLedger) -> dict[str, Any]:
    """The console's tools: the sample order's, and two that wait for a person (``refund``, ``restock``)."""
    return {**order_tools(ledger), **approval_tools(ledger)}


@pytest.fixture
def settings(tmp_path: Path, tokens: Tokens) -> SagaSettings:
    """A console on a SQLite journal of the test's own, with short claims (a stuck one lapses soon)."""
    return SagaSettings(
        home=tmp_path,
        journal_url=f"sqlite:///{tmp_path}/journal.db",
        console_tokens=tokens.spec,
        claim_ttl=2.0,
    )


@pytest.fixture
def sent() -> Sent:
    return Sent()


@pytest.fixture
def app(settings: SagaSettings, tools: dict[str, Any], sent: Sent) -> Iterator[TestClient]:
    """The console in-process (Starlette's test client); unwinds it enqueues are recorded in ``sent``."""
    with client_for(settings, tools, sent) as client:
        yield client


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(
                f"{url}: the process exited with {proc.returncode}:\n{log.read_text(errors='replace')}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    pytest.fail(f"{url} did not answer after {READY_TIMEOUT_S:.0f}s:\n{log.read_text(errors='replace')}")


class ConsoleServer:
    """``python -m saga_worker.cli serve`` with a deployment's settings and the tokens."""

    def __init__(
        self, setup: Setup, tokens: Tokens, log: Path, port: int | None = None, **extra_env: str
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = {
            **setup.env(),
            "SAGA_CONSOLE_TOKENS": tokens.spec,
            "SAGA_CONSOLE_PORT": str(self.port),
            "SAGA_CONSOLE_SECRET": CONSOLE_SECRET,
            **extra_env,
        }
        self._out = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "saga_worker.cli", "serve"],
            cwd=REPO,
            env=env,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_http(self.url + "/healthz", self.proc, log)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._out.close()


class MetricsWorker(WorkerProcess):
    """A worker started as people start it, ``saga-worker worker``, serving /metrics."""

    def __init__(self, setup: Setup, log: Path, metrics_dir: Path) -> None:
        self.metrics_port = free_port()
        env = dict(
            setup.env(), SAGA_METRICS_PORT=str(self.metrics_port), PROMETHEUS_MULTIPROC_DIR=str(metrics_dir)
        )
        super().__init__(["saga_worker.cli", "worker", "--no-beat"], env, log, concurrency=2, beat=False)

    def wait_ready(self) -> MetricsWorker:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.ready():
                return self
            time.sleep(0.1)
        pytest.fail(f"worker not ready after {READY_TIMEOUT_S:.0f}s:\n{self.tail()}")

    def scrape(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as answer:
            return str(answer.read().decode())


@dataclass
class Deployment:
    setup: Setup
    worker: MetricsWorker
    console: ConsoleServer
    tmp: Path


@pytest.fixture(scope="module")
def module_pg_url() -> Iterator[str]:
    """A PostgreSQL database of this module's own: the sweeper and the metrics see only its runs."""
    yield from fresh_pg_database("saga_c_")


@pytest.fixture(scope="module")
def console_env() -> dict[str, str]:
    """Settings the deployment's console gets beside the deployment's own (a module may override it)."""
    return {}


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, module_pg_url: str, tokens: Tokens, console_env: dict[str, str]
) -> Iterator[Deployment]:
    """Redis (broker, results, locks) + PostgreSQL journal, one worker, one console."""
    require("redis")
    tmp = tmp_path_factory.mktemp("console")
    url = REDIS_URL.rsplit("/", 1)[0] + f"/{redis_db()}"
    setup = make_setup(tmp, broker_url=url, result_backend=url, redis_url=url, journal_url=module_pg_url)
    (tmp / "metrics").mkdir()
    worker = MetricsWorker(setup, tmp / "worker.log", tmp / "metrics")
    console = None
    try:
        worker.wait_ready()
        console = ConsoleServer(setup, tokens, tmp / "console.log", None, **console_env)
        yield Deployment(setup, worker, console, tmp)
    finally:
        if console is not None:
            console.stop()
        worker.stop()


@pytest.fixture
def journal_and_ledger(deployment: Deployment) -> Iterator[tuple[Journal, Ledger]]:
    """The deployment's journal and the provider's ledger, opened for one test and closed after it."""
    journal, ledger = deployment.setup.journal(), deployment.setup.ledger()
    yield journal, ledger
    ledger.close()
    journal.close()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One headless Chromium per module (Debian's package, driven by Playwright).

    Not per session: Playwright's sync API keeps an asyncio loop running in the main thread while it
    is open, and every later test that calls asyncio.run() would fail on it.
    """
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists():
        missing(f"no browser at {CHROMIUM} (apt-get install chromium; `make test` does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
