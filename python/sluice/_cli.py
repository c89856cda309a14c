"""The console entry points `dlpack-shard` and `sluice` that
`pip install ./python` puts on PATH: each runs the C program of that name
shipped in this package (sluice/bin/, built with the extension by
setup.py), with the same arguments, exit code and output.
`dlpack-shard convert --from parquet` runs `$SLUICE_PYTHON -m
sluice.parquet`: unless set, SLUICE_PYTHON is this interpreter, the one
this package is installed in (and pyarrow, when installed, with it)."""
import os
import sys

BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def _run(name):
    exe = os.path.join(BIN, name)
    if not os.access(exe, os.X_OK):
        sys.stderr.write("%s: %s is missing: reinstall the package "
                         "(pip install ./python) or build it in place "
                         "(make python)\n" % (name, exe))
        return 127
    env = dict(os.environ)
    if name == "dlpack-shard" and not env.get("SLUICE_PYTHON"):
        env["SLUICE_PYTHON"] = sys.executable
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(exe, [name] + sys.argv[1:], env)
    return 127  # not reached


def dlpack_shard():
    return _run("dlpack-shard")


def sluice():
    return _run("sluice")
