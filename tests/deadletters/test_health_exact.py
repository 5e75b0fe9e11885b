"""What the health page shows is exact (issue 47 item 7): the charts' totals add up to the
workers' Done with the replay runs they leave out, each worker's last claim is shown (a
quieted worker is seen to stop claiming), and the Ordering keys blocked figure opens the keys
it counts."""

import re
from datetime import UTC

import pytest
from django.urls import reverse
from django.utils import timezone

from jobqueue import store
from jobqueue.conf import setting
from jobqueue.models import DeadLetter, WorkerRecord
from jobqueue.worker import Worker
from tests import tasks

pytestmark = pytest.mark.django_db

HEALTH = reverse("deadletters:health")


def record(worker_id, tallies, succeeded, failed=0, last_claim_at=None, now=None):
    now = now or timezone.now()
    store.record_worker(
        worker_id=worker_id,
        host="h",
        pid=1,
        queues=None,
        concurrency=1,
        started_at=now,
        succeeded=succeeded,
        failed=failed,
        current_job_ids=[],
        tallies=tallies,
        last_claim_at=last_claim_at,
        now=now,
    )


def tally(succeeded=0, failed=0, dead=0):
    t = store.Tally()
    t.succeeded, t.failed, t.dead = succeeded, failed, dead
    return t


def caption(html, title):
    figure = html.split(f"</span> {title} per minute, last hour:", 1)[1].split("</figcaption>")[0]
    return re.sub(r"<[^>]+>", "", figure).strip()


def test_the_completed_chart_and_the_replay_runs_it_leaves_out_add_up_to_the_workers_done(
    viewer_client,
):
    now = timezone.now()
    minute = now.replace(second=0, microsecond=0)
    internal = setting("REPLAY_QUEUE")
    # This minute and the first of the hour's window, for two workers; one replay run's job.
    record(
        "w:1",
        {
            (minute, "default", "shop.send_receipt"): tally(succeeded=5, failed=2, dead=1),
            (minute, internal, "deadletters.tasks.carry_out_run"): tally(succeeded=1),
        },
        succeeded=6,
        failed=2,
    )
    first = minute - timezone.timedelta(minutes=59)
    record("w:2", {(first, "mail", "shop.newsletter"): tally(succeeded=3)}, succeeded=3)
    html = viewer_client.get(HEALTH).content.decode()
    done = sum(w.jobs_succeeded for w in WorkerRecord.objects.all())
    assert done == 9
    assert caption(html, "Completed") == (
        f"8 in all, and 1 of the console's replay runs (queue {internal}), not drawn"
    )
    assert done == 8 + 1
    # Nothing left out: nothing said.
    assert caption(html, "Failed attempts") == "2 in all"


def test_each_worker_row_says_when_it_last_claimed_a_job(viewer_client):
    now = timezone.now()
    claimed = now - timezone.timedelta(minutes=3)
    record("w:claims", {}, succeeded=1, last_claim_at=claimed, now=now)
    record("w:fresh", {}, succeeded=0, now=now)
    html = viewer_client.get(HEALTH).content.decode()
    assert "<th" in html and ">Last claim</th>" in html
    rows = {
        worker: html.split(f">{worker.split(':')[0]}:<wbr>{worker.split(':')[1]}</code>", 1)[
            1
        ].split("</tr>")[0]
        for worker in ("w:claims", "w:fresh")
    }
    stamp = claimed.astimezone(UTC).isoformat().replace("+00:00", "Z")
    assert f'<td class="last-claim"><time datetime="{stamp}"' in rows["w:claims"]
    assert '<td class="last-claim"><span class="muted">none yet</span></td>' in rows["w:fresh"]
    # A record written again without a claim keeps the last one (a quiet worker's heartbeat).
    record("w:claims", {}, succeeded=1, now=now)
    assert WorkerRecord.objects.get(worker_id="w:claims").last_claim_at == claimed


@pytest.mark.django_db(transaction=True)
def test_a_worker_records_its_last_claim_and_a_quieted_one_claims_no_more():
    tasks.noop.enqueue(1)
    worker = Worker(poll_interval=0.05, concurrency=1)
    worker._claim_if_low()
    worker._record_if_due(force=True)
    first = WorkerRecord.objects.get(worker_id=worker.worker_id).last_claim_at
    assert first is not None
    # Quieted: its step claims nothing, and the record keeps the last claim.
    worker.quiet = True
    tasks.noop.enqueue(2)
    worker._step()
    worker._record_if_due(force=True)
    assert WorkerRecord.objects.get(worker_id=worker.worker_id).last_claim_at == first
    store.forget_worker(worker.worker_id)


def test_the_ordering_keys_blocked_figure_opens_the_keys_it_counts(viewer_client):
    for key in ("acct:1", "acct:1", "acct:2"):
        tasks.noop.using(ordering_key=key).enqueue(1)
    now = timezone.now()
    for job in store.claim(worker_id="w", queues=None, limit=10, lease_seconds=60):
        entry = store.error_entry(
            job, class_path="builtins.ValueError", message="x", traceback="", now=now
        )
        store.fail(job, entry, retry_at=None)  # the first of each key dies
    html = viewer_client.get(HEALTH).content.decode()
    figure = html.split('data-figure="blocked-keys"', 1)[0].rsplit('<div class="figure', 1)[1]
    assert '<a href="#blocked-keys">Ordering keys blocked</a>' in figure
    assert 'href="/deadletters/list/?state=pending"' not in figure
    section = html.split('id="blocked-keys"', 1)[1].split("</section>")[0]
    for key in ("acct:1", "acct:2"):
        letter = DeadLetter.objects.get(job__ordering_key=key)
        assert (
            f'<code class="ordering-key">{key}</code>: held by '
            f'<a href="/deadletters/{letter.pk}/">dead letter #{letter.pk}</a>'
        ) in section
    # Resolved: nothing blocked, no link and no list.
    store.discard(list(DeadLetter.objects.values_list("pk", flat=True)))
    html = viewer_client.get(HEALTH).content.decode()
    assert 'href="#blocked-keys"' not in html and 'id="blocked-keys"' not in html
