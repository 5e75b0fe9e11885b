"""The API with its endpoints: the reads, and the actions (deadletters.api.actions)."""

from .core import api
from .actions import router as acts
from .reads import router as reads

api.add_router("/", reads)
api.add_router("/", acts)

__all__ = ["api"]
