"""tlgpu/_C.pyi against the extension: every public name of _C has a stub and every stubbed name exists; the
same for the public members of Tensor (as tlgpu leaves it after import, with the members its Python layer
installs), Publisher and Subscriber, and every stubbed dunder exists. Where mypy is installed, the stub
type-checks and stubtest finds no mismatch with the runtime. py.typed sits beside it (the wheel's test in
test_package.py checks that both ship)."""
import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import tlgpu
from tlgpu import _C

PKG = Path(tlgpu.__file__).parent
STUB = PKG / "_C.pyi"
CLASSES = ("Tensor", "Publisher", "Subscriber")


def _tree():
    return ast.parse(STUB.read_text(), filename=str(STUB))


def _names(body):
    out = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif isinstance(node, ast.Assign):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return out


def _class_body(name):
    cls, = [n for n in _tree().body if isinstance(n, ast.ClassDef) and n.name == name]
    return _names(cls.body)


def _type_aliases():
    """The stub's own helpers (_Shape, _ValuesIndices, ...): names that exist only for typing."""
    names = _names(_tree().body)
    return {n for n in names if n.startswith("_") and n[1:2].isupper()} | {"_int", "_float", "_bool"}


def test_py_typed_beside_the_stub():
    assert STUB.is_file() and (PKG / "py.typed").is_file()


def test_every_public_name_has_a_stub():
    public = {n for n in dir(_C) if not n.startswith("_")}
    stubbed = {n for n in _names(_tree().body) if not n.startswith("_")}
    assert not public - stubbed, f"public _C names without a stub in _C.pyi: {sorted(public - stubbed)}"
    assert not stubbed - public, f"_C.pyi stubs names that _C lacks: {sorted(stubbed - public)}"


def test_every_stubbed_private_name_exists():
    private = {n for n in _names(_tree().body) if n.startswith("_")} - _type_aliases()
    assert not {n for n in private if not hasattr(_C, n)}, "stubbed private names _C lacks"


@pytest.mark.parametrize("cls", CLASSES)
def test_class_members_are_stubbed(cls):
    runtime = getattr(_C, cls)
    public = {n for n in dir(runtime) if not n.startswith("_")}
    stubbed = _class_body(cls)
    assert not public - stubbed, f"{cls} members without a stub: {sorted(public - stubbed)}"
    missing = {n for n in stubbed if not hasattr(runtime, n)}
    assert not missing, f"_C.pyi stubs {cls} members that it lacks: {sorted(missing)}"


def test_tensor_operators_are_stubbed():
    ops = {"__add__", "__sub__", "__mul__", "__truediv__", "__matmul__", "__getitem__", "__setitem__", "__neg__",
           "__pow__", "__lt__", "__eq__", "__array__", "__len__", "__bool__", "__float__", "__format__"}
    assert ops <= _class_body("Tensor")


mypy = pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")


@mypy
def test_stub_type_checks():
    p = subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent",
                        "--no-incremental", str(STUB)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


@mypy
def test_stubtest(tmp_path):
    """mypy's stubtest: the stub against the imported module (names, kinds, the Python-level signatures).
    The rest of tlgpu is not under review here, so its own type errors are ignored."""
    cfg = tmp_path / "mypy.ini"
    cfg.write_text("[mypy]\nignore_missing_imports = True\n[mypy-tlgpu.*]\nignore_errors = True\n"
                   "[mypy-tlgpu._C]\nignore_errors = False\n")
    p = subprocess.run([sys.executable, "-m", "mypy.stubtest", "tlgpu._C", "--mypy-config-file", str(cfg)],
                       capture_output=True, text=True, cwd=PKG.parent)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
