"""Idempotency claims in Redis, for an effect that does not live in the job's database.

`jobqueue.once` records its key in the same transaction as the work, so the two commit together.
An effect elsewhere (a file in object storage, a message to a chat, a cache another service
reads) has no such transaction: `redis_once` claims the key in Redis before the work, marks it
done after, and releases it when the work fails, so a retry can proceed.

redis-py is an optional extra (`pip install 'redrive[redis]'`): nothing here imports it until a
claim is made, and `import jobqueue` never does.
"""

from __future__ import annotations

import logging
import math
import secrets
import threading
from contextlib import contextmanager

from django.core.exceptions import ImproperlyConfigured

from jobqueue.conf import setting
from jobqueue.errors import TransientError

logger = logging.getLogger("jobqueue.redis")

PREFIX = "redrive:once:"
MAX_KEY_LENGTH = 200
DONE = "done"
PROCESSING = "processing:"
# Our own client's socket timeouts: a Redis that hangs fails the attempt (which is retried)
# instead of holding the worker for the lease.
SOCKET_TIMEOUT = 5.0

# Take the claim, or report who holds the key and for how long (one round trip, atomic).
CLAIM = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {1, ARGV[1], tonumber(ARGV[2])}
end
return {0, redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
"""
# Mark the work done, only while the claim is still ours.
FINISH = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
    return 1
end
return 0
"""
# Give the key up after a failure, only while the claim is still ours.
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
"""


class ClaimHeld(TransientError):
    """Another caller holds the key's claim: retry later, when it is done or has expired."""

    def __init__(self, message: str, *, key: str, expires_in: float | None):
        super().__init__(message)
        self.key = key
        self.expires_in = expires_in


class ClaimStoreUnavailable(TransientError):
    """Redis could not be reached (or refused the command) when claiming: the work did not run."""


_clients: dict[str, object] = {}
_clients_lock = threading.Lock()


@contextmanager
def redis_once(key: str, *, claim_seconds=None, keep_seconds=None, client=None):
    """Yield True when this caller should do the work for `key`, False when it is already done.

        with jobqueue.redis_once(f"thumbnail:{upload_id}") as first:
            if first:
                storage.put(thumbnail_path(upload_id), render(upload_id))

    Entering sets `redrive:once:<key>` to a claim of this caller's own (`processing:<token>`)
    that lives `claim_seconds` (REDRIVE["REDIS_CLAIM_SECONDS"]) if its holder dies:

    - the claim is taken: yields True; leaving normally marks the key `done` for
      `keep_seconds` (REDRIVE["REDIS_DONE_SECONDS"]), in which every later caller gets False;
      leaving with an exception deletes the claim and re-raises, so a retry runs the work;
    - the key is `done`: yields False (skip the work);
    - another caller's claim is live: raises `ClaimHeld` (a TransientError) without running the
      block, so the job is retried after its backoff and then finds the key done or free;
    - Redis cannot be reached, or refuses: raises `ClaimStoreUnavailable` (a TransientError);
      the block does not run.

    Marking done and releasing act only on this caller's own claim. If the claim expired while
    the work ran (it took longer than `claim_seconds`) and another caller took the key, leaving
    does not touch that caller's claim, logs a WARNING on the `jobqueue.redis` logger (the
    effect may have run twice) and returns normally. If Redis cannot be reached when marking
    done, the work is done all the same: an ERROR is logged and the block returns normally; the
    claim then expires and a later run of the same key repeats the effect once.

    What it cannot promise: a process that dies between the effect and marking it done (or a
    Redis that loses its data: no persistence, a failover) leaves the key free after the claim
    expires, and the retry repeats the effect once. Give `claim_seconds` comfortably more than
    the work takes. For money, or any remote call, pass the provider's own idempotency key too
    (`workflows.step_key()`, or the job's key); a claim cannot make a remote call atomic.

    `client` is a redis-py client to use instead of the one made from REDRIVE["REDIS_URL"].
    """
    name = redis_key(key)
    claim_ms = _millis(
        "claim_seconds", setting("REDIS_CLAIM_SECONDS") if claim_seconds is None else claim_seconds
    )
    keep_ms = _millis(
        "keep_seconds", setting("REDIS_DONE_SECONDS") if keep_seconds is None else keep_seconds
    )
    if client is None:
        client = get_client()
    token = PROCESSING + secrets.token_hex(16)
    if not _claim(client, key, name, token, claim_ms):
        yield False
        return
    try:
        yield True
    except BaseException:
        _release(client, key, name, token)
        raise
    _finish(client, key, name, token, keep_ms)


def redis_key(key: str) -> str:
    """The Redis key of an idempotency key (prefixed, so it never meets the host's own keys)."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"redis_once needs a non-empty string key, not {key!r}.")
    if len(key) > MAX_KEY_LENGTH:
        raise ValueError(
            f"redis_once's key is {len(key)} characters long; at most {MAX_KEY_LENGTH} allowed."
        )
    return PREFIX + key


def get_client():
    """The process's client for REDRIVE["REDIS_URL"], made on first use."""
    url = setting("REDIS_URL")
    if not url:
        raise ImproperlyConfigured(
            "jobqueue.redis_once needs REDRIVE['REDIS_URL'] (for example "
            "'redis://127.0.0.1:6379/0'), or a client passed as client=."
        )
    if not isinstance(url, str):
        raise ImproperlyConfigured(f"REDRIVE['REDIS_URL'] must be a string, not {url!r}.")
    with _clients_lock:
        if url not in _clients:
            _clients[url] = _make_client(url)
        return _clients[url]


def _make_client(url: str):
    try:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError as exc:
        raise ImproperlyConfigured(
            "REDRIVE['REDIS_URL'] is set but the 'redis' package is not installed: "
            "pip install 'redrive[redis]'"
        ) from exc
    try:
        return redis.Redis.from_url(
            url,
            socket_connect_timeout=SOCKET_TIMEOUT,
            socket_timeout=SOCKET_TIMEOUT,
            # One immediate retry (a pooled connection the server closed), not redis-py's
            # default of several with a backoff of seconds.
            retry=Retry(NoBackoff(), 1),
        )
    except ValueError as exc:
        raise ImproperlyConfigured(f"REDRIVE['REDIS_URL'] is not a Redis URL: {exc}") from exc


def _millis(name: str, seconds) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"redis_once's {name} must be a number of seconds, not {seconds!r}.")
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"redis_once's {name} must be positive and finite, not {seconds!r}.")
    return max(1, round(seconds * 1000))


def _text(value) -> str | None:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _redis_errors() -> tuple[type[BaseException], ...]:
    from redis.exceptions import RedisError

    return (RedisError,)


def _claim(client, key: str, name: str, token: str, claim_ms: int) -> bool:
    try:
        taken, value, ttl_ms = client.register_script(CLAIM)(keys=[name], args=[token, claim_ms])
    except _redis_errors() as exc:
        raise ClaimStoreUnavailable(
            f"Cannot claim idempotency key {key!r}: Redis is unavailable "
            f"({type(exc).__name__}: {exc}). The work did not run; a retry will try again."
        ) from exc
    value = _text(value)
    # A claim set by a first attempt whose reply was lost, then retried by the client, is ours.
    if taken or value == token:
        return True
    if value == DONE:
        return False
    expires = f"in {ttl_ms / 1000:g} s" if ttl_ms and ttl_ms > 0 else "never (it has no expiry)"
    raise ClaimHeld(
        f"Idempotency key {key!r} is claimed by another worker; it holds the key until it "
        f"finishes or its claim expires {expires}.",
        key=key,
        expires_in=ttl_ms / 1000 if ttl_ms and ttl_ms > 0 else None,
    )


def _finish(client, key: str, name: str, token: str, keep_ms: int) -> None:
    try:
        ours = client.register_script(FINISH)(keys=[name], args=[token, DONE, keep_ms])
    except _redis_errors() as exc:
        logger.error(
            "Could not mark idempotency key %r done: Redis is unavailable (%s: %s). The work "
            "is done; when the claim expires, a retry of the same key repeats it once.",
            key,
            type(exc).__name__,
            exc,
        )
        return
    if not ours:
        logger.warning(
            "The claim on idempotency key %r expired before the work finished, and the key is "
            "no longer ours: the effect may have run twice. Raise claim_seconds "
            "(REDRIVE['REDIS_CLAIM_SECONDS']) above the time the work takes.",
            key,
        )


def _release(client, key: str, name: str, token: str) -> None:
    try:
        client.register_script(RELEASE)(keys=[name], args=[token])
    except _redis_errors() as exc:
        logger.error(
            "Could not release idempotency key %r after the work failed: Redis is unavailable "
            "(%s: %s). A retry is refused until the claim expires.",
            key,
            type(exc).__name__,
            exc,
        )
