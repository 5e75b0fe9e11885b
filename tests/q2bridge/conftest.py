import pytest
from django_q.signals import post_execute

from deadletters import django_q2_bridge as bridge


@pytest.fixture
def bridge_on(settings):
    """The bridge on in this process: the setting, and the receiver connected."""
    settings.REDRIVE = {**settings.REDRIVE, "SOURCES": ["jobqueue", "django_q2"]}
    assert bridge.connect()
    yield
    post_execute.disconnect(dispatch_uid=bridge.DISPATCH_UID)
