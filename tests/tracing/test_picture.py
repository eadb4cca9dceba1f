"""The picture of a trace in docs/guides/tracing.md: a run recorded by one process and its unwind in
another, drawn from the spans they exported (tests/tracing/waterfall.py) and screenshot by Chromium.
``make screenshots`` (SAGA_UPDATE_SCREENSHOTS=1) writes it to docs/tracing-waterfall.png."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from saga_worker import compensate_run, open_journal

from .conftest import Spans
from .order import order_tools
from .spans import read_dir
from .waterfall import render

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("SAGA_TEST_CHROMIUM", "/usr/bin/chromium")
PICTURE = "tracing-waterfall.png"


def _browser_missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; under CI=true a missing browser is a failure, not a skip")
    pytest.skip(reason)


def test_the_picture_of_a_run_and_its_unwind_draws_every_span_and_each_link(
    spans: Spans, tmp_path: Path
) -> None:
    if shutil.which(CHROMIUM) is None and not Path(CHROMIUM).exists():
        _browser_missing(f"no browser at {CHROMIUM} (apt-get install chromium)")
    url = f"sqlite:///{tmp_path / 'journal.db'}"
    folder = tmp_path / "spans"
    folder.mkdir()
    subprocess.run(
        [sys.executable, "-m", "tests.tracing.order", url, "order-1042", str(folder), "slow"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
        timeout=120,
    )
    journal = open_journal(url)
    try:
        compensate_run(
            "order-1042", journal=journal, tools=order_tools(fail=("charge",), slow=True), actor="ops-ada"
        )
    finally:
        journal.close()
    recorded, unwound = read_dir(folder), spans.all()
    page = render(
        [
            ("order-1042: the run, recorded by process A (its own trace)", recorded),
            ("its unwind, later, by ops-ada in process B (another trace): halted at charge", unwound),
        ]
    )
    from playwright.sync_api import sync_playwright

    out_dir = REPO / "docs" if os.environ.get("SAGA_UPDATE_SCREENSHOTS") == "1" else Path(tempfile.mkdtemp())
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            tab = browser.new_page(viewport={"width": 1200, "height": 700}, device_scale_factor=1)
            tab.set_content(page)
            drawing = tab.locator("#waterfall")
            names = tab.locator("text.name").all_text_contents()
            links = tab.locator("path.link").count()
            drawing.screenshot(path=str(out_dir / PICTURE))
        finally:
            browser.close()
    assert names.count("saga.run") == 1 and names.count("saga.unwind") == 1
    assert sorted(n for n in names if n.startswith("execute_tool")) == [
        "execute_tool charge",
        "execute_tool notify",
        "execute_tool reserve",
    ]
    assert sorted(n for n in names if n.startswith("saga.compensate")) == [
        "saga.compensate charge",
        "saga.compensate notify",
        "saga.compensate reserve",
    ]
    assert links == 3  # each compensate span's link found its execute span, drawn across the two traces
    assert (out_dir / PICTURE).stat().st_size > 10_000
