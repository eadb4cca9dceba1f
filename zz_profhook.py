import cProfile, os
from celery import signals
_prof = None
@signals.worker_process_init.connect
def _start(**_):
    global _prof
    _prof = cProfile.Profile(); _prof.enable()
@signals.worker_process_shutdown.connect
def _stop(**_):
    if _prof is not None:
        _prof.disable(); _prof.dump_stats(f"/tmp/w/prof-{os.environ.get('PROF_TAG','x')}-{os.getpid()}.pstats")
