"""The API with its endpoints: the reads, and the actions (deadletters.api.actions)."""

from .actions import router as acts
from .core import api
from .door import guarded
from .reads import router as reads

api.add_decorator(guarded)  # the one door, before every endpoint
api.add_router("/", reads)
api.add_router("/", acts)

__all__ = ["api"]
