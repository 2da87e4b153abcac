"""The autograd engine's table is built at import from the rows the op families register (csrc/autograd/):
the import check refuses a registry with a missing op, an op twice, an unknown op id or a missing or doubled
engine primitive, naming what is wrong. _autograd_check_rows runs that same check on a made-up registry
(test-hooks builds only); the live registry passed it, or `import tlgpu` would have failed."""
import pytest

import tlgpu

_C = tlgpu._C
pytestmark = pytest.mark.skipif(not hasattr(_C, "_autograd_check_rows"), reason="needs a TLGPU_TEST_HOOKS=1 build")


def count():
    return _C._autograd_check_rows()             # every op once, every primitive once: passes


def test_a_complete_registry_passes():
    n = count()
    assert n >= 28
    assert _C._autograd_check_rows(list(range(n))[::-1]) == n     # order does not matter


def test_a_missing_row_fails_naming_the_op():
    n = count()
    with pytest.raises(ImportError, match=r"no autograd row for TL_OP_RESHAPE\b"):
        _C._autograd_check_rows([op for op in range(n) if op != 1])
    with pytest.raises(ImportError, match=r"no autograd row for TL_OP_TOPK\b"):
        _C._autograd_check_rows(list(range(n - 1)))
    with pytest.raises(ImportError, match="no autograd row for TL_OP_EW"):
        _C._autograd_check_rows([])


def test_two_rows_for_one_op_fail():
    n = count()
    with pytest.raises(ImportError, match="two autograd rows for TL_OP_EW: TestBackward and TestBackward"):
        _C._autograd_check_rows(list(range(n)) + [0])


def test_an_unknown_op_id_fails():
    n = count()
    for bad in (n, -1):
        with pytest.raises(ImportError, match=r"op -?\d+ is no TL_OP_"):
            _C._autograd_check_rows(list(range(n)) + [bad])


def test_engine_primitives_exactly_once():
    n = list(range(count()))
    with pytest.raises(ImportError, match="no op family registers the autograd engine's sum primitive"):
        _C._autograd_check_rows(n, "add_ reshape")
    with pytest.raises(ImportError, match="no op family registers the autograd engine's add_ primitive"):
        _C._autograd_check_rows(n, "")
    with pytest.raises(ImportError, match="two op families register the autograd engine's reshape primitive"):
        _C._autograd_check_rows(n, "add_ sum reshape reshape")
    with pytest.raises(ValueError, match="unknown word"):
        _C._autograd_check_rows(n, "add_ sum mul")


def test_live_rows_name_the_nodes():
    """The names grad_fn shows come from the families' rows (elementwise names its node per op code)."""
    import numpy as np
    x = tlgpu.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    assert (x * 2).grad_fn == "MulBackward" and (x + 1).exp().grad_fn == "ExpBackward"
    assert x.reshape(3, 2).grad_fn == "ReshapeBackward" and x.sum().grad_fn == "ReduceBackward"
    assert (x @ x.T).grad_fn == "MatmulBackward" and x.cumsum(1).grad_fn == "CumsumBackward"
