"""Build the sluice Python package: a small C extension on the CPython
limited API (one abi3 build for Python 3.8 and later) over libsluice.

Against an installed libsluice (make install):   pip install ./python
Against a build tree:  SLUICE_BUILD=../build python3 setup.py build_ext --inplace
(the extension then finds libsluice.so.0 in that directory at run time).
"""
import os

from setuptools import Extension, setup

here = os.path.dirname(os.path.abspath(__file__))
build = os.environ.get("SLUICE_BUILD")
library_dirs, runtime_dirs = [], []
if build:
    build = os.path.abspath(build)
    library_dirs.append(build)
    runtime_dirs.append(build)

warnings = ["-Wall", "-Wextra", "-Wshadow", "-Wpointer-arith", "-Wvla",
            "-Wformat=2", "-Wundef", "-Wmissing-prototypes",
            "-Wstrict-prototypes"]
# Warnings are errors only when asked (CI: make test WERROR=1).
if os.environ.get("WERROR") == "1":
    warnings.append("-Werror")

ext = Extension(
    "sluice._sluice",
    sources=[os.path.join("src", f) for f in
             ("module.c", "dataset.c", "loader.c", "batch.c", "tensor.c",
              "writer.c")],
    include_dirs=[os.path.join(here, "..", "include")],
    define_macros=[("Py_LIMITED_API", "0x03080000"), ("_GNU_SOURCE", "1")],
    py_limited_api=True,
    libraries=["sluice"],
    library_dirs=library_dirs,
    runtime_library_dirs=runtime_dirs,
    extra_compile_args=["-std=c11"] + warnings,
)

setup(
    name="sluice",
    version="0.1.0",
    description="Stream sharded record datasets from NVMe into GPU memory "
                "as DLPack tensors",
    packages=["sluice"],
    ext_modules=[ext],
    python_requires=">=3.8",
    options={"bdist_wheel": {"py_limited_api": "cp38"}},
)
