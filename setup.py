"""Build of tlgpu._C: C11 sources in csrc/ (one folder per layer), OpenCL kernels in kernels/ embedded as byte arrays.

Knobs: TLGPU_DEBUG=1 (-O0 -g), TLGPU_SANITIZE=1 (ASan + UBSan; the pool passes blocks straight through),
TLGPU_TEST_HOOKS=1 (-DTL_TEST_HOOKS: the test-only hooks; `make test` sets it, a wheel built without it
carries none of them).
"""
import os
import re
from glob import glob
from pathlib import Path

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

INCLUDE = re.compile(rb'^\s*#\s*include\s+"([^"]+)"\s*$', re.M)


def inline_includes(path: Path) -> bytes:
    """Source text with each `#include "x.h"` replaced by kernels/x.h between #line markers."""
    out, pos, text = [], 0, path.read_bytes()
    for m in INCLUDE.finditer(text):
        line = text.count(b"\n", 0, m.end()) + 1
        out += [text[pos:m.start()], f'#line 1 "{m.group(1).decode()}"\n'.encode(),
                inline_includes(path.parent / m.group(1).decode()), f'\n#line {line} "{path.name}"\n'.encode()]
        pos = m.end() + 1
    out.append(text[pos:])
    return b"".join(out)


def embed_kernels(out: Path) -> None:
    blobs, rows = [], []
    for i, cl in enumerate(sorted(Path("kernels").glob("*.cl"))):
        data = f'#line 1 "{cl.name}"\n'.encode() + inline_includes(cl)
        blobs.append(f"static const unsigned char k{i}[] = {{{','.join(map(str, data))},0}};")
        rows.append(f'    {{"{cl.stem}", k{i}, {len(data)}}},')
    text = "\n".join(['#include "programs.h"', *blobs, "const tl_kernel_src tl_kernel_sources[] = {",
                      *rows, "    {NULL, NULL, 0},", "};", ""])
    if not out.exists() or out.read_text() != text:
        out.write_text(text)


class BuildExt(build_ext):
    def build_extensions(self):
        gen = Path(self.build_temp) / "tl_kernels.c"
        gen.parent.mkdir(parents=True, exist_ok=True)
        embed_kernels(gen)
        for ext in self.extensions:
            if str(gen) not in ext.sources:
                ext.sources.append(str(gen))
            ext.depends += glob("kernels/*") + glob("csrc/**/*.h", recursive=True)
        super().build_extensions()


cflags = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden", "-D_GNU_SOURCE",
          "-Wno-missing-field-initializers", "-Wno-cast-function-type"]
ldflags = []
if os.environ.get("TLGPU_DEBUG") == "1":
    cflags += ["-O0", "-g", "-UNDEBUG"]
else:
    cflags += ["-O2"]
if os.environ.get("TLGPU_TEST_HOOKS") == "1":
    cflags += ["-DTL_TEST_HOOKS"]
if os.environ.get("TLGPU_SANITIZE") == "1":
    cflags += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-DTL_SANITIZE"]
    ldflags += ["-fsanitize=address,undefined"]

# csrc/ and its layer folders (core, tensor, autograd, ops, gemm, publish, module): `#include "x.h"` finds x.h
# in whichever folder holds it.
CSRC_DIRS = ["csrc"] + sorted(str(p) for p in Path("csrc").iterdir() if p.is_dir())

setup(
    ext_modules=[Extension(
        "tlgpu._C",
        sources=sorted(glob("csrc/**/*.c", recursive=True)),
        include_dirs=CSRC_DIRS + [numpy.get_include()],
        libraries=["OpenCL", "pthread"],
        extra_compile_args=cflags,
        extra_link_args=ldflags,
    )],
    cmdclass={"build_ext": BuildExt},
)
