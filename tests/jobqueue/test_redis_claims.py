"""jobqueue.redis_once: an idempotency claim in Redis for an effect outside the job's database.

Against the real Redis at REDRIVE_TEST_REDIS_URL (default redis://127.0.0.1:6379/0), each test
under keys of its own; the tests that need it are skipped when it cannot be reached, unless
REDRIVE_REQUIRE_REDIS is set (CI), where they fail instead.
"""

import logging
import os
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest
from django.core.exceptions import ImproperlyConfigured

from jobqueue import checks
from jobqueue.errors import TransientError
from jobqueue.redis_claims import PREFIX, ClaimHeld, ClaimStoreUnavailable, redis_once
from tests.conftest import BASE_DIR, wait_until

REDIS_URL = os.environ.get("REDRIVE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture(scope="module")
def redis_client():
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2, socket_timeout=5)
    try:
        client.ping()
    except redis.exceptions.RedisError as exc:
        reason = f"Redis at {REDIS_URL} is not reachable ({exc})"
        if os.environ.get("REDRIVE_REQUIRE_REDIS"):
            pytest.fail(f"{reason}, and REDRIVE_REQUIRE_REDIS is set")
        pytest.skip(f"{reason}; set REDRIVE_REQUIRE_REDIS=1 to fail instead of skipping")
    yield client
    client.close()


@pytest.fixture
def key(redis_client):
    """An idempotency key no other test (or run) uses; its Redis keys are removed afterwards."""
    base = f"test:{uuid.uuid4().hex}"
    yield base
    for name in redis_client.scan_iter(match=f"{PREFIX}{base}*"):
        redis_client.delete(name)


@pytest.fixture
def configured(settings):
    settings.REDRIVE = {**settings.REDRIVE, "REDIS_URL": REDIS_URL}


def unreachable_client():
    import redis

    return redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5, socket_timeout=0.5)


def test_the_first_caller_does_the_work_and_a_repeat_skips_it(redis_client, key):
    effects = []
    with redis_once(key, client=redis_client) as first:
        if first:
            effects.append("sent")
    assert first is True
    assert redis_client.get(PREFIX + key) == b"done"
    assert 86_000_000 < redis_client.pttl(PREFIX + key) <= 86_400_000  # REDIS_DONE_SECONDS

    with redis_once(key, client=redis_client) as again:
        if again:
            effects.append("sent")
    assert again is False
    assert effects == ["sent"]


def test_the_client_comes_from_redis_url(redis_client, key, configured):
    with redis_once(key, keep_seconds=60) as first:
        assert first is True
    with redis_once(key) as again:
        assert again is False
    assert 0 < redis_client.pttl(PREFIX + key) <= 60_000


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_a_failure_releases_the_key_so_a_retry_runs(redis_client, key, error):
    with pytest.raises(error), redis_once(key, client=redis_client) as first:
        assert first is True
        raise error("the provider timed out")
    assert redis_client.exists(PREFIX + key) == 0

    with redis_once(key, client=redis_client) as retry:
        assert retry is True
    assert redis_client.get(PREFIX + key) == b"done"


def test_a_claim_held_by_another_caller_is_retried_later(redis_client, key):
    ran = []
    with redis_once(key, client=redis_client, claim_seconds=60) as first:
        assert first is True
        claim = redis_client.get(PREFIX + key)
        assert claim.startswith(b"processing:")
        with pytest.raises(ClaimHeld) as held, redis_once(key, client=redis_client):
            ran.append("second")
        assert redis_client.get(PREFIX + key) == claim  # the holder's claim is untouched
    assert ran == []
    assert isinstance(held.value, TransientError)  # the worker retries the job after backoff
    assert held.value.key == key and 50 < held.value.expires_in <= 60
    assert repr(key) in str(held.value) and "claim expires in" in str(held.value)
    assert redis_client.get(PREFIX + key) == b"done"


def test_an_expired_claim_lets_a_retry_run(redis_client, key):
    """A holder that stops (here: never leaves its block) gives the key up after claim_seconds."""
    abandoned = redis_once(key, client=redis_client, claim_seconds=0.05)
    assert abandoned.__enter__() is True
    wait_until(lambda: redis_client.exists(PREFIX + key) == 0, timeout=10, message="expiry")

    with redis_once(key, client=redis_client) as retry:
        assert retry is True
    # The first holder failing late does not release the key the retry marked done.
    assert abandoned.__exit__(RuntimeError, RuntimeError("late"), None) is False
    assert redis_client.get(PREFIX + key) == b"done"


def test_leaving_after_the_claim_expired_and_was_taken_keeps_the_new_claim(
    redis_client, key, caplog
):
    slow = redis_once(key, client=redis_client, claim_seconds=0.05)
    assert slow.__enter__() is True
    wait_until(lambda: redis_client.exists(PREFIX + key) == 0, timeout=10, message="expiry")
    with redis_once(key, client=redis_client, claim_seconds=60) as second:
        assert second is True
        theirs = redis_client.get(PREFIX + key)
        with caplog.at_level(logging.WARNING, logger="jobqueue.redis"):
            slow.__exit__(None, None, None)  # returns normally
        assert redis_client.get(PREFIX + key) == theirs
    assert redis_client.get(PREFIX + key) == b"done"
    (record,) = [r for r in caplog.records if r.name == "jobqueue.redis"]
    assert record.levelno == logging.WARNING
    assert "expired before the work finished" in record.getMessage()
    assert "may have run twice" in record.getMessage()


def test_unreachable_redis_is_transient_and_the_work_does_not_run():
    ran = []
    client = unreachable_client()
    with pytest.raises(ClaimStoreUnavailable) as info, redis_once("receipt:1", client=client):
        ran.append("sent")
    assert ran == []
    assert isinstance(info.value, TransientError)
    assert "'receipt:1'" in str(info.value) and "Redis is unavailable" in str(info.value)


def test_unreachable_redis_from_the_url_is_transient(settings):
    settings.REDRIVE = {**settings.REDRIVE, "REDIS_URL": "redis://127.0.0.1:1/0"}
    with pytest.raises(ClaimStoreUnavailable), redis_once("receipt:1"):
        pytest.fail("the block ran")


def test_redis_lost_while_marking_done_logs_and_returns(redis_client, key, caplog):
    """The work is done: the job must not fail; the claim expires and a retry may repeat it."""
    import redis

    class LostAfterClaim:
        def __init__(self):
            self.scripts = 0

        def register_script(self, source):
            self.scripts += 1
            if self.scripts == 1:
                return redis_client.register_script(source)

            def gone(**kwargs):
                raise redis.exceptions.ConnectionError("Connection reset by peer")

            return gone

    with (
        caplog.at_level(logging.ERROR, logger="jobqueue.redis"),
        redis_once(key, client=LostAfterClaim(), claim_seconds=30) as first,
    ):
        assert first is True
    assert redis_client.get(PREFIX + key).startswith(b"processing:")
    assert 0 < redis_client.pttl(PREFIX + key) <= 30_000
    assert any(
        r.levelno == logging.ERROR and "Could not mark" in r.getMessage() for r in caplog.records
    )


@pytest.mark.parametrize("bad", ["", None, 42, b"receipt:1", "x" * 201])
def test_a_bad_key_is_refused_before_redis_is_asked(bad, settings):
    settings.REDRIVE = {**settings.REDRIVE, "REDIS_URL": ""}  # the key is checked first
    with pytest.raises(ValueError, match="redis_once"), redis_once(bad):
        pytest.fail("the block ran")


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), float("inf"), "5", True])
def test_bad_claim_or_keep_seconds_are_refused(seconds):
    with pytest.raises(ValueError, match="claim_seconds"), redis_once("k", claim_seconds=seconds):
        pytest.fail("the block ran")
    with pytest.raises(ValueError, match="keep_seconds"), redis_once("k", keep_seconds=seconds):
        pytest.fail("the block ran")


def test_a_key_of_200_characters_is_accepted(redis_client, key):
    long_key = key + "x" * (200 - len(key))
    with redis_once(long_key, client=redis_client) as first:
        assert first is True


def test_without_redis_url_it_is_improperly_configured(settings):
    settings.REDRIVE = {k: v for k, v in settings.REDRIVE.items() if k != "REDIS_URL"}
    with (
        pytest.raises(ImproperlyConfigured, match=r"REDRIVE\['REDIS_URL'\]"),
        redis_once("receipt:1"),
    ):
        pytest.fail("the block ran")


def test_import_jobqueue_does_not_import_redis():
    code = (
        "import sys, jobqueue; before = 'redis' in sys.modules; jobqueue.redis_once; "
        "print(before, 'redis' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=BASE_DIR,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.split() == ["False", "False"]  # not even once redis_once is looked up


def test_redis_url_without_redis_installed_is_an_error(settings, monkeypatch):
    real = checks.installed
    monkeypatch.setattr(checks, "installed", lambda module: module != "redis" and real(module))
    settings.REDRIVE = {**settings.REDRIVE, "REDIS_URL": ""}
    assert checks.check_redis_package() == []
    settings.REDRIVE = {**settings.REDRIVE, "REDIS_URL": REDIS_URL}
    (found,) = checks.check_redis_package()
    assert found.id == "redrive.E028" and found.level == 40
    assert "pip install 'redrive[redis]'" in found.hint
    monkeypatch.setattr(checks, "installed", real)
    assert checks.check_redis_package() == []


def test_the_redis_settings_are_declared(settings):
    settings.REDRIVE = {
        **settings.REDRIVE,
        "REDIS_URL": REDIS_URL,
        "REDIS_CLAIM_SECONDS": 60,
        "REDIS_DONE_SECONDS": 3600.0,
    }
    assert [m.id for m in checks.check_settings() if "REDIS" in m.msg] == []
    settings.REDRIVE = {**settings.REDRIVE, "REDIS_CLAIM_SECONDS": "60"}
    assert [m.id for m in checks.check_settings()] == ["redrive.E009"]


# A worker in a real process: configures only REDRIVE, then claims with the helper's own client.
CHILD_PRELUDE = """
import sys, time
from pathlib import Path
import django
from django.conf import settings
settings.configure(REDRIVE={"REDIS_URL": sys.argv[1]})
django.setup()
from jobqueue import redis_once
from jobqueue.redis_claims import ClaimHeld
key, workdir, me = sys.argv[2], Path(sys.argv[3]), sys.argv[4]
"""

RACER = """
other = "b" if me == "a" else "a"
print("ready", flush=True)
sys.stdin.readline()  # the start barrier: the parent writes to both at once
outcomes = []
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        with redis_once(key) as first:
            if first:
                with open(workdir / "effects", "a") as effects:
                    effects.write(me + "\\n")
                outcomes.append("ran")
                (workdir / f"{me}.attempted").touch()
                # Hold the claim until the other has tried once, so it meets it.
                while not (workdir / f"{other}.attempted").exists():
                    assert time.monotonic() < deadline, "the other never tried"
                    time.sleep(0.005)
            else:
                outcomes.append("skipped")
        break
    except ClaimHeld:
        outcomes.append("held")
        (workdir / f"{me}.attempted").touch()
        time.sleep(0.01)  # the job's backoff
print(",".join(outcomes), flush=True)
"""

HOLDER = """
with redis_once(key, claim_seconds=float(sys.argv[5])) as first:
    print("claimed" if first else "skipped", flush=True)
    sys.stdin.readline()  # never written: the worker hangs here until it is killed
"""


def child(source, key, tmp_path, name, *extra):
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(CHILD_PRELUDE) + source,
            REDIS_URL,
            key,
            str(tmp_path),
            name,
            *extra,
        ],
        cwd=BASE_DIR,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_two_processes_racing_on_one_key_do_the_effect_once(redis_client, key, tmp_path):
    racers = [child(RACER, key, tmp_path, name) for name in ("a", "b")]
    try:
        assert [racer.stdout.readline() for racer in racers] == ["ready\n", "ready\n"]
        for racer in racers:
            racer.stdin.write("go\n")
        for racer in racers:
            racer.stdin.flush()
        outcomes = sorted(racer.communicate(timeout=60)[0].strip() for racer in racers)
    finally:
        for racer in racers:
            racer.kill()
    assert [racer.returncode for racer in racers] == [0, 0]
    assert len((tmp_path / "effects").read_text().splitlines()) == 1
    winner, loser = sorted(outcomes, key=lambda outcome: outcome != "ran")
    assert winner == "ran"
    assert loser.startswith("held,") and loser.endswith(",skipped")
    assert set(loser.split(",")[:-1]) == {"held"}
    assert redis_client.get(PREFIX + key) == b"done"


def test_a_killed_workers_claim_expires_and_the_retry_runs(redis_client, key, tmp_path):
    holder = child(HOLDER, key, tmp_path, "holder", "2.0")
    try:
        assert holder.stdout.readline() == "claimed\n"
        os.kill(holder.pid, signal.SIGKILL)
        assert holder.wait(timeout=10) == -signal.SIGKILL
    finally:
        holder.kill()
    effects = []
    with pytest.raises(ClaimHeld), redis_once(key, client=redis_client):
        effects.append("too early")
    wait_until(lambda: redis_client.exists(PREFIX + key) == 0, timeout=10, message="expiry")

    with redis_once(key, client=redis_client) as first:
        if first:
            effects.append("sent")
    assert effects == ["sent"]
    assert redis_client.get(PREFIX + key) == b"done"
