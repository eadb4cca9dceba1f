"""A documented import path (``saga_worker.audit``, with ``REASON_MAX`` and ``read_audit``): the code
lives in ``operating/audit.py``; this module only re-exports it."""

from .operating.audit import REASON_MAX, audit_dict, read_audit

__all__ = ["REASON_MAX", "audit_dict", "read_audit"]
