import getpass
import os
import sys

from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError
from django.core.management import CommandError
from django.core.validators import validate_email
from django.db import transaction

from deadletters.roles import ROLE_PERMISSIONS, assign
from jobqueue.management import cli
from jobqueue.management.cli import usage_error

# A new user's password when none is given otherwise, as createsuperuser reads
# DJANGO_SUPERUSER_PASSWORD: for scripts, without the password on a command line.
PASSWORD_VARIABLE = "REDRIVE_OPERATOR_PASSWORD"


def messages(error: ValidationError) -> str:
    return " ".join(error.messages)


class Command(cli.Command):
    help = "Create a console user (or change an existing one's role)."
    # Like createsuperuser (and enqueue), no system checks: it signs nothing, so it runs where
    # the long-running commands refuse to start, e.g. a checkout whose only SECRET_KEY is the
    # demo's in var/ (config/secret_key.py).
    requires_system_checks = []
    # Run from a shell (not call_command): a --password is then on this process's command line.
    from_command_line = False

    def run_from_argv(self, argv):
        self.from_command_line = True
        super().run_from_argv(argv)

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", choices=list(ROLE_PERMISSIONS), required=True)
        parser.add_argument(
            "--password-stdin",
            action="store_true",
            help="Read the password from standard input (one line).",
        )
        parser.add_argument(
            "--password",
            help="Visible to other users (ps) and kept in shell history: prefer "
            f"--password-stdin or {PASSWORD_VARIABLE}.",
        )
        parser.add_argument("--email", default="")

    def handle(self, *args, username, role, password, password_stdin, email, **opts):
        """Everything is checked before the first write, and the user, its password and its
        role are written in one transaction: a refused command leaves no half-made user.

        The password: --password-stdin, else --password, else (a new user only)
        REDRIVE_OPERATOR_PASSWORD, else (a new user at a terminal) asked twice."""
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
        if password_stdin and password is not None:
            raise usage_error("Give the password once: --password-stdin or --password.")
        user = User.objects.filter(**{User.USERNAME_FIELD: username}).first()
        created = user is None
        if created:
            user = User(**{User.USERNAME_FIELD: username, "email": email})
        on_command_line = password is not None and self.from_command_line
        if password_stdin:
            password = read_one_line(sys.stdin)
        elif password is None and created:
            password = os.environ.get(PASSWORD_VARIABLE) or None
            if password is None:
                if not sys.stdin.isatty():
                    raise usage_error(
                        "No terminal to prompt on: pipe the password to --password-stdin, "
                        f"or set {PASSWORD_VARIABLE}."
                    )
                password = self.ask_password(username, user)
        if password is not None:
            check_password(password, user)
        if on_command_line:
            self.stderr.write(
                "Warning: --password is visible to other users of this machine and kept in "
                f"shell history; prefer --password-stdin or {PASSWORD_VARIABLE}."
            )
        with transaction.atomic():
            if password is not None:
                user.set_password(password)
            user.save()
            assign(user, role)
        verb = "Created" if created else "Updated"
        self.stdout.write(f"{verb} {role} {username}")

    def ask_password(self, username: str, user) -> str:
        """Asked twice until both match and pass the validators; Ctrl-C or Ctrl-D give up."""
        try:
            while True:
                password = getpass.getpass(f"Password for {username}: ")
                if getpass.getpass("Password (again): ") != password:
                    self.stderr.write("The passwords did not match.")
                    continue
                try:
                    check_password(password, user)
                except CommandError as exc:
                    self.stderr.write(str(exc))
                    continue
                return password
        except (EOFError, KeyboardInterrupt):
            raise usage_error("Cancelled: nothing was written.") from None


def read_one_line(stream) -> str:
    try:
        text = stream.read()
    except UnicodeDecodeError as exc:
        raise usage_error(f"--password-stdin: not text in this encoding ({exc})") from exc
    line = text.removesuffix("\n").removesuffix("\r")
    if "\n" in line or "\r" in line:
        raise usage_error("--password-stdin reads one line: the password, nothing more.")
    return line


def check_password(password: str, user) -> None:
    if not password:
        raise usage_error("The password may not be empty.")
    try:
        password.encode()
    except UnicodeEncodeError:  # undecodable bytes of an argument or of stdin
        raise usage_error("The password is not valid text (UTF-8).") from None
    try:
        # settings.AUTH_PASSWORD_VALIDATORS, as `changepassword` and the admin apply them.
        password_validation.validate_password(password, user)
    except ValidationError as exc:
        raise usage_error(messages(exc)) from exc
