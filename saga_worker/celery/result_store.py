"""What the saga tasks read and write in the result backend besides their own results: the report
stored under an unwind's id once, a withdrawal (``saga-worker revoke``) read back, whether an id
has a final answer. Without a result backend, nothing can be stored or read there."""

from __future__ import annotations

from typing import Any, cast

from celery import Task, states
from celery.backends.redis import RedisBackend
from kombu.utils.encoding import bytes_to_str

from .checked_releases import CELERY_RESULT_STORE, installed_version

WITHDRAWN = "REVOKED"

# Celery's Redis result backend writes a result as ``RedisBackend._set`` does in the releases this was
# checked against (``checked_releases.CELERY_RESULT_STORE``, which pyproject.toml's bound on Celery matches): the meta of
# ``_get_result_meta``, encoded by ``encode``, SET (SETEX with ``expires``) and PUBLISHed on
# ``get_key_for_task``'s key. ``store_once`` does the same in one compare-and-set (a script: the
# stored status read and the result written in one round trip, where the read and the store were
# three: Celery's ``store_result`` reads the key again itself); anywhere else (another backend,
# another Celery, a serializer other than JSON, compression), the read, then ``store_result``.
_STORE_UNLESS_READY = """
local stored = redis.call('GET', KEYS[1])
if stored then
  local ok, meta = pcall(cjson.decode, stored)
  if not ok or type(meta) ~= 'table' then return -1 end
  for i = 3, #ARGV do
    if meta['status'] == ARGV[i] then return 0 end
  end
end
if tonumber(ARGV[2]) > 0 then
  redis.call('SETEX', KEYS[1], ARGV[2], ARGV[1])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
redis.call('PUBLISH', KEYS[1], ARGV[1])
return 1
"""


def _celery_checked() -> bool:
    """Is the installed Celery one whose Redis backend ``store_once``'s script was checked against?"""
    version = installed_version("celery")
    return version is not None and CELERY_RESULT_STORE.contains(version, prereleases=True)


_CHECKED = _celery_checked()


def store_once(backend: Any, task_id: str, result: Any) -> bool:
    """Store ``result`` as the ``SUCCESS`` of ``task_id`` unless a final state (a report, an error,
    a withdrawal) is stored there already; whether it was stored."""
    stored = _store_unless_ready(backend, task_id, result)
    if stored is not None:
        return stored
    return store_once_apart(backend, task_id, result)


def store_once_apart(backend: Any, task_id: str, result: Any) -> bool:
    """``store_once`` on any backend: the stored state read, then the result stored if none was final."""
    try:
        if backend.get_task_meta(task_id, cache=False).get("status") in states.READY_STATES:
            return False
    except NotImplementedError:  # no result backend: nobody can read an answer anyway
        return False
    backend.store_result(task_id, result, states.SUCCESS)
    return True


def _redis(backend: Any) -> bool:
    return isinstance(backend, RedisBackend)  # its subclasses too (Sentinel): the same writes


def _store_unless_ready(backend: Any, task_id: str, result: Any) -> bool | None:
    """``store_once`` on Celery's Redis backend in one round trip; None where it does not apply (or
    the stored value is not JSON it can read): the caller stores it apart."""
    if not (_CHECKED and _redis(backend) and backend.serializer == "json" and not backend.compression):
        return None
    meta = backend._get_result_meta(
        result=backend.encode_result(result, states.SUCCESS),
        state=states.SUCCESS,
        traceback=None,
        request=None,
    )
    meta["task_id"] = bytes_to_str(task_id)
    value = backend.encode(meta)
    if len(value) > backend._MAX_STR_VALUE_SIZE:
        return None  # refused as Celery refuses it
    script = backend.__dict__.get("_saga_store_unless_ready")
    if script is None:
        script = backend.__dict__["_saga_store_unless_ready"] = backend.client.register_script(
            _STORE_UNLESS_READY
        )
    key = backend.get_key_for_task(task_id)
    expires = int(backend.expires or 0)
    args = [value, expires, *sorted(states.READY_STATES)]
    done = int(backend.ensure(lambda: script(keys=[key], args=args), ()))
    return None if done < 0 else done == 1


def withdrawn(task: Task[Any, Any]) -> bool:
    """Was this unwind request withdrawn (``saga-worker revoke``) while it waited in the queue? Read
    from the result backend, where the withdrawal is stored: a revoke broadcast reaches only the
    workers running at the time, and a request queued while none ran must stay withdrawn."""
    if task.request.is_eager:
        return False
    try:
        # The read ``AsyncResult(id).state`` makes, without a result object built and dropped per unwind.
        meta = task.backend.get_task_meta(cast(str, task.request.id))
        return bool(meta.get("status") == WITHDRAWN)
    except NotImplementedError:  # no result backend: nothing can have been stored there
        return False


def answered(task: Task[Any, Any], task_id: str) -> bool:
    """Is a final state (a report, an error, a withdrawal) stored under ``task_id``?"""
    try:
        return task.AsyncResult(task_id).state in states.READY_STATES
    except NotImplementedError:  # no result backend: nothing can have been stored there
        return False


__all__ = ["WITHDRAWN", "answered", "store_once", "store_once_apart", "withdrawn"]
