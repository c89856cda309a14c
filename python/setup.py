"""Build the sluice Python package: a small C extension on the CPython
limited API (one abi3 build for Python 3.8 and later) with libsluice
linked in statically, so the result depends on no libsluice.so, no
`make install`, no ldconfig and no RUNPATH:

    pip install ./python            # builds libsluice from source too
    python -m build python          # sdist (carries the library) + wheel

libsluice is built with the project's Makefile into this build's own
temporary directory (make's dependency files rebuild what changed) and the
extension is relinked every time, so a stale build is never reused.
`make python` and the tests pass SLUICE_BUILD=<make's build dir> to link
the libsluice.a that make just built (sanitizer builds included).

The two CLIs, `dlpack-shard` and `sluice`, are built by the same make run
and shipped in the package (sluice/bin/); console entry points of the same
names (sluice/_cli.py) run them, so `pip install ./python` puts both on
the venv's PATH, and `dlpack-shard convert --from parquet` runs the
venv's own python.
"""
import os
import shlex
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

here = os.path.dirname(os.path.abspath(__file__))
# What libsluice is built from: the checkout around python/, or the copy
# an sdist carries (see SdistWithLibrary).
LIBRARY_PARTS = ["Makefile", "include", "datasets", "io", "pipeline", "gpu",
                 "programs"]
# The CLIs shipped in the package (sluice/bin/), run by sluice/_cli.py.
PROGRAMS = ["dlpack-shard", "sluice"]
BUNDLED = os.path.join(here, "libsluice")


def library_root():
    for root in (BUNDLED, os.path.join(here, "..")):
        if os.path.isfile(os.path.join(root, "include", "sluice.h")) and \
                os.path.isfile(os.path.join(root, "Makefile")):
            return os.path.abspath(root)
    raise SystemExit("sluice: libsluice's sources are not here (neither "
                     "../include/sluice.h nor libsluice/): build from a "
                     "checkout or from the sdist")


def make(root, *args):
    cmd = ["make", "--no-print-directory", "-C", root] + list(args)
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE,
                          universal_newlines=True).stdout


class BuildWithLibrary(build_ext):
    """Build (or take from SLUICE_BUILD) libsluice.a, then link it in."""

    def run(self):
        root = library_root()
        build = os.environ.get("SLUICE_BUILD")
        if build:
            build = os.path.abspath(build)
        else:
            build = os.path.abspath(os.path.join(self.build_temp,
                                                 "libsluice"))
            jobs = str(os.cpu_count() or 1)
            make(root, "-j" + jobs, "BUILD=" + build,
                 os.path.join(build, "libsluice.a"),
                 *[os.path.join(build, p) for p in PROGRAMS])
        static = os.path.join(build, "libsluice.a")
        for need in [static] + [os.path.join(build, p) for p in PROGRAMS]:
            if not os.path.isfile(need):
                raise SystemExit("sluice: %s is missing (run make first)"
                                 % need)
        # The CLIs go beside the extension (in place too: make python).
        bindir = os.path.join(os.path.dirname(
            self.get_ext_fullpath("sluice._sluice")), "bin")
        os.makedirs(bindir, exist_ok=True)
        for p in PROGRAMS:
            shutil.copy2(os.path.join(build, p), os.path.join(bindir, p))
            os.chmod(os.path.join(bindir, p), 0o755)
        # The link line libsluice.a needs (-luring -lzstd ..., cudart).
        libs = shlex.split(make(root, "-s", "BUILD=" + build,
                                "print-libs"))
        for ext in self.extensions:
            ext.include_dirs.append(os.path.join(root, "include"))
            ext.extra_objects.append(static)
            ext.libraries += [a[2:] for a in libs if a.startswith("-l")]
            ext.extra_link_args += [a for a in libs
                                    if not a.startswith("-l")]
            # libsluice's symbols stay private to the extension.
            ext.extra_link_args.append("-Wl,--exclude-libs,ALL")
        self.force = True     # relink: libsluice.a may have changed
        super().run()


class SdistWithLibrary(sdist):
    """The sdist carries libsluice's sources in libsluice/, so that the
    wheel built from it (python -m build) needs nothing outside it."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        root = library_root()
        dest = os.path.join(base_dir, "libsluice")
        for part in LIBRARY_PARTS:
            src = os.path.join(root, part)
            if os.path.isdir(src):
                shutil.copytree(src, os.path.join(dest, part),
                                ignore=shutil.ignore_patterns("*.o", "*.d"))
            else:
                os.makedirs(dest, exist_ok=True)
                shutil.copy2(src, os.path.join(dest, part))


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
    depends=[os.path.join("src", f) for f in ("pysluice.h", "tensor.h")],
    define_macros=[("Py_LIMITED_API", "0x03080000"), ("_GNU_SOURCE", "1")],
    py_limited_api=True,
    extra_compile_args=["-std=c11"] + warnings,
)

setup(
    name="sluice",
    version="0.1.0",
    description="Stream sharded record datasets from NVMe into GPU memory "
                "as DLPack tensors",
    packages=["sluice"],
    ext_modules=[ext],
    cmdclass={"build_ext": BuildWithLibrary, "sdist": SdistWithLibrary},
    entry_points={"console_scripts": [
        "dlpack-shard = sluice._cli:dlpack_shard",
        "sluice = sluice._cli:sluice",
    ]},
    python_requires=">=3.8",
    options={"bdist_wheel": {"py_limited_api": "cp38"}},
)
