"""Checks for docs/porting.md's rows (see porting_checks.py): torch names added in the fourteenth session (tensor2)."""
import numpy as np

import tlgpu
from porting_checks import T, close, f32, raises, rng, row  # noqa: F401
