#!/usr/bin/python3
"""The RL weight-sync pattern (issue 34): a PyTorch trainer on 2 ranks pushes
its state_dict into a served model every few optimizer steps while another
process keeps generating from it.

    scripts/setup.sh                       # builds build/bin and build/python
    /usr/bin/python3 examples/rl_sync.py   # Debian's python3 (numpy, torch, grpcio)

What it does, all on this machine (ports from the OS, one temp dir):
  1. writes a tiny GPT-2 with random weights in Hugging Face's names and
     layout (Conv1D weights [in, out], the fused c_attn [d, 3d], the
     attn.bias / attn.masked_bias buffers, lm_head tied to wte) as
     model.safetensors + config.json, and `meshserve import`s it;
  2. starts `meshserve local --workers 2`;
  3. starts a generator process: --streams threads, each starting greedy
     `MeshserveClient.generate` streams back to back and logging every
     chunk's arrival time and `.version`;
  4. starts --ranks trainer processes (torch, one thread each). They hold the
     same replica (same init, same batches: data parallel whose gradients
     would be all-reduced), take --steps_per_push Adam steps (next-token loss
     on counting sequences: the served completions learn to count), then each joins
     the push (`join_push(model, push_id)`) and puts ITS rows of every tensor
     of `model.state_dict()` as it is (`Push.put(name, rows, offset=[row0,
     0, ...])`: c_attn fused, lm_head.weight tied, the attn buffers ignored by
     the server); this process `begin_push`es, hands out the push_id, and
     `commit()`s once every rank has put;
  5. after --pushes pushes: stops the generator, checks a greedy completion
     against torch's teacher-forced argmax on the ranks' final weights, and
     stops everything.

It prints, per push, the version, the push time (begin_push to commit()'s
return) and how long generation paused around it (the longest gap between
any two streamed tokens that overlaps the push, next to the gaps outside
pushes); and checks that every stream finished on the version it started
with, that streams started after a commit report the new version, and that
none failed. Exit 0 when all checks pass. --summary FILE writes the numbers
as JSON (tests/integration/test_rl_sync.py reads it); --keep keeps the temp
dir (--work DIR uses DIR), with init.npz and final.npz (the weights before
and after training, pushed) and streams.jsonl (every stream's record).

Thread-safety: the generator's threads append to one list under a lock;
everything else is single-threaded per process.
"""
import argparse
import json
import os
import queue
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "rl_gpt2"
NEAR_TIE = 1e-4  # of the largest |logit|: float32 server vs torch rounding


def client_package(bin_dir):
    """meshserve_client from BUILD/python (bin_dir's sibling). It may be
    imported before or after torch (its protos are registered as
    "meshserve/*.proto", apart from the "tensor.proto" OpenCV registers)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(bin_dir)), "python"))
    import meshserve_client
    return meshserve_client


# ---- the model: Hugging Face GPT-2 names and layout ----

def gpt2_config(a):
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": a.n_layer,
            "n_embd": a.n_embd, "n_head": a.n_head, "n_inner": None, "vocab_size": a.vocab,
            "n_positions": a.n_positions, "layer_norm_epsilon": 1e-5,
            "activation_function": "gelu_new", "scale_attn_weights": True}


def write_safetensors(path, tensors):
    """name -> array, as a float32 .safetensors file."""
    arrays = {n: np.ascontiguousarray(v, np.float32) for n, v in tensors.items()}
    ends = np.cumsum([a.nbytes for a in arrays.values()])
    header = {n: {"dtype": "F32", "shape": list(a.shape), "data_offsets": [int(e) - a.nbytes,
                                                                          int(e)]}
              for (n, a), e in zip(arrays.items(), ends)}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for a in arrays.values():
            f.write(a.tobytes())


def gpt2_init(cfg, seed):
    """Random float32 weights in the checkpoint's names and layout (the
    attn.bias / attn.masked_bias buffers included): the torch model's
    state_dict, drawn with `seed` (embeddings N(0, 0.5^2), matrices
    N(0, 1/fan_in), LayerNorm scales 1 + N(0, 0.01), biases N(0, 0.01))."""
    import torch
    torch.manual_seed(seed)
    model = torch_gpt2(cfg, None)
    with torch.no_grad():
        for name, t in model.named_parameters():
            if name in ("wte.weight", "wpe.weight"):
                t.normal_(0, 0.5)
            elif t.dim() == 2:
                t.normal_(0, t.shape[0] ** -0.5)
            else:
                is_scale = name.split(".")[-2].startswith("ln") and name.endswith("weight")
                t.normal_(1.0 if is_scale else 0.0, 0.1)
    return {n: t.detach().numpy().copy() for n, t in model.state_dict().items()
            if n != "lm_head.weight"}  # tied: the checkpoint has wte only


def torch_gpt2(cfg, weights):
    """A torch GPT-2 whose state_dict has the checkpoint's names and layouts,
    loaded from `weights` (name -> array) unless None."""
    import torch
    from torch import nn
    d, heads, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]

    class Conv1D(nn.Module):  # transformers.pytorch_utils.Conv1D: x @ W[in, out] + b
        def __init__(self, n_in, n_out):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(n_in, n_out))
            self.bias = nn.Parameter(torch.zeros(n_out))

        def forward(self, x):
            return x @ self.weight + self.bias

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            p = cfg["n_positions"]
            self.register_buffer("bias", torch.tril(torch.ones(p, p)).view(1, 1, p, p))
            self.register_buffer("masked_bias", torch.tensor(-1e4))
            self.c_attn, self.c_proj = Conv1D(d, 3 * d), Conv1D(d, d)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = (t.view(b, s, heads, d // heads).transpose(1, 2)
                       for t in self.c_attn(x).split(d, dim=-1))
            scores = q @ k.transpose(-1, -2) / (d // heads) ** 0.5
            scores = scores.masked_fill(self.bias[:, :, :s, :s] == 0, float("-inf"))
            o = torch.softmax(scores, dim=-1) @ v
            return self.c_proj(o.transpose(1, 2).reshape(b, s, d))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(d, eps), Attention(), nn.LayerNorm(d, eps)
            self.mlp = nn.Module()
            self.mlp.c_fc, self.mlp.c_proj = Conv1D(d, 4 * d), Conv1D(4 * d, d)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            m = nn.functional.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh")  # gelu_new
            return x + self.mlp.c_proj(m)

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(cfg["vocab_size"], d)
            self.wpe = nn.Embedding(cfg["n_positions"], d)
            self.h = nn.ModuleList(Block() for _ in range(cfg["n_layer"]))
            self.ln_f = nn.LayerNorm(d, eps)
            self.lm_head = nn.Linear(d, cfg["vocab_size"], bias=False)
            self.lm_head.weight = self.wte.weight  # tied, as GPT2LMHeadModel

        def forward(self, ids):
            x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))[None]
            for block in self.h:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    model = GPT2()
    if weights is not None:
        state = {k: torch.from_numpy(np.array(v)) for k, v in weights.items()}
        state["lm_head.weight"] = state["wte.weight"]
        model.load_state_dict(state)
    return model


def greedy_reference(cfg, weights, prompt, got):
    """Teacher forcing with torch: (all tokens match, first mismatch). Token
    i must be the argmax of the logits after prompt + got[:i]; a near-tie
    (within NEAR_TIE of the largest |logit|) counts as equal."""
    import torch
    model = torch_gpt2(cfg, weights).eval()
    with torch.no_grad():
        logits = model(torch.tensor([list(prompt) + list(got)]))[0].numpy()
    for i, tok in enumerate(got):
        row = logits[len(prompt) - 1 + i]
        if row[tok] < row.max() - NEAR_TIE * np.abs(row).max():
            return False, "token %d: got %d (logit %.6f), argmax %d (%.6f)" % (
                i, tok, row[tok], int(row.argmax()), row.max())
    return True, ""


# ---- a trainer rank (a process) ----

def rank_rows(shape, rank, ranks):
    """This rank's rows [r0, r1) of a tensor of `shape` (0-d: rank 0 whole)."""
    if len(shape) == 0:
        return (0, 1) if rank == 0 else None
    r0, r1 = shape[0] * rank // ranks, shape[0] * (rank + 1) // ranks
    return (r0, r1) if r1 > r0 else None


def rank_main(a):
    """Trains; per push: prints `trained`, reads a push_id, puts its rows of
    every state_dict tensor, prints `put`. At the end saves its weights."""
    import torch  # before the client, as a trainer's code would
    mc = client_package(a.bin_dir)
    torch.set_num_threads(1)
    cfg = json.load(open(os.path.join(a.work, "hf", "config.json")))
    weights = dict(np.load(os.path.join(a.work, "init.npz")))
    model = torch_gpt2(cfg, weights)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    client = mc.MeshserveClient(a.target, timeout_s=120)
    step = 0
    for k in range(a.pushes):
        for _ in range(a.steps_per_push):  # identical batches on every rank
            g = torch.Generator().manual_seed(a.seed * 1000 + step)
            starts = torch.randint(0, cfg["vocab_size"], (8, 1), generator=g)
            batch = (starts + torch.arange(a.train_len + 1)) % cfg["vocab_size"]  # counting
            logits = model(batch[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                     batch[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
        print(json.dumps({"trained": k, "loss": float(loss)}), flush=True)
        push_id = sys.stdin.readline().strip()
        t0 = time.time()
        push = client.join_push(MODEL, push_id)
        sent = 0
        for name, t in model.state_dict().items():  # as is: c_attn, lm_head, attn.bias
            arr = t.detach().float().numpy()
            rows = rank_rows(arr.shape, a.rank, a.ranks)
            if rows is None:
                continue
            box = arr[rows[0]:rows[1]] if arr.ndim else arr
            push.put(name, box, offset=[rows[0]] + [0] * (arr.ndim - 1) if arr.ndim else None)
            sent += box.nbytes
        print(json.dumps({"put": k, "s": time.time() - t0, "bytes": sent,
                          "direct": push.bytes_direct, "through": push.bytes_through,
                          "ignored": push.ignored}), flush=True)
    final = {n: t.detach().float().numpy() for n, t in model.state_dict().items()}
    np.savez(os.path.join(a.work, "final-rank%d.npz" % a.rank), **final)
    print(json.dumps({"done": a.rank}), flush=True)
    return 0


# ---- the generator (a process) ----

def generator_main(a):
    """--streams threads start greedy streams back to back until stdin
    closes; prints one JSON line per stream (start, end, token arrival
    times, versions, error)."""
    mc = client_package(a.bin_dir)
    client = mc.MeshserveClient(a.target, timeout_s=120)
    stop = threading.Event()
    lock = threading.Lock()
    rng = np.random.default_rng(a.seed)
    prompts = [rng.integers(0, a.vocab, size=4).tolist() for _ in range(64)]

    def loop(i):
        n = i
        while not stop.is_set():
            rec = {"start": time.time(), "times": [], "versions": [], "tokens": 0, "error": None}
            try:
                for chunk in client.generate(MODEL, prompt_ids=prompts[n % 64],
                                             max_tokens=a.max_tokens, temperature=0,
                                             ignore_eos=True):
                    rec["times"].append(time.time())
                    rec["versions"].append(chunk.version)
                    rec["tokens"] += len(chunk.token_ids)
            except Exception as e:  # a failed stream is what we look for
                rec["error"] = "%s: %s" % (type(e).__name__, e)
            rec["end"] = time.time()
            with lock:
                print(json.dumps(rec), flush=True)
            n += a.streams

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(a.streams)]
    for t in threads:
        t.start()
    sys.stdin.read()  # EOF: stop
    stop.set()
    for t in threads:
        t.join()
    return 0


# ---- the driver ----

class Child:
    """A child process whose stdout lines arrive on a queue."""

    def __init__(self, cmd, log_path, stdin=True):
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin else None,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next_json(self, timeout_s=300):
        while True:
            line = self.lines.get(timeout=timeout_s)
            if line is None:
                with open(self.log.name, errors="replace") as f:
                    tail = f.read()[-3000:]
                raise RuntimeError("%s exited (%s); the end of %s:\n%s" % (
                    " ".join(self.proc.args[-4:]), self.proc.wait(), self.log.name, tail))
            if line.startswith("{"):
                return json.loads(line)

    def send(self, text):
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def stop(self, timeout_s=30):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def start_server(a, work):
    """meshserve import + meshserve local --workers N; returns (Child, target)."""
    models = os.path.join(work, "models")
    p = subprocess.run([os.path.join(a.bin_dir, "meshserve"), "import", "--hf_dir",
                        os.path.join(work, "hf"), "--out_dir", models, "--name", MODEL],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError("meshserve import failed:\n%s%s" % (p.stdout, p.stderr))
    # --port 0: a port from the OS, named by the ready line.
    cmd = [os.path.join(a.bin_dir, "meshserve"), "local", "--workers", str(a.workers),
           "--model_dir", models, "--port", "0", "--log_dir", os.path.join(work, "logs")]
    server = Child(cmd, os.path.join(work, "local.log"), stdin=False)
    deadline = time.time() + 180
    while time.time() < deadline:
        line = server.lines.get(timeout=max(0.1, deadline - time.time()))
        if line is None:
            raise RuntimeError("meshserve local exited; see %s" % work)
        if "ready: coordinator " in line:
            return server, line.split("ready: coordinator ", 1)[1].split(",", 1)[0]
    raise RuntimeError("meshserve local not ready in 180 s")


def pause_stats(streams, pushes):
    """Per push: the longest gap between consecutive token arrivals (over all
    streams) overlapping [begin, commit]; and the gaps outside pushes."""
    times = sorted(t for s in streams for t in s["times"])
    gaps = [(t0, t1) for t0, t1 in zip(times, times[1:])]
    windows = [(p["begin"], p["commit"]) for p in pushes]
    inside = [[t1 - t0 for t0, t1 in gaps if t1 >= b and t0 <= c] for b, c in windows]
    outside = [t1 - t0 for t0, t1 in gaps if all(t1 < b or t0 > c for b, c in windows)]
    return [max(g) if g else 0.0 for g in inside], outside


def check_streams(streams, pushes, v0):
    """[(ok, what)]: no stream failed; every stream's chunks carry one version
    (the one it started with, on its last chunk too); a stream started after
    commit k returned runs on version >= v_k; versions are ones committed."""
    checks = []
    failed = [s["error"] for s in streams if s["error"]]
    checks.append((not failed and streams, "%d streams, none failed%s" % (
        len(streams), ("; failed: %s" % failed[:3]) if failed else "")))
    mixed = [s["versions"] for s in streams if len(set(s["versions"])) > 1]
    checks.append((not mixed, "every stream finished on the version it started with%s" % (
        ("; mixed: %s" % mixed[:3]) if mixed else "")))
    known = {v0} | {p["version"] for p in pushes}
    unknown = sorted({s["versions"][-1] for s in streams if s["versions"]} - known)
    checks.append((not unknown, "every stream's version is one committed%s" % (
        ("; unknown: %s" % unknown) if unknown else "")))
    for p in pushes:
        after = [s for s in streams if s["start"] > p["commit"] and s["versions"]]
        stale = [s["versions"][-1] for s in after if s["versions"][-1] < p["version"]]
        checks.append((after and not stale, "%d streams started after commit of v%d report it "
                       "(or newer)%s" % (len(after), p["version"],
                                         ("; stale: %s" % stale[:5]) if stale else "")))
    return checks


def drive(a, work):
    """Runs the scenario; returns the summary dict."""
    cfg = gpt2_config(a)
    init = gpt2_init(cfg, a.seed)
    os.makedirs(os.path.join(work, "hf"))
    json.dump(cfg, open(os.path.join(work, "hf", "config.json"), "w"))
    write_safetensors(os.path.join(work, "hf", "model.safetensors"), init)
    np.savez(os.path.join(work, "init.npz"), **init)
    server, target = start_server(a, work)
    children = [server]
    try:
        return run_pushes(a, work, cfg, target, children)
    finally:
        for child in reversed(children):
            child.stop()


def run_pushes(a, work, cfg, target, children):
    mc = client_package(a.bin_dir)
    client = mc.MeshserveClient(target, timeout_s=120)
    me = [sys.executable, os.path.abspath(__file__), "--bin_dir", a.bin_dir, "--target", target,
          "--work", work] + ["--%s=%s" % (k, getattr(a, k)) for k in (
              "pushes", "steps_per_push", "ranks", "lr", "seed", "vocab", "streams",
              "max_tokens", "train_len")]
    gen = Child(me + ["--role", "generator"], os.path.join(work, "generator.log"))
    children.append(gen)
    ranks = [Child(me + ["--role", "rank", "--rank", str(r)],
                     os.path.join(work, "rank%d.log" % r)) for r in range(a.ranks)]
    children.extend(ranks)
    pushes = []
    for k in range(a.pushes):
        trained = [r.next_json() for r in ranks]
        push = client.begin_push(MODEL)
        begin = time.time()
        for r in ranks:
            r.send(str(push.push_id))
        puts = [r.next_json() for r in ranks]
        version = push.commit()
        commit = time.time()
        pushes.append({"version": version, "begin": begin, "commit": commit,
                       "push_s": commit - begin, "put_s": [p["s"] for p in puts],
                       "bytes": [p["bytes"] for p in puts],
                       "bytes_direct": [p["direct"] for p in puts],
                       "ignored": sorted(set(sum((p["ignored"] for p in puts), []))),
                       "loss": trained[0]["loss"]})
        print("push %d: v%d, %.3f s (ranks put %s s, %s bytes, direct %s), loss %.3f" % (
            k + 1, version, commit - begin, ["%.3f" % p["s"] for p in puts],
            [p["bytes"] for p in puts], [p["direct"] for p in puts], trained[0]["loss"]),
            flush=True)
        time.sleep(a.gap_s)  # let streams start on the new version
    for r in ranks:
        r.next_json()  # done: final weights saved
    gen.proc.stdin.close()  # the generator finishes its streams and exits
    gen.proc.wait(timeout=300)
    streams = []
    while True:
        line = gen.lines.get(timeout=60)
        if line is None:
            break
        if line.startswith("{"):
            streams.append(json.loads(line))
    return summarize(a, work, cfg, client, pushes, streams)


def final_weights(work, ranks):
    """The pushed weights: each tensor's rows from the rank that put them."""
    parts = [dict(np.load(os.path.join(work, "final-rank%d.npz" % r))) for r in range(ranks)]
    out = {}
    for name, t in parts[0].items():
        out[name] = t.copy()
        for r in range(1, ranks):
            rows = rank_rows(t.shape, r, ranks)
            if rows and t.ndim:
                out[name][rows[0]:rows[1]] = parts[r][name][rows[0]:rows[1]]
    return out


def summarize(a, work, cfg, client, pushes, streams):
    v0 = min(min(s["versions"]) for s in streams if s["versions"]) if streams else 1
    v0 = min(v0, pushes[0]["version"] - 1) if pushes else v0
    pauses, outside = pause_stats(streams, pushes)
    for p, pause in zip(pushes, pauses):
        p["pause_s"] = pause
    checks = check_streams(streams, pushes, v0)
    versions = [p["version"] for p in pushes]
    checks.append((all(x < y for x, y in zip([v0] + versions, versions)),
                   "pushes committed with increasing versions %s" % versions))
    weights = final_weights(work, a.ranks)
    prompt = [1, 2, 3]
    got, last_version = [], None
    for chunk in client.generate(MODEL, prompt_ids=prompt, max_tokens=a.max_tokens,
                                 temperature=0, ignore_eos=True):
        got += chunk.token_ids
        last_version = chunk.version
    ok, why = greedy_reference(cfg, weights, prompt, got)
    checks.append((ok and last_version == versions[-1], "greedy after the last push (v%s) equals "
                   "torch's teacher forcing on the trainer's final weights %s" % (last_version, why)))
    gaps = sorted(outside)
    print("generation: %d streams, %d tokens; token gaps outside pushes p50 %.1f ms, max %.1f ms"
          % (len(streams), sum(s["tokens"] for s in streams),
             1e3 * gaps[len(gaps) // 2] if gaps else 0, 1e3 * gaps[-1] if gaps else 0))
    for k, p in enumerate(pushes):
        print("push %d: v%d  push %.3f s  generation paused (longest token gap) %.1f ms" % (
            k + 1, p["version"], p["push_s"], 1e3 * p["pause_s"]))
    for ok, what in checks:
        print("%s %s" % ("ok  " if ok else "FAIL", what))
    np.savez(os.path.join(work, "final.npz"), **weights)
    with open(os.path.join(work, "streams.jsonl"), "w") as f:
        f.writelines(json.dumps(s) + "\n" for s in streams)
    return {"pushes": pushes, "v0": v0, "streams": len(streams),
            "failed_streams": [s["error"] for s in streams if s["error"]],
            "tokens": sum(s["tokens"] for s in streams),
            "gap_outside_p50_s": gaps[len(gaps) // 2] if gaps else None,
            "gap_outside_max_s": gaps[-1] if gaps else None,
            "greedy": {"prompt": prompt, "ids": got, "version": last_version},
            "config": cfg, "checks": [[bool(ok), what] for ok, what in checks],
            "final_weights": os.path.join(work, "final.npz")}


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin_dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--pushes", type=int, default=5)
    ap.add_argument("--steps_per_push", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n_layer", type=int, default=4)
    ap.add_argument("--n_embd", type=int, default=128)
    ap.add_argument("--n_head", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--n_positions", type=int, default=64)
    ap.add_argument("--train_len", type=int, default=16)
    ap.add_argument("--streams", type=int, default=2, help="concurrent generation streams")
    ap.add_argument("--max_tokens", type=int, default=24)
    ap.add_argument("--gap_s", type=float, default=1.0, help="pause after each commit")
    ap.add_argument("--summary", help="write the numbers as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    # Internal: the child processes.
    ap.add_argument("--role", default="driver", choices=("driver", "rank", "generator"))
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--target")
    ap.add_argument("--work", help="an empty directory for the files (default: a temp dir, "
                    "removed at the end unless --keep)")
    return ap.parse_args()


def main():
    a = parse_args()
    if a.role == "rank":
        return rank_main(a)
    if a.role == "generator":
        return generator_main(a)
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        print("rl_sync: needs PyTorch (Debian: apt-get install python3-torch)", file=sys.stderr)
        return 2
    own_dir = not a.work
    work = a.work or tempfile.mkdtemp(prefix="meshserve-rl-sync-")
    os.makedirs(work, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ok = False
    try:
        summary = drive(a, work)
        ok = all(c[0] for c in summary["checks"])
        if a.summary:
            with open(a.summary, "w") as f:
                json.dump(summary, f)
    finally:
        if a.keep or not own_dir:
            print("rl_sync: files in %s" % work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
