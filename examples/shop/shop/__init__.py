"""A small shop that places orders through a chain of Celery tasks and cancels them with saga-worker."""
