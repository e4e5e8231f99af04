#!/usr/bin/python3
"""Quality of `meshserve suggest` (issue 35 item 4), measured.

For each model and worker count: the layout `meshserve suggest --target`
chooses at each shape, against hand-written alternatives, all served by one
`meshserve local` cluster and timed by `meshserve bench --concurrency 1`
(p50), interleaved: each repeat times every layout once at a shape, and the
table gives the median over repeats. The prediction is the suggested layout's
`predicted_ms` (suggest --json) against its measured median; beside it the
busiest worker's CPU time per request (/proc/PID/stat user + system, over
the bench's requests and warmup), which on a loaded host shows how much of
the wall time is the layout's own work and how much is waiting for a core.

Hand-written alternatives (mesh axes D = the input's batch axis, M = the
other one), from the model's own file by rule:
  megatron_column_row  mesh {D:1, M:W}: column kernels (q/k/v/gate/up/fc) P(None, M),
                       row kernels (o/down/proj) P(M, None), their layers'
                       out_sharding replicated (an all-reduce);
  megatron_row_column  the other way round, every linear's out_sharding
                       replicated (an all-reduce after a column kernel, an
                       all-gather after a row one);
  replicated           mesh {D:W}: everything replicated;
  data_parallel        mesh {D:W}: the input's dim 0 over D, params replicated;
  fsdp                 mesh {D:W}: the input's dim 0 over D, every matrix's
                       dim 0 over D (gathered before use).
A layout JAX's rules or the cluster refuse at a shape (batch 1 over D = 2)
is listed as n/a.

Figures: the workers measure their calibration once into a fresh cache
($XDG_CACHE_HOME set to the run's folder), so the predictions use this run's
rates. Bounded: about 2-4 minutes per (model, worker count) on 2 cores
(--repeats 3); --quick: 1 repeat and fewer requests.

Usage: bench/suggest_quality.py [--bin_dir build/bin] [--workers 2,4]
       [--models swiglu,transformer] [--repeats 3] [--quick] [--doc docs/suggest.md]
"""
import argparse
import copy
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import mslib  # noqa: E402

BEGIN = "<!-- suggest_quality.py: begin -->"
END = "<!-- suggest_quality.py: end -->"
NOTES = "<!-- suggest_quality.py: notes (kept across runs) -->"
ROW_KERNELS = re.compile(r"(o_proj|down_proj|c_proj|out_proj|dense_4h_to_h|\.wo\b|\.w2\b)")

# model -> (file, {shape name: input shape}, requests per repeat by shape)
MODELS = {
    "swiglu": ("examples/models/swiglu.json",
               {"decode (1 row)": [1, 1, 2048], "batch 1 (32 tokens)": [1, 32, 2048],
                "large (8x32 rows)": [8, 32, 2048]},
               {"decode (1 row)": 30, "batch 1 (32 tokens)": 20, "large (8x32 rows)": 8}),
    "transformer": ("examples/models/transformer.json",
                    {"batch 1 (16 tokens)": [1, 16, 64], "large (64x16 rows)": [64, 16, 64]},
                    {"batch 1 (16 tokens)": 200, "large (64x16 rows)": 60}),
}


def axes_of(model):
    """(D, M): the axis the input's dim 0 is sharded over (else the first), and the other."""
    names = list(model["mesh"].keys())
    first = next(iter(model["inputs"].values()))
    d = first["sharding"][0] if first.get("sharding") and first["sharding"][0] else names[0]
    m = next(n for n in names if n != d)
    return d, m


def linear_layers(model):
    return [l for l in model["layers"] if l["op"] == "linear"]


def variant(model, name, workers):
    """The hand-written layout `name` of `model` on `workers` devices (a new dict)."""
    m = copy.deepcopy(model)
    d, mm = axes_of(m)
    m["name"] = "%s__%s" % (model["name"], name)
    m["mesh"] = {d: workers, mm: 1} if name in ("replicated", "data_parallel", "fsdp") \
        else {d: 1, mm: workers}
    for inp in m["inputs"].values():
        rank = len(inp["shape"])
        inp["sharding"] = [d if name in ("data_parallel", "fsdp") and i == 0 else None
                           for i in range(rank)]
    rank = len(next(iter(m["inputs"].values()))["shape"])
    for pname, p in m["params"].items():
        if len(p["shape"]) != 2:
            p["sharding"] = [None] * len(p["shape"])
            continue
        row = bool(ROW_KERNELS.search(pname))
        p["sharding"] = {
            "replicated": [None, None], "data_parallel": [None, None], "fsdp": [d, None],
            "megatron_column_row": [mm, None] if row else [None, mm],
            "megatron_row_column": [None, mm] if row else [mm, None],
        }[name]
    for layer in m["layers"]:
        layer.pop("out_sharding", None)
    for layer in linear_layers(m):
        row = bool(ROW_KERNELS.search(layer["kernel"]))
        if name in ("data_parallel", "fsdp"):
            layer["out_sharding"] = [d] + [None] * (rank - 1)
        elif name == "megatron_row_column" or (name == "megatron_column_row" and row):
            layer["out_sharding"] = [None] * rank
    return m


def shape_flag(model, shape):
    return "%s=%s" % (next(iter(model["inputs"])), ",".join(map(str, shape)))


class Run:
    def __init__(self, args, work):
        self.args, self.work = args, work
        self.bin = os.path.join(args.bin_dir, "meshserve")
        self.env = dict(os.environ, XDG_CACHE_HOME=os.path.join(work, "cache"))

    def cluster(self, workers, model_dir, tag):
        old = os.environ.get("XDG_CACHE_HOME")
        os.environ["XDG_CACHE_HOME"] = self.env["XDG_CACHE_HOME"]  # the workers inherit it
        try:
            return mslib.LocalCluster(self.args.bin_dir, workers, model_dir,
                                      os.path.join(self.work, "logs-" + tag),
                                      ready_timeout_s=600)
        finally:
            if old is None:
                os.environ.pop("XDG_CACHE_HOME")
            else:
                os.environ["XDG_CACHE_HOME"] = old

    def suggest(self, model_file, workers, shape_flags, target, out):
        cmd = [self.bin, "suggest", "--model_file", model_file, "--workers", str(workers),
               "--target", target, "--out", out, "--json", "--max_search_s", "60"]
        for s in shape_flags:
            cmd += ["--input_shape", s]
        rc, stdout, stderr = mslib.run(cmd, timeout=300)
        if rc != 0:
            raise RuntimeError("suggest failed (rc %d): %s\n%s" % (rc, stdout, stderr))
        return json.loads(stdout.strip().splitlines()[-1])

    def bench(self, target, model, flag, requests, pids=()):
        before = [cpu_ms(p) for p in pids]
        cmd = [self.bin, "bench", "--target", target, "--model", model, "--input_shape", flag,
               "--concurrency", "1", "--requests", str(requests), "--warmup", "2",
               "--timeout_s", "30"]
        rc, out, err = mslib.run(cmd, timeout=300)
        try:
            stats = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None, (out + err).strip().splitlines()[-1:] or ["rc %d" % rc]
        if stats.get("errors"):
            return None, ["%d errors" % stats["errors"]]
        used = [cpu_ms(p) - b for p, b in zip(pids, before)]
        self.last_cpu_ms = max(used) / (requests + 2) if used else None  # + the warmup
        return stats["p50_ms"], None


def cpu_ms(pid):
    """CPU ms (user + system) process `pid` has used so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def measure(run, key, workers, log):
    path, shapes, requests = MODELS[key]
    with open(os.path.join(ROOT, path)) as f:
        base = json.load(f)
    d = os.path.join(run.work, "%s-%d" % (key, workers))
    os.makedirs(d)
    names = ["megatron_column_row", "megatron_row_column", "replicated", "data_parallel",
             "fsdp"]
    for n in names:
        with open(os.path.join(d, "%s__%s.json" % (base["name"], n)), "w") as f:
            json.dump(variant(base, n, workers), f)
    # The suggested layouts need the cluster's figures: a first cluster serves
    # the hand-written ones and is asked; the second serves all of them.
    c = run.cluster(workers, d, "%s-%d-a" % (key, workers))
    suggested = {}
    try:
        for i, (sname, shape) in enumerate(shapes.items()):
            out = os.path.join(run.work, "sugg-%s-%d-%d.json" % (key, workers, i))
            j = run.suggest(os.path.join(ROOT, path), workers, [shape_flag(base, shape)],
                            c.target, out)
            with open(out) as f:
                m = json.load(f)
            m["name"] = "%s__suggested%d" % (base["name"], i)
            with open(os.path.join(d, m["name"] + ".json"), "w") as f:
                json.dump(m, f)
            suggested[sname] = (m["name"], j)
            log("  suggest %s W=%d %s: %s %s predicted %.3f ms (figures %s)" % (
                key, workers, sname, j["layout"], j["mesh"], j["predicted_ms"],
                json.dumps(j["figures"])))
    finally:
        c.stop()
    c = run.cluster(workers, d, "%s-%d-b" % (key, workers))
    rows = []
    try:
        for i, (sname, shape) in enumerate(shapes.items()):
            flag = shape_flag(base, shape)
            models = [suggested[sname][0]] + ["%s__%s" % (base["name"], n) for n in names]
            times = {m: [] for m in models}
            cpu = []  # the suggested layout's busiest worker's CPU ms per request
            errors = {}
            load = []
            for m in models[1:]:  # JAX refuses dim 0 of size 1 over D = W
                if ("data_parallel" in m or "fsdp" in m) and shape[0] % workers:
                    errors[m] = ["batch %d not divisible by %d" % (shape[0], workers)]
            for r in range(run.args.repeats):
                for m in models:
                    if m in errors:
                        continue
                    load.append(loadavg())
                    p50, err = run.bench(c.target, m, flag, requests[sname],
                                         list(c.worker_pids.values()))
                    if p50 is None:
                        errors[m] = err
                    else:
                        times[m].append(p50)
                        if m == models[0]:
                            cpu.append(run.last_cpu_ms)
            med = {m: statistics.median(t) for m, t in times.items() if t}
            j = suggested[sname][1]
            hand = {m.split("__")[1]: t for m, t in med.items() if "__suggested" not in m}
            best = min(hand, key=hand.get) if hand else None
            sugg = med.get(suggested[sname][0])
            row = dict(model=key, workers=workers, shape=sname, flag=flag,
                       layout="%s %s" % (j["layout"], j["mesh"]), predicted=j["predicted_ms"],
                       measured=sugg, cpu_ms=statistics.median(cpu) if cpu else None,
                       best=best, best_ms=hand.get(best), hand=hand,
                       errors={m.split("__")[1]: e for m, e in errors.items()},
                       load=statistics.mean(load) if load else None, figures=j["figures"],
                       baselines={b["layout"]: (b["mesh"], b["predicted_ms"]) for b in j["baselines"]})
            rows.append(row)
            log("  %s W=%d %s: suggested %s measured %s (busiest worker CPU %s ms) predicted %.2f; hand %s; n/a %s; load %.1f" % (
                key, workers, sname, row["layout"], sugg, fmt(row["cpu_ms"]), j["predicted_ms"],
                json.dumps({k: round(v, 2) for k, v in hand.items()}), sorted(row["errors"]),
                row["load"] or 0))
    finally:
        c.stop()
    return rows


def fmt(v):
    return "n/a" if v is None else "%.2f" % v


def table(rows, args, elapsed):
    out = [BEGIN, "## Quality", "",
           "`bench/suggest_quality.py` (issue 35 item 4; %d repeats interleaved, median of "
           "`meshserve bench --concurrency 1` p50; %.0f s on this shared 2-core machine, "
           "load average during the benches %.1f-%.1f). Figures: `--target` (the workers' "
           "calibration measured in this run, host sharing from the cluster's status)." % (
               args.repeats, elapsed, min(r["load"] for r in rows), max(r["load"] for r in rows)),
           "",
           "| model | W | shape | suggested layout | predicted ms | measured ms | pred/meas "
           "| busiest worker CPU ms | best hand-written (ms) | suggested / best |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ratio = r["measured"] / r["best_ms"] if r["measured"] and r["best_ms"] else None
        pm = r["predicted"] / r["measured"] if r["measured"] else None
        out.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s (%s) | %s |" % (
            r["model"], r["workers"], r["shape"], r["layout"].replace("|", "/"),
            fmt(r["predicted"]), fmt(r["measured"]), fmt(pm), fmt(r["cpu_ms"]), r["best"],
            fmt(r["best_ms"]),
            fmt(ratio)))
    out += ["", "Every hand-written layout's median (ms; n/a: refused at that shape):", ""]
    for r in rows:
        hand = ", ".join("%s %s" % (k, fmt(v)) for k, v in sorted(r["hand"].items()))
        na = ", ".join(sorted(r["errors"]))
        out.append("* %s W=%d %s: %s%s" % (r["model"], r["workers"], r["shape"], hand,
                                            "; n/a: " + na if na else ""))
    out += [END]
    return "\n".join(out) + "\n"


def write_doc(path, text):
    """Replaces the section between BEGIN and END (appended when absent),
    keeping the notes (NOTES .. END) a person wrote there."""
    with open(path) as f:
        doc = f.read()
    if BEGIN in doc and END in doc:
        old = doc[doc.index(BEGIN):doc.index(END)]
        if NOTES in old:  # the hand-written reading of the last run stays
            text = text.replace(END, old[old.index(NOTES):] + END)
        doc = doc[:doc.index(BEGIN)] + text + doc[doc.index(END) + len(END) + 1:]
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    with open(path, "w") as f:
        f.write(doc)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin_dir", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--workers", default="2,4")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--doc", default="")
    p.add_argument("--json_out", default="")
    args = p.parse_args()
    if args.quick:
        args.repeats = 1
    work = tempfile.mkdtemp(prefix="suggest_quality.")
    start = time.time()
    rows = []
    try:
        run = Run(args, work)
        for key in args.models.split(","):
            for w in map(int, args.workers.split(",")):
                rows += measure(run, key, w, lambda s: print(s, flush=True))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = table(rows, args, time.time() - start)
    print(text)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(rows, f, indent=1)
    if args.doc:
        write_doc(args.doc, text)


if __name__ == "__main__":
    main()
