"""A multilabel blob label (``np.save`` bytes) as stored in every backend, read with `decode_multilabel`."""

import numpy as np
from common import fuzz, instrumented

with instrumented():
    from workbench.data import decode_multilabel, encode_multilabel


def target(data: bytes) -> None:
    assert isinstance(decode_multilabel(data), np.ndarray)


if __name__ == "__main__":
    fuzz("multilabel", target, [encode_multilabel(np.array([0, 1, 1, 0], dtype=np.uint8)),
                                encode_multilabel(np.eye(3, dtype=np.float32))])
