"""docs/porting.md's tables, row by row: each row's claim checked against numpy on random inputs. The rows are
read from the page, so a row without a check fails (a new row comes with its check) and so does a check
whose row is gone. The checks live in porting_checks.py and the porting_checks_*.py files it imports below,
keyed by a row's first cell (its PyTorch column, verbatim)."""
import os

import pytest

import porting_checks_extra  # noqa: F401  registers its rows
import porting_checks_layers2  # noqa: F401  registers its rows
import porting_checks_math  # noqa: F401  registers its rows
import porting_checks_more  # noqa: F401  registers its rows
import porting_checks_names  # noqa: F401  registers its rows
import porting_checks_nn  # noqa: F401  registers its rows
import porting_checks_sched  # noqa: F401  registers its rows
import porting_checks_tensor2  # noqa: F401  registers its rows
from porting_checks import CHECKS

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "porting.md")


def table_rows():
    rows = []
    for line in open(DOC, encoding="utf-8"):
        if line.startswith("| ") and not line.startswith("| PyTorch |"):
            rows.append(line.split(" | ")[0][2:])
    return rows


ROWS = table_rows()


def test_every_row_has_a_check_and_every_check_a_row():
    missing = [r for r in ROWS if r not in CHECKS]
    stale = [k for k in CHECKS if k not in ROWS]
    assert not missing, f"docs/porting.md rows without a check in {__file__}: {missing}"
    assert not stale, f"checks whose docs/porting.md row is gone: {stale}"
    assert len(ROWS) == len(set(ROWS)), "two rows share a first cell; make them distinct"


@pytest.mark.parametrize("key", [r for r in ROWS if r in CHECKS])
def test_row(key, tmp_path):
    fn = CHECKS[key]
    fn(tmp_path) if fn.__code__.co_argcount else fn()
