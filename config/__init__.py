"""A shim from a checkout: settings and the Celery configuration live in ``saga_worker.settings`` and
``saga_worker.celery`` (the wheel installs only ``saga_worker``)."""
