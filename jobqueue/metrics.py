"""/metrics in Prometheus text format, from the same health snapshot as the dashboard.

Guarded: a request needs `Authorization: Bearer <REDRIVE["METRICS_TOKEN"]>` or a staff
login. Labels are queue and task only, whose number the code bounds.

prometheus-client (the `redrive[metrics]` extra) is imported when the page is served, so a
project that routes no /metrics never needs it; one that routes it without the extra is told
so by `manage.py check` (redrive.E002).
"""

import hmac

from django.http import HttpResponse

from jobqueue.conf import setting
from jobqueue.health import snapshot

PER_ROW = [
    ("redrive_jobs_ready", "Due jobs waiting for a worker.", "ready"),
    ("redrive_jobs_scheduled", "Jobs scheduled for later (deferred or backing off).", "scheduled"),
    ("redrive_jobs_running", "Jobs under a live lease.", "running"),
    (
        "redrive_jobs_lease_expired",
        "Running jobs whose lease expired, not yet re-claimed.",
        "expired",
    ),
    ("redrive_jobs_retrying", "Jobs not done that have failed at least once.", "retrying"),
    ("redrive_dead_letters_pending", "Dead letters awaiting replay or discard.", "dead_letters"),
    ("redrive_oldest_ready_age_seconds", "Age of the oldest due job.", "oldest_ready_age"),
]


class HealthCollector:
    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        health = snapshot()
        for name, doc, attr in PER_ROW:
            family = GaugeMetricFamily(name, doc, labels=["queue", "task"])
            for row in health.rows:
                family.add_metric([row.queue, row.task], getattr(row, attr))
            yield family
        for window in ("5m", "60m"):
            family = GaugeMetricFamily(
                f"redrive_job_attempts_last_{window}",
                f"Attempts finished in the last {window}, by outcome.",
                labels=["queue", "task", "outcome"],
            )
            for row in health.rows:
                family.add_metric(
                    [row.queue, row.task, "succeeded"], getattr(row, f"succeeded_{window}")
                )
                family.add_metric([row.queue, row.task, "failed"], getattr(row, f"failed_{window}"))
            yield family
        paused = GaugeMetricFamily(
            "redrive_queue_paused", "1 while a queue is paused (workers skip it).", labels=["queue"]
        )
        for queue in health.paused:
            paused.add_metric([queue], 1)
        yield paused
        workers = GaugeMetricFamily("redrive_workers", "Registered workers.", labels=["state"])
        lost = health.totals["lost_workers"]
        workers.add_metric(["alive"], health.totals["workers"] - lost)
        workers.add_metric(["lost"], lost)
        yield workers
        if health.last_success_at:
            yield GaugeMetricFamily(
                "redrive_last_success_timestamp_seconds",
                "When a job last succeeded anywhere.",
                value=health.last_success_at.timestamp(),
            )


def allowed(request) -> bool:
    token = setting("METRICS_TOKEN")
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    # Compared as bytes: compare_digest refuses str with non-ASCII characters (TypeError), and
    # a header is whatever the client sent (WSGI hands it over decoded as Latin-1).
    if token and given and hmac.compare_digest(token.encode(), given.encode()):
        return True
    return request.user.is_authenticated and request.user.is_staff


def metrics(request):
    if not allowed(request):
        response = HttpResponse(
            "metrics need a bearer token or a staff login\n", status=401, content_type="text/plain"
        )
        response["WWW-Authenticate"] = "Bearer"
        return response
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(HealthCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
