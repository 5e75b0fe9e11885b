import getpass
import sys

from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from deadletters.roles import ROLE_PERMISSIONS, assign
from jobqueue.management import cli
from jobqueue.management.cli import usage_error


def messages(error: ValidationError) -> str:
    return " ".join(error.messages)


class Command(cli.Command):
    help = "Create a console user (or change an existing one's role)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", choices=list(ROLE_PERMISSIONS), required=True)
        parser.add_argument("--password", help="Default: prompt (required for a new user).")
        parser.add_argument("--email", default="")

    def handle(self, *args, username, role, password, email, **opts):
        """Everything is checked before the first write, and the user, its password and its
        role are written in one transaction: a refused command leaves no half-made user."""
        User = get_user_model()
        field = User._meta.get_field(User.USERNAME_FIELD)
        try:
            username = field.clean(username, None)  # required, max_length, the field's validators
        except ValidationError as exc:
            raise usage_error(f"username {username!r}: {messages(exc)}") from exc
        try:
            if email:
                validate_email(email)
        except ValidationError as exc:
            raise usage_error(f"--email {email!r}: {messages(exc)}") from exc
        user = User.objects.filter(**{User.USERNAME_FIELD: username}).first()
        created = user is None
        if created:
            user = User(**{User.USERNAME_FIELD: username, "email": email})
        if password is None and created:
            if not sys.stdin.isatty():
                raise usage_error("No terminal to prompt on: pass --password.")
            password = getpass.getpass(f"Password for {username}: ")
        if password is not None:
            if not password:
                raise usage_error("The password may not be empty.")
            try:
                # settings.AUTH_PASSWORD_VALIDATORS, as `changepassword` and the admin apply them.
                password_validation.validate_password(password, user)
            except ValidationError as exc:
                raise usage_error(messages(exc)) from exc
        with transaction.atomic():
            if password is not None:
                user.set_password(password)
            user.save()
            assign(user, role)
        verb = "Created" if created else "Updated"
        self.stdout.write(f"{verb} {role} {username}")
