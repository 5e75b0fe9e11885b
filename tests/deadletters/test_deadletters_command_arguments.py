"""`deadletters` and `createoperator` against hostile arguments: status 0 or 2, one line when
refused, never a traceback, nothing printed or written on refusal."""

import contextlib
import io
import json
import re
from datetime import timedelta
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.utils import timezone
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from deadletters.models import ReplayRun, Selection
from jobqueue.models import DeadLetter
from tests.cli import command, row_counts, run
from tests.deadletters.conftest import user_with_role
from tests.factories import DeadLetterFactory, JobFactory
from tests.properties import examples

pytestmark = pytest.mark.django_db

HUGE = str(2**63)
PASSWORD = "a-long-enough-pass"


@pytest.fixture
def oncall(db):
    return user_with_role("operator", "oncall")


@pytest.fixture
def chief(db):
    return user_with_role("admin", "chief")


def act(*argv, operator="oncall", reason="API back"):
    return run("deadletters", *argv, "--reason", reason, "--operator", operator)


# --- examples, one per finding -------------------------------------------------------------


def test_replay_of_an_id_that_does_not_exist_is_refused_and_audits_nothing(oncall):
    """It used to exit 0 and write an audited run of "1 skipped"."""
    letter = DeadLetterFactory()
    for argv in (["99999999"], [str(letter.pk), "99999999"]):
        result = act("replay", *argv)
        assert result.refused_cleanly, result
        assert "No dead letter 99999999" in result.err
    assert not ReplayRun.objects.exists() and not Selection.objects.exists()
    assert DeadLetter.objects.get().state == "pending"


@pytest.mark.parametrize("action", ["replay", "discard"])
def test_an_id_beyond_a_bigint_is_refused(oncall, action):
    result = act(action, HUGE)
    assert result.refused_cleanly, result
    shown = run("deadletters", "show", HUGE)
    assert shown.refused_cleanly, shown


def test_show_of_a_missing_letter_is_a_usage_error():
    result = run("deadletters", "show", "99999999")
    assert result.refused_cleanly and "No dead letter 99999999" in result.err


@pytest.mark.parametrize("limit", ["-1", "0", HUGE, "²"])
def test_list_refuses_a_limit_out_of_range(limit):
    result = run("deadletters", "list", "--limit", limit)
    assert result.refused_cleanly, result


@pytest.mark.parametrize("limit", ["-1", "0", HUGE, "100001"])
def test_replay_by_filter_refuses_a_limit_out_of_range(oncall, limit):
    DeadLetterFactory(task_path="shop.receipt")
    result = act("replay", "--job-type", "shop.receipt", "--limit", limit)
    assert result.refused_cleanly, result
    assert not Selection.objects.exists()


@pytest.mark.parametrize("reason", ["", " ", "\t\n"])
def test_an_empty_reason_is_refused_before_the_preview_and_before_any_write(oncall, reason):
    """It used to print the preview, then leave the frozen selection behind."""
    letter = DeadLetterFactory()
    result = act("replay", str(letter.pk), reason=reason)
    assert result.refused_cleanly, result
    assert "--reason" in result.err
    assert not Selection.objects.exists() and not ReplayRun.objects.exists()


def test_list_says_when_more_rows_exist_than_shown():
    DeadLetterFactory.create_batch(4)
    lines = run("deadletters", "list", "--limit", "3").out.splitlines()
    assert len(lines) == 4 and lines[-1] == "… 1 more; use --limit"
    as_json = run("deadletters", "list", "--limit", "3", "--json")
    assert len(json.loads(as_json.out)) == 3
    assert re.search(r"(?<![0-9])1 more", as_json.err)  # not "11 more"


def test_a_cli_run_is_audited_with_the_filter_it_selected_by(oncall):
    """What the operator typed and what the command adds to it (the oldest --limit pending
    letters), as `act letters.replay --select-all` records them; never a default the command
    did not select by (`order=newest`)."""
    DeadLetterFactory.create_batch(2, task_path="shop.receipt")
    result = act("replay", "--job-type", "shop.receipt", "--limit", "5")
    assert result.code == 0, result
    run_ = ReplayRun.objects.get()
    assert run_.filter == {
        "job_type": "shop.receipt",
        "state": "pending",
        "order": "oldest",
        "limit": 5,
    }
    assert run_.selection.filter == run_.filter
    letter = DeadLetterFactory()
    assert act("discard", str(letter.pk)).code == 0
    assert ReplayRun.objects.latest("pk").filter == {}  # hand-picked, as in the console


def test_the_registrys_limit_freezes_the_first_of_a_select_all(oncall, settings):
    """`--limit N` of `deadletters replay` is the registry's: with select all, the first N in
    the list's order; with ids, or past the largest selection, refused."""
    settings.REDRIVE = {**settings.REDRIVE, "MAX_SELECTION": 10}
    now = timezone.now()
    letters = [
        DeadLetterFactory(task_path="shop.receipt", dead_lettered_at=now - timedelta(hours=n))
        for n in range(4)
    ]
    select = ["--select-all", "--job-type", "shop.receipt", "--order", "oldest"]
    frozen = run("act", "letters.replay", *select, "--limit", "2", "--operator", "oncall", "--json")
    assert frozen.code == 0, frozen
    assert Selection.objects.get().ids == [letters[3].pk, letters[2].pk]
    assert json.loads(frozen.out)["filters"]["limit"] == 2
    for argv, message in (
        (["--ids", str(letters[0].pk), "--limit", "1"], "A limit goes with select all"),
        ([*select, "--limit", "11"], "A selection holds at most 10 items."),
        ([*select, "--limit", "0"], "greater than or equal to 1"),
    ):
        refused = run("act", "letters.replay", *argv, "--operator", "oncall")
        assert refused.refused_cleanly and message in refused.err, refused
    assert Selection.objects.count() == 1


@pytest.mark.parametrize("rate", ["1e-300", "0.0001", "nan", "inf", "-1", "100000", "fast"])
def test_replay_rate_out_of_range_is_refused(oncall, rate):
    letter = DeadLetterFactory()
    result = act("replay", str(letter.pk), "--rate", rate)
    assert result.refused_cleanly, result
    assert "replay rate must be" in result.err
    assert not Selection.objects.exists()


def test_a_replay_rate_in_range_is_the_runs(oncall):
    letter = DeadLetterFactory()
    assert act("replay", str(letter.pk), "--rate", "2.5").code == 0
    assert ReplayRun.objects.get().rate == 2.5


def test_a_refused_start_leaves_no_selection_behind(oncall, monkeypatch):
    """Whatever start_run refuses, the selection frozen for it goes too (one transaction)."""
    from deadletters import services

    def refuse(**kwargs):
        raise services.RefusedError("This preview has expired: preview the selection again.")

    monkeypatch.setattr(services, "start_run", refuse)
    letter = DeadLetterFactory()
    result = act("replay", str(letter.pk))
    assert result.code == 2 and "expired" in result.err
    assert not Selection.objects.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["x", "--role", "viewer", "--password", ""], "may not be empty"),
        (["x", "--role", "viewer", "--password", "a"], "too short"),
        (["x", "--role", "viewer", "--password", "x"], "too short"),
        (["", "--role", "viewer", "--password", PASSWORD], "username"),
        (["a b", "--role", "viewer", "--password", PASSWORD], "username"),
        (["u" * 151, "--role", "viewer", "--password", PASSWORD], "username"),
        (["x", "--role", "viewer", "--password", PASSWORD, "--email", "nope"], "--email"),
    ],
)
def test_createoperator_refusals_leave_no_user(argv, message):
    """It used to exit 1 and leave user x behind, and skip AUTH_PASSWORD_VALIDATORS."""
    before = row_counts()
    result = run("createoperator", *argv)
    assert result.refused_cleanly, result
    assert message in result.err
    assert row_counts() == before


def test_createoperator_keeps_an_existing_user_whole_when_refused():
    assert run("createoperator", "vic", "--role", "viewer", "--password", PASSWORD).code == 0
    result = run("createoperator", "vic", "--role", "admin", "--password", "short")
    assert result.refused_cleanly, result
    vic = User.objects.get(username="vic")
    assert vic.check_password(PASSWORD) and not vic.is_staff
    assert list(vic.groups.values_list("name", flat=True)) == ["Dead-letter viewers"]


# --- Hypothesis ------------------------------------------------------------------------------

IDS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["²", "١٢", "1_0", " 1", "+1", "0x1", "9" * 5000, "-"]),
)
TEXTS = st.one_of(
    st.text(max_size=12),
    st.text(st.characters(codec=None, categories=None), max_size=8),
    st.sampled_from(["", " ", "a\x00b", "\udcff", "x" * 101, "x" * 256, "shop.receipt"]),
)
LIMITS = st.one_of(IDS, st.sampled_from(["1", "2", "50", "100000", "100001"]))
RATES = st.one_of(
    st.floats().map(repr), st.sampled_from(["0", "0.1", "1e-300", "10000", "10001", "nan", ""])
)
FILTERS = {
    "--job-type": TEXTS,
    "--error-class": TEXTS,
    "--queue": TEXTS,
    "--source": st.one_of(st.sampled_from(["jobqueue", "outbox", "django_q2", "celery"]), TEXTS),
}
HYPOTHESIS = settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def pairs(spec):
    return st.lists(
        st.sampled_from(sorted(spec)).flatmap(
            lambda flag: spec[flag].map(lambda v, flag=flag: [flag] if v is None else [flag, v])
        ),
        max_size=4,
    ).map(lambda ps: [a for p in ps for a in p])


def check(argv):
    before = row_counts()
    result = run(*argv)
    assert result.code in (0, 2), result
    assert "Traceback" not in result.err, result.err
    event(f"exit {result.code}")  # --hypothesis-show-statistics: how many got through
    if result.code == 2:
        assert result.refused_cleanly, result
        assert row_counts() == before, argv
    return result


@pytest.fixture
def letters(db):
    DeadLetterFactory.create_batch(3, task_path="shop.receipt")


@HYPOTHESIS
@given(pairs({**FILTERS, "--state": TEXTS, "--limit": LIMITS, "--json": st.none()}))
def test_list_arguments(letters, argv):
    check(["deadletters", "list", *argv])


@HYPOTHESIS
@given(
    st.one_of(
        pairs({"--json": st.none(), "--backend": TEXTS}).map(lambda a: ["types", *a]),
        st.tuples(
            st.one_of(st.just("shop.receipt"), TEXTS),
            pairs({"--json": st.none(), "--limit": LIMITS, "--backend": TEXTS}),
        ).map(lambda t: ["causes", t[0], *t[1]]),
        st.lists(TEXTS, max_size=2).map(lambda rest: ["causes", *rest]),
    )
)
def test_types_and_causes_arguments(letters, argv):
    check(["deadletters", *argv])


@HYPOTHESIS
@given(st.lists(st.one_of(IDS, st.none()), max_size=2), pairs({"--json": st.none()}))
def test_show_arguments(letters, ids, argv):
    known = str(DeadLetter.objects.values_list("pk", flat=True).first())
    check(["deadletters", "show", *(known if pk is None else pk for pk in ids), *argv])


@HYPOTHESIS
@given(
    st.sampled_from(["replay", "discard"]),
    st.lists(IDS, max_size=3),
    pairs(
        {**FILTERS, "--limit": LIMITS, "--reason": TEXTS, "--operator": TEXTS,
         "--rate": RATES, "--dry-run": st.none(), "--allow-poisoned": st.none(),
         "--to-queue": st.one_of(st.just("emails"), TEXTS), "--allow-unknown-queue": st.none()}
    ),
    st.sampled_from(["oncall", "chief", "nobody"]),
    st.one_of(st.just("API back"), TEXTS),
)  # fmt: skip
def test_replay_and_discard_arguments(oncall, chief, letters, action, ids, argv, who, reason):
    known = [str(pk) for pk in DeadLetter.objects.values_list("pk", flat=True)[:2]]
    ids = ids or known[:1]
    result = check(["deadletters", action, *ids, *argv, "--reason", reason, "--operator", who])
    if result.code == 2:
        assert "skip" not in result.out  # no preview printed before a refusal


ROLES = st.one_of(st.sampled_from(["viewer", "operator", "admin"]), TEXTS)
SECRETS = st.one_of(st.just(PASSWORD), TEXTS)


@HYPOTHESIS
@given(
    st.one_of(st.from_regex(r"[a-z]{1,10}", fullmatch=True), TEXTS),
    ROLES,
    SECRETS,
    pairs({"--role": ROLES, "--password": SECRETS, "--email": TEXTS}),
)
def test_createoperator_arguments(username, role, password, argv):
    check(["createoperator", username, "--role", role, "--password", password, *argv])


class ClosedPipe(io.StringIO):
    """A stdout whose reader went away after the first line."""

    def write(self, text):
        if self.getvalue().count("\n") >= 1:
            raise BrokenPipeError(32, "Broken pipe")
        return super().write(text)


@pytest.mark.parametrize(
    "argv",
    [
        ["deadletters", "list"],
        ["deadletters", "list", "--json"],
        ["deadletters", "show", "{pk}"],
        ["queuehealth"],
        ["jobs"],
    ],
)
def test_a_listing_whose_reader_left_ends_quietly(argv):
    letter = DeadLetterFactory.create_batch(3)[0]
    argv = [arg.format(pk=letter.pk) for arg in argv]
    err = io.StringIO()
    cmd = command(argv[0], stdout=ClosedPipe(), stderr=err)
    with (
        contextlib.redirect_stderr(err),
        mock.patch.object(connections, "close_all"),
        pytest.raises(SystemExit) as exit,
    ):
        cmd.run_from_argv(["manage.py", *argv])
    assert exit.value.code == 141
    assert err.getvalue() == ""


DAYS = st.one_of(st.sampled_from(["2020-01-01", "2024-02-30", "9999-12-31", "0001-01-01"]), TEXTS)


@HYPOTHESIS
@given(
    pairs(
        {**FILTERS, "--format": TEXTS, "--state": TEXTS, "--fingerprint": TEXTS,
         "--search": TEXTS, "--since": DAYS, "--until": DAYS, "--order": TEXTS,
         "--operator": TEXTS}
    ),
    st.sampled_from(["oncall", "chief", "nobody"]),
    st.sampled_from(["csv", "jsonl"]),
)  # fmt: skip
def test_export_arguments(oncall, chief, letters, argv, who, fmt):
    """Never --output here: a fuzzed path would be a file made anywhere."""
    from jobqueue.models import AuditEntry

    exports = AuditEntry.objects.filter(action="letters.export", channel="cli")
    before = exports.count()
    result = check(["deadletters", "export", "--format", fmt, *argv, "--operator", who])
    assert exports.count() == before + (result.code == 0)


@HYPOTHESIS
@given(
    st.one_of(IDS, st.none()),
    pairs({"--operator": TEXTS}),
    st.sampled_from(["oncall", "chief", "nobody"]),
)
def test_approve_arguments(oncall, chief, letters, settings, run_id, argv, who):
    """`approve RUN --operator NAME` (the two-person rule): oncall's run is refused to oncall
    and to anyone unknown, and carried out when chief approves it."""
    from deadletters import services

    settings.REDRIVE = {**settings.REDRIVE, "APPROVAL_THRESHOLD": 1}
    awaiting = ReplayRun.objects.filter(state="awaiting").first()
    if awaiting is None:
        ids = list(DeadLetter.objects.values_list("pk", flat=True)[:2])
        selection = services.freeze_selection(operator=oncall, action="replay", ids=ids)
        awaiting = services.start_run(operator=oncall, selection=selection, reason="API back")
    run_id = str(awaiting.pk) if run_id is None else run_id
    result = check(["deadletters", "approve", run_id, *argv, "--operator", who])
    if result.code == 0:
        assert ReplayRun.objects.get(pk=awaiting.pk).approved_by == "chief"
    else:
        assert ReplayRun.objects.get(pk=awaiting.pk).state == "awaiting"


def test_what_a_task_wrote_reaches_the_terminal_as_visible_escapes():
    """An error's class name and message are a task's text: an escape sequence in them must not
    clear the operator's screen or retitle the terminal, nor a newline fake a list row."""
    from tests.cli import run
    from tests.factories import DeadLetterFactory

    letter = DeadLetterFactory(
        error_class="mod.Weird\x1b[31mRED\nevent=fake",
        last_error="line1\x1b[2J\x1b]0;title\x07 \rover",
    )
    listed = run("deadletters", "list")
    shown = run("deadletters", "show", str(letter.pk))
    for result in (listed, shown):
        assert result.code == 0, result
        assert not any(c in result.out for c in "\x1b\x07\r"), result.out
        assert "\\x1b" in result.out
    assert len(listed.out.strip().splitlines()) == 1  # one row, not a faked second line


def _act_options(action_name):
    """Every option `manage.py act <action>` takes, each with hostile and ordinary values."""
    from deadletters import actions

    action = actions.get(action_name)
    fields = action.select_form.base_fields if action.bulk else action.fields()
    values = st.one_of(IDS, TEXTS, st.sampled_from(["[]", "{}", "[1, 2]", '{"a": 1}', "on"]))
    return {f"--{name.replace('_', '-')}": values for name in fields}


@HYPOTHESIS
@given(data=st.data())
def test_act_arguments(oncall, chief, letters, data):
    """Every action of the registry from the command line, with anything in its options: a
    clean refusal (one line, status 2, nothing written) or done; never a traceback."""
    from deadletters import actions

    name = data.draw(st.sampled_from(sorted(actions.REGISTRY)))
    who = data.draw(st.sampled_from([oncall.username, chief.username, "nobody"]))
    JobFactory(queue_name="emails")
    check(["act", name, *data.draw(pairs(_act_options(name))), "--operator", who])
