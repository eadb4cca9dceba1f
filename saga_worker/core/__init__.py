"""The ground the other areas stand on: values a journal can store, redaction, display-safe text,
fault points, process ids, boundary checks, idempotency keys, and the lease keeper with its owner
tokens. Nothing here imports an area above it."""
