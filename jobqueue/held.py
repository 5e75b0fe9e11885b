"""The jobs a worker holds leases on, in memory: its lease table (jobqueue.worker's main thread,
handler threads and settler change it, under one lock)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from jobqueue.models import Job


@dataclass(slots=True)
class Held:
    """A job whose lease this worker holds."""

    job: Job
    started: float | None = None  # monotonic time the handler began, None while buffered
    lost: bool = False
    thread: threading.Thread | None = None  # the handler running it
    returned: bool = False  # its handler is done; the outcome waits to be settled
    # Its outcome is being stored: the lease-guarded acknowledgement (or failure) decides
    # whether the lease was lost, not a heartbeat that finds the job no longer running.
    settling: bool = False


class LeaseTable(Mapping):
    """The jobs this worker holds leases on, by id: read like a dict, changed only through the
    verbs below, under one lock shared by the main thread and the handler threads.

    hold (claimed) → start (a handler took it) → returned (its outcome is queued) → finish
    (settled or released); lose (the heartbeat found the lease gone); abandon (past its timeout).
    """

    def __init__(self):
        self._held: dict[int, Held] = {}
        self._lock = threading.Lock()
        self.busy = 0  # begun and not returned: handlers at work

    def __getitem__(self, job_id: int) -> Held:
        return self._held[job_id]

    def __iter__(self):
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, *jobs: Job) -> None:
        with self._lock:
            for job in jobs:
                self._held[job.id] = Held(job)

    def start(
        self, job: Job, thread: threading.Thread | None, *, handback: Callable | None = None
    ) -> Held | None:
        """A handler may run `job`: only this very claim, still ours and not begun (a lease
        lost, then claimed again, leaves a second copy of the job in the inbox). With
        `handback` (the worker is stopping) such a claim is not begun but handed to it."""
        with self._lock:
            held = self._held.get(job.id)
            if held is None or held.lost or held.job is not job or held.started is not None:
                return None
            if handback is not None:
                handback(job)
                return None
            held.thread = thread
            held.started = time.monotonic()
            self.busy += 1
            return held

    def forget_unstarted(self, job: Job) -> bool:
        """This claim of `job`, not begun, is no longer ours to run: forget it. False if it is
        not held as this very claim (already forgotten, or held by a newer claim)."""
        with self._lock:
            held = self._held.get(job.id)
            if held is None or held.job is not job or held.started is not None:
                return False
            del self._held[job.id]
            return True

    def returned(self, held: Held) -> None:
        with self._lock:
            if not held.returned:
                held.returned = True
                self.busy -= 1

    def lose(self, job: Job) -> bool:
        """The lease is gone. A job not begun is forgotten now (the handler skips it; nothing
        would report back for it); a running one is marked, its outcome dropped on return.

        False, and nothing changed, for a job no longer held or whose outcome is being stored:
        its acknowledgement committed (or is about to be refused, and says so itself) while
        the heartbeat waited for the database, and it is not running to be extended."""
        with self._lock:
            held = self._held.get(job.pk)
            if held is None or held.settling:
                return False
            if held.started is None:
                del self._held[job.pk]
            else:
                held.lost = True
            return True

    def to_settle(self, claim: Job) -> Held | None:
        """The claim whose outcome the settler is about to store, marked settling; None if
        there is nothing to store: no longer held, held as another claim of the job (a newer
        one), or its lease lost (then forgotten here)."""
        with self._lock:
            held = self._held.get(claim.pk)
            if held is None or held.job is not claim:
                return None
            if held.lost:
                del self._held[claim.pk]
                return None
            held.settling = True
            return held

    def unsettle(self, pairs) -> None:
        """Storing these outcomes failed; they go back to be tried again."""
        with self._lock:
            for held, _ in pairs:
                held.settling = False

    def finish(self, job_id: int) -> Held | None:
        """Settled, released or dropped: no longer ours to vouch for."""
        with self._lock:
            return self._held.pop(job_id, None)

    def finish_claim(self, job: Job) -> None:
        """finish, if `job` is still held as this very claim (not a newer claim of it)."""
        with self._lock:
            held = self._held.get(job.pk)
            if held is not None and held.job is job:
                del self._held[job.pk]

    def finish_all(self, job_ids) -> None:
        with self._lock:
            for job_id in job_ids:
                self._held.pop(job_id, None)

    def abandon(self, job_id: int) -> Held | None:
        """Past its timeout: forgotten while its handler may still be running it (a fresh
        handler takes that one's place, so it no longer counts as busy)."""
        with self._lock:
            held = self._held.pop(job_id, None)
            if held is not None and held.started is not None and not held.returned:
                held.returned = True
                self.busy -= 1
            return held

    def live_jobs(self) -> list[Job]:
        """The jobs whose leases the heartbeat extends."""
        with self._lock:
            return [h.job for h in self._held.values() if not h.lost]

    def running(self) -> list[Held]:
        """Begun and not returned: what a timeout may apply to."""
        with self._lock:
            return [h for h in self._held.values() if h.started is not None and not h.returned]

    def jobs(self) -> list[Job]:
        with self._lock:
            return [h.job for h in self._held.values()]
