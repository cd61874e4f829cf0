"""The run store: one SQLite file shared by the kernel (writer) and the server (reader)."""

from .location import store_path
from .reader import StoreReader
from .schema import StoreError
from .writer import StoreWriter

__all__ = ["StoreError", "StoreReader", "StoreWriter", "store_path"]
