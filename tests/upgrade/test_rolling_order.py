"""The rolling upgrade's migration steps (tests/fleet/rolling.py) read the current code's migrations,
whatever they hold when it runs: expand to the head, or short of the first contract migration (a
module that sets ``contract = True``), which the contract step runs once nothing of the previous
release is left. No fleet needed."""

from __future__ import annotations

import shutil
from pathlib import Path

from saga_worker.journal import migrate
from tests.fleet.rolling import contract_revisions, expand_target


def test_with_no_contract_migration_expand_goes_to_the_head_and_contract_is_empty() -> None:
    assert contract_revisions() == []  # this release ships none (docs/guides/upgrading.md says so)
    assert expand_target() == migrate.head_revision()


def test_a_contract_migration_is_left_to_the_contract_step(tmp_path: Path) -> None:
    shutil.copytree(migrate.MIGRATIONS, tmp_path / "m", ignore=shutil.ignore_patterns("__pycache__"))
    head = migrate.head_revision()
    (tmp_path / "m" / "versions" / "9998_drop_something.py").write_text(
        f'revision = "9998"\ndown_revision = "{head}"\nbranch_labels = None\ndepends_on = None\n'
        "contract = True\n\n\ndef upgrade() -> None:\n    pass\n"
    )
    (tmp_path / "m" / "versions" / "9999_add_something.py").write_text(
        'revision = "9999"\ndown_revision = "9998"\nbranch_labels = None\ndepends_on = None\n\n\n'
        "def upgrade() -> None:\n    pass\n"
    )
    assert contract_revisions(tmp_path / "m") == ["9998"]
    assert expand_target(tmp_path / "m") == head
