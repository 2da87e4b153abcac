"""Checks for docs/porting.md's rows (see porting_checks.py): torch names added in the thirteenth session (names)."""
import numpy as np  # noqa: F401

import tlgpu  # noqa: F401
from porting_checks import T, close, f32, raises, rng, row  # noqa: F401
