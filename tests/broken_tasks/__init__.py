"""Task modules that fail while they are imported (the worker and the commands must refuse
their jobs with the reason, not crash)."""
