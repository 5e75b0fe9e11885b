import getpass
import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from deadletters.roles import ROLE_PERMISSIONS, assign


class Command(BaseCommand):
    help = "Create a console user (or change an existing one's role)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", choices=list(ROLE_PERMISSIONS), required=True)
        parser.add_argument("--password", help="Default: prompt (required for a new user).")
        parser.add_argument("--email", default="")

    def handle(self, *args, username, role, password, email, **opts):
        User = get_user_model()
        user, created = User.objects.get_or_create(
            **{User.USERNAME_FIELD: username}, defaults={"email": email}
        )
        if password is None and created:
            if not sys.stdin.isatty():
                user.delete()
                raise CommandError("No terminal to prompt on: pass --password.")
            password = getpass.getpass(f"Password for {username}: ")
        if password is not None:
            if not password:
                raise CommandError("The password may not be empty.")
            user.set_password(password)
            user.save()
        assign(user, role)
        verb = "Created" if created else "Updated"
        self.stdout.write(f"{verb} {role} {username}")
