"""Optional parts stay optional: a project without django-q2 replays its own letters."""

import sys

import pytest

from jobqueue import store
from jobqueue.models import DeadLetter, Job
from tests.factories import DeadLetterFactory


@pytest.fixture
def without_django_q2(monkeypatch):
    """Importing django_q (or any of its modules) fails as if the package were absent."""
    for name in [n for n in sys.modules if n == "django_q" or n.startswith("django_q.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "django_q", None)


@pytest.mark.django_db
def test_replaying_job_letters_never_imports_django_q2(without_django_q2):
    with pytest.raises(ImportError):
        import django_q.models  # noqa: F401 - the fixture works
    letter = DeadLetterFactory()
    outcome = store.replay([letter.pk])
    assert list(outcome.done) == [letter.pk]
    assert Job.objects.filter(replayed_from=letter).count() == 1
    assert DeadLetter.objects.get(pk=letter.pk).state == "replaying"


def test_the_metrics_module_imports_without_prometheus_client(monkeypatch):
    """A host's urls may import the view; only serving it needs the extra."""
    import importlib

    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    monkeypatch.delitem(sys.modules, "jobqueue.metrics", raising=False)
    module = importlib.import_module("jobqueue.metrics")
    assert callable(module.metrics)
    monkeypatch.delitem(sys.modules, "jobqueue.metrics")
