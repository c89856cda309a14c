"""examples/train.py under torchrun: 2 CPU processes (gloo), DDP, rank-0
checkpoint; a run stopped mid-epoch and restarted ends with exactly the
parameters of an uninterrupted run."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not torch.distributed.is_available() or \
        not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available",
                allow_module_level=True)

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(__file__)),
                       "examples", "train.py")


def run(*args, nproc=2):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(nproc), EXAMPLE] + [str(a) for a in args]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       env=env, timeout=300, universal_newlines=True)
    assert p.returncode == 0, p.stdout
    return p.stdout


def digest(out):
    lines = [l for l in out.splitlines() if "final params sha256" in l]
    assert len(lines) == 1, out
    return lines[0].split()[-1]


def test_ddp_restart_resumes_exactly(tmp_path):
    data = tmp_path / "data"
    common = ["--records", 3000, "--batch-size", 64, "--epochs", 2,
              "--save-every", 5, "--device", "cpu"]
    # 3000 records / 64 = 47 batches: 24 per rank per epoch (wrapped).
    whole = run(data, "--make-data", "--checkpoint", tmp_path / "a.pt",
                *common)
    assert "epoch 1:" in whole
    first = run(data, "--checkpoint", tmp_path / "b.pt", "--stop-after", 30,
                *common)
    assert "stopped after 30 steps (epoch 1, batch 6)" in first, first
    ckpt = torch.load(tmp_path / "b.pt", weights_only=False)
    assert ckpt["world_size"] == 2
    assert ckpt["loader"]["epoch"] == 1          # one state, no rank
    assert ckpt["loader"]["batches_consumed"] == 6
    rest = run(data, "--checkpoint", tmp_path / "b.pt", *common)
    assert "resuming at epoch 1, batch 6" in rest, rest
    assert digest(rest) == digest(whole)
    # Saved by 2 processes, resumed by 1: the rest of epoch 1 on one rank.
    second = run(data, "--checkpoint", tmp_path / "c.pt", "--stop-after", 30,
                 *common)
    one = run(data, "--checkpoint", tmp_path / "c.pt", *common, nproc=1)
    assert "elastic resume: 2 processes saved it, 1 resume" in one, one
    assert "epoch 1:" in one, one
