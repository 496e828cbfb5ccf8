"""`workbench bench ingest-cortx` without the stack: bad input is refused first, the table shows every ratio."""

from __future__ import annotations

import pytest

from workbench.bench.cortx_upload import NoiseImages, UploadRow, bench_cortx_upload, table_lines
from workbench.config import Settings
from workbench.errors import WorkbenchError


def test_bad_counts_are_one_line_before_anything_connects(tmp_path):
    with pytest.raises(WorkbenchError, match=r"workers, count, side and repeats must be >= 1, got workers=\[0, 2\]"):
        bench_cortx_upload(Settings(), 10, 8, [0, 2], 1, tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing written, no bucket made


def test_the_table_gives_each_worker_count_its_median_and_ratio_to_one():
    rows = [UploadRow(1, 2000, 9_000_000, 96, 3, 4.0, 3.9, 4.4, 500.0, 1.0),
            UploadRow(3, 2000, 9_000_000, 96, 3, 2.5, 2.4, 2.9, 800.0, 1.6)]
    lines = table_lines(rows)
    assert lines[0] == "upload_cv_dataset, 2000 x 96x96 JPEG, median of 3 repeat(s), same run"
    assert [line.split() for line in lines[2:]] == [["1", "4.00", "3.90-4.40", "500", "1.00x"],
                                                     ["3", "2.50", "2.40-2.90", "800", "1.60x"]]


def test_noise_images_are_the_same_every_time_and_differ_from_each_other():
    images = NoiseImages(3, side=5)
    assert images[1][0].tobytes() == NoiseImages(3, side=5)[1][0].tobytes() != images[2][0].tobytes()
    assert [label for _, label in (images[i] for i in range(3))] == [0, 1, 2] and images[0][0].size == (5, 5)
