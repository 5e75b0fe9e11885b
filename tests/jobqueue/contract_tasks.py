"""Tasks for the django.tasks contract and poison-result tests (the shapes of Django's own
tests/tasks/tasks.py, plus values a database cannot store). Mostly one attempt each, so a
failure is final at once, as in Django's backends, which never retry."""

from django.tasks import TaskContext, task


@task(max_attempts=1)
def noop_task(*args, **kwargs):
    return None


@task(max_attempts=1)
async def noop_task_async(*args, **kwargs):
    return None


@task(max_attempts=1)
def calculate_meaning_of_life():
    return 42


@task(max_attempts=1)
def echo(value):
    return value


@task(max_attempts=1)
def failing_task_value_error():
    raise ValueError("This task failed due to ValueError")


@task(max_attempts=1)
def failing_task_system_exit():
    raise SystemExit("This task failed due to SystemExit")


@task(max_attempts=1)
def complex_exception():
    raise ValueError(ValueError("This task failed"))


@task(max_attempts=3)
def complex_return_value():
    return object  # not JSON: normalize_json raises TypeError("Unsupported type ...")


@task(max_attempts=3)
def returns_nan():
    return float("nan")


@task(max_attempts=1)
def returns_nul():
    return "a\x00b"


@task(max_attempts=1)
def returns_nul_in_a_key():
    return {"ok": ["fine"], "k\x00": 1}


@task(max_attempts=1)
def returns_lone_surrogate():
    return {"text": "\ud800"}


@task(max_attempts=1)
def raises_nul():
    raise ValueError("a\x00b")


# A class path longer than the dead letter's error_class column (255 characters).
VeryLongError = type("VeryLong" + "X" * 300 + "Error", (Exception,), {"__module__": __name__})


@task(max_attempts=1)
def raises_a_long_class_path():
    raise VeryLongError("boom")


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no text for you")


@task(max_attempts=1)
def raises_unprintable():
    raise Unprintable()


@task(max_attempts=1, takes_context=True)
def get_task_id(context):
    return context.task_result.id


@task(max_attempts=1, takes_context=True)
def check_context(context, attempt):
    assert isinstance(context, TaskContext)
    assert context.attempt == attempt
