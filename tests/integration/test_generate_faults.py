#!/usr/bin/python3
"""e2e_generate_faults: generation survives a worker lost and the worker
count changing mid-stream (issue 32, item 6). The coordinator keeps every
sequence's tokens; when its layout changes it rebuilds the caches on the new
one by recomputing them (re-prefill) and the streams go on.

A GPT-2 (8 heads, 6 layers, d 512, vocabulary 256, context 128; random
weights in Hugging Face's layout, the writer and NumPy forward of
test_lm_import.py) imported
and served by meshserve-coordinator and meshserve-worker processes started
one by one (mslib.ProcessCluster, heartbeats every 250 ms, replicas on):

  kill9     4 workers, 8 greedy streams of 96 tokens over gRPC; once every
            stream has its first tokens, one worker is killed with SIGKILL.
            Then (3 workers left) 8 streams of version 1; version 2 pushed
            (a new ln_f.bias) while they run, and another worker killed:
            every chunk names version 1 and every token is version 1's
            greedy choice and every stream completes (the coordinator
            makes each held version resident on the new generation too,
            moved from the surviving holders). A stream started after the
            push runs version 2, against its NumPy reference.
  scale     2 workers, 8 streams; two workers join mid-stream (started
            before the streams and held with SIGSTOP before they register
            until every stream runs; the mesh grows to model=4), then one
            leaves (SIGTERM) mid-stream.
  cancel    then, on the scale cluster, a client cancels a stream mid-way:
            the coordinator's KV bytes used go back to 0 (/metrics), running
            sequences to 0, and the next stream is served right.

For kill9 and scale: every stream ends with finish_reason "length" and all
its tokens, each token the argmax of NumPy's logits over the prompt and the
tokens before it (teacher forcing, check_greedy of test_generate.py: a
near-tie within float rounding counts as equal), every stream was live when
the layout changed (it had fewer than its tokens), and the coordinator
placed the model anew (a later generation) while they ran. (Should a join be
so slow that a wave of streams ends first, that wave's tokens are checked
and another wave runs, up to 4.)

Usage: test_generate_faults.py --bin_dir build/bin [--keep]
"""
import os
import re
import signal
import sys
import threading
import time
import urllib.request

import numpy as np

import e2e_common as e2e
import mslib
import test_generate as tg
import test_lm_import as lm

HEARTBEAT_MS = 250
# Big enough that 8 streams take seconds (a step ~30 ms), so that the layout
# changes while every stream runs.
CONFIG = dict(lm.GPT2_CONFIG, n_layer=6, n_embd=512, n_head=8, vocab_size=256, n_positions=128)
STREAMS = 8
MAX_TOKENS = 96  # prompt (3..17) + 96 <= the context of 128


def make_model(env):
    rng = np.random.default_rng(32)
    weights = lm.gpt2_weights(rng, CONFIG)
    hf = os.path.join(env.root, "hf", "gpt2")
    models = os.path.join(env.root, "models")
    lm.write_hf_dir(hf, CONFIG, weights)
    rc, out, err = env.cli.run("import", "--hf_dir", hf, "--out_dir", models, timeout=120)
    env.c.check(rc == 0, "import gpt2", out + err)
    weights = {k: v.astype(np.float64) for k, v in weights.items()}
    return models, weights


def gpt2(weights):
    """The NumPy forward of `weights` (test_lm_import.gpt2_forward)."""
    return lambda ids: lm.gpt2_forward(weights, CONFIG, ids)


def teacher_forced(forward, prompt, got):
    """forward for test_generate.check_greedy over prefixes of prompt + got,
    from one forward pass of the whole sequence (the model is causal: the
    logits at a position depend on the tokens up to it only)."""
    full = forward(np.array([list(prompt) + list(got)], dtype=np.int32))
    return lambda ids: full[:, :ids.shape[1]]


class Streams:
    """STREAMS greedy Generate calls at once, each read by its own thread."""

    def __init__(self, mc, target, prompts, max_tokens):
        self.client = mc.MeshserveClient(target)
        self.prompts = prompts
        self.max_tokens = max_tokens
        self.tokens = [[] for _ in prompts]
        self.finish = [None] * len(prompts)
        self.error = [None] * len(prompts)
        self.versions = [set() for _ in prompts]  # the versions its chunks named
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(len(prompts))]
        for t in self.threads:
            t.start()

    def _run(self, i):
        try:
            for chunk in self.client.generate("gpt2", prompt_ids=self.prompts[i],
                                              max_tokens=self.max_tokens, temperature=0,
                                              timeout_s=120):
                self.tokens[i].extend(chunk.token_ids)
                self.versions[i].add(chunk.version)
                if chunk.finish_reason:
                    self.finish[i] = chunk.finish_reason
        except Exception as e:  # noqa: BLE001 (recorded, checked below)
            self.error[i] = "%s: %s" % (type(e).__name__, e)

    def counts(self):
        return [len(t) for t in self.tokens]

    def wait_all_started(self, at_least, timeout_s=60):
        deadline = time.time() + timeout_s
        while time.time() < deadline and min(self.counts()) < at_least:
            if all(not t.is_alive() for t in self.threads):
                break
            time.sleep(0.002)
        return self.counts()

    def join(self, timeout_s=120):
        deadline = time.time() + timeout_s
        for t in self.threads:
            t.join(max(0.0, deadline - time.time()))
        self.client.close()
        return not any(t.is_alive() for t in self.threads)


def prompts_for(seed):
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(0, CONFIG["vocab_size"], size=3 + 2 * i)]
            for i in range(STREAMS)]


def check_streams(c, what, streams, forward, live_at, cl, before):
    """The streams ran across a layout change: returned, were mid-generation
    (`live_at`: their token counts at the change), the model was placed anew
    (a generation after `before`) by the time they ended, and check_tokens."""
    start = time.time()
    finished = streams.join()
    gens = generations(cl)
    print("    the streams ended %.2f s after the change" % (time.time() - start), flush=True)
    c.check(finished, "%s: every stream returned (no hang)" % what)
    c.check(any(g > before for g in gens),
            "%s: the model was placed anew while the streams ran (generations %s, before %d)"
            % (what, gens, before), cl.logs_tail())
    c.check(all(n < streams.max_tokens for n in live_at),
            "%s: every stream was live when the layout changed (tokens then: %s)" % (
                what, live_at))
    check_tokens(c, what, streams, forward)


def check_tokens(c, what, streams, forward, version=1):
    """Each stream ended "length" with all its tokens, every chunk naming
    `version`, each token NumPy's greedy choice."""
    for i, prompt in enumerate(streams.prompts):
        got = streams.tokens[i]
        name = "%s: stream %d (%d-token prompt)" % (what, i, len(prompt))
        if c.check(streams.error[i] is None and streams.finish[i] == "length" and
                   len(got) == streams.max_tokens and streams.versions[i] <= {version},
                   name + " ends with finish_reason length and %d tokens of version %d" % (
                       streams.max_tokens, version),
                   "    error=%s finish=%s tokens=%d versions=%s" % (
                       streams.error[i], streams.finish[i], len(got), streams.versions[i])):
            tg.check_greedy(c, name + " equals NumPy's teacher forcing",
                            teacher_forced(forward, prompt, got), prompt, got)


def placed_workers(cl):
    """The processes of the workers the model's newest placement uses (the
    coordinator's "placing model" line names worker ids; each worker's log
    its own)."""
    placing = re.findall(r"placing model 'gpt2': gen \d+ v\d+ \S+ workers \{([^}]*)\}",
                         cl.log(cl.coordinator_log))
    ids = {int(w) for w in re.findall(r"(\d+): devices", placing[-1])} if placing else set()
    procs = []
    for i, proc in enumerate(cl.workers):
        m = re.search(r"ready id=(\d+)", cl.log("worker%d" % i))
        if m and int(m.group(1)) in ids and proc.poll() is None:
            procs.append(proc)
    return procs


def generations(cl):
    return [int(g) for g in re.findall(r"now serves generation (\d+)", cl.log(cl.coordinator_log))]


def cluster(env, models, name, workers, http_port=0):
    args = ["--max_prefill_tokens_per_step", "32", "--min_workers", str(workers)]
    if http_port:
        args += ["--http_port", str(http_port)]
    cl = mslib.ProcessCluster(env.bin_dir, workers, models,
                              os.path.join(env.root, "logs-" + name),
                              coordinator_args=args, heartbeat_ms=HEARTBEAT_MS)
    if not cl.wait_ready():
        raise RuntimeError("cluster %s not ready:\n%s" % (name, cl.logs_tail()))
    return cl


def start_streams(c, mc, cl, seed, what):
    """After one short warm-up stream (it compiles the first decode
    programs): the generation served, STREAMS streams and their token
    counts once each has its first token."""
    with mc.MeshserveClient(cl.target) as client:
        ids = [t for ch in client.generate("gpt2", prompt_ids=[1, 2, 3], max_tokens=4,
                                           temperature=0, timeout_s=120) for t in ch.token_ids]
    c.check(len(ids) == 4, "%s: a warm-up stream is served" % what, cl.logs_tail())
    before = max(generations(cl) or [0])
    streams = Streams(mc, cl.target, prompts_for(seed), MAX_TOKENS)
    return before, streams, streams.wait_all_started(1)


def kill9(env, state):
    c, mc = env.c, state["mc"]
    cl = cluster(env, state["models"], "kill9", 4)
    try:
        before, streams, live_at = start_streams(c, mc, cl, 1, "kill9")
        os.kill(cl.workers[2].pid, signal.SIGKILL)
        print("    killed worker 2 at tokens %s" % live_at, flush=True)
        check_streams(c, "kill -9 under %d streams" % STREAMS, streams, state["forward"],
                      live_at, cl, before)
        push_then_kill(env, state, cl)
    finally:
        cl.stop()


def push_then_kill(env, state, cl):
    """Streams of version 1; version 2 pushed (a new ln_f.bias) while they
    run, then a worker killed: they end on version 1's weights, rebuilt on
    the new placement; a stream started after the push runs version 2."""
    c, mc = env.c, state["mc"]
    what = "push, then kill -9, under %d streams" % STREAMS
    v2 = dict(state["weights"])
    v2["ln_f.bias"] = np.random.default_rng(5).standard_normal(CONFIG["n_embd"])
    checkpoint = os.path.join(env.root, "v2.safetensors")
    mslib.write_safetensors(checkpoint, {"ln_f.bias": v2["ln_f.bias"].astype(np.float32)})
    before = max(generations(cl) or [0])
    streams = Streams(mc, cl.target, prompts_for(4), MAX_TOKENS)
    streams.wait_all_started(1)
    rc, out, err = env.cli.run("push", "--target", cl.target, "--model", "gpt2", "--checkpoint",
                               checkpoint, timeout=60)
    c.check(rc == 0 and re.search(r"version 2\b", out), "%s: the push makes version 2" % what,
            out + err)
    live_at = streams.counts()
    victims = placed_workers(cl)
    c.check(len(victims) == 2, "%s: the model is placed on 2 of the 3 workers" % what,
            cl.logs_tail())
    os.kill(victims[0].pid, signal.SIGKILL)
    print("    pushed, then killed a worker of the placement at tokens %s" % live_at, flush=True)
    finished = streams.join()
    c.check(finished, "%s: every stream returned (no hang)" % what)
    c.check(any(g > before for g in generations(cl)),
            "%s: the model was placed anew (generations %s)" % (what, generations(cl)))
    c.check(all(0 < n < streams.max_tokens for n in live_at),
            "%s: every stream was mid-generation at the kill (tokens then: %s)" % (what, live_at))
    # Version 1 is held by the streams: the new generation has it too, so
    # each stream ends with all its tokens, each version 1's.
    check_tokens(c, what, streams, state["forward"], version=1)
    later = Streams(mc, cl.target, prompts_for(5)[:2], 16)
    c.check(later.join(), "after the push: every stream returned (no hang)")
    check_tokens(c, "after the push", later, gpt2(v2), version=2)


def wait_placed_anew(cl, before, streams, timeout_s=30):
    """Waits for a generation after `before`; returns the streams' token
    counts at that moment, or None if it did not come before every stream
    ended or the timeout."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        counts = streams.counts()
        alive = any(t.is_alive() for t in streams.threads)
        if any(g > before for g in generations(cl)):
            return counts
        if not alive:
            return None
        time.sleep(0.005)
    return None


def across(c, mc, cl, before, streams, what, forward, waves=4):
    """The streams across a scale step: check_streams of the wave that ran
    while the model was placed anew, with their token counts at that moment.
    A wave that ended before (a slow join) is checked for its tokens and
    followed by the next, up to `waves`."""
    for wave in range(waves):
        live_at = wait_placed_anew(cl, before, streams)
        if live_at is not None or wave == waves - 1:
            break
        print("    wave %d ended before the model moved; another" % wave, flush=True)
        c.check(streams.join(), "%s, wave %d: every stream returned" % (what, wave))
        check_tokens(c, "%s, wave %d" % (what, wave), streams, forward)
        streams = Streams(mc, cl.target, prompts_for(10 + wave), MAX_TOKENS)
    print("    placed anew at tokens %s" % live_at, flush=True)
    c.check(live_at is not None, "%s: the model is placed anew" % what, cl.logs_tail())
    check_streams(c, what, streams, forward, live_at or [0], cl, before)


def scale(env, state):
    c, mc = env.c, state["mc"]
    http_port = mslib.free_port()
    cl = cluster(env, state["models"], "scale", 2, http_port)
    try:
        # The joining workers start now and are stopped before they register
        # (their start takes ~0.3 s); they go on once every stream runs, so
        # that the model moves while all of them are mid-generation.
        joining = [cl.add_worker() for _ in range(2)]
        for proc in joining:
            os.kill(proc.pid, signal.SIGSTOP)
        registered = re.findall(r"worker \d+ registered", cl.log(cl.coordinator_log))
        c.check(len(registered) == 2, "scale: the joining workers are held before they register",
                cl.logs_tail())
        try:
            before, streams, _ = start_streams(c, mc, cl, 2, "scale")
        finally:
            for proc in joining:
                os.kill(proc.pid, signal.SIGCONT)
        across(c, mc, cl, before, streams, "scale 2 -> 4 under %d streams" % STREAMS,
               state["forward"])
        c.check(re.search(r"now serves generation \d+ .*scale step: 4 workers",
                          cl.log(cl.coordinator_log)) is not None,
                "scale up: the model is placed on 4 workers", cl.logs_tail())
        before = max(generations(cl) or [0])
        streams = Streams(mc, cl.target, prompts_for(3), MAX_TOKENS)
        streams.wait_all_started(1)
        cl.workers[3].send_signal(signal.SIGTERM)  # a graceful leave
        across(c, mc, cl, before, streams, "scale 4 -> 3 under %d streams" % STREAMS,
               state["forward"])
        cancel(c, mc, cl, http_port, state["forward"])
    finally:
        cl.stop()


def metric(text, name, labels):
    m = re.search(r"^%s\{%s\} (\S+)" % (re.escape(name), re.escape(labels)), text, re.M)
    return float(m.group(1)) if m else None


def cancel(c, mc, cl, http_port, forward):
    """A stream cancelled mid-way frees its KV blocks; the next is served."""
    url = "http://127.0.0.1:%d/metrics" % http_port

    def kv():
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        return (metric(text, "meshserve_generation_kv_cache_bytes",
                       'model="gpt2",state="used"'),
                metric(text, "meshserve_generation_sequences", 'model="gpt2",state="running"'), text)

    with mc.MeshserveClient(cl.target) as client:
        stream = client.generate("gpt2", prompt_ids=[5, 6, 7], max_tokens=120,
                                 temperature=0, timeout_s=60)
        got = []
        for chunk in stream:
            got.extend(chunk.token_ids)
            if len(got) >= 3:
                break
        used_during, running_during, _ = kv()
        stream.cancel()
        deadline = time.time() + 10
        used, running, text = kv()
        while time.time() < deadline and (used != 0 or running != 0):
            time.sleep(0.05)
            used, running, text = kv()
        print("    KV bytes used mid-stream %s, after the cancel %s" % (used_during, used),
              flush=True)
        c.check(used_during is not None and used_during > 0 and running_during == 1 and
                used == 0 and running == 0,
                "cancel: the cancelled sequence's KV blocks are freed (used %s -> %s bytes, "
                "running %s -> %s)" % (used_during, used, running_during, running),
                "\n".join(l for l in text.splitlines() if "generation" in l))
        ids = [t for ch in client.generate("gpt2", prompt_ids=[5, 6, 7], max_tokens=8,
                                           temperature=0, timeout_s=60)
               for t in ch.token_ids]
        if c.check(len(ids) == 8, "cancel: the next stream is served"):
            tg.check_greedy(c, "cancel: the next stream equals teacher forcing",
                            teacher_forced(forward, [5, 6, 7], ids), [5, 6, 7], ids)


def stages(env):
    state = {}

    def prepare():
        state["models"], state["weights"] = make_model(env)
        state["forward"] = gpt2(state["weights"])
        state["mc"] = mslib.client_package(env.bin_dir)

    return [("import", prepare),
            ("kill -9 under 8 streams", lambda: kill9(env, state)),
            ("scale under 8 streams, then a cancel", lambda: scale(env, state))]


if __name__ == "__main__":
    sys.exit(e2e.main("generate_faults", stages, doc=__doc__))
