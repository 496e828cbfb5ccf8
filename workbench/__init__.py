"""Workbench: measure how fast training and inference can be fed from remote storage."""

__version__ = "0.1.0"
