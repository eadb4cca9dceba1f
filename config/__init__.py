"""Settings and Celery/beat configuration for the saga-worker executor (DESIGN.md §4)."""
