"""``python -m tests.fleet.upgrade [--runs N] [--repeats R]``: the rolling upgrade under faults (issue
51). Builds (or reuses) the previous release's venv from its tag (tests/upgrade/previous.py: it needs
the package index, which the fleet's namespaces cannot reach), then runs tests.fleet.rolling in the
fleet as ``python -m tests.fleet`` runs its drive: cleaned before and after, logs kept."""

from __future__ import annotations

import sys

from tests.upgrade.previous import previous_release

from .__main__ import main

if __name__ == "__main__":
    release = previous_release()
    print(f"previous release: {release.tag} ({release.commit[:12]}) in {release.root}", flush=True)
    sys.exit(
        main("tests.fleet.rolling", ["--previous", str(release.root), "--tag", release.tag, *sys.argv[1:]])
    )
