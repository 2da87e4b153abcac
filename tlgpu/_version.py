"""The one place tlgpu's version is written: pyproject.toml and setup.py read it from here."""
__version__ = "0.1.0"
