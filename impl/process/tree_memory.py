"""The memory a process tree takes: the proportional set sizes of a process and all its
descendants, summed (shared pages counted once), and a sampler that keeps its peak.

Used by the ecosystem run (each engine's gate run, servers and engines included) and by
the suite's own memory report (``tests/memory_profile.py``). A sample can miss a peak
shorter than its interval."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
#: Seconds between two samples of a process tree.
SAMPLE_INTERVAL = 0.2


def descendants(pid: int) -> list[int]:
    """``pid``'s children, grandchildren, … (Linux ``/proc/<pid>/task/<tid>/children``)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{parent}/task"):
                with contextlib.suppress(OSError):
                    kids = [int(k) for k in Path(f"/proc/{parent}/task/{task}/children").read_text().split()]
                    found.extend(kids)
                    todo.extend(kids)
    return found


def proportional_bytes(pid: int) -> int:
    """``pid``'s proportional set size (``Pss`` of ``/proc/<pid>/smaps_rollup``): its
    resident pages, each shared page divided among the processes sharing it — so a
    child forked from a large parent (copy-on-write) or two processes mapping the same
    model file are not counted twice. Its resident size where smaps is not readable;
    0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return resident_bytes(pid)


def resident_bytes(pid: int) -> int:
    """``pid``'s resident size (``/proc/<pid>/statm``), every shared page counted whole:
    never below its proportional set size, and read without walking its page tables
    (``smaps_rollup`` does walk them: sampling the suite's process tree that way every
    0.2 s, in the controller and in each xdist worker, was 15 % of the samples of a
    system-wide ``perf`` profile of the fast tier, 3 % once pruned); 0 once it is gone."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def tree_bytes(pid: int) -> int:
    """The proportional set sizes of ``pid`` and all its descendants, summed: the memory
    the process tree takes, shared pages counted once."""
    return sum(proportional_bytes(p) for p in [pid, *descendants(pid)])


def tree_peak(pid: int, peak: int) -> int:
    """``max(peak, tree_bytes(pid))``, read cheaply where it can be: while the resident
    sizes of the tree sum to at most ``peak``, so do its proportional set sizes (each is
    at most its resident size), and no ``smaps_rollup`` is read."""
    tree = [pid, *descendants(pid)]
    if sum(resident_bytes(p) for p in tree) <= peak:
        return peak
    return max(peak, sum(proportional_bytes(p) for p in tree))


class TreePeak:
    """While open, a daemon thread samples ``tree_bytes(pid)`` every ``interval`` seconds
    and keeps the peak (bytes; 0 where ``/proc`` is not readable) and, with ``where``,
    what ``where()`` said when it was reached (``at``: the suite's memory report names the
    test that was running)::

        with TreePeak(proc.pid) as peak:
            proc.wait()
        peak.bytes
    """

    def __init__(
        self, pid: int, interval: float = SAMPLE_INTERVAL, where: Callable[[], str] | None = None
    ) -> None:
        self.pid, self.interval, self.bytes = pid, interval, 0
        self.where, self.at = where, ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="specgate-tree-peak", daemon=True)

    def sample(self) -> None:
        peak = tree_peak(self.pid, self.bytes)
        if peak > self.bytes:
            self.bytes, self.at = peak, self.where() if self.where else ""

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval):
                return

    def start(self) -> TreePeak:
        self._thread.start()
        return self

    def stop(self) -> int:
        """Stop sampling; the peak in bytes."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        return self.bytes

    def __enter__(self) -> TreePeak:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
