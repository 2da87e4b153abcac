"""PyTorch indexing forms the C __getitem__/__setitem__ leave out (issue 24: nanoGPT's generate() uses all
three), composed from C ops; everything else goes to C unchanged:

- one integer list / 1-D array / int32 tensor inside a tuple key, the rest basic (`x[:, [-1], :]`): basic
  indexing with that entry as a full slice, then index_select along the dim it lands on (differentiable);
- a boolean mask: a numpy bool array, or a float32 tensor (tlgpu's comparisons give float32 masks, and torch
  refuses float indices, so a float32 key can only mean a mask) over the leading dims of the tensor.
  `x[mask] = v` with a number (or a one-element tensor) is masked_fill_ (no host wait); `x[mask]` selects
  the rows where the mask is nonzero, as torch's does, and like torch's (whose result shape depends on the
  values) it is a sync point: the mask is read back;
- `__index__` on a one-element int32 tensor (a sync point, as in torch), so `data[i:i + n]` takes a tensor i.
"""
import numpy as np

from . import _C

Tensor = _C.Tensor
_c_getitem = Tensor.__getitem__
_c_setitem = Tensor.__setitem__


def _is_int_list(k):
    if isinstance(k, list):
        return all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in k)
    if isinstance(k, np.ndarray):
        return k.ndim == 1 and k.dtype.kind in "iu"
    return isinstance(k, Tensor) and k.dtype == np.int32 and k.ndim == 1


def _is_mask(k):
    if isinstance(k, np.ndarray):
        return k.dtype == np.bool_
    return isinstance(k, Tensor) and k.dtype == np.float32


def _one_list_in_tuple(key):
    """(basic key, dim, index) for a tuple key with exactly one integer list and basic entries, else None."""
    if not isinstance(key, tuple):
        return None
    pos = [i for i, k in enumerate(key) if _is_int_list(k)]
    others = [k for i, k in enumerate(key) if i not in pos]
    basic = all(k is None or k is Ellipsis or isinstance(k, (slice, int, np.integer)) for k in others)
    if len(pos) != 1 or not basic or Ellipsis in key[:pos[0]]:
        return None
    p = pos[0]
    dim = sum(1 for k in key[:p] if k is None or isinstance(k, slice))   # ints drop a dim, None adds one
    return key[:p] + (slice(None),) + key[p + 1:], dim, key[p]


def _check_mask(self, mask, op):
    if tuple(mask.shape) != tuple(self.shape[:mask.ndim]):
        raise IndexError(f"{op}: index tensors must be int32; a boolean mask (a numpy bool array or a float32 "
                         f"tensor) of shape {tuple(mask.shape)} must match the leading dims of {tuple(self.shape)}")


def _mask_for(self, mask, op):
    """The mask as a tensor shaped to broadcast over self (mask over self's leading dims), or an error."""
    _check_mask(self, mask, op)
    shape = tuple(mask.shape)
    m = mask if isinstance(mask, Tensor) else _C.tensor(mask.astype(np.float32))
    return m.reshape(shape + (1,) * (self.ndim - len(shape)))


def getitem(self, key):
    if _is_mask(key):                                 # a sync point: the result's length is the mask's count
        _check_mask(self, key, "__getitem__")
        flat = np.asarray(key.numpy() if isinstance(key, Tensor) else key).reshape(-1)
        rows = self.reshape((flat.size,) + tuple(self.shape[key.ndim:]))
        return rows.index_select(0, np.flatnonzero(flat).astype(np.int32))
    found = _one_list_in_tuple(key)
    if found is not None:
        basic, dim, index = found
        return _c_getitem(self, basic).index_select(dim, index)
    return _c_getitem(self, key)


def setitem(self, key, value):
    if _is_mask(key) and (isinstance(value, (int, float, np.number)) or
                          (isinstance(value, Tensor) and value.numel() == 1)):
        self.masked_fill_(_mask_for(self, key, "__setitem__"), value if not isinstance(value, Tensor) else
                          value.reshape(()))
        return
    _c_setitem(self, key, value)


def index(self):
    """operator.index(t) for a one-element int32 tensor: a sync point, as in torch."""
    if self.dtype != np.int32 or self.numel() != 1:
        raise TypeError(f"only one-element int32 tensors can be converted to an index (got {self.dtype} of "
                        f"shape {tuple(self.shape)})")
    return int(self.item())


def iterate(self):
    """Rows along dim 0 (C's indexing: assigning __getitem__ from Python replaced the C sequence slot)."""
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d tensor")
    return (_c_getitem(self, i) for i in range(self.shape[0]))


def install():
    Tensor.__getitem__ = getitem
    Tensor.__setitem__ = setitem
    Tensor.__iter__ = iterate
    Tensor.__index__ = index
