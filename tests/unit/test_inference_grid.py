"""The grid every inference measurement (our sweep and perf_analyzer's) checks before any I/O."""

import pytest

from workbench.bench.inference import check_grid
from workbench.errors import WorkbenchError


def test_a_valid_grid_comes_back_as_lists():
    assert check_grid(range(1, 3), (1, 8), 10) == ([1, 2], [1, 8])


@pytest.mark.parametrize(("concurrencies", "batches", "samples", "says"), [
    ([], [1], 10, "concurrency values must be integers >= 1"),
    ([0], [1], 10, "concurrency values must be integers >= 1"),
    ([1], [1.5], 10, "batch size values must be integers >= 1"),
    ([1], [65], 10, "over the models' max_batch_size of 64"),
    ([1], [1], 0, "samples must be >= 1"),
])
def test_a_wrong_value_is_one_line_naming_it(concurrencies, batches, samples, says):
    with pytest.raises(WorkbenchError, match=says) as info:
        check_grid(concurrencies, batches, samples)
    assert "\n" not in str(info.value)
