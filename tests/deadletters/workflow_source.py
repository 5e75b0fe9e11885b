"""A host's own dead-letter source, as the workflows to come would be: one module."""

from jobqueue.store.sources import BaseSource, Description, Replayed

STUCK = "the workflow was cancelled"


class WorkflowLetters(BaseSource):
    name = "workflow"
    label = "Workflow"

    def __init__(self):
        self.discarded: list[int] = []

    def replay(self, letters, *, now, using):
        return {
            letter.pk: STUCK if letter.kwargs.get("cancelled") else Replayed(ref=f"wf-{letter.pk}")
            for letter in letters
        }

    def discard(self, letters, *, now, using):
        self.discarded += [letter.pk for letter in letters]
        return super().discard(letters, now=now, using=using)

    def describe(self, letter, *, payload=None):
        return Description(label=self.label, reference_name="run", reference=letter.task_path)
