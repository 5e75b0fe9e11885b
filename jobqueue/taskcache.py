"""The tasks a worker runs, by path: imported and inspected once per worker, not per job. The
console checks an edited payload with it too (deadletters.edits)."""

from __future__ import annotations

import inspect

from jobqueue.backend import load_task
from jobqueue.errors import UnknownTask

MAX_CALL_SHAPES = 10_000  # bounds TaskCache's memory whatever payloads arrive


class TaskCache:
    """Task objects and signatures by path: imported and inspected once per worker, not per job."""

    def __init__(self):
        self._resolved: dict[str, tuple] = {}
        # Call shapes (task, argument count, keyword names) known to bind: whether arguments
        # bind depends on nothing else, and Signature.bind cost more than a quick job.
        self._shapes: set[tuple] = set()

    def check_call(self, path: str, args: list, kwargs: dict) -> None:
        """Raise TypeError unless the task (resolved) takes these arguments."""
        shape = (path, len(args), *kwargs)
        if shape in self._shapes:
            return
        task, signature, _ = self._resolved[path]
        signature.bind(*([None] if task.takes_context else []), *args, **kwargs)
        if len(self._shapes) < MAX_CALL_SHAPES:
            self._shapes.add(shape)

    def resolve(self, path: str):
        try:
            return self._resolved[path]
        except KeyError:
            pass
        try:
            task = load_task(path)
        except (ImportError, AttributeError, TypeError, ValueError) as exc:
            raise UnknownTask(f"cannot load task {path!r}: {exc}") from exc
        self._resolved[path] = (
            task,
            inspect.signature(task.func),
            not inspect.iscoroutinefunction(task.func),
        )
        return self._resolved[path]

    def get(self, path: str):
        """The task, or None if it cannot be loaded (callers fall back to default policy)."""
        try:
            return self.resolve(path)[0]
        except UnknownTask:
            return None
