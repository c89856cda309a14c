"""A data-parallel training loop fed by sluice, with exact resume.

    # one process (CPU or the GPU of LOCAL_RANK); writes a small synthetic
    # dataset first (sluice.ShardWriter, parts merged)
    python3 examples/train.py /tmp/sluice-demo --make-data --epochs 3

    # data-parallel: torchrun starts the processes and sets RANK,
    # WORLD_SIZE and LOCAL_RANK; each rank's loader reads its own part of
    # every epoch; gloo on CPU, NCCL on GPUs
    torchrun --standalone --nproc-per-node 2 examples/train.py /tmp/sluice-demo

Rank 0 writes the checkpoint (model, optimizer and the loader position),
atomically, every --save-every steps and at each epoch's end.
Kill the job and start the same command again: every rank loads it and
continues with exactly the batches an uninterrupted run would have seen
(--stop-after N stops cleanly after step N's checkpoint, to try it).

The loader position is one state for the whole job (it names no rank:
every rank has consumed the same number of batches), so rank 0 alone saves
it and every rank loads it. A restart with another number of processes
also resumes: it delivers exactly the samples of the epoch not yet seen,
split over the new ranks (the model then sees other batches than an
uninterrupted run would, so only a same-size restart is bit-exact).
"""
import argparse
import hashlib
import os
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

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


def params_digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data", help="dataset directory")
    ap.add_argument("--make-data", action="store_true",
                    help="write a synthetic dataset at DATA first "
                         "(when missing)")
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--device", default="auto",
                    help="auto, cpu, cuda, cuda:N (auto: LOCAL_RANK's GPU "
                         "when there is one)")
    ap.add_argument("--checkpoint", default="/tmp/sluice-train.pt")
    ap.add_argument("--save-every", type=int, default=20,
                    help="checkpoint every N steps (and at epoch ends)")
    ap.add_argument("--stop-after", type=int, default=0,
                    help="stop cleanly after N steps of this run, "
                         "checkpointed (to try a restart)")
    args = ap.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    distributed = world > 1
    if distributed:
        # gloo works everywhere; NCCL is what GPUs want.
        backend = "nccl" if (torch.cuda.is_available() and
                             args.device != "cpu") else "gloo"
        dist.init_process_group(backend)
    rank = dist.get_rank() if distributed else 0

    if args.make_data and rank == 0 and not os.path.exists(args.data):
        make_data(args.data, args.records)
    if distributed:
        dist.barrier()          # the data exists before anyone opens it

    ckpt = None
    if os.path.exists(args.checkpoint):
        ckpt = torch.load(args.checkpoint, map_location="cpu",
                          weights_only=False)
        if rank == 0:
            print("resuming at epoch %(epoch)d, batch %(batches_consumed)d"
                  % ckpt["loader"])
            if ckpt["world_size"] != world:
                print("elastic resume: %d processes saved it, %d resume; "
                      "the rest of the epoch is split over %d" % (
                          ckpt["world_size"], world, world))

    # RANK and WORLD_SIZE come from the environment; state= continues
    # this rank's part exactly where the checkpoint left it.
    loader = sluice.torch.Loader(
        args.data, batch_size=args.batch_size, shuffle="window", seed=0,
        device=args.device, prefetch=4,
        state=ckpt["loader"] if ckpt else None)
    device = loader.device
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, CLASSES)).to(device)
    if ckpt:
        model.load_state_dict(ckpt["model"])
    if distributed:
        model = DDP(model, device_ids=[device.index]
                    if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if ckpt:
        opt.load_state_dict(ckpt["opt"])
    first_epoch = ckpt["loader"]["epoch"] if ckpt else 0
    plain = model.module if distributed else model

    def save():
        """Rank 0 writes; the loader state is the same on every rank."""
        if rank == 0:
            tmp = args.checkpoint + ".tmp"
            torch.save({"model": plain.state_dict(), "opt": opt.state_dict(),
                        "loader": loader.state_dict(), "world_size": world},
                       tmp)
            os.replace(tmp, args.checkpoint)   # never half a checkpoint
        if distributed:
            dist.barrier()      # no rank runs ahead of a checkpoint

    steps = 0
    for epoch in range(first_epoch, args.epochs):
        # After a resume this keeps the saved position in that epoch.
        loader.set_epoch(epoch)
        start, seen, correct, loss_sum = time.time(), 0, 0, 0.0
        for batch in loader:
            x, y = batch["data"], batch["label"]
            logits = model(x)
            loss = torch.nn.functional.cross_entropy(logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            seen += len(y)
            correct += int((logits.argmax(1) == y).sum())
            loss_sum += loss.item() * len(y)
            consumed = loader.state_dict()["batches_consumed"]
            if args.stop_after and steps == args.stop_after:
                save()
                if rank == 0:
                    print("stopped after %d steps (epoch %d, batch %d); "
                          "run again to resume" % (steps, epoch, consumed))
                if distributed:
                    dist.destroy_process_group()
                return
            if consumed % args.save_every == 0:
                save()
        save()
        if rank == 0:
            print("epoch %d: rank 0 saw %d records, loss %.3f, accuracy "
                  "%.3f, %.0f records/s" % (
                      epoch, seen, loss_sum / max(seen, 1),
                      correct / max(seen, 1),
                      seen / (time.time() - start)))
    if rank == 0:
        print("final params sha256", params_digest(plain))
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
