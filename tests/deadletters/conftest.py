import pytest
from django.test import Client

from deadletters.roles import assign
from tests.factories import UserFactory


def messages_of(response) -> list[str]:
    """The messages (django.contrib.messages) the response's request carried."""
    return [str(m) for m in response.wsgi_request._messages]


def user_with_role(role, username=None):
    user = UserFactory(username=username or role)
    assign(user, role)
    return user


@pytest.fixture
def viewer(db):
    return user_with_role("viewer")


@pytest.fixture
def operator(db):
    return user_with_role("operator")


@pytest.fixture
def admin_operator(db):
    return user_with_role("admin", "chief")


def logged_in(user):
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def viewer_client(viewer):
    return logged_in(viewer)


@pytest.fixture
def operator_client(operator):
    return logged_in(operator)


@pytest.fixture
def admin_client_(admin_operator):
    return logged_in(admin_operator)


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
