# One image for every saga-worker process: migrate, worker, beat, flower, console (see docker-compose.yml).
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    SAGA_HOME=/data

WORKDIR /app
COPY pyproject.toml README.md ./
COPY saga_worker ./saga_worker
COPY tasks ./tasks
COPY config ./config
RUN pip install '.[postgres,flower,console]' \
    && useradd --create-home --uid 1000 saga \
    && mkdir -p /data && chown saga /data

USER saga
# `celery -A tasks` finds the checkout shim here; `celery -A saga_worker.celery:app` works anywhere.
CMD ["saga-worker", "worker"]
