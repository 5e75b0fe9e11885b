"""Edit before replay (issue 18): what an operator's edited payload must pass before a job gets
it, and the diffs the audit shows of it.

The checks, in order (each refusal says what is wrong and nothing is written):
  1. JSON: args an array, kwargs an object (the form parses the text).
  2. Masks: a value the page showed masked (••••) and left as it was is put back to the value it
     hid; a mask anywhere else is refused (redaction.restore_masked). A job never gets a mask.
     Replacing a masked value takes having seen it (deadletters.view_secrets and a recorded
     reveal of the letter); anyone else may keep or remove it. No refusal's words depend on
     what a mask hides (see `checked`): an edit is no oracle for a secret.
  3. Storable as any job's payload: jobqueue.store.check_payload (JSON only, no NUL or lone
     surrogates, at most REDRIVE["MAX_PAYLOAD_BYTES"]).
  4. The task still imports and takes these arguments: the worker's own check
     (jobqueue.taskcache.TaskCache), so an edit the worker would refuse is refused here.
  5. The job type's own validator, if configured:

         REDRIVE = {"PAYLOAD_VALIDATORS": {"shop.tasks.send_receipt": "shop.checks.receipt"}}

         def receipt(args, kwargs):
             if kwargs.get("amount", 0) < 0:
                 raise ValueError("amount must not be negative")

     It is called with the edited args (a list) and kwargs (a dict); raising ValueError or
     django.core.exceptions.ValidationError refuses the edit with its message. `manage.py
     check` refuses a path that does not import (redrive.E025). When masked values were put
     back, its refusal is worded as it words the payload sent, masks in place (it is called a
     second time for that): a message quoting a hidden value never shows it.

The replay itself (deadletters.services.edit_and_replay) goes through jobqueue.store.replay_edited.
"""

from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass
from functools import partial

from django.core.exceptions import ValidationError
from django.utils.module_loading import import_string

from jobqueue import store
from jobqueue.conf import setting
from jobqueue.errors import UnknownTask, UnstorableValue
from jobqueue.models import DeadLetter

from . import redaction
from .models import PayloadEdit


class InvalidEdit(ValueError):
    """An edited payload refused by one of the checks; the message says which and why."""


def parse(text: str, kind: type, name: str):
    """The JSON `text` of a form's field as `kind` (list or dict), or InvalidEdit."""
    try:
        value = store.loads(text, name, parse_constant=_no_constant)
    except UnstorableValue as exc:  # nested past the one depth limit
        raise InvalidEdit(f"{exc}.") from None
    except ValueError as exc:  # JSONDecodeError, and an integer too long to read
        raise InvalidEdit(f"{name}: not valid JSON ({exc}).") from None
    if not isinstance(value, kind):
        raise InvalidEdit(f"{name} must be a JSON {JSON_TYPES[kind]}, not {_json_type(value)}.")
    return value


JSON_TYPES = {list: "array", dict: "object", str: "string", bool: "boolean", type(None): "null"}


def _json_type(value) -> str:
    return JSON_TYPES.get(type(value), "number")


def _no_constant(name):
    raise ValueError(f"{name} is not JSON")


def checked(letter: DeadLetter, args, kwargs, *, may_replace: bool = True) -> tuple[list, dict]:
    """The payload a job will get for this edit of `letter`: masks put back, every check passed
    (see the module's docstring); InvalidEdit otherwise.

    An edit of the masked payload learns nothing of what the masks hide. Without `may_replace`
    (the operator has not seen the masked values: services.edit_and_replay) a masked value can
    be kept or removed, not replaced (redaction.restore_masked): no guess typed over a mask is
    ever compared with it. And no refusal's words come from a hidden value: with masks put
    back, the size limit is named without the size, and any other refusal is worded as it is
    for the payload as sent (masks in place), or not at all if that passes."""
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise InvalidEdit("args must be a JSON array and kwargs a JSON object.")
    sent = (args, kwargs)
    try:
        restored = (
            redaction.restore_masked(args, letter.args, "args", may_replace=may_replace),
            redaction.restore_masked(kwargs, letter.kwargs, "kwargs", may_replace=may_replace),
        )
    except ValueError as exc:
        raise InvalidEdit(str(exc)) from None
    hidden = restored != sent
    try:
        args, kwargs, size = _storable(*restored)
    except (TypeError, ValueError) as exc:
        reason = _as_sent(_storable, sent) if hidden else exc
        raise InvalidEdit(
            f"Not a payload a job can carry: {reason}."
            if reason
            else "Not a payload a job can carry once its masked values are put back (why is "
            "not shown: it would tell something of them)."
        ) from None
    limit = setting("MAX_PAYLOAD_BYTES")
    if size > limit:
        what = "with its masked values put back, it is" if hidden else f"payload is {size} bytes,"
        raise InvalidEdit(f"Not a payload a job can carry: {what} over the {limit}-byte limit.")
    _check_call(letter.task_path, args, kwargs)  # names and counts only: no value in its words
    try:
        _validate(letter.task_path, args, kwargs)
    except InvalidEdit:
        if not hidden:
            raise
        words = _as_sent(partial(_validate, letter.task_path), sent)
        raise InvalidEdit(
            f"{words} (as it words the payload with its masks in place)"
            if words
            else f"Refused by {_validator_path(letter.task_path)} (why is not shown: it depends "
            "on the masked values)."
        ) from None
    return args, kwargs


def _storable(args, kwargs) -> tuple[list, dict, int]:
    """The payload as a job row stores it, and its size (checked by the caller)."""
    args, kwargs = store.normalized(args, "args"), store.normalized(kwargs, "kwargs")
    args_json, kwargs_json = store.check_payload(args, kwargs, limit=sys.maxsize)
    return args, kwargs, len(args_json) + len(kwargs_json)


def _as_sent(check, sent) -> Exception | None:
    """How `check` refuses the payload as the operator sent it (masks in place), or None if it
    passes: words that depend on nothing hidden. A validator is called a second time for this,
    on the masked payload."""
    try:
        check(*sent)
    except Exception as refusal:  # noqa: BLE001 - a check's refusal, of any kind
        return refusal
    return None


def _check_call(task_path: str, args, kwargs) -> None:
    from jobqueue.taskcache import TaskCache

    tasks = TaskCache()
    try:
        tasks.resolve(task_path)
    except UnknownTask as exc:
        raise InvalidEdit(f"The task cannot be run: {exc}.") from None
    try:
        tasks.check_call(task_path, args, kwargs)
    except TypeError as exc:
        raise InvalidEdit(f"{task_path} does not take these arguments: {exc}.") from None


def _validator_path(task_path: str) -> str | None:
    return (setting("PAYLOAD_VALIDATORS") or {}).get(task_path)


def _validate(task_path: str, args, kwargs) -> None:
    path = _validator_path(task_path)
    if not path:
        return
    try:
        validator = import_string(path)
    except ImportError as exc:
        raise InvalidEdit(f"The payload validator {path} does not import: {exc}.") from None
    try:
        validator(args, kwargs)
    except ValidationError as exc:
        raise InvalidEdit(f"Refused by {path}: {' '.join(exc.messages)}") from None
    except ValueError as exc:
        raise InvalidEdit(f"Refused by {path}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a validator broken by a hostile edit refuses it
        raise InvalidEdit(
            f"Refused by {path}: it failed on this payload ({type(exc).__name__}: {exc})"
        ) from None


# --- reads: edits and their diffs ---------------------------------------------------------


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "add", "del", "hunk", "file" or "" (context)
    text: str


def pretty(args, kwargs) -> str:
    return redaction.pretty({"args": args, "kwargs": kwargs})


def diff(edit: PayloadEdit, *, redacted: bool = True) -> list[DiffLine]:
    """A unified diff of the payload before and after `edit`, pretty-printed JSON; masked as
    the console masks payloads unless `redacted` is False (a recorded reveal)."""
    if redacted:
        old_args, new_args = redaction.redact_pair(edit.old_args, edit.new_args)
        old_kwargs, new_kwargs = redaction.redact_pair(edit.old_kwargs, edit.new_kwargs)
    else:
        old_args, new_args = redaction.unmasked(edit.old_args), redaction.unmasked(edit.new_args)
        old_kwargs = redaction.unmasked(edit.old_kwargs)
        new_kwargs = redaction.unmasked(edit.new_kwargs)
    lines = difflib.unified_diff(
        pretty(old_args, old_kwargs).splitlines(),
        pretty(new_args, new_kwargs).splitlines(),
        "before",
        "after",
        lineterm="",
    )
    return [DiffLine(_kind(line), line) for line in lines]


def _kind(line: str) -> str:
    if line.startswith(("---", "+++")):
        return "file"
    if line.startswith("@@"):
        return "hunk"
    return {"+": "add", "-": "del"}.get(line[:1], "")


def with_diffs(edits, *, redacted: bool = True) -> list[PayloadEdit]:
    edits = list(edits)
    for edit in edits:
        edit.diff_lines = diff(edit, redacted=redacted)
    return edits


def of_letter(letter_id: int, *, redacted: bool = True) -> list[PayloadEdit]:
    """Every edit of one letter, newest first, each with its diff (`diff_lines`)."""
    return with_diffs(PayloadEdit.objects.filter(dead_letter_id=letter_id), redacted=redacted)


# A path's text and the paths an audit entry lists at most: a hostile payload's keys may be
# long, and many (the entry says how many more changed).
PATH_CHARS = 200
MAX_PATHS = 50


def changed_paths(old_args, old_kwargs, new_args, new_kwargs) -> tuple[list[str], int]:
    """Where an edit changed the payload, as restore_masked names places (`kwargs['amount']`,
    `args[0]`): the places only, never a value, so the audit log's entry shows nothing a mask
    hides. Returns the first MAX_PATHS in order and how many there were in all. A list whose
    length changed is one changed place, as is a value that changed type; the walk stops at
    MAX_JSON_DEPTH (a payload is never deeper)."""
    paths: list[str] = []
    todo = [(new_kwargs, old_kwargs, "kwargs", 1), (new_args, old_args, "args", 1)]
    while todo:
        new, old, where, depth = todo.pop()
        if _same(new, old):
            continue
        if depth < store.MAX_JSON_DEPTH and isinstance(new, dict) and isinstance(old, dict):
            keys = [*new, *(key for key in old if key not in new)]
            todo.extend(
                (new.get(key, _GONE), old.get(key, _GONE), f"{where}[{key!r}]", depth + 1)
                for key in reversed(keys)
            )
        elif (
            depth < store.MAX_JSON_DEPTH
            and isinstance(new, list)
            and isinstance(old, list)
            and len(new) == len(old)
        ):
            todo.extend(
                (new[n], old[n], f"{where}[{n}]", depth + 1) for n in reversed(range(len(new)))
            )
        else:
            paths.append(where if len(where) <= PATH_CHARS else where[: PATH_CHARS - 1] + "…")
    return paths[:MAX_PATHS], len(paths)


_GONE = object()  # a key one side of an edit does not have


def _same(a, b) -> bool:
    try:
        return type(a) is type(b) and a == b
    except RecursionError:
        return False
