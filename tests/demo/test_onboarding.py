"""The demo's workflows (demo.onboarding) in-process: what `manage.py demo` seeds ends as the
console shows it: onboardings asleep for their week, a refused card dead at its first step, a
contacts import with its malformed rows buried one letter each."""

import pytest

from demo import onboarding
from demo.models import Account, OutgoingEmail, ProviderCharge
from jobqueue.models import DeadLetter, Job, JobState, Workflow, WorkflowState
from tests.jobqueue.test_worker import burst

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_seeded_workflows_end_where_the_demo_says():
    *customers, contacts = onboarding.seed(customers=3)
    burst()
    states = dict(Workflow.objects.values_list("pk", "state"))
    assert [states[pk] for pk in customers] == ["sleeping", "sleeping", "dead"]
    refused = Workflow.objects.get(pk=customers[-1])
    assert refused.step == "charge_card"
    letter = DeadLetter.objects.get(original_job_id=customers[-1])
    assert "refuses payment method 'tok_expired'" in letter.last_error
    assert ProviderCharge.objects.count() == 2
    assert OutgoingEmail.objects.filter(kind="welcome").count() == 2

    assert states[contacts] == WorkflowState.DONE
    job = Job.objects.get(pk=contacts)
    bad_rows = [n for n in range(20) if onboarding.CONTACTS[n % 7] in ("not-an-address", "ken@")]
    assert job.return_value == {
        "imported": 20 - len(bad_rows),
        "failed": len(bad_rows),
        "outcome": "done_with_failures",
    }
    buried = DeadLetter.objects.filter(task_path="demo.onboarding.import_contact")
    assert sorted(letter.args[0]["row"] for letter in buried) == bad_rows
    imported = Account.objects.exclude(email__startswith="customer")
    assert imported.count() == 20 - len(bad_rows)
    done = Job.objects.get(task_path="demo.onboarding.contacts_imported")
    assert done.state == JobState.DONE and done.return_value["outcome"] == "done_with_failures"
