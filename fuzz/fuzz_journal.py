"""The JSON-lines journals (``_journal/*.jsonl``) of the object and fs layouts: bad lines are skipped, never a crash."""

import json
from pathlib import Path

from common import fuzz, instrumented

with instrumented():
    from workbench.layouts.objects import JOURNAL, ObjectSet
    from workbench.loaders.fs import FileEntry, read_journal
    from workbench.storage.local import DirStore

ROOT = Path("/dev/shm" if Path("/dev/shm").is_dir() else "/tmp") / "workbench-fuzz-journal"  # reused by every run
(ROOT / JOURNAL).mkdir(parents=True, exist_ok=True)


def target(data: bytes) -> None:
    (ROOT / JOURNAL / "0001.jsonl").write_bytes(data)
    records = ObjectSet(DirStore(ROOT), 1, "int")._journal()[0]
    assert all(isinstance(r, dict) and k == r["key"] for k, r in records.items())
    assert all(e is None or (isinstance(e, FileEntry) and k == e.rel) for k, e in read_journal(ROOT).items())


if __name__ == "__main__":
    lines = [json.dumps({"key": f"train/c/{i}.jpg", "id": f"{i:032x}", "label": i, "blob": False}) for i in range(3)]
    fuzz("journal", target, ["\n".join(lines).encode() + b"\n"])
