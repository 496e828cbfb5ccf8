"""The OSS-connector manifest of an s3-objects dataset (``key [label]`` lines, keys percent-encoded), from S3."""

import io

from common import fuzz, instrumented

with instrumented():
    from workbench.loaders.s3_objects import default_manifest_parser


def target(data: bytes) -> None:
    for key, label in default_manifest_parser(io.BytesIO(data)):
        assert isinstance(key, str) and key and not key.startswith("/"), key
        assert label is None or isinstance(label, int | str), label


if __name__ == "__main__":
    fuzz("manifest", target, [b"train/cat/a.jpg 0\ntrain/dog/b%20c.jpg 1\n", b"k -3\nk2 k2.label\nk3\n"])
