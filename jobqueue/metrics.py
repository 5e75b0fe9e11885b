"""/metrics in Prometheus text format, from the same health snapshot as the dashboard.

Guarded: a request needs `Authorization: Bearer <REDRIVE["METRICS_TOKEN"]>` or a staff
login. Labels are queue and task only, whose number the code bounds; with more than one queue
database (several Redrive TASKS backends, each with its own OPTIONS["DATABASE"]), also
`backend`, each backend's figures read from its own database.

Run time and queue wait are histograms of the attempts finished in the last hour, from the
per-minute timing rollups (jobqueue.timing), with the rollups' bucket bounds as `le`: a window,
not a counter since start, so histogram_quantile() reads them as they are, without rate().

prometheus-client (the `redrive[metrics]` extra) is imported when the page is served, so a
project that routes no /metrics never needs it; one that routes it without the extra is told
so by `manage.py check` (redrive.E002).
"""

import hmac
import logging

from django.db import DatabaseError
from django.http import HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_safe

from jobqueue.conf import setting
from jobqueue.databases import queue_databases
from jobqueue.health import snapshot
from jobqueue.logfmt import log_line
from jobqueue.loop import first_line
from jobqueue.timing import RUN, WAIT, timings

logger = logging.getLogger("jobqueue.metrics")

PER_ROW = [
    ("redrive_jobs_ready", "Due jobs waiting for a worker.", "ready"),
    ("redrive_jobs_scheduled", "Jobs whose first run is later.", "scheduled"),
    ("redrive_jobs_running", "Jobs under a live lease.", "running"),
    (
        "redrive_jobs_lease_expired",
        "Running jobs whose lease expired, not yet re-claimed.",
        "expired",
    ),
    ("redrive_jobs_retrying", "Failed jobs waiting out their backoff.", "retrying"),
    ("redrive_dead_letters_pending", "Dead letters awaiting replay or discard.", "dead_letters"),
    ("redrive_oldest_ready_age_seconds", "Age of the oldest due job.", "oldest_ready_age"),
]

TIMING_MINUTES = 60


def le_text(bound: float) -> str:
    """A bucket bound as Prometheus writes `le`: 0.0025, 1.0, +Inf."""
    return "+Inf" if bound == float("inf") else repr(float(bound))


class HealthCollector:
    """Every figure of every queue database, each read from its own database. With more than
    one, each sample carries a `backend` label (the TASKS alias the database is named after);
    with one, the labels are as they always were."""

    def collect(self):
        from prometheus_client.core import GaugeMetricFamily

        now = timezone.now()
        known = queue_databases()
        # One database: the labels as they always were; several: each sample names its backend.
        by = ["backend"] if len(known) > 1 else []

        def labelled(backend, *values):
            return [backend, *values] if by else list(values)

        parts, up, reached = self._snapshots(now, known, several=bool(by))
        if by:
            family = GaugeMetricFamily(
                "redrive_backend_up",
                "1 if the backend's queue database answered this scrape, 0 if not.",
                labels=by,
            )
            for backend, value in up:
                family.add_metric([backend], value)
            yield family
        yield from self._per_row(parts, by, labelled)
        yield from self._timings(now, reached, by, labelled)
        yield from self._states(parts, by, labelled)

    @staticmethod
    def _snapshots(now, known, *, several: bool):
        """Each database's health snapshot, whether it answered, and those that did."""
        parts, up, reached = [], [], []
        for q in known:
            try:
                parts.append((q.name, snapshot(now=now, using=q.database)))
                reached.append((q.name, q.database))
            except DatabaseError as exc:
                if not several:
                    raise  # the only database: the scrape fails, which Prometheus reports
                # One database away must not hide the others' figures: it is reported down.
                log_line(
                    logger, logging.WARNING, "metrics_backend_unreachable", backend=q.name,
                    error=first_line(exc),
                )  # fmt: skip
                up.append((q.name, 0))
            else:
                up.append((q.name, 1))
        return parts, up, reached

    @staticmethod
    def _per_row(parts, by, labelled):
        """The gauges of each (queue, task) row, and its attempts of the last 5 and 60 minutes."""
        from prometheus_client.core import GaugeMetricFamily

        for name, doc, attr in PER_ROW:
            family = GaugeMetricFamily(name, doc, labels=[*by, "queue", "task"])
            for backend, health in parts:
                for row in health.rows:
                    family.add_metric(labelled(backend, row.queue, row.task), getattr(row, attr))
            yield family
        for window in ("5m", "60m"):
            family = GaugeMetricFamily(
                f"redrive_job_attempts_last_{window}",
                f"Attempts finished in the last {window}, by outcome.",
                labels=[*by, "queue", "task", "outcome"],
            )
            for backend, health in parts:
                for row in health.rows:
                    for outcome in ("succeeded", "failed"):
                        family.add_metric(
                            labelled(backend, row.queue, row.task, outcome),
                            getattr(row, f"{outcome}_{window}"),
                        )
            yield family

    @staticmethod
    def _timings(now, reached, by, labelled):
        """Run time and queue wait of the last hour's attempts, as histograms."""
        from prometheus_client.core import HistogramMetricFamily

        histograms = [
            (RUN, "redrive_job_run_seconds", "Run time of the attempts finished in the last hour."),
            (
                WAIT,
                "redrive_job_queue_wait_seconds",
                "Wait from due to claimed of the attempts finished in the last hour.",
            ),
        ]
        per_backend = [
            (backend, timings(now, TIMING_MINUTES, using=using)) for backend, using in reached
        ]
        for kind, name, doc in histograms:
            family = HistogramMetricFamily(name, doc, labels=[*by, "queue", "task"])
            for backend, found in per_backend:
                for (queue, task), timing in sorted(found.items()):
                    histogram = timing.run if kind == RUN else timing.wait
                    if not histogram.total:
                        continue
                    family.add_metric(
                        labelled(backend, queue, task),
                        [(le_text(bound), count) for bound, count in histogram.cumulative()],
                        histogram.seconds,
                    )
            yield family

    @staticmethod
    def _states(parts, by, labelled):
        """Paused queues, live and lost workers, and when a job last succeeded."""
        from prometheus_client.core import GaugeMetricFamily

        paused = GaugeMetricFamily(
            "redrive_queue_paused",
            "1 while a queue is paused (workers skip it).",
            labels=[*by, "queue"],
        )
        for backend, health in parts:
            for queue in health.paused:
                paused.add_metric(labelled(backend, queue), 1)
        yield paused
        workers = GaugeMetricFamily("redrive_workers", "Registered workers.", labels=[*by, "state"])
        for backend, health in parts:
            lost = health.totals["lost_workers"]
            workers.add_metric(labelled(backend, "alive"), health.totals["workers"] - lost)
            workers.add_metric(labelled(backend, "lost"), lost)
        yield workers
        succeeded = [(backend, h.last_success_at) for backend, h in parts if h.last_success_at]
        if succeeded and by:
            family = GaugeMetricFamily(
                "redrive_last_success_timestamp_seconds",
                "When a job of the backend last succeeded.",
                labels=by,
            )
            for backend, at in succeeded:
                family.add_metric([backend], at.timestamp())
            yield family
        elif succeeded:
            yield GaugeMetricFamily(
                "redrive_last_success_timestamp_seconds",
                "When a job last succeeded anywhere.",
                value=succeeded[0][1].timestamp(),
            )


def allowed(request) -> bool:
    token = setting("METRICS_TOKEN")
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    # Compared as bytes: compare_digest refuses str with non-ASCII characters (TypeError), and
    # a header is whatever the client sent (WSGI hands it over decoded as Latin-1).
    if token and given and hmac.compare_digest(token.encode(), given.encode()):
        return True
    return request.user.is_authenticated and request.user.is_staff


@require_safe  # a scrape is a GET (HEAD for a probe); anything else is a 405
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
    try:
        body = generate_latest(registry)
    except DatabaseError as exc:
        # The queue database is away: a plain 503 the scraper records (the target is down),
        # not a traceback page.
        log_line(logger, logging.WARNING, "metrics_unavailable", error=first_line(exc))
        return HttpResponse(
            "the queue database is unreachable\n", status=503, content_type="text/plain"
        )
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
