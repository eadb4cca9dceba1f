"""Integrations with web frameworks (optional extras): :mod:`saga_worker.contrib.django`."""
