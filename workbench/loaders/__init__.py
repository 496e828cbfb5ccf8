"""Loaders: one module per loading strategy; every one yields `Item`s (or `Batch`es) and counts what it delivered."""

from workbench.data.batch import Batch
from workbench.loaders.base import Item, Loader, LoaderConfig
from workbench.loaders.registry import LOADERS, default_loaders, loader_class, make_loader, register_loader

__all__ = [
    "LOADERS",
    "Batch",
    "Item",
    "Loader",
    "LoaderConfig",
    "default_loaders",
    "loader_class",
    "make_loader",
    "register_loader",
]
