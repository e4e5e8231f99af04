#!/usr/bin/python3
"""The generation benchmark of issue 32 (item 7): writes the section
"## Generation" of docs/PERFORMANCE.md (bench/run_performance.py keeps it),
every figure a ratio against a baseline measured in the same run.

Model: GPT-2-small's shape (d 768, 12 layers, 12 heads, vocabulary 50257,
1024 positions, float32), random weights (normal, std 0.02; LayerNorms
near 1) written in Hugging Face's layout (config.json + model.safetensors,
bare names, head tied to wte), `meshserve import`ed and served by
`meshserve local --workers 2`. Requests: POST /v1/completions on the
coordinator's --http_port, streamed (SSE), greedy, ignore_eos, token-id
prompts; a token's time is when its chunk arrives at the client.

Measured (docs/PERFORMANCE.md has the table; the raw log goes to stdout):
  - memory floor: two processes each stream a 512 MiB float32 array (sum,
    and a one-thread sgemv of a weight-shaped matrix) at the same time;
    each pass timed by its thread's CPU time (a preempted pass would
    count other jobs' time); one core's bandwidth is the faster of the two
    kinds (the median pass); floor = half the
    model's bytes / that bandwidth (each worker streams its half per
    token); meshserve's one-stream time per token vs the floor;
  - PyTorch (bench/torch_gpt2.py, the same weights, 2 threads): one stream,
    the 128-token prefill, a static batch of the 16 prompts;
  - 16 concurrent streams (prompts of 16-46 tokens, 64 new tokens each):
    generated tokens / wall time vs meshserve's one-stream rate and torch's
    static batch;
  - llama.cpp (node-llama-cpp 3.21.1's prebuilt CPU binaries, installed by
    npm into a temporary folder; bench/llama_cpp_bench.mjs; an F32 GGUF of
    the same weights written by bench/gguf_write.py), 2 threads: one
    stream's tokens/s and the first token of the 128-token prompt;
  - prefill: the first token of the 128-token prompt (max_tokens 1) vs
    NumPy (OPENBLAS_NUM_THREADS=2) running the prompt's 48 block GEMMs
    alone (128 rows x c_attn, attn c_proj, c_fc, mlp c_proj per layer);
  - where a step goes: the coordinator's /metrics (time to first token and
    inter-token histograms) around each phase, and `perf record` of one
    worker during 128-token prefills and during one-stream decode.

Setup (once): Debian's python3-torch (`apt-get install -y python3-torch`),
Node with npm (node-llama-cpp is installed by the script into a temporary
folder; --no_llama_cpp skips it), perf (--no_perf skips the profiles).

Usage: bench/run_generation.py [--bin_dir build/bin] [--quick]
       [--doc docs/PERFORMANCE.md] [--no_llama_cpp] [--no_perf]
Bounded: about 6-10 minutes on 2 cores (--quick: about 4).
"""
import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import gguf_write  # noqa: E402
import mslib  # noqa: E402
import generation_doc  # noqa: E402

CONFIG = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 12,
          "n_embd": 768, "n_head": 12, "n_inner": None, "vocab_size": 50257,
          "n_positions": 1024, "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new",
          "scale_attn_weights": True, "bos_token_id": 50256, "eos_token_id": 50256}
MODEL = "gpt2_bench"
NODE_LLAMA_CPP = "node-llama-cpp@3.21.1"
MAX_TOKENS = 64
LONG = 128


LOADS = {}


def note(text):
    print(text, flush=True)


def phase(name):
    """Records the 1-minute load average as a phase starts."""
    LOADS[name] = os.getloadavg()[0]
    note("-- %s (load %.1f)" % (name, LOADS[name]))


# ---- the model ----

def gpt2_weights(seed=0):
    rng = np.random.default_rng(seed)
    d, v, p, L = CONFIG["n_embd"], CONFIG["vocab_size"], CONFIG["n_positions"], CONFIG["n_layer"]

    def w(*shape, std=0.02):
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(std)

    t = {"wte.weight": w(v, d), "wpe.weight": w(p, d, std=0.01),
         "ln_f.weight": 1 + w(d, std=0.1), "ln_f.bias": w(d)}
    for i in range(L):
        h = "h.%d." % i
        t.update({
            h + "ln_1.weight": 1 + w(d, std=0.1), h + "ln_1.bias": w(d),
            h + "attn.c_attn.weight": w(d, 3 * d), h + "attn.c_attn.bias": w(3 * d),
            h + "attn.c_proj.weight": w(d, d), h + "attn.c_proj.bias": w(d),
            h + "ln_2.weight": 1 + w(d, std=0.1), h + "ln_2.bias": w(d),
            h + "mlp.c_fc.weight": w(d, 4 * d), h + "mlp.c_fc.bias": w(4 * d),
            h + "mlp.c_proj.weight": w(4 * d, d), h + "mlp.c_proj.bias": w(d),
        })
    return t


def write_model(work, weights):
    hf = os.path.join(work, "hf")
    os.makedirs(hf)
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(CONFIG, f)
    mslib.write_safetensors(os.path.join(hf, "model.safetensors"), weights)
    return hf


def prompts(seed=1):
    rng = np.random.default_rng(seed)

    def ids(n):
        return [int(t) for t in rng.integers(0, 50000, size=n)]
    # 16 prompts of 16-46 tokens (2 apart), a 16-token prompt for one stream.
    return {"short": ids(16), "long": ids(LONG), "batch": [ids(16 + 2 * i) for i in range(16)]}


# ---- baselines outside meshserve ----

BANDWIDTH_SCRIPT = r"""
import json, sys, time
import numpy as np
kind, start_at, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
if kind == "sum":
    a = np.ones(128 << 20, np.float32)      # 512 MiB
    run = lambda: a.sum()
else:                                       # sgemv: a [65536, 2048] float32 matrix, one row in
    a = np.ones((65536, 2048), np.float32)
    x = np.ones(2048, np.float32)
    run = lambda: a @ x
run()
while time.time() < start_at:
    time.sleep(0.001)
rates = []
end = time.time() + seconds
while time.time() < end:
    # This thread's CPU time, not the wall clock: on a shared machine a pass
    # that was preempted would count the other jobs' time as slow reading.
    t = time.thread_time()
    run()
    rates.append(a.nbytes / (time.thread_time() - t))
print(json.dumps({"gbps": sorted(rates)[len(rates) // 2] / 1e9, "passes": len(rates)}))
"""


def measure_bandwidth(seconds):
    """{kind: GB/s one process gets while another does the same}."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    out = {}
    for kind in ("sum", "sgemv"):
        start_at = time.time() + 3.0
        procs = [subprocess.Popen(["/usr/bin/python3", "-c", BANDWIDTH_SCRIPT, kind,
                                   str(start_at), str(seconds)], stdout=subprocess.PIPE,
                                  text=True, env=env) for _ in range(2)]
        res = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
        out[kind] = min(r["gbps"] for r in res)
        note("bandwidth %s, 2 processes at once: %s GB/s each" % (
            kind, ", ".join("%.2f" % r["gbps"] for r in res)))
    return out


NUMPY_PREFILL_SCRIPT = r"""
import json, struct, sys, time
import numpy as np
path, rows, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    data = f.read()
mats = []
for i in range(100):
    names = ["h.%d.attn.c_attn.weight", "h.%d.attn.c_proj.weight", "h.%d.mlp.c_fc.weight",
             "h.%d.mlp.c_proj.weight"]
    if "h.%d.ln_1.weight" % i not in header:
        break
    for name in names:
        e = header[name % i]
        b, end = e["data_offsets"]
        mats.append(np.frombuffer(data[b:end], np.float32).reshape(e["shape"]))
x = np.random.default_rng(0).standard_normal((rows, 3072), dtype=np.float32)
def run():
    for w in mats:
        (x[:, :w.shape[0]] @ w)
run()
times = []
for _ in range(reps):
    t = time.perf_counter()
    run()
    times.append((time.perf_counter() - t) * 1e3)
print(json.dumps({"ms": min(times), "gemms": len(mats)}))
"""


def measure_numpy_prefill(hf, reps):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2")
    p = subprocess.run(["/usr/bin/python3", "-c", NUMPY_PREFILL_SCRIPT,
                        os.path.join(hf, "model.safetensors"), str(LONG), str(reps)],
                       capture_output=True, text=True, env=env, timeout=600, check=True)
    r = json.loads(p.stdout.strip().splitlines()[-1])
    flops = 2.0 * LONG * (
        12 * (3 + 1 + 4 + 4) * CONFIG["n_embd"] ** 2)
    note("numpy (2 threads): the %d block GEMMs of a %d-token prompt: %.1f ms (%.1f GFLOP/s)" % (
        r["gemms"], LONG, r["ms"], flops / r["ms"] / 1e6))
    return r["ms"]


def measure_torch(work, hf, ps, reps):
    path = os.path.join(work, "prompts.json")
    with open(path, "w") as f:
        json.dump(ps, f)
    p = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "torch_gpt2.py"),
                        "--hf_dir", hf, "--prompts", path, "--max_tokens", str(MAX_TOKENS),
                        "--threads", "2", "--reps", str(reps)],
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError("torch_gpt2.py failed:\n" + p.stderr[-3000:])
    r = json.loads(p.stdout.strip().splitlines()[-1])
    note("torch GEMM 128x768x3072: %.1f GFLOP/s" % r["gemm_gflops"])
    note("torch %s, %d threads, BLAS %s: decode %s ms/token, prefill(128) %s ms, static "
         "batch 16: %s tokens/s" % (r["torch"], r["threads"], r["blas"],
                                    _fmt(r["decode_ms_per_token"]), _fmt(r["prefill_ms"]),
                                    _fmt(r["batch_tokens_per_s"])))
    return r


def _fmt(values):
    return "[" + ", ".join("%.1f" % v for v in values) + "]"


def measure_llama_cpp(work, hf_weights, ps, reps):
    """{ttft_ms, decode_ms_per_token, ...} or {"error": why}."""
    mod = os.path.join(work, "nlc")
    os.makedirs(mod)
    with open(os.path.join(mod, "package.json"), "w") as f:
        json.dump({"name": "nlc-bench", "version": "1.0.0", "private": True}, f)
    p = subprocess.run(["npm", "i", "-E", NODE_LLAMA_CPP, "--ignore-scripts", "--no-audit",
                        "--no-fund"], cwd=mod, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return {"error": "npm i -E %s failed (rc %d): %s" % (NODE_LLAMA_CPP, p.returncode,
                                                              p.stderr.strip()[-500:])}
    gguf = os.path.join(work, "gpt2.gguf")
    gguf_write.write_gpt2_gguf(gguf, hf_weights, CONFIG)
    note("llama.cpp: wrote %s (%.0f MB)" % (gguf, os.path.getsize(gguf) / 1e6))
    p = subprocess.run(["node", os.path.join(ROOT, "bench", "llama_cpp_bench.mjs"),
                        os.path.join(mod, "node_modules"), gguf, "2", str(reps),
                        str(MAX_TOKENS), ",".join(map(str, ps["long"])),
                        ",".join(map(str, ps["short"]))],
                       capture_output=True, text=True, timeout=900)
    lines = [l for l in p.stdout.strip().splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"error": "node llama_cpp_bench.mjs failed (rc %d): %s" % (
            p.returncode, (p.stderr + p.stdout).strip()[-800:])}
    r = json.loads(lines[-1])
    note("llama.cpp (node-llama-cpp 3.21.1, %s threads): first token of %d-token prompt %s ms, "
         "decode %s ms/token" % (r["threads"], LONG, _fmt(r["ttft_ms"]),
                                 _fmt(r["decode_ms_per_token"])))
    return r


# ---- meshserve over HTTP ----

def complete(port, prompt, max_tokens, conn=None):
    """Streams one completion (on `conn` if given, else a new connection);
    returns (arrival times of each token (s, from the request's send), token ids)."""
    body = json.dumps({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True, "stream": True,
                       "return_token_ids": True})
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError("HTTP %d: %s" % (resp.status, resp.read()[:500]))
    times, ids = [], []
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        now = time.perf_counter() - t0
        for choice in chunk.get("choices", []):
            new = choice.get("token_ids") or []
            ids.extend(new)
            times.extend([now] * len(new))
    conn.close()
    if len(ids) != max_tokens:
        raise RuntimeError("asked %d tokens, got %d" % (max_tokens, len(ids)))
    return times, ids


def scrape(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for m in re.finditer(r'^(meshserve_generation_\w+?)_(sum|count)\{model="%s"\} (\S+)' % MODEL,
                         text, re.M):
        out["%s_%s" % (m.group(1), m.group(2))] = float(m.group(3))
    return out


def metric_mean(before, after, name):
    n = after.get(name + "_count", 0) - before.get(name + "_count", 0)
    s = after.get(name + "_sum", 0) - before.get(name + "_sum", 0)
    return (s / n * 1e3, int(n)) if n else (None, 0)


def measure_meshserve(port, ps, reps):
    r = {}
    complete(port, ps["short"], 8)  # compile, warm
    complete(port, ps["long"], 1)
    m0 = scrape(port)
    per_token = []
    for _ in range(reps):
        times, ids = complete(port, ps["short"], MAX_TOKENS)
        per_token.append((times[-1] - times[0]) / (len(times) - 1) * 1e3)
    r["tokens"] = ids
    m1 = scrape(port)
    r["decode_ms_per_token"] = per_token
    r["itl_metric_ms"] = metric_mean(m0, m1, "meshserve_generation_inter_token_seconds")
    note("meshserve one stream: %s ms/token (coordinator's inter-token mean %.2f ms over %d)" % (
        _fmt(per_token), r["itl_metric_ms"][0] or -1, r["itl_metric_ms"][1]))
    ttft = []
    for _ in range(reps):
        times, _ = complete(port, ps["long"], 1)
        ttft.append(times[0] * 1e3)
    m2 = scrape(port)
    r["ttft_ms"] = ttft
    r["ttft_metric_ms"] = metric_mean(m1, m2, "meshserve_generation_time_to_first_token_seconds")
    note("meshserve first token of the %d-token prompt: %s ms (coordinator's mean %.1f ms)" % (
        LONG, _fmt(ttft), r["ttft_metric_ms"][0] or -1))
    rates = []
    for _ in range(1 if reps <= 2 else 2):
        results = [None] * len(ps["batch"])
        # Connected one by one before the 16 requests go at once: 16 connects
        # in one burst overflow the HTTP server's listen backlog (cpp-httplib's
        # CPPHTTPLIB_LISTEN_BACKLOG, 5) and some were reset by the peer.
        conns = []
        for _ in ps["batch"]:
            conns.append(http.client.HTTPConnection("127.0.0.1", port, timeout=600))
            conns[-1].connect()

        def run(i):
            results[i] = complete(port, ps["batch"][i], MAX_TOKENS, conns[i])
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(ps["batch"]))]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        if any(x is None for x in results):
            raise RuntimeError("a concurrent stream failed")
        rates.append(sum(len(x[1]) for x in results) / wall)
    r["batch_tokens_per_s"] = rates
    r["batch_itl_ms"] = float(np.median([(x[0][-1] - x[0][0]) / (len(x[0]) - 1) * 1e3
                                         for x in results]))
    note("meshserve 16 streams: %s tokens/s (median per-stream inter-token %.1f ms)" % (
        _fmt(rates), r["batch_itl_ms"]))
    return r


# ---- profiles ----

_EXPORTS = {}


def _exported(dso):
    """Sorted (address, name) of a shared object's exported functions."""
    if dso not in _EXPORTS:
        p = subprocess.run(["nm", "-D", "--defined-only", dso], capture_output=True, text=True)
        syms = []
        for line in p.stdout.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in "Tt":
                syms.append((int(parts[0], 16), parts[2].split("@")[0]))
        _EXPORTS[dso] = sorted(syms)
    return _EXPORTS[dso]


def _leaf_label(ip, sym, dso):
    """A sample's leaf symbol; an address without one (OpenBLAS's static
    kernels) is named by the exported functions around it."""
    if sym != "[unknown]":
        return re.sub(r"\+0x[0-9a-f]+$", "", sym)
    if not os.path.isfile(dso):
        return "[unknown] (%s)" % os.path.basename(dso)
    below = above = None
    for addr, name in _exported(dso):
        if addr <= ip:
            below = name
        else:
            above = name
            break
    return "%s: %s or static code after it (before %s)" % (os.path.basename(dso), below, above)


# Where a sample's time goes, from its call chain (leaf first); the first match wins.
CATEGORIES = [
    ("GEMM (DotGeneral: sgemm/sgemv, meshserve's gemm)", ("DotGeneral", "sgemm", "sgemv",
                                                         "gemm_avx512", "saxpby")),
    ("attention (causal/cached, softmax)", ("Attention", "Softmax")),
    ("sampling", ("SampleRows", "SelectCandidates", "Sample")),
    ("elementwise (gelu, layernorm, add)", ("Gelu", "expm1f", "tanhf", "LayerNorm", "MapUnary",
                                            "MapBinary")),
    ("memset/memcpy", ("memset", "memmove", "memcpy")),
    ("gRPC and protobuf", ("grpc", "google::protobuf", "libgrpc", "libprotobuf")),
    ("kernel (scheduling, syscalls, page faults)", ("[k]",)),
]


def _category(chain):
    names = []
    for ip, sym, dso in chain:
        names.append(sym + " " + os.path.basename(dso) + (" [k]" if "kernel" in dso else ""))
    # OpenBLAS's frame-pointer-less kernels lose their chain: the leaf's library decides.
    for label, keys in CATEGORIES:
        if any(k in n for n in names for k in keys):
            return label
    if "openblas" in names[0]:
        return CATEGORIES[0][0]
    return "other (meshserve's runtime, malloc, ...)"


def _summarize_perf(data):
    """(top leaf symbols, top innermost meshserve:: frames, categories, samples)."""
    p = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym,dso"],
                       capture_output=True, text=True, timeout=300)
    leaves, frames, cats, total = {}, {}, {}, 0
    for block in p.stdout.split("\n\n"):
        lines = [l.strip() for l in block.strip().splitlines() if l.strip()]
        if not lines:
            continue
        chain = []
        for line in lines:
            m = re.match(r"([0-9a-f]+) (.+) \((.*)\)$", line)
            if m:
                chain.append((int(m.group(1), 16), m.group(2), m.group(3)))
        if not chain:
            continue
        total += 1
        leaf = _leaf_label(*chain[0])
        leaves[leaf] = leaves.get(leaf, 0) + 1
        op = next((re.sub(r"\+0x[0-9a-f]+$", "", s) for _, s, _ in chain
                   if s.startswith("meshserve::")), "(no meshserve frame: kernel, or a "
                                                      "frame-pointer-less kernel's chain)")
        frames[op] = frames.get(op, 0) + 1
        cat = _category(chain)
        cats[cat] = cats.get(cat, 0) + 1

    def top(d, n):
        return [(100.0 * c / total, k) for k, c in sorted(d.items(), key=lambda kv: -kv[1])[:n]]
    return top(leaves, 12), top(frames, 8), top(cats, 10), total


def perf_profile(work, pid, name, load, seconds, hz=499):
    """perf record (call graphs by frame pointer) of one worker while `load`
    runs; `load` returns how many tokens it made. CPU ms per token: samples / hz."""
    data = os.path.join(work, "perf-%s.data" % name)
    rec = subprocess.Popen(["perf", "record", "-F", str(hz), "-g", "-p", str(pid), "-o", data,
                            "--", "sleep", str(seconds)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    stop = time.time() + seconds
    n = tokens = 0
    while time.time() < stop - 0.2:
        tokens += load()
        n += 1
    _, err = rec.communicate(timeout=120)
    if rec.returncode != 0:
        return {"error": "perf record failed: %s" % err.strip()[-300:]}
    leaves, frames, cats, total = _summarize_perf(data)
    cpu_ms = total / float(hz) * 1e3 / max(1, tokens)
    note("perf %s (worker pid %d, %d requests, %d tokens in %.0f s, %d samples, %.1f CPU ms "
         "per token):\n  leaf: %s\n  innermost meshserve frame: %s\n  categories: %s" % (
             name, pid, n, tokens, seconds, total, cpu_ms,
             "; ".join("%.1f%% %s" % t for t in leaves),
             "; ".join("%.1f%% %s" % t for t in frames),
             "; ".join("%.1f%% %s" % t for t in cats)))
    return {"top": leaves, "frames": frames, "categories": cats, "requests": n,
            "tokens": tokens, "samples": total, "cpu_ms_per_token": cpu_ms}


# ---- main ----

def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--bin_dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "PERFORMANCE.md"))
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    ap.add_argument("--no_llama_cpp", action="store_true")
    ap.add_argument("--no_perf", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args()
    start = time.time()
    reps = 2 if args.quick else 4
    load_start = "%.1f/%.1f/%.1f" % os.getloadavg()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    work = tempfile.mkdtemp(prefix="meshserve-gen-")
    res = {"load_start": load_start, "commit": commit}
    try:
        weights = gpt2_weights()
        res["model_bytes"] = sum(w.nbytes for w in weights.values())
        hf = write_model(work, weights)
        ps = prompts()
        models = os.path.join(work, "models")
        rc, out, err = mslib.run([os.path.join(args.bin_dir, "meshserve"), "import", "--hf_dir",
                                  hf, "--out_dir", models, "--name", MODEL], timeout=600)
        if rc != 0:
            raise RuntimeError("meshserve import failed (rc %d): %s %s" % (rc, out, err))
        note("model: %.1f MB of float32 params, imported in %.0f s" % (
            res["model_bytes"] / 1e6, time.time() - start))
        phase("bandwidth")
        res["bandwidth"] = measure_bandwidth(2.0 if args.quick else 4.0)
        http_port = mslib.free_port()
        t = time.time()
        cluster = mslib.LocalCluster(args.bin_dir, 2, models, os.path.join(work, "logs"),
                                     ready_timeout_s=300,
                                     extra_args=["--http_port", str(http_port)])
        note("cluster: 2 workers ready in %.1f s (worker pids %s)" % (
            time.time() - t, cluster.worker_pids))
        try:
            phase("meshserve")
            res["meshserve"] = measure_meshserve(http_port, ps, reps)
            if not args.no_perf and cluster.worker_pids:
                phase("perf")
                pid = cluster.worker_pids[min(cluster.worker_pids)]
                res["perf_prefill"] = perf_profile(
                    work, pid, "prefill", lambda: len(complete(http_port, ps["long"], 1)[1]),
                    6 if args.quick else 10)
                res["perf_decode"] = perf_profile(
                    work, pid, "decode",
                    lambda: len(complete(http_port, ps["short"], MAX_TOKENS)[1]),
                    6 if args.quick else 10)
        finally:
            cluster.stop()
        phase("numpy")
        res["numpy_prefill_ms"] = measure_numpy_prefill(hf, 5 if args.quick else 10)
        phase("torch")
        res["torch"] = measure_torch(work, hf, ps, reps)
        if args.no_llama_cpp:
            res["llama_cpp"] = {"error": "skipped (--no_llama_cpp)"}
        else:
            phase("llama.cpp")
            res["llama_cpp"] = measure_llama_cpp(work, weights, ps, reps)
            if "error" in res["llama_cpp"]:
                note("llama.cpp: " + res["llama_cpp"]["error"])
    finally:
        mslib._cleanup()
        if args.keep:
            note("kept %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    res["load_end"] = "%.1f/%.1f/%.1f" % os.getloadavg()
    res["phase_loads"] = LOADS
    res["elapsed_s"] = time.time() - start
    res["command"] = "bench/run_generation.py" + (" --quick" if args.quick else "")
    res["avx512"] = "avx512f" in open("/proc/cpuinfo").read()
    print("RESULTS " + json.dumps(res), flush=True)
    generation_doc.update_doc(args.doc, generation_doc.section(res))
    note("wrote the Generation section of %s (%.0f s)" % (args.doc, time.time() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
