"""Source "outbox": letters of outbox messages that died. A replay makes the same row, so the
same message id, pending again with a fresh attempt budget; its letter stays linked and turns
'replayed' when the relay publishes it (jobqueue.store.outbox_messages.mark_published)."""

from __future__ import annotations

from django.db import connections

from jobqueue.models import OutboxMessage, OutboxState

from ..outbox_messages import NOTIFY_CHANNEL, SOURCE
from . import BaseSource, Made, Replayed

SKIP_NOT_DEAD = "the outbox message is not dead (already republished?)"
SKIP_GONE = "the outbox message no longer exists"


class OutboxLetters(BaseSource):
    name = SOURCE
    label = "outbox"

    def made(self, ref):
        # The same message, pending again under its own id: nothing new to point at.
        return Made("message republished")

    def replay(self, letters, *, now, using):
        results: dict[int, Replayed | str] = {}
        messages = {
            m.dead_letter_id: m
            for m in OutboxMessage.objects.using(using)
            .select_for_update()
            .filter(dead_letter_id__in=[letter.pk for letter in letters])
            .order_by("pk")
        }
        for letter in letters:
            message = messages.get(letter.pk)
            if message is None:
                results[letter.pk] = SKIP_GONE
                continue
            if message.state != OutboxState.DEAD:
                results[letter.pk] = SKIP_NOT_DEAD
                continue
            OutboxMessage.objects.using(using).filter(pk=message.pk, state=OutboxState.DEAD).update(
                state=OutboxState.PENDING, available_at=now, attempts=0, errors=[]
            )
            # Which replay of the message this is: the letter follows its latest one, so the
            # audit can tell "published" from "died again" per replay.
            results[letter.pk] = Replayed(ref=f"outbox:{letter.replays + 1}")
        if connections[using].vendor == "postgresql" and any(
            not isinstance(r, str) for r in results.values()
        ):
            with connections[using].cursor() as cursor:
                cursor.execute("SELECT pg_notify(%s, '')", [NOTIFY_CHANNEL])
        return results
