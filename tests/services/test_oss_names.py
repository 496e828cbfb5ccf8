# ruff: noqa: E501  (the README's examples below are kept verbatim, long lines and all)
"""The OSS connector README's examples, run as its users wrote them, against the stack's MinIO.

Each block below is the README's text (seed 002_5541cca19950c6cd.txt, "Examples" and "Configuration"), kept
verbatim; `_localize` changes only the import line (``osstorchconnector`` -> our modules) and the values of
ENDPOINT, CRED_PATH and CONFIG_PATH (the stack's MinIO, a credential file with the stack's keys in tmp_path, the
README's config with its log paths in tmp_path). The bucket and keys are the README's own: the fixture fills
``ossconnectorbucket`` with PNGs under them and deletes it afterwards.
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from collections.abc import Iterable

import pytest
import torch
from PIL import Image

from workbench.storage import BotoS3Store, s3_client

pytestmark = [pytest.mark.services,
              pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")]

BUCKET = "ossconnectorbucket"
PREFIX = "EnglistImg/Img/BadImag/Bmp/Sample001/"
N = 8  # the map example reads map_dataset[5]

# ------------------------------------------------------------------------ the README's text (verbatim)

CONFIG = """{
    "logLevel": 1,
    "logPath": "/var/log/oss-connector/connector.log",
    "auditPath": "/var/log/oss-connector/audit.log",
    "datasetConfig": {
        "prefetchConcurrency": 24,
        "prefetchWorker": 2
    },
    "checkpointConfig": {
        "prefetchConcurrency": 24,
        "prefetchWorker": 4,
        "uploadConcurrency": 64
    }
}"""

ITERABLE = '''
from osstorchconnector import OssIterableDataset

ENDPOINT = "http://oss-cn-beijing-internal.aliyuncs.com"
CONFIG_PATH = "/etc/oss-connector/config.json"
CRED_PATH = "/root/.alibabacloud/credentials"
OSS_URI = "oss://ossconnectorbucket/EnglistImg/Img/BadImag/Bmp/Sample001/"

# 1) from_prefix
iterable_dataset = OssIterableDataset.from_prefix(OSS_URI, endpoint=ENDPOINT, cred_path=CRED_PATH, config_path=CONFIG_PATH)
for item in iterable_dataset:
    print(item.key)
    print(item.size)
    content = item.read()
    print(len(content))
    item.close()


# 2) from_objects
uris = [
    "oss://ossconnectorbucket/EnglistImg/Img/BadImag/Bmp/Sample001/img001-00001.png",
    "oss://ossconnectorbucket/EnglistImg/Img/BadImag/Bmp/Sample001/img001-00002.png",
    "oss://ossconnectorbucket/EnglistImg/Img/BadImag/Bmp/Sample001/img001-00003.png"
]

iterable_dataset = OssIterableDataset.from_objects(uris, endpoint=ENDPOINT, cred_path=CRED_PATH, config_path=CONFIG_PATH)]
for item in iterable_dataset:
    print(item.key)
    print(item.size)
    content = item.read()
    print(len(content))
    item.close()
'''

MAP = '''
from osstorchconnector import OssMapDataset

ENDPOINT = "http://oss-cn-beijing-internal.aliyuncs.com"
CONFIG_PATH = "/etc/oss-connector/config.json"
CRED_PATH = "/root/.alibabacloud/credentials"
OSS_URI = "oss://ossconnectorbucket/EnglistImg/Img/BadImag/Bmp/Sample001/"

# 1) from_prefix
map_dataset = OssMapDataset.from_prefix(OSS_URI, endpoint=ENDPOINT, cred_path=CRED_PATH, config_path=CONFIG_PATH)
# random access
item = map_dataset[0]
print(item.key)
content = item.read()
print(item.size)
print(len(content))
item.close()

# or
with map_dataset[5] as item:
    print(item.key)
    content = item.read()
    print(item.size)
    print(len(content))

# iterable
for item in map_dataset:
    print(item.key)
    print(item.size)
    content = item.read()
    print(len(content))
    item.close()


# 2) from_objects
uris = [
    "oss://ossconnectorbucket/EnglistImg/Img/BadImag/Bmp/Sample001/img001-00001.png",
    "oss://ossconnectorbucket/EnglistImg/Img/BadImag/Bmp/Sample001/img001-00002.png",
    "oss://ossconnectorbucket/EnglistImg/Img/BadImag/Bmp/Sample001/img001-00003.png"
]

map_dataset = OssMapDataset.from_objects(uris, endpoint=ENDPOINT, cred_path=CRED_PATH, config_path=CONFIG_PATH)
# random access
item = map_dataset[1]
print(item.key)
print(item.size)
content = item.read()
print(len(content))
item.close()

# iterable
for item in map_dataset:
    print(item.key)
    print(item.size)
    content = item.read()
    print(len(content))
    item.close()
'''

MANIFEST_LINES = """Img/BadImag/Bmp/Sample001/img001-00001.png label1
Img/BadImag/Bmp/Sample001/img001-00002.png label2
Img/BadImag/Bmp/Sample001/img001-00003.png label3
"""

MANIFEST = '''
from osstorchconnector import OssIterableDataset

ENDPOINT = "http://oss-cn-beijing-internal.aliyuncs.com"
CONFIG_PATH = "/etc/oss-connector/config.json"
CRED_PATH = "/root/.alibabacloud/credentials"
OSS_URI = "oss://ossconnectorbucket/EnglistImg/Img/BadImag/Bmp/Sample001/"

# manifest_parser
def manifest_parser(reader: io.IOBase) -> Iterable[Tuple[str, str]]:
    lines = reader.read().decode("utf-8").strip().split("\\n")
    for i, line in enumerate(lines):
        try:
            items = line.strip().split(' ')
            if len(items) >= 2:
                key = items[0]
                label = items[1]
                yield (key, label)
            elif len(items) == 1:
                key = items[0]
                yield (key, '')
            else:
                raise ValueError("format error")
        except ValueError as e:
            raise e

# from local manifest_file
iterable_dataset = OssIterableDataset.from_manifest_file("manifest_file", manifest_parser, "oss://ossconnectorbucket/EnglistImg/", endpoint=ENDPOINT, cred_path=CRED_PATH, config_path=CONFIG_PATH)
for item in iterable_dataset:
    print(item.key)
    print(item.size)
    print(item.label)
    content = item.read()
    print(len(content))
    item.close()

# manifest_file on oss
iterable_dataset = OssIterableDataset.from_manifest_file("oss://ossconnectorbucket/manifest_file/EnglistImg/manifest_file", manifest_parser, "oss://ossconnectorbucket/EnglistImg/", endpoint=ENDPOINT, cred_path=CRED_PATH, config_path=CONFIG_PATH)
'''

TRANSFORM = '''
import sys
import io
import torchvision.transforms as transforms
from PIL import Image

from osstorchconnector import OssIterableDataset, OssMapDataset

ENDPOINT = "http://oss-cn-beijing-internal.aliyuncs.com"
CONFIG_PATH = "/etc/oss-connector/config.json"
CRED_PATH = "/root/.alibabacloud/credentials"
OSS_URI = "oss://ossconnectorbucket/EnglistImg/Img/BadImag/Bmp/Sample001/"

trans = transforms.Compose([
    transforms.Resize(256),
    transforms.CenterCrop(224),
    transforms.ToTensor(),
    transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
])

def transform(data):
    try:
        img = Image.open(io.BytesIO(data.read())).convert('RGB')
        val = trans(img)
    except Exception as e:
        raise e
    return val, data.label

iterable_dataset = OssIterableDataset.from_prefix(OSS_URI, endpoint=ENDPOINT, transform=transform, cred_path=CRED_PATH, config_path=CONFIG_PATH)

for item in iterable_dataset:
    print(item[0])
    print(item[1])
'''

DATALOADER = '''
import sys
import io
import torch
import torchvision.transforms as transforms
from PIL import Image
from osstorchconnector import OssIterableDataset, OssMapDataset

ENDPOINT = "http://oss-cn-beijing-internal.aliyuncs.com"
CONFIG_PATH = "/etc/oss-connector/config.json"
CRED_PATH = "/root/.alibabacloud/credentials"
OSS_URI = "oss://ossconnectorbucket/EnglistImg/Img/BadImag/Bmp/Sample001/"


trans = transforms.Compose([
    transforms.Resize(256),
    transforms.CenterCrop(224),
    transforms.ToTensor(),
    transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
])

def transform(data):
    try:
        img = Image.open(io.BytesIO(data.read())).convert('RGB')
        val = trans(img)
    except Exception as e:
        raise e
    return val, data.key, data.label

# OssIterableDataset
iterable_dataset = OssIterableDataset.from_prefix(OSS_URI, endpoint=ENDPOINT, transform=transform, cred_path=CRED_PATH, config_path=CONFIG_PATH)
loader = torch.utils.data.DataLoader(iterable_dataset, batch_size=256, num_workers=32, prefetch_factor=2)
for i, (datas, keys, labels) in enumerate(loader):
    print(datas)
    print(keys)

# OssMapDataset with shuffle
map_dataset = OssMapDataset.from_prefix(OSS_URI, endpoint=ENDPOINT, transform=transform, cred_path=CRED_PATH, config_path=CONFIG_PATH)
loader = torch.utils.data.DataLoader(map_dataset, batch_size=256, num_workers=32, prefetch_factor=2, shuffle=True)
for i, (datas, keys, labels) in enumerate(loader):
    print(datas)
    print(keys)
'''

CHECKPOINT = '''
import torch
from osstorchconnector import OssCheckpoint

ENDPOINT = "http://oss-cn-beijing-internal.aliyuncs.com"
CONFIG_PATH = "/etc/oss-connector/config.json"
CRED_PATH = "/root/.alibabacloud/credentials"

checkpoint = OssCheckpoint(endpoint=ENDPOINT, cred_path=CRED_PATH, config_path=CONFIG_PATH)

# read checkpoint
CHECKPOINT_READ_URI = "oss://ossconnectorbucket/checkpoint/epoch.0"
with checkpoint.reader(CHECKPOINT_READ_URI) as reader:
   state_dict = torch.load(reader)

# write checkpoint
CHECKPOINT_WRITE_URI = "oss://ossconnectorbucket/checkpoint/epoch.1"
with checkpoint.writer(CHECKPOINT_WRITE_URI) as writer:
   torch.save(state_dict, writer)
'''

# ------------------------------------------------------------------------ running it here

IMPORTS = {"from osstorchconnector import OssCheckpoint": "from workbench.checkpoints.s3 import OssCheckpoint",
           "from osstorchconnector import": "from workbench.compat.oss_connector import"}
# The README's from_objects line ends in "CONFIG_PATH)]", a SyntaxError: its one typo, the one other change.
TYPO = ("config_path=CONFIG_PATH)]\n", "config_path=CONFIG_PATH)\n")


def _png(i: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (24 + i, 16 + 2 * i), (30 * i % 256, 90, 200)).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def oss_bucket(stack):
    """The README's bucket: N PNGs under its prefix, its manifest on OSS and a checkpoint epoch.0; deleted after."""
    client = s3_client(stack)
    store = BotoS3Store(stack, BUCKET)
    store.ensure_bucket(True)
    store.delete(k for k, _ in store.list())  # what an interrupted run left
    objects = {f"{PREFIX}img001-{i:05d}.png": _png(i) for i in range(1, N + 1)}
    for key, body in objects.items():
        client.put_object(Bucket=BUCKET, Key=key, Body=body)
    client.put_object(Bucket=BUCKET, Key="manifest_file/EnglistImg/manifest_file", Body=MANIFEST_LINES.encode())
    state = {"w": torch.arange(1000, dtype=torch.float32), "step": torch.tensor(7)}
    saved = io.BytesIO()
    torch.save(state, saved)
    client.put_object(Bucket=BUCKET, Key="checkpoint/epoch.0", Body=saved.getvalue())
    yield objects, state
    store.delete(k for k, _ in store.list())
    client.delete_bucket(Bucket=BUCKET)


@pytest.fixture
def values(stack, tmp_path):
    """ENDPOINT, CRED_PATH and CONFIG_PATH here: the stack's MinIO, its keys in the README's credential format, the
    README's config with its log files in tmp_path."""
    access, secret = stack.s3_credentials()
    cred_path = tmp_path / "credentials"
    cred_path.write_text(json.dumps({"AccessKeyId": access, "AccessKeySecret": secret}))
    config = json.loads(CONFIG)
    config["logPath"], config["auditPath"] = str(tmp_path / "connector.log"), str(tmp_path / "audit.log")
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config))
    return {"ENDPOINT": stack.s3_endpoint(), "CRED_PATH": str(cred_path), "CONFIG_PATH": str(config_path)}


def _localize(example: str, values: dict[str, str]) -> str:
    text = example
    for theirs, ours in IMPORTS.items():
        text = text.replace(theirs, ours)
    for name, value in values.items():
        text, n = re.subn(rf'^{name} = ".*"$', f"{name} = {value!r}", text, flags=re.MULTILINE)
        assert n == 1, name
    assert "osstorchconnector" not in text
    return text


def _run(example: str, values: dict[str, str], name: str) -> dict:
    # io, Iterable and Tuple: the manifest example's parser names them without importing them
    namespace = {"__name__": f"seed_{name}", "io": io, "Iterable": Iterable, "Tuple": tuple}
    exec(compile(_localize(example, values), f"<README example: {name}>", "exec"), namespace)
    return namespace


def _triples(keys, objects) -> list[str]:
    return [line for key in keys for line in (key, str(len(objects[key])), str(len(objects[key])))]


def test_iterable_dataset_example(oss_bucket, values, capsys):
    objects, _ = oss_bucket
    assert ITERABLE.count(TYPO[0]) == 1
    _run(ITERABLE.replace(*TYPO), values, "IterableDataset")
    first3 = sorted(objects)[:3]
    assert capsys.readouterr().out.splitlines() == _triples(sorted(objects), objects) + _triples(first3, objects)


def test_map_dataset_example(oss_bucket, values, capsys):
    objects, _ = oss_bucket
    keys = sorted(objects)
    ns = _run(MAP, values, "MapDataset")
    expected = _triples([keys[0], keys[5], *keys, keys[1], *keys[:3]], objects)
    assert capsys.readouterr().out.splitlines() == expected
    assert len(ns["map_dataset"]) == 3


def test_manifest_example(oss_bucket, values, capsys, tmp_path, monkeypatch):
    objects, _ = oss_bucket
    monkeypatch.chdir(tmp_path)
    (tmp_path / "manifest_file").write_text(MANIFEST_LINES)  # the README's "manifest_file", in the cwd
    ns = _run(MANIFEST, values, "Manifest file")
    keys = sorted(objects)[:3]
    labels = ["label1", "label2", "label3"]
    expected = [line for key, label in zip(keys, labels, strict=True)
                for line in (key, str(len(objects[key])), label, str(len(objects[key])))]
    assert capsys.readouterr().out.splitlines() == expected
    from_oss = [(item.key, item.label, item.read()) for item in ns["iterable_dataset"]]  # the one on OSS
    assert from_oss == [(key, label, objects[key]) for key, label in zip(keys, labels, strict=True)]


def test_transform_example(oss_bucket, values, capsys):
    objects, _ = oss_bucket
    ns = _run(TRANSFORM, values, "Dataset and transform")
    out = capsys.readouterr().out
    assert out.count("tensor(") == len(objects)
    tensors = [value for value, label in ns["iterable_dataset"]]
    assert [t.shape for t in tensors] == [torch.Size([3, 224, 224])] * len(objects)


def test_dataloader_example(oss_bucket, values, capsys, tmp_path):
    objects, _ = oss_bucket
    _run(DATALOADER, values, "Pytorch dataloader")
    printed = re.findall(r"'(EnglistImg/[^']+\.png)'", capsys.readouterr().out)
    assert Counter(printed) == Counter({key: 2 for key in objects})  # each object once per loader
    audit = [line.split("\t") for line in (tmp_path / "audit.log").read_text().splitlines()]  # the config's
    assert Counter(row[2] for row in audit) == Counter({f"{BUCKET}/{key}": 2 for key in objects})


def test_checkpoint_example(oss_bucket, values, stack):
    _, state = oss_bucket
    ns = _run(CHECKPOINT, values, "Checkpoint")
    assert ns["state_dict"].keys() == state.keys()
    body = s3_client(stack).get_object(Bucket=BUCKET, Key="checkpoint/epoch.1")["Body"].read()
    written = torch.load(io.BytesIO(body))
    assert all(torch.equal(written[k], state[k]) for k in state)
