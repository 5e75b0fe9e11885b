"""The demo's schedule: the receipt tally every 30 seconds, so the console's Schedules page has
a schedule that ticks while a newcomer watches.

Declared here, by `manage.py demo` (which syncs it before its workers start), rather than in
demo/tasks.py: every `runworker` imports each installed app's `tasks` module and
syncs what it declares, so a declaration there would tick in every worker the test suite
starts and add a job to the tests that count theirs. Once synced, the row is what the workers
tick; a worker's own sync at start never retires it (`manage.py schedules sync` would).
"""

from demo.tasks import tally_receipts
from jobqueue.schedules import periodic

RECEIPT_TALLY = "demo-receipt-tally"
EVERY = 30  # seconds


def declare():
    """Declare the schedule (again is harmless); `schedules.sync()` then writes its row. A
    function rather than at import: a test process that imports the demo's command must not
    find the schedule among those its own syncs write."""
    periodic(f"* * * * * */{EVERY}", name=RECEIPT_TALLY, overlap=False, catch_up="none")(
        tally_receipts
    )
