"""Which executor (``computeserver.executor``) a compute server is started with.

Kept apart from both executors' modules: the Dask executor builds on ``computeserver.executor``
(its tasks and payloads), so choosing between them there would tie the two modules in a loop.
"""

from __future__ import annotations

from feddpsyn.computeserver.executor import Executor, InProcessExecutor, LocalPoolExecutor

__all__ = ["make_executor"]


def make_executor(workers: int | None = None, dask_scheduler: str | None = None,
                  dask_security=None) -> Executor:
    """The executor a compute server is started with: a Dask cluster when a scheduler is
    named; else ``workers`` local processes (0: in-process threads); else the default."""
    if dask_scheduler:
        # Imported only here: dask is needed only by a server that names a scheduler.
        from feddpsyn.computeserver.dask_executor import DaskExecutor

        return DaskExecutor(dask_scheduler, security=dask_security)
    if workers is None:
        return InProcessExecutor()
    if workers < 0:
        raise ValueError("workers: 0 (in-process) or a positive number of processes")
    return InProcessExecutor() if workers == 0 else LocalPoolExecutor(workers)
