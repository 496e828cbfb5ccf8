"""Storage: flat key -> bytes stores, one module per system that holds objects.

`Store` (base) is the whole interface the layouts, loaders and checkpoints use: list, get, ranged get,
head, put, multipart put, delete. `S3Store` (s3) is the only place an S3 client is built or an S3 error
is read; `DirStore` (local) is a directory. Replacing the S3 client is a change to `s3.py` alone.
"""

from workbench.storage.base import MultipartUpload, ObjectInfo, Store
from workbench.storage.local import TMP_SUFFIX, DirStore
from workbench.storage.s3 import S3Store, explain_s3_tls_errors, parse_s3_uri, s3_client, s3_client_at

__all__ = [
    "TMP_SUFFIX", "DirStore", "MultipartUpload", "ObjectInfo", "S3Store", "Store", "explain_s3_tls_errors",
    "parse_s3_uri", "s3_client", "s3_client_at",
]
