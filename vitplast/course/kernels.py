"""Kernels: how the notebooks' papermill kernels start, share the cores and stop at Ctrl-C.

``manager`` makes the kernel manager ``notebooks.run`` gives papermill: its kernels start in
the run's folder, write their stderr to its ``kernel.log`` and compute on ``threads_each`` of
the cores when notebooks run side by side. A kernel runs in its own session, out of the
terminal's reach: Ctrl-C lands in ``run``'s main thread (``note_sigint`` records it in
``INTERRUPTED``), and ``interrupt_all`` hands it on to every kernel running. A kernel between
cells ignores that interrupt, so once Ctrl-C came a kernel's client starts no further cell
(``NotStarted``); a kernel that has not answered within ``GRACE`` seconds is killed
(``kill_all``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from pathlib import Path


def threads_each(jobs: int) -> int | None:
    """The compute threads of each of ``jobs`` kernels side by side: their share of the cores
    this process may use (torch's default, a thread per core in every kernel, puts ``jobs``
    threads on each core, and they wait for each other inside every operation). None for one
    kernel, or where ``OMP_NUM_THREADS`` is set already (the user's)."""
    if jobs == 1 or "OMP_NUM_THREADS" in os.environ:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // jobs)


#: The process ids of the kernels running now (``manager``'s): Ctrl-C interrupts each
#: (``interrupt_all``), since a kernel runs in its own session, out of the terminal's
#: reach, and a notebook run side by side is not in the main thread, where Ctrl-C lands.
_RUNNING: set[int] = set()


def interrupt_all() -> None:
    """Send every running kernel the interrupt Ctrl-C would: its cell stops (KeyboardInterrupt)."""
    _signal_all(signal.SIGINT)


#: Seconds the kernels have, after ``interrupt_all``, to stop their cells before ``kill_all``:
#: an interrupt that lands in a kernel's own message handling, not in a cell, leaves the cell's
#: reply unsent, and papermill would wait for it forever.
GRACE = 10.0


def kill_all() -> None:
    """Kill every running kernel (papermill then raises ``DeadKernelError``, recorded as an
    interruption after Ctrl-C)."""
    _signal_all(signal.SIGKILL)


def _signal_all(signum: int) -> None:
    for pid in list(_RUNNING):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


class NotStarted(RuntimeError):
    """A cell was not started: Ctrl-C came (``INTERRUPTED``) while its kernel was between cells,
    where the kernel ignores the interrupt ``interrupt_all`` sends."""


def manager(log: Path, cwd: Path, threads: int | None = None):
    """A Jupyter kernel manager whose kernels start in ``cwd`` (set here rather than by
    papermill's process-wide ``chdir``, which notebooks run side by side would race on), with
    ``threads`` compute threads (``threads_each``; None: torch's default), and write their
    stderr (startup warnings, the traceback of the interrupt sent at shutdown after Ctrl-C,
    crashes) to ``log``, not to the terminal; cell errors are in the executed notebook either
    way."""
    from jupyter_client.asynchronous import AsyncKernelClient
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import Type

    class Client(AsyncKernelClient):
        """Starts no cell once Ctrl-C came (``NotStarted``)."""

        def execute(self, *args, **kwargs):
            if INTERRUPTED.is_set():
                raise NotStarted("Ctrl-C came between cells: the next cell was not started")
            return super().execute(*args, **kwargs)

    class KernelManager(AsyncKernelManager):
        client_factory = Type(Client)

        async def start_kernel(self, **kw):
            if threads is not None:
                kw["env"] = {**kw.get("env", os.environ), "OMP_NUM_THREADS": str(threads)}
            with open(log, "ab") as stderr:  # the kernel holds its own copy of the file
                kw.setdefault("stderr", stderr)
                kw["cwd"] = str(cwd)
                started = await super().start_kernel(**kw)
            self._pid = getattr(getattr(self.provisioner, "process", None), "pid", None)
            if self._pid is not None:  # a local kernel (another provisioner: not reachable)
                _RUNNING.add(self._pid)
            return started

        async def shutdown_kernel(self, *args, **kw):
            _RUNNING.discard(getattr(self, "_pid", None))
            return await super().shutdown_kernel(*args, **kw)

    return KernelManager


#: Set when this process receives Ctrl-C during ``notebooks.run`` (a kernel that Ctrl-C killed is
#: recorded as interrupted, not failed).
INTERRUPTED = threading.Event()


def note_sigint(signum, frame):
    """``run``'s SIGINT handler: Python's own (KeyboardInterrupt), noting that Ctrl-C came."""
    INTERRUPTED.set()
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigint_ignored():
    """Ignore Ctrl-C inside the block (main thread only; elsewhere signals never arrive)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


__all__ = ["GRACE", "INTERRUPTED", "NotStarted", "interrupt_all", "kill_all", "manager",
           "note_sigint", "sigint_ignored", "threads_each"]
