"""The dead-letter console."""

# Declares the console's keys of REDRIVE before any of its modules reads one.
from . import conf  # noqa: F401
