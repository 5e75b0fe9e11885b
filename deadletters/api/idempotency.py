"""`Idempotency-Key` on the API's POSTs: a client that retries a call after a lost response gets
the first call's answer, not a second action.

The key is kept per token (deadletters.IdempotentRequest, unique on token and key) with the
request's fingerprint (method, path, body) and the answer. The row is claimed first, then the
action runs, then the answer is stored, all in one transaction on the default database, so:

- a concurrent duplicate waits on the claim (PostgreSQL: the unique index holds the second
  insert until the first commits; SQLite: IMMEDIATE transactions take the write lock at BEGIN)
  and then reads the stored answer: one action, two identical answers;
- an action that is refused or fails rolls the claim back with it: nothing is kept, and a retry
  tries again (a refusal acted on nothing);
- the same key on a different request is refused (422) and does nothing.

An action whose rows live in another queue database commits there on its own; its answer is
kept here only once that has committed. Keys older than 24 hours are pruned as new ones come.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, transaction
from django.utils import timezone

from ..models import IdempotentRequest

HEADER = "Idempotency-Key"
LIFETIME = timedelta(hours=24)
KEY_CHARS = IdempotentRequest._meta.get_field("key").max_length


class KeyRefused(Exception):
    """The key cannot be used: the message says why; `status` is the answer's."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def fingerprint(request) -> str:
    digest = hashlib.sha256()
    for part in (request.method.encode(), request.path.encode(), request.body):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def checked_key(text) -> str:
    if not text or len(text) > KEY_CHARS or not all(33 <= ord(ch) < 127 for ch in text):
        raise KeyRefused(
            400,
            f"An {HEADER} is 1 to {KEY_CHARS} printable ASCII characters without spaces "
            "(a UUID is a good one).",
        )
    return text


def as_json(body):
    """The answer as stored: plain JSON (times as ISO text), as a retry will get it."""
    return json.loads(json.dumps(body, cls=DjangoJSONEncoder))


def _replayed(row: IdempotentRequest, fp: str):
    if row.fingerprint != fp:
        raise KeyRefused(
            422,
            f"This {HEADER} was used for a different request (another path or body) in the "
            "last 24 hours: send a new key for a new request.",
        )
    return row.status, row.body, True


def answer(request, handler, *, now=None):
    """(status, body, replayed): `handler()`'s (status, body), carried out once per key."""
    raw = request.headers.get(HEADER)
    if raw is None:
        status, body = handler()
        return status, body, False
    key = checked_key(raw)
    token = request.auth
    fp = fingerprint(request)
    now = now or timezone.now()
    IdempotentRequest.objects.filter(created_at__lt=now - LIFETIME).delete()
    with transaction.atomic():
        row = IdempotentRequest.objects.filter(token=token, key=key).first()
        if row is not None:
            return _replayed(row, fp)
        try:
            with transaction.atomic():
                row = IdempotentRequest.objects.create(
                    token=token, key=key, fingerprint=fp, status=0, body={}, created_at=now
                )
        except IntegrityError:
            # Claimed by a concurrent request that has committed since: its answer is stored.
            return _replayed(IdempotentRequest.objects.get(token=token, key=key), fp)
        status, body = handler()
        if status >= 400:
            transaction.set_rollback(True)
            return status, body, False
        row.status, row.body = status, as_json(body)
        row.save(update_fields=["status", "body"])
    return status, row.body, False
