"""Every read the console offers, as JSON: the same selectors, the same forms validating the same
parameters (a bad one is a 400 with the form's message, where a page would name and ignore it),
payloads masked as the pages mask them.

Lists page by keyset (deadletters.paging): each answer's `next` is the `after` of the page
that follows (null on the last one), `prev` the `before` of the one that leads to it.
"""

# Imported in the order the OpenAPI document lists their endpoints.
# isort: off
from . import letters, runs, jobs, queues, schedules, workflows, audit  # noqa: F401

# isort: on
from .jobs import job_list
from .kit import router
from .letters import letter_list

__all__ = ["job_list", "letter_list", "router"]
