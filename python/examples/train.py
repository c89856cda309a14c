"""A training loop fed by sluice, with resumable checkpoints.

    # a small synthetic dataset (written with sluice.ShardWriter), then train
    python3 examples/train.py --make-data /tmp/sluice-demo
    python3 examples/train.py /tmp/sluice-demo --epochs 3

    # several GPUs: torchrun sets RANK / WORLD_SIZE / LOCAL_RANK, which the
    # loader reads; each rank gets its own part of every epoch
    torchrun --nproc-per-node 8 examples/train.py /data/train

Stop it with Ctrl-C and run it again: it continues from the checkpoint,
with the exact batch order of an uninterrupted run.
"""
import argparse
import os
import time

import numpy as np
import torch

import sluice
import sluice.torch

FEATURES, CLASSES = 32, 10


def make_data(path, records=20000, parts=4):
    """Write `parts` parts as separate jobs would, then merge them."""
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    schema = [("data", "float32", (FEATURES,)), ("label", "int64", ())]
    part_dirs = []
    for p in range(parts):
        part = "%s.part%d" % (path, p)
        with sluice.ShardWriter(part, schema, block_size=256 << 10) as w:
            for _ in range(records // parts):
                y = int(rng.integers(CLASSES))
                x = centers[y] + 0.5 * rng.normal(size=FEATURES)
                w.write({"data": x.astype(np.float32), "label": y})
        part_dirs.append(part)
    print("merged:", sluice.merge(part_dirs, path))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data", help="dataset directory")
    ap.add_argument("--make-data", action="store_true",
                    help="write a synthetic dataset at DATA first")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--device", default=None,
                    help="cpu, cuda, cuda:N (default: LOCAL_RANK's GPU)")
    ap.add_argument("--checkpoint", default="/tmp/sluice-train.pt")
    args = ap.parse_args()

    if args.make_data:
        make_data(args.data)

    ckpt = None
    if os.path.exists(args.checkpoint):
        ckpt = torch.load(args.checkpoint, weights_only=False)
        print("resuming at epoch %(epoch)d, batch %(batches_consumed)d"
              % ckpt["loader"])

    loader = sluice.torch.Loader(
        args.data, batch_size=args.batch_size, shuffle="window", seed=0,
        device=args.device, prefetch=4,
        state=ckpt["loader"] if ckpt else None)
    device = loader.device
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, CLASSES)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    first_epoch = 0
    if ckpt:
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["opt"])
        first_epoch = ckpt["loader"]["epoch"]

    # The loader position after the last batch whose step completed: a
    # Ctrl-C inside a step must not count that batch as trained.
    position = loader.state_dict()

    def save():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                    "loader": position}, args.checkpoint)

    try:
        for epoch in range(first_epoch, args.epochs):
            if not (ckpt and epoch == first_epoch):
                loader.set_epoch(epoch)    # a resumed epoch goes on as is
            start, seen, correct, loss_sum = time.time(), 0, 0, 0.0
            for step, batch in enumerate(loader):
                x, y = batch["data"], batch["label"]
                logits = model(x)
                loss = torch.nn.functional.cross_entropy(logits, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                position = loader.state_dict()
                seen += len(y)
                correct += int((logits.argmax(1) == y).sum())
                loss_sum += loss.item() * len(y)
                if step % 20 == 0:
                    save()
            print("epoch %d: %d records, loss %.3f, accuracy %.3f, %.0f "
                  "records/s" % (epoch, seen, loss_sum / max(seen, 1),
                                 correct / max(seen, 1),
                                 seen / (time.time() - start)))
            position = loader.state_dict()
            save()
    except KeyboardInterrupt:
        save()
        print("interrupted; run again to resume from", args.checkpoint)
        return
    os.remove(args.checkpoint)


if __name__ == "__main__":
    main()
