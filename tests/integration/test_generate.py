#!/usr/bin/python3
"""e2e_generate: token generation over real processes, against the full-prefix
forward pass (teacher forcing) of an independent NumPy model.

GPT-2 (4 heads) and Llama with grouped-query attention (4 query heads over 2
KV heads, RoPE) written with random weights in Hugging Face's layout (the
writers and NumPy forwards of test_lm_import.py), imported, and served by
`meshserve local` on 1, 2 and 4 workers. For each:
  - greedy `meshserve generate --ids`: every token is the argmax of NumPy's
    logits over the prompt and the tokens before it (a near-tie within
    float rounding counts as equal), for prompts of 1 to 20 tokens and up
    to the model's context;
  - six sequences at once (continuous batching, chunked prefill with
    --max_prefill_tokens_per_step 8): each equals its greedy reference;
  - seeded sampling (temperature 0.8, top_k 20): the same seed gives the
    same tokens on every worker count and alone or batched;
  - refusals, each with its code, and the next request still served;
  - the coordinator's /metrics counts the tokens and times the first ones.

Usage: test_generate.py --bin_dir build/bin [--workers 1,2,4]
"""
import os
import re
import subprocess
import sys
import threading
import urllib.request

import numpy as np

import e2e_common as e2e
import mslib
import test_lm_import as lm

NEAR_TIE = 1e-4  # of the largest |logit|


def make_models(env):
    c, cli = env.c, env.cli
    rng = np.random.default_rng(7)
    hf = os.path.join(env.root, "hf")
    models = os.path.join(env.root, "models")
    g = lm.gpt2_weights(rng, lm.GPT2_CONFIG)
    ll = lm.llama_weights(rng, lm.LLAMA_CONFIG)
    lm.write_hf_dir(os.path.join(hf, "gpt2"), lm.GPT2_CONFIG, g)
    lm.write_hf_dir(os.path.join(hf, "llama"), lm.LLAMA_CONFIG, ll)
    for name in ("gpt2", "llama"):
        rc, out, err = cli.run("import", "--hf_dir", os.path.join(hf, name), "--out_dir", models,
                               timeout=120)
        c.check(rc == 0, "import %s" % name, out + err)
    forwards = {
        "gpt2": (lambda ids: lm.gpt2_forward(g, lm.GPT2_CONFIG, ids), 32),
        "llama": (lambda ids: lm.llama_forward(ll, lm.LLAMA_CONFIG, ids), 64),
    }
    return models, forwards


def check_greedy(c, what, forward, prompt, got):
    """Teacher forcing: token i must be the argmax of the logits after
    prompt + got[:i] (a near-tie within float rounding counts)."""
    seq = list(prompt)
    for i, tok in enumerate(got):
        logits = forward(np.array([seq], dtype=np.int32))[0, -1]
        best = int(np.argmax(logits))
        if tok != best and logits[best] - logits[tok] > NEAR_TIE * np.max(np.abs(logits)):
            return c.check(False, what, "    token %d: got %d (logit %.6f), argmax %d (%.6f)" % (
                i, tok, logits[tok], best, logits[best]))
        seq.append(tok)
    return c.check(True, what)


def generate(cli, target, model, prompt, max_tokens, extra=()):
    args = ["generate", "--target", target, "--model", model, "--prompt_ids",
            ",".join(str(t) for t in prompt), "--max_tokens", str(max_tokens), "--ids"]
    rc, out, err = cli.run(*(args + list(extra)), timeout=120)
    lines = [l for l in out.strip().split("\n") if l.strip()]
    ids = [int(t) for t in lines[-1].split()] if rc == 0 and lines else None
    return rc, ids, out, err


def serve(env, workers, models, forwards, sampled):
    print("== %d worker(s)" % workers, flush=True)
    c, cli = env.c, env.cli
    http_port = mslib.free_port()
    cluster = env.cluster(workers, models, "gen%d" % workers,
                          extra_args=["--max_prefill_tokens_per_step", "8",
                                      "--http_port", str(http_port)])
    rng = np.random.default_rng(100 + workers)
    try:
        for model, (forward, context) in forwards.items():
            for n in (1, 5, 20):
                prompt = [int(t) for t in rng.integers(0, 64, size=n)]
                max_tokens = min(12, context - n)
                rc, ids, out, err = generate(cli, cluster.target, model, prompt, max_tokens,
                                             ["--temperature", "0"])
                what = "%d workers: %s greedy, %d-token prompt" % (workers, model, n)
                if c.check(rc == 0 and ids is not None and len(ids) == max_tokens,
                           what + " returns %d ids" % max_tokens, out + err):
                    check_greedy(c, what + " equals NumPy's teacher forcing", forward, prompt,
                                 ids)
            # Up to the context: prompt + max_tokens == context.
            prompt = [3, 1, 4]
            rc, ids, out, err = generate(cli, cluster.target, model, prompt, context - 3,
                                         ["--temperature", "0"])
            what = "%d workers: %s greedy to the context (%d tokens)" % (workers, model, context)
            if c.check(rc == 0 and ids is not None and len(ids) == context - 3, what, out + err):
                check_greedy(c, what + " equals teacher forcing", forward, prompt, ids)
            # Six at once: continuous batching with chunked prefill.
            prompts = [[int(t) for t in rng.integers(0, 64, size=2 + 3 * i)] for i in range(6)]
            results = [None] * 6

            def run(i):
                results[i] = generate(cli, cluster.target, model, prompts[i], 8,
                                      ["--temperature", "0"])

            threads = [threading.Thread(target=run, args=(i,)) for i in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for i, (rc, ids, out, err) in enumerate(results):
                what = "%d workers: %s, one of 6 at once (%d-token prompt)" % (
                    workers, model, len(prompts[i]))
                if c.check(rc == 0 and ids is not None and len(ids) == 8, what, out + err):
                    check_greedy(c, what + " equals teacher forcing", forward, prompts[i], ids)
            # Seeded sampling: the same draws on every mesh.
            rc, ids, out, err = generate(cli, cluster.target, model, [5, 6, 7], 10,
                                         ["--temperature", "0.8", "--top_k", "20", "--seed",
                                          "1234"])
            if c.check(rc == 0 and ids is not None, "%d workers: %s seeded sample" % (
                    workers, model), out + err):
                sampled.setdefault(model, {})[workers] = ids
        refusals(env, cluster.target)
        metrics = urllib.request.urlopen("http://127.0.0.1:%d/metrics" % http_port,
                                         timeout=10).read().decode()
        tokens = re.search(r'^meshserve_generation_tokens_total\{model="gpt2"\} (\d+)', metrics,
                           re.M)
        c.check(tokens is not None and int(tokens.group(1)) > 0 and
                'meshserve_generation_time_to_first_token_seconds_count{model="gpt2"}' in metrics
                and 'meshserve_generation_kv_cache_bytes{model="gpt2",state="capacity"}' in metrics,
                "%d workers: /metrics counts gpt2's tokens, times its first tokens, shows its KV "
                "cache" % workers, metrics[-2000:])
    finally:
        cluster.stop()


def refusals(env, target):
    c, cli = env.c, env.cli
    cases = [
        ("an id outside the vocabulary", "gpt2", [1, 64], 4, [], "outside the vocabulary"),
        ("prompt + max_tokens past the context", "gpt2", [1] * 30, 3, [], "context of 32"),
        ("max_tokens 0", "gpt2", [1], 0, [], "max_tokens"),
        ("a negative temperature", "gpt2", [1], 2, ["--temperature", "-1"], "temperature"),
        ("an unknown model", "nope", [1], 2, [], "nope"),
    ]
    for what, model, prompt, max_tokens, extra, phrase in cases:
        rc, ids, out, err = generate(cli, target, model, prompt, max_tokens, extra)
        c.check(rc != 0 and phrase in err, "refused: %s (%s)" % (what, phrase),
                "    rc=%d\n%s\n%s" % (rc, out, err))
    rc, ids, out, err = generate(cli, target, "gpt2", [2, 3], 4, ["--temperature", "0"])
    c.check(rc == 0 and ids is not None and len(ids) == 4, "served after the refusals", out + err)


def stages(env):
    workers = [int(w) for w in env.args.workers.split(",")]
    state = {"sampled": {}}

    def prepare():
        state["models"], state["forwards"] = make_models(env)

    def same_draws():
        for model, by_workers in state["sampled"].items():
            runs = list(by_workers.values())
            env.c.check(len(runs) == len(workers) and all(r == runs[0] for r in runs),
                        "%s: the seeded sample is the same on %s workers" % (model, workers),
                        str(by_workers))

    out = [("import", prepare)]
    for w in workers:
        out.append(("serve on %d" % w, lambda w=w: serve(env, w, state["models"],
                                                          state["forwards"], state["sampled"])))
    out.append(("same draws", same_draws))
    return out


if __name__ == "__main__":
    sys.exit(e2e.main("generate", stages, doc=__doc__,
                      add_args=lambda ap: ap.add_argument("--workers", default="1,2,4")))
