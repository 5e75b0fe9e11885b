"""Crash drills: an environment variable names one point where the process SIGKILLs itself,
so tests and operators can rehearse recovery with real processes. A module of its own, with
no imports of the queue's, so the store's broker sources have theirs without importing the
loops above it."""

import os
import signal


class FaultPoints:
    """Crash drills: the environment variable names one point where the process SIGKILLs
    itself, so tests and operators can rehearse recovery with real processes; or, for the
    points in `freezable`, "freeze_<point>": it SIGSTOPs itself there, the first time only (as
    a debugger, a host swapping or a paused VM would hold it) until a SIGCONT."""

    def __init__(
        self,
        variable: str,
        points: set[str],
        who: str,
        *,
        qualified: bool = False,
        freezable: frozenset[str] = frozenset(),
    ):
        """`qualified`: the variable names a point and what it applies to, "point:name"
        (a workflow's step), so a drill can stop at one step of many."""
        self.chosen = os.environ.get(variable, "")
        self.who = who
        points = points | {f"freeze_{point}" for point in freezable}
        point = self.chosen.partition(":")[0] if qualified else self.chosen
        if self.chosen and (point not in points or (qualified and ":" not in self.chosen)):
            form = "<point>:<name>, <point> one of " if qualified else ""
            raise RuntimeError(f"{variable} must be {form}{sorted(points)}, not {self.chosen!r}")

    def __call__(self, name: str, qualifier: str | None = None):
        if self.chosen and self.chosen == (name if qualifier is None else f"{name}:{qualifier}"):
            os.write(2, f"{self.who}: fault point {self.chosen}: SIGKILL\n".encode())
            os.kill(os.getpid(), signal.SIGKILL)
        if self.chosen == f"freeze_{name}":
            os.write(2, f"{self.who}: fault point {self.chosen}: SIGSTOP\n".encode())
            # Once: resumed, it goes on as the process a freeze leaves behind, rather than
            # freezing again at the next tick (which its SIGTERM could not end).
            self.chosen = ""
            os.kill(os.getpid(), signal.SIGSTOP)


# REDRIVE_FAULT=after_claim|after_effect|after_ack|heartbeat|in_tick: a worker SIGKILLs itself
# at that point (in_tick: a periodic job's tick enqueued by the chores, its transaction not yet
# committed); freeze_in_tick: it SIGSTOPs itself there, holding the tick's locks. Here, not in
# the worker, because the worker and its chores (jobqueue.chores) share the one variable.
worker_fault_point = FaultPoints(
    "REDRIVE_FAULT",
    {"after_claim", "after_effect", "after_ack", "heartbeat", "in_tick"},
    "jobqueue",
    freezable=frozenset({"in_tick"}),
)
