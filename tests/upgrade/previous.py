"""The previous release, installed beside the current code: its wheel built from its tag (a ``git
archive`` of the tagged commit, then ``pip wheel``) and installed with its dependencies into a venv of
its own, cached under ``.venv-previous/`` by commit (``SAGA_PREVIOUS_CACHE`` moves it).

Its own ``tests`` tree (the fault suite's toolkit and ledger of that release) sits in a folder of its
own, without the package beside it, so a process of the previous release imports ``saga_worker`` from
its venv and ``tests.faults`` from that folder, never from this checkout.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The release before the current code: its tag and the commit the tag names (a clone without tags
# still finds the commit).
PREVIOUS_TAG, PREVIOUS_COMMIT = "v0.1.0", "80da609"
CACHE = Path(os.environ.get("SAGA_PREVIOUS_CACHE", str(REPO / ".venv-previous")))
PIP_TIMEOUT_S = 900


@dataclass(frozen=True)
class Release:
    tag: str
    commit: str
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "venv" / "bin" / "python"

    @property
    def tests_root(self) -> Path:
        """A folder holding only the release's ``tests`` package: what its processes put on PYTHONPATH."""
        return self.root / "tests-root"

    @property
    def source(self) -> Path:
        return self.root / "src"

    def env(self, base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
        """An environment for a process of the release: its venv first, its tests tree importable."""
        env = dict(os.environ if base is None else base)
        env.pop("VIRTUAL_ENV", None)
        env["PYTHONPATH"] = str(self.tests_root)
        env["PATH"] = f"{self.python.parent}:{env.get('PATH', '')}"
        env.update(extra)
        return env

    def run(self, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``python ARGS`` of the release, outside this checkout (so nothing of it is imported), with
        ``env`` added to the environment."""
        return subprocess.run(
            [str(self.python), *args],
            cwd=self.tests_root,
            env=self.env(None, **(env or {})),
            capture_output=True,
            text=True,
            timeout=300,
        )


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def resolve(tag: str = PREVIOUS_TAG, commit: str = PREVIOUS_COMMIT) -> str:
    """The full commit of ``tag`` (or of the known commit where the clone has no tags); a tag that
    names another commit than the one the release was is an error, not a silent switch."""
    full = _git("rev-parse", f"{commit}^{{commit}}")
    try:
        tagged = _git("rev-parse", f"{tag}^{{commit}}")
    except subprocess.CalledProcessError:
        return full
    if tagged != full:
        raise RuntimeError(f"tag {tag} names {tagged}, not the release's commit {full}")
    return full


def _build(release: Release) -> None:
    shutil.rmtree(release.root, ignore_errors=True)
    release.source.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", release.commit],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(release.source)], input=archive, check=True)
    wheels = release.root / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(release.source)],
        cwd=release.root,
        check=True,
        timeout=PIP_TIMEOUT_S,
    )
    (wheel,) = wheels.glob("saga_worker-*.whl")
    venv.EnvBuilder(with_pip=True, clear=True).create(release.root / "venv")
    subprocess.run(
        [str(release.python), "-m", "pip", "install", "-q", f"{wheel}[postgres]"],
        cwd=release.root,
        check=True,
        timeout=PIP_TIMEOUT_S,
    )
    release.tests_root.mkdir()
    shutil.copytree(release.source / "tests", release.tests_root / "tests")


def previous_release(tag: str = PREVIOUS_TAG, commit: str = PREVIOUS_COMMIT) -> Release:
    """The previous release, built and installed once per commit (later calls reuse it)."""
    full = resolve(tag, commit)
    release = Release(tag, full, CACHE / f"{tag}-{full[:12]}")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = release.root / ".ready"
        if not ready.exists():
            _build(release)
            ready.write_text(full + "\n")
    return release


if __name__ == "__main__":
    r = previous_release()
    print(r.python)
