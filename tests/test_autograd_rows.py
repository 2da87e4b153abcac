"""An op's identity is its autograd row (tl_op_row, a static const object of its family; there are no op ids):
each family lists its rows in its tl_family.rows and the import check (csrc/autograd/) refuses a registry with
a row missing its name or backward, a row listed twice (by one family or by two), two rows of one name, or a
missing or doubled engine primitive, naming what is wrong. _autograd_check_rows runs that same check on a
made-up registry (test-hooks builds only); the live registry passed it, or `import tlgpu` would have failed.
Test-hooks builds also refuse to record a node whose row no family listed (_autograd_record_unlisted)."""
import numpy as np
import pytest

import tlgpu

_C = tlgpu._C
pytestmark = pytest.mark.skipif(not hasattr(_C, "_autograd_check_rows"), reason="needs a TLGPU_TEST_HOOKS=1 build")

# A made-up family is a list of items: "Name" a new row with a backward, ("Name", False) a new row without
# one, None a new row without a name, an int k the k-th new row made so far (that same row object again).


def test_the_live_registry_passes():
    assert _C._autograd_check_rows() >= 28            # the live families' rows, every primitive once


def test_a_made_up_registry_passes():
    assert _C._autograd_check_rows([["ABackward", "BBackward"], ["CBackward"], []]) == 3
    assert _C._autograd_check_rows([]) == 0


def test_a_row_missing_its_backward_fails():
    with pytest.raises(ImportError, match="autograd row BBackward has no backward"):
        _C._autograd_check_rows([["ABackward", ("BBackward", False)]])


def test_a_row_missing_its_name_fails():
    with pytest.raises(ImportError, match="autograd row 1 of op family 0 has no name"):
        _C._autograd_check_rows([["ABackward", None]])
    with pytest.raises(ImportError, match="has no name"):
        _C._autograd_check_rows([[""]])


def test_a_row_listed_twice_fails():
    with pytest.raises(ImportError, match="autograd row ABackward is listed twice by one op family"):
        _C._autograd_check_rows([["ABackward", "BBackward", 0]])
    with pytest.raises(ImportError, match="autograd row BBackward is listed by two op families"):
        _C._autograd_check_rows([["ABackward", "BBackward"], ["CBackward", 1]])


def test_two_rows_of_one_name_fail():
    with pytest.raises(ImportError, match="two autograd rows are named ABackward"):
        _C._autograd_check_rows([["ABackward"], ["BBackward", "ABackward"]])
    with pytest.raises(ImportError, match="two autograd rows are named ABackward"):
        _C._autograd_check_rows([["ABackward", "ABackward"]])


def test_engine_primitives_exactly_once():
    with pytest.raises(ImportError, match="no op family registers the autograd engine's sum primitive"):
        _C._autograd_check_rows(None, "add_ reshape")
    with pytest.raises(ImportError, match="no op family registers the autograd engine's add_ primitive"):
        _C._autograd_check_rows(None, "")
    with pytest.raises(ImportError, match="two op families register the autograd engine's reshape primitive"):
        _C._autograd_check_rows(None, "add_ sum reshape reshape")
    with pytest.raises(ValueError, match="unknown word"):
        _C._autograd_check_rows(None, "add_ sum mul")


def test_recording_an_unlisted_row_fails():
    x = tlgpu.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    with pytest.raises(SystemError, match="autograd row UnlistedBackward is listed by no op family"):
        _C._autograd_record_unlisted(x)
    assert x.grad_fn is None


def test_live_rows_name_the_nodes():
    """The names grad_fn shows come from the families' rows (elementwise names its node per op code)."""
    x = tlgpu.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    assert (x * 2).grad_fn == "MulBackward" and (x + 1).exp().grad_fn == "ExpBackward"
    assert x.reshape(3, 2).grad_fn == "ReshapeBackward" and x.sum().grad_fn == "ReduceBackward"
    assert (x @ x.T).grad_fn == "MatmulBackward" and x.cumsum(1).grad_fn == "CumsumBackward"
