"""A traceback on a letter's page and a job's page: the application's frames shown first, the
frames of libraries, the standard library and Redrive's worker folded, one box to show every
frame."""

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from tests.browser.test_console import login
from tests.browser.util import axe_violations
from tests.deadletters.test_tracebacks import TRACEBACK
from tests.factories import DeadLetterFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("width", [1280, 390])
def test_application_frames_first_and_a_box_to_show_every_frame(page, live_server, width):
    error = {
        "attempt": 1,
        "at": timezone.now().isoformat(),
        "worker_id": "host:1",
        "exception_class_path": "builtins.ConnectionRefusedError",
        "message": "[Errno 111] Connection <refused>",
        "traceback": TRACEBACK,
    }
    letter = DeadLetterFactory(attempts=1, errors=[error])
    letter.job.errors = [error]
    letter.job.save()
    login(page, live_server, "operator")
    page.set_viewport_size({"width": width, "height": 900})
    for path in (f"/deadletters/{letter.pk}/", f"/deadletters/jobs/{letter.job_id}/"):
        page.goto(f"{live_server.url}{path}")
        view = page.locator(".traceback-view").first
        view.locator("summary").click()
        expect(view.locator("summary")).to_contain_text("1 of its 6 frames are the application's")
        pre = view.locator("pre.traceback")
        shown = pre.inner_text()
        assert 'File "/srv/app/shop/tasks.py", line 12, in send_receipt' in shown
        assert "client.post(url)" in shown
        assert "site-packages" not in shown and "socket.py" not in shown
        assert "… 2 frames of libraries" in shown and "… 3 frames of libraries" in shown
        # The exception itself is always there, escaped.
        expect(pre).to_contain_text("ConnectionRefusedError: [Errno 111] Connection <refused>")
        assert axe_violations(page) == []

        view.get_by_label("Show every frame").check()
        every = pre.inner_text()
        assert every.replace("\r", "").strip() == TRACEBACK.strip()
        assert "frames of libraries" not in every
        assert page.evaluate("[document.documentElement.scrollWidth, innerWidth]")[0] <= width
