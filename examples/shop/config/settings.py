"""The shop's settings, from the environment. saga-worker reads its own (``SAGA_*``) itself."""

from __future__ import annotations

import os

BROKER_URL = os.environ.get("SHOP_BROKER_URL", "redis://127.0.0.1:6379/0")
RESULT_BACKEND = os.environ.get("SHOP_RESULT_BACKEND", BROKER_URL)
DATABASE_URL = os.environ.get("SHOP_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/shop")
QUEUE = os.environ.get("SHOP_QUEUE", "shop")
