"""Every console page at the widths operators use: no sideways page scroll on laptops (1,024,
1,280, 1,366 px) and usable on a phone (390 px: table rows are cards, the top bar
wraps); and no serious or critical accessibility violation (axe-core) on any of them."""

import re
from datetime import timedelta

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.utils import timezone
from playwright.sync_api import expect

from deadletters import services
from deadletters.models import ReplayRun
from jobqueue import store
from jobqueue.models import (
    JobCounter,
    Schedule,
    ScheduleRun,
    Workflow,
    WorkflowSignal,
    WorkflowStep,
)
from tests.browser.test_console import login
from tests.factories import DeadLetterFactory, JobFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDTHS = (390, 1024, 1280, 1366)
LONG_TASK = "shop.integrations.payments.providers.stripe.send_receipt_for_completed_order"
LONG_ERROR = "receipt dependency unavailable: " + "upstream said 503 Service Unavailable " * 12


def console_data():
    """Enough of everything that each page shows its widest parts: long job types and errors,
    a django-q2 letter, a letter that died again, a run with its ledger, workers, counters."""
    now = timezone.now()
    letters = [
        DeadLetterFactory(
            task_path=LONG_TASK,
            error_class="requests.exceptions.ConnectionErrorWithAVeryLongName",
            last_error=LONG_ERROR,
            queue_name="receipts-and-other-customer-notifications",
            kwargs={"order": i, "card_number": "4111111111111111", "note": "x" * 300},
        )
        for i in range(4)
    ]
    died_again = DeadLetterFactory(task_path="shop.sync_stock", replays=1)
    JobFactory(dead=True, replayed_from=died_again)
    DeadLetterFactory(
        source="django_q2", job=None, original_job_id=None, task_path="demo.q2tasks.sync_ledger"
    )
    JobFactory.create_batch(2, task_path=LONG_TASK, queue_name="receipts")
    JobFactory(task_path="deadletters.tasks.carry_out_run", queue_name="deadletters")
    for minutes in range(0, 60, 4):
        JobCounter.objects.create(
            minute=(now - timedelta(minutes=minutes)).replace(second=0, microsecond=0),
            queue_name="receipts",
            task_path=LONG_TASK,
            succeeded=10 + minutes,
            failed=minutes % 5,
            dead=minutes % 3,
            last_success_at=now,
        )
    # A worker's heartbeat (its record), with a minute of timing rollups for the health page
    # and a task's page.
    timings = store.Tally()
    for seconds in (0.004, 0.08, 0.08, 2.0, 4000.0):
        timings.observe("run", seconds)
        timings.observe("wait", seconds * 3)
    store.record_worker(
        worker_id="worker-host-with-a-long-name.internal.example:4242:abc123def456",
        host="worker-host-with-a-long-name.internal.example",
        pid=4242,
        queues=["receipts", "webhooks", "search-index", "default"],
        concurrency=1,
        started_at=now - timedelta(hours=2),
        succeeded=0,
        failed=0,
        current_job_ids=[],
        tallies={(now.replace(second=0, microsecond=0), "receipts", LONG_TASK): timings},
    )
    return letters, died_again


def schedule_pages():
    """Schedules with long names and crons, one paused, with ticks that did not run."""
    now = timezone.now()
    for name, cron in (
        ("refresh-exchange-rates-from-every-provider-in-the-region", "*/5 * * * *"),
        ("weekly-digest", "0 9 * * mon"),
    ):
        store.schedules.upsert(
            name,
            {"task_path": LONG_TASK, "cron": cron, "timezone": "Europe/Paris", "overlap": False},
            first_tick=now + timedelta(minutes=5),
            now=now,
        )
    store.schedules.pause("weekly-digest", actor="operator", reason="provider rate-limits us")
    ScheduleRun.objects.create(
        schedule=Schedule.objects.get(name="weekly-digest"),
        tick=now - timedelta(minutes=5),
        outcome="skipped",
        note="job 12 was still ready or running",
        at=now,
    )


def workflow_page(letters) -> int:
    """A workflow dead at a step after a batch, with long names, results, an error and a
    signal: its page at its widest."""
    now = timezone.now()
    job = JobFactory(dead=True, task_path=LONG_TASK)
    workflow = Workflow.objects.create(
        pk=job.pk,
        task_path=LONG_TASK,
        job=job,
        state="dead",
        step="provision-the-customer-account-in-every-region-and-wait-for-replication",
        started_at=now - timedelta(hours=1),
        updated_at=now,
    )
    steps = [
        ("charge", "call", "done", {"charge_id": "ch_" + "x" * 200, "api_key": "sk_live"}),
        ("wait:setup_done", "wait", "done", {"signal": {"note": "y" * 300}, "sent_at": "now"}),
        ("sleep-1", "sleep", "done", None),
        (
            "import",
            "batch",
            "done",
            {
                "total": 3000,
                "next": 3000,
                "done": 2998,
                "failed": 2,
                "digest": "d",
                "dead_letters": [letters[0].pk, letters[1].pk],
            },
        ),
        (workflow.step, "call", "dead", None),
    ]
    for minute, (name, kind, state, result) in enumerate(steps):
        WorkflowStep.objects.create(
            workflow=workflow,
            name=name,
            kind=kind,
            state=state,
            attempts=3 if state == "dead" else 1,
            result=result,
            errors=job.errors if state == "dead" else [],
            wake_at=now if kind in ("sleep", "wait") else None,
            started_at=now - timedelta(minutes=60 - minute),
            finished_at=now,
        )
    WorkflowSignal.objects.create(
        workflow=workflow, name="setup_done", payload={"note": "y" * 300}, sent_at=now
    )
    return workflow.pk


def console_pages(live_server, operator):
    """Every page of the console an operator reaches, by path."""
    letters, died_again = console_data()
    selection = services.freeze_selection(
        operator=operator, action="replay", ids=[dl.pk for dl in letters[:2]], filter={}
    )
    other = services.freeze_selection(
        operator=operator, action="replay", ids=[letters[2].pk], filter={}
    )
    run = services.start_run(operator=operator, selection=other, reason="receipt API back")
    assert ReplayRun.objects.filter(pk=run.pk).exists()
    waiting = JobFactory(
        task_path="shop.tasks.send_newsletter_to_every_subscriber_in_the_region",
        run_after=timezone.now() + timedelta(hours=3),
    )
    job_selection = services.freeze_selection(
        kind="jobs", operator=operator, action="cancel", ids=[waiting.pk]
    )
    schedule_pages()
    workflow = workflow_page(letters)
    return {
        "workflows": "/deadletters/workflows/",
        "workflow": f"/deadletters/workflows/{workflow}/",
        "schedules": "/deadletters/schedules/",
        "job-waiting": f"/deadletters/jobs/{waiting.pk}/",
        "job-confirm": f"/deadletters/jobs/selections/{job_selection.pk}/",
        "health": "/",
        "health-7d": "/deadletters/health/?window=7d",
        "task-timing": f"/deadletters/health/tasks/{LONG_TASK}/",
        "overview": "/deadletters/",
        "list": "/deadletters/list/?state=pending",
        # A job type's letters by cause (their counters), above its list.
        "list-by-cause": f"/deadletters/list/?job_type={letters[0].task_path}",
        "list-invalid-filter": "/deadletters/list/?job_type=x&since=30%2F11%2F2026",
        "detail": f"/deadletters/{letters[0].pk}/",
        "detail-died-again": f"/deadletters/{died_again.pk}/",
        "confirm": f"/deadletters/selections/{selection.pk}/",
        "run": f"/deadletters/runs/{run.pk}/",
        "audit": "/deadletters/audit/",
        "jobs": "/deadletters/jobs/",
        "jobs-dead": "/deadletters/jobs/?state=dead",
        "job": f"/deadletters/jobs/{letters[0].job_id}/",
        "not-found": "/deadletters/999999/",
        "unknown-path": "/deadletters/no/such/page/",
    }


def test_no_page_scrolls_sideways_at_laptop_widths_and_phones_wrap(page, live_server):
    login(page, live_server, "operator")
    pages = console_pages(live_server, UserFactory(username="operator"))
    overflow = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in pages.items():
            page.goto(f"{live_server.url}{path}")
            page.wait_for_load_state("load")
            scroll, inner = page.evaluate(
                "[document.documentElement.scrollWidth, window.innerWidth]"
            )
            if scroll > inner:
                overflow.append(f"{name} at {width}px: scrollWidth {scroll} > {inner}")
    assert overflow == []
    # At 390 px the top bar wraps: every link and the account stay inside the viewport.
    page.set_viewport_size({"width": 390, "height": 900})
    page.goto(f"{live_server.url}/deadletters/list/")
    for item in page.locator(".topbar a, .topbar .whoami span, .topbar button").all():
        box = item.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, item.inner_text()
    # ...and the wide table's rows are cards that fit (tests/browser/test_narrow.py).
    box = page.locator("table.letters").evaluate(
        "t => [t.closest('.scroll').scrollWidth, t.closest('.scroll').clientWidth]"
    )
    assert box[0] <= box[1]


def test_no_serious_or_critical_accessibility_violation_on_any_page(page, live_server):
    login(page, live_server, "operator")
    pages = console_pages(live_server, UserFactory(username="operator"))
    viewer_only = UserFactory(username="nobody")
    axe = Axe()
    found = []

    def check(name):
        results = axe.run(page)
        for violation in results.response["violations"]:
            if violation["impact"] in ("serious", "critical"):
                targets = [node["target"] for node in violation["nodes"]][:3]
                found.append(f"{name}: {violation['id']} ({violation['impact']}) {targets}")

    for name, path in pages.items():
        page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("load")
        check(name)
    page.goto(f"{live_server.url}/deadletters/list/?state=pending")
    expect(page.locator(".select-all")).to_contain_text("Select all")
    check("list-after-count")
    page.context.clear_cookies()
    page.goto(f"{live_server.url}/accounts/login/")
    check("login")
    page.fill('input[name="username"]', viewer_only.username)
    page.fill('input[name="password"]', "pw-for-tests")
    page.click('button[type="submit"]')
    expect(page.locator("h1")).to_contain_text("Not allowed")
    check("forbidden")
    assert found == []


def test_keyboard_focus_is_visible(page, live_server):
    DeadLetterFactory()
    login(page, live_server, "operator")
    page.goto(f"{live_server.url}/deadletters/list/")
    page.keyboard.press("Tab")
    focused = page.evaluate(
        "(() => { const s = getComputedStyle(document.activeElement);"
        " return [document.activeElement.tagName, s.outlineStyle, s.outlineWidth]; })()"
    )
    assert focused[0] == "A" and focused[1] != "none" and re.match(r"[1-9]", focused[2])
