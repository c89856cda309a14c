#!/usr/bin/env python3
"""bench/gpu/summarize.py LOGDIR OUTDIR STOPPED SECONDS - the results of
bench/gpu/run.sh: OUTDIR/results.md (for bench/results/ once it ran on a
GPU) and OUTDIR/results.json from the step logs, the benchmark JSON files
and the tutorial's JSON; prints the short table last.  Exit 0 when every
step passed."""
import glob
import json
import os
import re
import statistics
import sys


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def steps(logs):
    rows = []
    for line in read(os.path.join(logs, "steps.tsv")).splitlines():
        name, status, secs = line.split("\t")
        rows.append({"step": name, "status": status, "seconds": int(secs)})
    return rows


def device(logs):
    text = read(os.path.join(logs, "device.log"))
    m = re.search(r"^name, driver_version.*\n(.*)$", text, re.M)
    return {"csv": m.group(1).strip() if m else "unknown (no nvidia-smi)",
            "nvidia_smi": text.split("\nname, driver_version")[0].strip()}


def tests(logs):
    text = read(os.path.join(logs, "test-gpu.log"))
    lines = [l for l in text.splitlines()
             if re.match(r"^(PASS|FAIL|SKIP)  ", l)]
    summary = [l for l in text.splitlines()
               if re.match(r"^\d+ passed, \d+ failed, \d+ skipped$", l)]
    return {"lines": lines, "summary": summary[-1] if summary else None}


def bench_runs(logs, name):
    out = []
    for p in sorted(glob.glob(os.path.join(logs, "bench", name + "-*.json"))):
        try:
            out.append(json.loads(read(p)))
        except ValueError:
            pass
    return out


def med(runs, get):
    vals = [get(r) for r in runs]
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def bench(logs):
    rows = []
    for name in ("h2d", "overlap", "pageable", "plain", "cold",
                 "gather-window-on", "gather-window-off",
                 "gather-full-on", "gather-full-off"):
        runs = bench_runs(logs, name)
        if not runs:
            continue
        res = lambda r: r["result"]
        rows.append({
            "bench": name,
            "runs": len(runs),
            "batch_bytes": runs[0]["dataset"]["raw_bytes"] /
            max(1, runs[0]["dataset"]["records"]) *
            runs[0]["config"]["batch_size"],
            "samples_per_s": med(runs, lambda r: res(r)["samples_per_s"]),
            "device_copy_gbps": med(runs, lambda r: res(r).get("device_copy_gbps")),
            "pcie_probe_gbps": med(runs, lambda r: r["limits"]["pcie"].get("gbps")),
            "copy_over_probe": med(runs, lambda r: res(r).get("device_copy_over_pcie_probe")),
            "consumer_wait": med(runs, lambda r: res(r)["consumer_wait_fraction"]),
            "gpu_idle": med(runs, lambda r: res(r).get("gpu_idle_fraction")),
            "compute_ms": runs[0]["config"]["compute_ms"],
            "pinned": runs[0]["fallbacks"]["device_pinned"],
            "registered_buffers": runs[0]["fallbacks"]["registered_buffers"],
            "binding": runs[0]["limits"]["binding"],
            "fallbacks": runs[0]["fallbacks"]["reasons"],
            "cpu_s_per_gb": med(runs, lambda r: res(r).get("cpu_s_per_gb")),
            "batches_gathered": med(runs, lambda r: res(r).get("batches_gathered")),
            "batches": med(runs, lambda r: res(r).get("batches")),
            "device_memory_bytes": runs[0]["result"].get("device_memory_bytes"),
        })
    return rows


def streaming(logs):
    text = read(os.path.join(logs, "streaming.json"))
    return json.loads(text) if text else None


def streaming_lines(st):
    lines = ["streaming %.1f GB (%d CPUs): KvikIO %s GB/s (%s CPU s/GB), "
             "PCIe probe %s GB/s, "
             "read limit %s GB/s (%d threads; 1 thread %s; into 64 MiB "
             "buffers %s)" % (
                 st["dataset_bytes"] / 1e9, st["cpus"],
                 fmt(st.get("kvikio_gbps"), "%.2f"),
                 fmt(st.get("kvikio_cpu_s_per_gb"), "%.3f"),
                 fmt(st.get("pcie_gbps"), "%.2f"),
                 fmt(st.get("read_limit_gbps"), "%.2f"), st["cpus"],
                 fmt(st.get("read_limit_1thread_gbps"), "%.2f"),
                 fmt(st.get("read_limit_cold_gbps"), "%.2f"))]
    for x in st["rows"]:
        if x.get("delivered_gbps") is None:
            lines.append("  %-26s FAILED: %s" % (x["name"], x.get("error")))
            continue
        lines.append("  %-26s %6.2f GB/s  CPU %.3f s/GB  wait %.3f  occ %.2f  "
                     "mem %.2f GB  threads r/d/a/up/ck/idle/lock "
                     "%.1f/%.1f/%.1f/%s/%s/%s/%s  "
                     "landed %s  on GPU %s  staged %s (overlap %s)  "
                     "ahead %s  "
                     "cpus limit %s%s" % (
                         x["name"], x["delivered_gbps"], x["cpu_s_per_gb"],
                         x["consumer_wait"], x["slot_occupancy"],
                         (x["memory_bytes"] or 0) / 1e9,
                         x["read_threads_busy"], x["decode_threads_busy"],
                         x["assemble_threads_busy"],
                         fmt(x.get("upload_threads_busy"), "%.1f"),
                         fmt(x.get("check_threads_busy"), "%.1f"),
                         fmt(x.get("idle_threads"), "%.1f"),
                         fmt(x.get("lock_threads"), "%.1f"),
                         fmt(x.get("verified_landing_fraction"), "%.2f"),
                         fmt(x.get("verified_device_fraction"), "%.2f"),
                         fmt(x.get("staged_fraction"), "%.2f"),
                         fmt(x.get("overlapped_fraction"), "%.2f"),
                         fmt(x.get("read_ahead_blocks"), "%d"),
                         fmt(x.get("cpus_gbps"), "%.1f"),
                         "  (%s)" % x["error"] if x.get("error") else ""))
        w = x.get("trace_waits")
        if w:
            # the first run's trace: how much of the consumer's wait
            # fell on the first batches of epochs 2..E
            lines.append("  %-26s trace: waited %.3f s in %d batches, "
                         "%.3f s of it in epochs' first batches; "
                         "median wait %.2f ms" % (
                             "", w["wait_s"], w["batches"],
                             w["epoch_start_wait_s"],
                             w["median_wait_s"] * 1e3))
    return lines


def tutorial_verdict(t):
    """Issue 9's goal: at least 3x the best DataLoader row's samples/s at
    no more than a third of its CPU per sample."""
    rows = t["results"]
    sl = [x for x in rows if x["config"] == "sluice"]
    dl = [x for x in rows if x["config"] != "sluice"]
    if not sl or not dl:
        return None
    best = max(dl, key=lambda x: x["samples_per_s"])
    speed = sl[0]["samples_per_s"] / best["samples_per_s"]
    cpu = sl[0]["cpu_s_per_sample"] / best["cpu_s_per_sample"]
    return ("sluice vs the best DataLoader row (%s): %.2fx samples/s at "
            "%.2fx CPU per sample (goal: >= 3x at <= 0.33x): %s" % (
                best["config"], speed, cpu,
                "met" if speed >= 3 and cpu <= 1 / 3 else "NOT met"))


def fmt(v, spec, none="-"):
    return none if v is None else spec % v


def markdown(r):
    out = ["# sluice on a GPU: bench/gpu/run.sh", ""]
    out += ["Device: `%s`" % r["device"]["csv"], "",
            "Run: %s s in all%s." % (r["seconds"], "; STOPPED: " + r["stopped"]
                                     if r["stopped"] else ""), ""]
    out += ["## Steps", "", "| step | status | s |", "| --- | --- | ---: |"]
    out += ["| %s | %s | %d |" % (s["step"], s["status"], s["seconds"])
            for s in r["steps"]]
    if r["tests"]["lines"]:
        out += ["", "## make test-gpu", "", "```"] + r["tests"]["lines"] + \
               [r["tests"]["summary"] or "(no summary line)", "```"]
    if r["bench"]:
        out += ["", "## Benchmarks (bench/gpu/bench.sh; medians of the runs)", "",
                "| bench | runs | MiB/batch | samples/s | to device GB/s | PCIe probe GB/s | ratio | compute ms | consumer wait | GPU idle | pinned | fixed bufs | binding |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for b in r["bench"]:
            out.append("| %s | %d | %.1f | %.0f | %s | %s | %s | %g | %s | %s | %d | %d | %s |" % (
                b["bench"], b["runs"], b["batch_bytes"] / 2**20,
                b["samples_per_s"], fmt(b["device_copy_gbps"], "%.2f"),
                fmt(b["pcie_probe_gbps"], "%.2f"),
                fmt(b["copy_over_probe"], "%.2fx"), b["compute_ms"],
                fmt(b["consumer_wait"], "%.4f"),
                fmt(b["gpu_idle"], "%.4f"), b["pinned"],
                b["registered_buffers"], b["binding"]))
    gathers = [b for b in r["bench"] if b["bench"].startswith("gather-")]
    if gathers:
        out += ["", "## Device gather on vs off (bench/gpu/bench.sh gather-*; medians, runs alternated)", "",
                "| bench | runs | samples/s | CPU s/GB | batches gathered / delivered | device memory MB |",
                "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for b in gathers:
            out.append("| %s | %d | %.0f | %s | %s / %s | %s |" % (
                b["bench"], b["runs"], b["samples_per_s"],
                fmt(b["cpu_s_per_gb"], "%.3f"),
                fmt(b["batches_gathered"], "%d"), fmt(b["batches"], "%d"),
                fmt(b["device_memory_bytes"] and b["device_memory_bytes"] / 1e6,
                    "%.0f")))
    if r.get("streaming"):
        out += ["", "## Streaming (bench/gpu/streaming.py; medians)", "",
                "```"] + streaming_lines(r["streaming"]) + ["```"]
    t = r["tutorial"]
    if t:
        out += ["", "## PyTorch's data-loading tutorial vs sluice (bench/gpu/tutorial.py)", "",
                "%s, torch %s, %d CPUs (DataLoader workers and sluice decode threads: %d), batch %d, %d samples of uint8[3,224,224] per epoch, page cache dropped before each epoch." % (
                    t["device"], t["torch"], t["cpus"], t["workers"],
                    t["batch_size"], t["samples"]), "",
                "| config | s/epoch | samples/s | GPU idle | CPU s/sample |",
                "| --- | ---: | ---: | ---: | ---: |"]
        for x in t["results"]:
            out.append("| %s | %.2f | %.0f | %s | %.5f |" % (
                x["config"], x["epoch_seconds"], x["samples_per_s"],
                fmt(x["gpu_idle"], "%.3f", "n/a"), x["cpu_s_per_sample"]))
        verdict = tutorial_verdict(t)
        if verdict:
            out += ["", verdict]
    out += ["", "## nvidia-smi", "", "```", r["device"]["nvidia_smi"], "```", ""]
    return "\n".join(out)


def short_table(r):
    lines = ["", "== sluice GPU run: %s" % r["device"]["csv"]]
    for s in r["steps"]:
        lines.append("  %-10s %-28s %4ds" % (s["step"], s["status"], s["seconds"]))
    if r["tests"]["summary"]:
        lines.append("  test-gpu:  %s" % r["tests"]["summary"])
    for b in r["bench"]:
        lines.append("  bench %-9s %8.0f samples/s  dev %s GB/s  probe %s GB/s  ratio %s  wait %s  idle %s" % (
            b["bench"], b["samples_per_s"], fmt(b["device_copy_gbps"], "%.2f"),
            fmt(b["pcie_probe_gbps"], "%.2f"), fmt(b["copy_over_probe"], "%.2f"),
            fmt(b["consumer_wait"], "%.3f"), fmt(b["gpu_idle"], "%.3f")) +
            ("  CPU %s s/GB  gathered %s" % (fmt(b["cpu_s_per_gb"], "%.3f"),
                                          fmt(b["batches_gathered"], "%d"))
             if b["bench"].startswith("gather-") else ""))
    if r.get("streaming"):
        lines += ["  " + l for l in streaming_lines(r["streaming"])]
    if r["tutorial"]:
        for x in r["tutorial"]["results"]:
            lines.append("  tutorial %-11s %6.2f s/epoch %7.0f samples/s  GPU idle %s  CPU %.5f s/sample" % (
                x["config"], x["epoch_seconds"], x["samples_per_s"],
                fmt(x["gpu_idle"], "%.2f", "n/a"), x["cpu_s_per_sample"]))
    if r["tutorial"] and tutorial_verdict(r["tutorial"]):
        lines.append("  " + tutorial_verdict(r["tutorial"]))
    if r["stopped"]:
        lines.append("  STOPPED: %s" % r["stopped"])
    return "\n".join(lines)


def main():
    logs, out, stopped, seconds = sys.argv[1:5]
    tut = read(os.path.join(logs, "tutorial.json"))
    r = {"device": device(logs), "stopped": stopped, "seconds": int(seconds),
         "steps": steps(logs), "tests": tests(logs), "bench": bench(logs),
         "tutorial": json.loads(tut) if tut else None,
         "streaming": streaming(logs)}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(r, f, indent=1)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(markdown(r))
    print(short_table(r))
    return 0 if all(s["status"] == "ok" or s["status"].startswith("skipped")
                    for s in r["steps"]) else 1


if __name__ == "__main__":
    sys.exit(main())
