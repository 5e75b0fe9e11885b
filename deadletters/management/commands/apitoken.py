"""`manage.py apitoken`: make, revoke and list the JSON API's tokens (deadletters.tokens).

    manage.py apitoken create --user ann --name post-deploy [--scopes read,act] [--days 90]
    manage.py apitoken revoke 12 --operator ann
    manage.py apitoken list [--user ann] [--json]

`create` prints the token once (with --json, an object holding it): nothing can show it again.
Each create and revoke is audited under the command-line channel.
"""

from django.contrib.auth import get_user_model
from django.utils import timezone

from deadletters import tokens
from deadletters.models import ApiToken
from deadletters.roles import VIEW
from jobqueue.management import cli
from jobqueue.management.cli import usage_error
from jobqueue.models import AuditEntry

CLI = AuditEntry.Channel.CLI


def _user(username: str):
    User = get_user_model()
    try:
        return User.objects.get(**{User.USERNAME_FIELD: username})
    except User.DoesNotExist:
        raise usage_error(f"No user {username!r}") from None


def as_json(token: ApiToken) -> dict:
    return {
        "id": token.pk,
        "user": token.user.get_username(),
        "name": token.name,
        "prefix": token.label,
        "scopes": token.scope_list,
        "created_at": token.created_at.isoformat(),
        "expires_at": token.expires_at.isoformat(),
        "revoked_at": token.revoked_at.isoformat() if token.revoked_at else None,
        "last_used_at": token.last_used_at.isoformat() if token.last_used_at else None,
    }


class Command(cli.Command):
    help = "Create, revoke or list the JSON API's tokens."

    def add_arguments(self, parser):
        commands = parser.add_subparsers(dest="command", required=True)
        create = commands.add_parser("create", help="Make a token (printed once).")
        create.add_argument("--user", type=cli.operator_name, required=True)
        create.add_argument("--name", type=cli.column(ApiToken, "name"), required=True)
        create.add_argument("--scopes", default="read", help="read, or read,act (default read).")
        create.add_argument(
            "--days",
            type=cli.integer(1, tokens.MAX_DAYS),
            default=tokens.DEFAULT_DAYS,
            help=f"Days until it expires (default {tokens.DEFAULT_DAYS}).",
        )
        create.add_argument("--json", action="store_true")
        revoke = commands.add_parser("revoke", help="Revoke a token by its id.")
        revoke.add_argument("id", type=cli.integer(1, 2**63 - 1, "a token's id"))
        revoke.add_argument(
            "--operator",
            type=cli.operator_name,
            required=True,
            help="Who revokes it (its user, or an admin); the audit names them.",
        )
        listing = commands.add_parser("list", help="The tokens, newest first.")
        listing.add_argument("--user", type=cli.operator_name)
        listing.add_argument("--json", action="store_true", help="One JSON array of objects.")

    def handle(self, *args, command, **opts):
        return getattr(self, f"_{command}")(**opts)

    def _create(self, *, user, name, scopes, days, json, **_):
        owner = _user(user)
        if not owner.has_perm(VIEW):
            raise usage_error(f"{user} lacks {VIEW}: a token acts as its user.")
        try:
            made = tokens.create(owner, name=name, scopes=scopes, days=days, channel=CLI)
        except tokens.TokenError as exc:
            raise usage_error(exc) from None
        if json:
            self.stdout.write(cli.json_text(as_json(made.token) | {"token": made.text}))
            return
        self.stdout.write(made.text)
        self.stderr.write(
            f"Token {made.token.label} (id {made.token.pk}) for {user}, scopes "
            f"{made.token.scopes}, expires {made.token.expires_at:%Y-%m-%d}. "
            "It is shown this once: keep it in your secret store."
        )

    def _revoke(self, *, id, operator, **_):
        who = _user(operator)
        try:
            token = tokens.revoke(id, operator=who, channel=CLI)
        except ApiToken.DoesNotExist:
            raise usage_error(f"No API token {id}") from None
        except (tokens.TokenError, PermissionError) as exc:
            raise usage_error(exc) from None
        self.stdout.write(f"Token {token.label} ({token.name}) of {token.user} revoked.")

    def _list(self, *, user, json, **_):
        rows = ApiToken.objects.select_related("user").order_by("-created_at", "-id")
        if user:
            rows = rows.filter(user=_user(user))
        rows = list(rows[: cli.MAX_LIST_LIMIT])
        if json:
            self.write_json_rows(as_json(token) for token in rows)
            return
        now = timezone.now()
        for token in rows:
            state = (
                "revoked" if token.revoked_at else "expired" if token.expires_at <= now else "live"
            )
            self.stdout.write(
                cli.one_line(
                    f"{token.pk}\t{token.label}\t{token.user}\t{token.name}\t{token.scopes}\t"
                    f"{state}\texpires {token.expires_at:%Y-%m-%d}"
                )
            )
        if not rows:
            self.stdout.write("no API tokens")
