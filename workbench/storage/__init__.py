"""Storage: flat key -> bytes stores, one module per system that holds objects.

`Store` (base) is the whole interface the layouts, loaders and checkpoints use: list, get, ranged get,
head, put, multipart put, delete. `S3Store` is the S3 store every S3 path builds: today the obstore one
(`s3_native.NativeS3Store`, GIL-free requests); `s3.BotoS3Store` is the boto3 one it extends, and `s3.py`
is the only place a boto3 client is built or a botocore error is read. `DirStore` (local) is a directory.
Switching the S3 client of the whole workbench is the one line below that names `S3Store`.
"""

from workbench.storage.base import MultipartUpload, ObjectInfo, Store, WrongSize
from workbench.storage.local import TMP_SUFFIX, DirStore
from workbench.storage.s3 import BotoS3Store, explain_s3_tls_errors, parse_s3_uri, s3_client, s3_client_at
from workbench.storage.s3_native import NativeS3Store as S3Store

__all__ = [
    "TMP_SUFFIX", "BotoS3Store", "DirStore", "MultipartUpload", "ObjectInfo", "S3Store", "Store",
    "WrongSize", "explain_s3_tls_errors", "parse_s3_uri", "s3_client", "s3_client_at",
]
