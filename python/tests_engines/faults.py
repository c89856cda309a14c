"""Failure injection for the engine tests: a task_hook that fails one
task's first attempt at one point, once (a marker file remembers it
across attempts and processes)."""
import os


def fail_once(marker_dir, event, task, after_records=0, crash=False):
    """A hook(event, info) for sluice.parts.write_part: the first time
    task @task reaches @event with at least @after_records records
    written, raise (or, with @crash, kill the worker process)."""
    def hook(ev, info):
        if ev != event or info["task"] != task or \
                info["records"] < after_records:
            return
        try:
            fd = os.open(os.path.join(marker_dir, "%s-%d" % (event, task)),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, str(info["records"]).encode())
        os.close(fd)
        if crash:
            os._exit(3)
        raise RuntimeError("injected failure: task %d after %d records" % (
            task, info["records"]))
    return hook


def fired(marker_dir, event, task):
    """The record count at which the failure fired, or None."""
    path = os.path.join(marker_dir, "%s-%d" % (event, task))
    return int(open(path).read()) if os.path.exists(path) else None


def run_dir(out):
    """The one run folder under OUT.parts (a write with keep_parts)."""
    parts = str(out) + ".parts"
    runs = os.listdir(parts)
    assert len(runs) == 1, runs
    return os.path.join(parts, runs[0])
