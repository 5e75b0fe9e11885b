"""Redrive installs into a fresh `django-admin startproject` by the README's steps alone.

The wheel is built from this checkout and installed, with Django and nothing of the example
project, into a new virtual environment; the README's "Install into your project" blocks are
applied to the new project as written (settings and urls blocks appended, shell lines run; the
pip line installs the wheel with the same extras, createoperator takes its password from
REDRIVE_OPERATOR_PASSWORD since no one is at a terminal, runworker gets --burst so it returns).
Then a view of the host's own enqueues inside `transaction.atomic()`, a worker runs the job, an
operator signs in and out and browses every console page under /ops/ and replays a dead letter
from the command line. All with django-q2, pika and
prometheus-client absent, and then the README's API block pasted without `redrive[api]`:
`manage.py check` names the extra (redrive.E037); then again with `redrive[django-q2]` and the
bridge on and `redrive[api]` with the API block, which serves its OpenAPI document.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from django.db import connection

from tests.conftest import BASE_DIR, POOLED

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

README = BASE_DIR / "README.md"
PASSWORD = "a-long-operator-password-1"


def readme_steps() -> list[tuple[str, str]]:
    """The fenced blocks of the README's install section, as (language, text)."""
    text = README.read_text()
    section = text[text.index("## Install into your project") :]
    section = section[: re.search(r"\n#{2,3} ", section[1:]).start() + 1]
    blocks = re.findall(r"^ *```(\w+)\n(.*?)^ *```", section, flags=re.S | re.M)
    return [(lang, textwrap.dedent(body)) for lang, body in blocks]


def readme_api_block() -> str:
    """The README's block that mounts the JSON API (section "The API"), as written."""
    text = README.read_text()
    section = text[text.index("## The API") :]
    section = section[: section.index("\n## ", 3)]
    (block,) = re.findall(r"```python\n(# urls\.py\n.*?)```", section, flags=re.S)
    return block


def mount_the_api(project: HostProject) -> None:
    with (project.root / "hostsite" / "urls.py").open("a") as fh:
        fh.write("\n" + readme_api_block())


def run(*args, cwd=None, env=None, check=True, timeout=300) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args))} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv is needed to build the wheel (`pip install uv`)")
    out = tmp_path_factory.mktemp("dist")
    run(uv, "build", "--wheel", "--out-dir", out, cwd=BASE_DIR)
    (built,) = out.glob("redrive-*.whl")
    return built


@pytest.fixture
def server_database():
    """On PostgreSQL a database of the host project's own, dropped afterwards."""
    if connection.vendor != "postgresql":
        yield None
        return
    import psycopg

    sd = connection.settings_dict
    params = {
        "host": sd.get("HOST") or "127.0.0.1",
        "port": sd.get("PORT") or 5432,
        "user": sd.get("USER") or "postgres",
        "dbname": "postgres",
    }
    if sd.get("PASSWORD"):
        params["password"] = sd["PASSWORD"]
    name = f"redrive_pkg_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(**params, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield {**params, "dbname": name}
    with psycopg.connect(**params, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


HOST_APP_TASKS = """
from django.tasks import task

from jobqueue.errors import PermanentError


@task
def send_receipt(payment_id):
    return {"receipt_for": payment_id}


@task(max_attempts=1)
def charge_card(payment_id):
    raise PermanentError(f"card of payment {payment_id} declined")
"""

HOST_APP_VIEWS = """
from django.db import transaction
from django.http import HttpResponse

from shop.tasks import charge_card, send_receipt


def pay(request, payment_id):
    with transaction.atomic():
        result = send_receipt.enqueue(payment_id)
    return HttpResponse(result.id)


def pay_then_fail(request, payment_id):
    try:
        with transaction.atomic():
            send_receipt.enqueue(payment_id)
            raise RuntimeError("the payment write failed")
    except RuntimeError:
        return HttpResponse("rolled back")


def charge(request, payment_id):
    return HttpResponse(charge_card.enqueue(payment_id).id)
"""

HOST_URLS = """
from shop import views as shop_views
urlpatterns += [
    path("pay/<int:payment_id>/", shop_views.pay),
    path("pay-then-fail/<int:payment_id>/", shop_views.pay_then_fail),
    path("charge/<int:payment_id>/", shop_views.charge),
]
"""

# Run inside the host project (manage.py shell): the host's views and the console, as a user.
ENQUEUE_SCRIPT = """
from django.test import Client
from django.test.utils import setup_test_environment
from jobqueue.models import Job

setup_test_environment()
client = Client()
assert client.get("/pay/1/").status_code == 200
assert client.get("/pay-then-fail/2/").content == b"rolled back"
assert client.get("/charge/3/").status_code == 200
paths = sorted(Job.objects.values_list("task_path", "args"))
assert paths == [("shop.tasks.charge_card", [3]), ("shop.tasks.send_receipt", [1])], paths
print("enqueued", len(paths))
"""

CONSOLE_SCRIPT = """
from django.contrib.auth import get_user_model
from django.test import Client
from django.test.utils import setup_test_environment
from jobqueue.models import DeadLetter, Job

setup_test_environment()
done = Job.objects.get(task_path="shop.tasks.send_receipt")
assert done.state == "done" and done.return_value == {"receipt_for": 1}, done.state
letter = DeadLetter.objects.get(task_path="shop.tasks.charge_card")
assert letter.error_class.endswith("PermanentError"), letter.error_class

# Signed in as a browser does, through the page the README mounts: alice is an operator, not
# staff (the admin's login page would refuse her).
client = Client()
anonymous = client.get("/ops/list/")
assert anonymous.status_code == 302, anonymous.status_code
sign_in = anonymous["Location"]
assert sign_in.startswith("/accounts/login/"), sign_in
assert 'name="password"' in client.get(sign_in).content.decode()
signed_in = client.post(sign_in, {"username": "alice", "password": PASSWORD})
assert signed_in.status_code == 302 and signed_in["Location"] == "/ops/list/", signed_in
assert not get_user_model().objects.get(username="alice").is_staff
# Signing in at the sign-in page itself lands on the health page, where the brand links;
# logging out, on the sign-in page again, in the console's look (not the admin's "Logged out",
# whose link alice cannot use).
direct = Client()
landed = direct.post("/accounts/login/", {"username": "alice", "password": PASSWORD})
assert landed.status_code == 302 and landed["Location"] == "/ops/health/", landed
assert "Log out" in direct.get("/ops/").content.decode()
signed_out = direct.post("/accounts/logout/")
assert signed_out.status_code == 302 and signed_out["Location"] == "/accounts/login/", signed_out
assert "deadletters/console.css" in direct.get("/accounts/login/").content.decode()
pages = ["", "list/", "list/count/", f"{letter.pk}/", "audit/", "health/"]
for page in pages:
    response = client.get(f"/ops/{page}")
    assert response.status_code == 200, (page, response.status_code)
for page in ("", "list/"):
    assert "shop.tasks.charge_card" in client.get(f"/ops/{page}").content.decode(), page
from django.contrib.staticfiles import finders
for asset in ("deadletters/console.css", "deadletters/console.js"):
    assert finders.find(asset), asset
print("letter", letter.pk)
"""

AUDIT_SCRIPT = """
from deadletters.models import ReplayRun
from jobqueue.models import Job

run = ReplayRun.objects.get()
assert (run.operator_name, run.reason, run.done) == ("alice", "card fixed", 1), run
assert Job.objects.filter(replayed_from__isnull=False).count() == 1
print("audited run", run.pk)
"""


class HostProject:
    def __init__(self, root: Path, python: Path, env: dict):
        self.root, self.python, self.env = root, python, env

    def manage(self, *args, check=True, input_text=None):
        return run(self.python, "manage.py", *args, cwd=self.root, env=self.env, check=check)

    def shell(self, code: str) -> str:
        return self.manage("shell", "-c", code).stdout


def make_host_project(tmp_path, wheel, server_database, extras: str) -> HostProject:
    uv = shutil.which("uv")
    venv = tmp_path / "venv"
    run(uv, "venv", "--quiet", "--python", sys.executable, venv)
    python = venv / "bin" / "python"
    steps = readme_steps()
    langs = [lang for lang, _ in steps]
    assert langs == ["sh", "python", "python", "python", "python", "sh", "sh"], langs

    # Step 1: the README's pip line, installing this checkout's wheel with the extras it names.
    (pip_line,) = steps[0][1].strip().splitlines()
    named = re.search(r"redrive\[([\w,-]+)\]", pip_line).group(1).split(",")
    wanted = [e for e in named if e != "postgres" or server_database] + extras.split(",")
    spec = f"{wheel}[{','.join(e for e in wanted if e)}]" if any(wanted) else str(wheel)
    run(uv, "pip", "install", "--quiet", "--python", python, spec)

    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_URL"))}
    env["PYTHONPATH"] = ""
    env["REDRIVE_OPERATOR_PASSWORD"] = PASSWORD
    run(venv / "bin" / "django-admin", "startproject", "hostsite", tmp_path / "proj", env=env)
    root = tmp_path / "proj"
    site = root / "hostsite"
    (root / "shop").mkdir()
    (root / "shop" / "__init__.py").write_text("")
    (root / "shop" / "tasks.py").write_text(HOST_APP_TASKS)
    (root / "shop" / "views.py").write_text(HOST_APP_VIEWS)

    settings_py, urls_py = site / "settings.py", site / "urls.py"
    with settings_py.open("a") as fh:
        if server_database:
            db = server_database
            fh.write(
                "\nDATABASES = {'default': {'ENGINE': 'django.db.backends.postgresql', "
                f"'NAME': {db['dbname']!r}, 'HOST': {db['host']!r}, 'PORT': {db['port']!r}, "
                f"'USER': {db['user']!r}, 'PASSWORD': {db.get('password', '')!r}}}}}\n"
            )
            if POOLED:
                # The suite's server is PgBouncer in transaction pooling mode: the host project
                # is set up as the README's "Behind PgBouncer" says (it then polls).
                fh.write(
                    "\nDATABASES['default']['DISABLE_SERVER_SIDE_CURSORS'] = True\n"
                    "REDRIVE = {'POOLER': 'transaction'}\n"
                )
        fh.write("\nINSTALLED_APPS += ['shop']\n")
    # Steps 2-4: the settings and urls blocks, as written.
    for _, body in (step for step in steps if step[0] == "python"):
        target = {"# settings.py": settings_py, "# urls.py": urls_py}[body.splitlines()[0]]
        with target.open("a") as fh:
            fh.write("\n" + body)
    with urls_py.open("a") as fh:
        fh.write(HOST_URLS)
    return HostProject(root, python, env)


def shell_lines(body: str) -> list[list[str]]:
    return [line.split() for line in body.strip().splitlines() if line.strip()]


def apply_and_use(project: HostProject, steps):
    shell_steps = [body for lang, body in steps if lang == "sh"]
    # Step 5: migrate and createoperator, as written (its password from the environment: no
    # one is at a terminal).
    for words in shell_lines(shell_steps[1]):
        assert words[:2] == ["python", "manage.py"], words
        project.manage(*words[2:])
    check = project.manage("check", "--fail-level", "WARNING")
    assert "no issues" in check.stdout, check.stdout + check.stderr
    assert "enqueued 2" in project.shell(ENQUEUE_SCRIPT)
    # Step 6: the worker, as written, but returning once the queue is empty.
    (worker,) = shell_lines(shell_steps[2])
    assert worker[2] == "runworker"
    ran = project.manage(*worker[2:], "--burst")
    # Event lines show up without any LOGGING in the host's settings.
    assert "event=worker_started" in ran.stderr, ran.stderr
    console = CONSOLE_SCRIPT.replace("PASSWORD", repr(PASSWORD))
    letter_id = re.search(r"letter (\d+)", project.shell(console)).group(1)
    replay = project.manage(
        "deadletters", "replay", letter_id, "--reason", "card fixed", "--operator", "alice"
    )
    assert "finished" in replay.stdout, replay.stdout
    assert "audited run" in project.shell(AUDIT_SCRIPT)


def test_installs_into_a_fresh_project_without_optional_packages(tmp_path, wheel, server_database):
    project = make_host_project(tmp_path, wheel, server_database, extras="")
    for module in ("django_q", "pika", "prometheus_client", "dj_database_url", "config", "demo"):
        found = run(
            project.python,
            "-c",
            f"import importlib.util as u; print(u.find_spec({module!r}) is None)",
            cwd=tmp_path,
            env=project.env,
        )
        assert found.stdout.strip() == "True", f"{module} is installed in the host's venv"
    apply_and_use(project, readme_steps())
    # The README's API block, pasted without its extra: the check names it (not a traceback).
    mount_the_api(project)
    refused = project.manage("check", check=False)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "redrive.E037" in refused.stderr and "redrive[api]" in refused.stderr, refused.stderr
    assert "ModuleNotFoundError" not in refused.stderr, refused.stderr


def test_installs_with_the_django_q2_extra_and_the_bridge_on(tmp_path, wheel, server_database):
    project = make_host_project(tmp_path, wheel, server_database, extras="django-q2,api")
    mount_the_api(project)  # the README's API block, as written, with its extra installed
    with (project.root / "hostsite" / "settings.py").open("a") as fh:
        fh.write(
            "\nINSTALLED_APPS += ['django_q']\n"
            # Kept: REDRIVE's POOLER, when the suite runs through PgBouncer (make_host_project).
            "REDRIVE = {**globals().get('REDRIVE', {}), 'SOURCES': ['jobqueue', 'django_q2']}\n"
            "Q_CLUSTER = {'name': 'host', 'orm': 'default', 'max_attempts': 1, 'retry': 60,"
            " 'timeout': 30}\n"
        )
    apply_and_use(project, readme_steps())
    listing = project.shell(
        "from django.test import Client\n"
        "from django.test.utils import setup_test_environment\n"
        "from django.contrib.auth import get_user_model\n"
        "setup_test_environment()\n"
        "c = Client(); c.force_login(get_user_model().objects.get(username='alice'))\n"
        "r = c.get('/ops/list/', {'source': 'django_q2'}); print('status', r.status_code)\n"
    )
    assert "status 200" in listing
    schema = project.shell(
        "from django.test import Client\n"
        "from django.test.utils import setup_test_environment\n"
        "setup_test_environment()\n"
        "r = Client().get('/api/openapi.json'); print('api', r.status_code, r.json()['openapi'])\n"
    )
    assert "api 200 3.1" in schema, schema


def test_the_wheel_holds_the_two_apps_and_nothing_of_the_example(wheel):
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"jobqueue", "deadletters"}
    for needed in (
        "deadletters/templates/deadletters/base.html",
        "deadletters/static/deadletters/console.js",
        "deadletters/migrations/0001_audit_log.py",
        "jobqueue/migrations/0001_initial.py",
        "jobqueue/management/commands/runworker.py",
        "deadletters/management/commands/createoperator.py",
    ):
        assert needed in names, needed
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
