import pytest

from jobqueue.backoff import retry_delay
from jobqueue.errors import (
    InvalidPayload,
    JobTimeout,
    PermanentError,
    RateLimited,
    UnknownTask,
    classify,
)


@pytest.mark.parametrize("attempt", [1, 2, 3, 4, 5, 10])
def test_delay_stays_within_half_step_and_step(attempt):
    step = min(30.0, 0.25 * 2 ** (attempt - 1))
    low = retry_delay(attempt, base=0.25, cap=30.0, random=lambda: 0.0)
    high = retry_delay(attempt, base=0.25, cap=30.0, random=lambda: 0.999999)
    assert low == pytest.approx(step / 2)
    assert step / 2 <= high < step


def test_delay_grows_until_the_cap():
    delays = [retry_delay(n, base=1.0, cap=8.0, random=lambda: 0.5) for n in range(1, 7)]
    assert delays == [0.75, 1.5, 3.0, 6.0, 6.0, 6.0]


def test_huge_attempt_numbers_do_not_overflow():
    assert retry_delay(10_000, base=1.0, cap=60.0, random=lambda: 0.0) == 30.0


@pytest.mark.parametrize("bad", [dict(attempt=0), dict(attempt=1, base=0), dict(attempt=1, cap=-1)])
def test_rejects_nonsense(bad):
    with pytest.raises(ValueError):
        retry_delay(**bad)


def test_classifier():
    assert classify(PermanentError("x")).retry is False
    assert classify(UnknownTask("x")).retry is False
    assert classify(InvalidPayload("x")).retry is False
    assert classify(ConnectionError("x")).retry is True
    assert classify(JobTimeout("x")).retry is True
    assert classify(ValueError("x")) == classify(RuntimeError("y"))
    limited = classify(RateLimited(retry_after=42))
    assert limited.retry and limited.delay == 42
