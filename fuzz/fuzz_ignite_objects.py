"""Ignite binary objects turned into tensors: IgniteDataset's schema inference and conversion, and `sample_item`.

pyignite decodes the wire format; what reaches our code is a binary object (a class with a ``_schema`` of
declared Ignite types) whose fields may hold anything another writer put there. The fuzzer's bytes choose the
schema and the values; every converted element must then become numpy arrays of the declared dtypes.
"""

import contextlib
import datetime
import decimal
import uuid
from collections import OrderedDict

import atheris
from common import fuzz, instrumented

with instrumented():
    from workbench.compat.ignite_dataset import infer_schema, to_python
    from workbench.errors import WorkbenchError
    from workbench.loaders.ignite import sample_item

TYPES = ["String", "ByteArrayObject", "IntObject", "LongObject", "ShortObject", "ByteObject", "FloatObject",
         "DoubleObject", "BoolObject", "UUIDObject", "IntArrayObject", "LongArrayObject", "DoubleArrayObject",
         "BoolArrayObject", "StringArrayObject", "CharObject", "DecimalObject", "DateObject", "MapObject",
         "CollectionObject", "BinaryObject", "ObjectArrayObject"]
FIELDS = ["id", "split", "label", "data", "width", "x", "nested"]


def value(fdp: atheris.FuzzedDataProvider, depth: int = 2):
    kind = fdp.ConsumeIntInRange(0, 12 if depth else 9)
    if kind == 0:
        return None
    if kind == 1:
        return fdp.ConsumeBool()
    if kind == 2:
        return fdp.ConsumeInt(fdp.ConsumeIntInRange(1, 80))
    if kind == 3:
        return fdp.ConsumeRegularFloat() if fdp.ConsumeBool() else fdp.ConsumeFloat()
    if kind == 4:
        return fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 12))
    if kind == 5:
        return fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 12))
    if kind == 6:
        return uuid.UUID(int=fdp.ConsumeInt(16) % (1 << 128))
    if kind == 7:
        return decimal.Decimal(fdp.PickValueInList(["NaN", "sNaN", "Infinity", "-Infinity", "1e400", "-0", "3.5",
                                                    str(fdp.ConsumeInt(8))]))
    if kind == 8:
        return datetime.datetime(2000, 1, 1) + datetime.timedelta(seconds=fdp.ConsumeIntInRange(0, 10**9))
    if kind == 9:
        return fdp.ConsumeIntListInRange(fdp.ConsumeIntInRange(0, 4), -(2**70), 2**70)
    if kind == 10:
        return [value(fdp, depth - 1) for _ in range(fdp.ConsumeIntInRange(0, 3))]
    if kind == 11:
        return {fdp.ConsumeUnicodeNoSurrogates(3): value(fdp, depth - 1) for _ in range(fdp.ConsumeIntInRange(0, 3))}
    return binary_object(fdp, depth - 1)


def binary_object(fdp: atheris.FuzzedDataProvider, depth: int = 2):
    names = [n for n in FIELDS if fdp.ConsumeBool()]
    schema = OrderedDict((n, type(fdp.PickValueInList(TYPES), (), {})) for n in names)
    obj = type("Obj", (), {"_schema": schema})()
    for name in names:
        setattr(obj, name, value(fdp, depth))
    return obj


def target(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    first = binary_object(fdp) if fdp.ConsumeBool() else value(fdp)
    with contextlib.suppress(WorkbenchError):
        sample_item("k", first, "c", fdp.PickValueInList(["int", "blob", "none"]))
    to_python(first)
    node = infer_schema(first, "Ignite cache c: first entry")
    for other in [first] + [binary_object(fdp) for _ in range(fdp.ConsumeIntInRange(0, 2))]:
        node.arrays(node.convert(other, "Ignite cache c: entry"))


if __name__ == "__main__":
    fuzz("ignite-objects", target, [bytes(range(256)), b"\x01" * 64, b"\xff" * 64])
