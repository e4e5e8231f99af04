#!/usr/bin/python3
"""e2e_generate_logprobs: OpenAI completions' `logprobs` and `n` over real
processes, against an independent NumPy model.

GPT-2 and Llama with grouped-query attention (random weights in Hugging
Face's layout: test_lm_import.py's writers and NumPy forwards), imported and
served by `meshserve local` on 2 workers. Over HTTP POST /v1/completions:
  - `logprobs` N (whole and streamed, greedy and seeded sampling with
    temperature, top_k and top_p): at every position the sampled token's
    logprob equals NumPy's log_softmax of the teacher-forced logits (the
    prompt and the tokens before it), and `top_logprobs` holds NumPy's N most
    likely tokens (a near-tie within float rounding counts) with their
    log_softmax values, most likely first, plus the sampled token when it is
    not among them (OpenAI's up to N + 1); `tokens` are the ids' decimal
    strings (these models have no tokenizer) and `text_offset` all 0;
  - over gRPC (GenerateService.Generate through the generated Python stubs):
    each chunk's `top_logprobs` holds N (ids, logprobs) per token, and those
    and `logprobs` equal NumPy's as above;
  - `n` 4 (greedy and seeded): choice i's tokens equal those of a request
    of its own with seed + i (greedy: all four equal the one greedy answer),
    and the prompt (L tokens) is prefilled once: the coordinator's
    /metrics counter meshserve_generation_prefill_tokens_total grows by
    L - 1 for the n=4 request (the choices fork the source's cache on the
    workers and each feeds the last prompt token) and by 4 L for the four
    requests of their own.

Usage: test_generate_logprobs.py --bin_dir build/bin
"""
import json
import os
import sys
import urllib.request

import numpy as np

import e2e_common as e2e
import mslib
import test_generate as gen
import test_generate_text as gt

TOL = 2e-3  # logprob agreement (float32 workers vs float64 NumPy)


def http(base, body):
    """(status, parsed JSON, or the SSE events' parsed objects) of a completion."""
    status, got = gt.http(base, body)
    if status != 200 or not body.get("stream"):
        return status, got
    return status, [json.loads(l[6:]) for l in got.split("\n")
                    if l.startswith("data: ") and l != "data: [DONE]"]


def merged_choice(events, index=0):
    """A stream's chunks of one choice, joined as a whole choice."""
    lp = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    ids = []
    for e in events:
        for ch in e.get("choices", []):
            if ch["index"] != index:
                continue
            ids += ch.get("token_ids") or []
            for k in lp:
                lp[k] += (ch.get("logprobs") or {}).get(k, [])
    return ids, lp


def log_softmax(x):
    x = x.astype(np.float64)
    m = np.max(x)
    return x - m - np.log(np.sum(np.exp(x - m)))


def check_logprobs(c, what, forward, prompt, ids, lp, n):
    """Each position's logprob and top N against NumPy's teacher forcing."""
    if not c.check(len(lp["tokens"]) == len(ids) == len(lp["token_logprobs"]) ==
                   len(lp["top_logprobs"]) == len(lp["text_offset"]) and len(ids) > 0,
                   what + ": one logprobs entry per token", json.dumps(lp)[:2000]):
        return
    seq = list(prompt)
    for i, tok in enumerate(ids):
        ls = log_softmax(forward(np.array([seq], dtype=np.int32))[0, -1])
        order = np.argsort(-ls, kind="stable")
        top = lp["top_logprobs"][i]
        listed = [(int(k), v) for k, v in top.items()]
        want_len = n + (0 if any(k == tok for k, _ in listed[:n]) else 1)
        problems = []
        if lp["tokens"][i] != str(tok):
            problems.append("tokens[%d] %r, want %r" % (i, lp["tokens"][i], str(tok)))
        if abs(lp["token_logprobs"][i] - ls[tok]) > TOL:
            problems.append("token_logprobs[%d] %.6f, NumPy %.6f" % (
                i, lp["token_logprobs"][i], ls[tok]))
        if len(listed) != want_len:
            problems.append("top_logprobs[%d] has %d entries, want %d" % (i, len(listed), want_len))
        nth = ls[order[n - 1]]
        for rank, (k, v) in enumerate(listed):
            if abs(v - ls[k]) > TOL:
                problems.append("top_logprobs[%d][%d] %.6f, NumPy %.6f" % (i, k, v, ls[k]))
            if rank < n and ls[k] < nth - TOL:
                problems.append("top_logprobs[%d] lists %d (%.6f), not among NumPy's top %d "
                                "(%s)" % (i, k, ls[k], n, order[:n].tolist()))
            if rank >= n and k != tok:
                problems.append("top_logprobs[%d] entry %d is %d, not the sampled %d" % (
                    i, rank, k, tok))
        values = [v for _, v in listed[:n]]
        if any(values[j] < values[j + 1] for j in range(len(values) - 1)):
            problems.append("top_logprobs[%d] not most likely first: %s" % (i, values))
        if lp["text_offset"][i] != 0:
            problems.append("text_offset[%d] %r" % (i, lp["text_offset"][i]))
        if problems:
            return c.check(False, what, "    " + "\n    ".join(problems[:6]))
        seq.append(tok)
    return c.check(True, what)


def logprobs_cases(env, base, model, forward):
    c = env.c
    prompt = [3, 14, 15, 9, 2]
    cases = [
        ("greedy, logprobs 5", {"temperature": 0, "logprobs": 5}, 5),
        ("seeded T 0.8 top_k 20 top_p 0.9, logprobs 3",
         {"temperature": 0.8, "top_k": 20, "top_p": 0.9, "seed": 17, "logprobs": 3}, 3),
        ("seeded T 1.5, logprobs 20", {"temperature": 1.5, "seed": 5, "logprobs": 20}, 20),
    ]
    for what, extra, n in cases:
        for stream in (False, True):
            body = dict(model=model, prompt=prompt, max_tokens=8, return_token_ids=True,
                        stream=stream, **extra)
            status, got = http(base, body)
            label = "%s: %s (%s)" % (model, what, "streamed" if stream else "whole")
            if not c.check(status == 200, label + " answers 200", str(got)[:2000]):
                continue
            if stream:
                ids, lp = merged_choice(got)
            else:
                ids, lp = got["choices"][0]["token_ids"], got["choices"][0]["logprobs"]
            check_logprobs(c, label + ": logprobs equal NumPy's log_softmax", forward, prompt,
                           ids, lp, n)


def grpc_cases(env, target, model, forward):
    """Generate over gRPC through the Python client with logprobs N: each
    chunk's top_logprobs, (id, logprob) pairs per token (GenerateChunk.top_logprobs)."""
    from meshserve_client import MeshserveClient
    c = env.c
    prompt = [8, 6, 7, 5, 3]
    with MeshserveClient(target) as client:
        for what, extra, n in (("greedy", dict(temperature=0.0), 4),
                               ("seeded", dict(temperature=0.7, top_k=25, seed=3), 2)):
            ids, lp, sizes = [], {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                                  "text_offset": []}, []
            for chunk in client.generate(model, prompt_ids=prompt, max_tokens=6, logprobs=n,
                                         timeout_s=120, **extra):
                ids += list(chunk.token_ids)
                lp["token_logprobs"] += list(chunk.logprobs)
                for tok, top in zip(chunk.token_ids, chunk.top_logprobs):
                    sizes.append(len(top))
                    d = {str(i): v for i, v in top}
                    if str(tok) not in d:  # OpenAI's shape, as check_logprobs reads it
                        d[str(tok)] = lp["token_logprobs"][len(lp["top_logprobs"])]
                    lp["top_logprobs"].append(d)
                    lp["tokens"].append(str(tok))
                    lp["text_offset"].append(0)
            label = "%s: gRPC %s, logprobs %d" % (model, what, n)
            c.check(sizes == [n] * len(ids) and len(ids) == 6,
                    label + ": %d top entries for each of 6 tokens" % n, str(sizes))
            check_logprobs(c, label + ": logprobs and top_logprobs equal NumPy's", forward,
                           prompt, ids, lp, n)


def prefill_tokens(base, model):
    """The coordinator's meshserve_generation_prefill_tokens_total for `model`."""
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        text = r.read().decode("utf-8")
    series = 'meshserve_generation_prefill_tokens_total{model="%s"} ' % model
    for line in text.split("\n"):
        if line.startswith(series):
            return int(float(line[len(series):]))
    return 0


def n_cases(env, base, model):
    c = env.c
    prompt = [7, 1, 8, 2, 8, 1, 8, 2, 8, 4, 5]
    for what, extra in (("greedy", {"temperature": 0}),
                        ("seeded", {"temperature": 0.9, "top_k": 30, "seed": 99})):
        before = prefill_tokens(base, model)
        status, got = http(base, dict(model=model, prompt=prompt, max_tokens=6, n=4,
                                      return_token_ids=True, **extra))
        shared = prefill_tokens(base, model) - before
        c.check(shared == len(prompt) - 1,
                "%s: n=4 %s prefills the %d-token prompt once (%d tokens)"
                % (model, what, len(prompt), len(prompt) - 1),
                "prefill tokens counted: %d" % shared)
        if not c.check(status == 200 and len(got["choices"]) == 4,
                       "%s: n=4 %s answers 4 choices" % (model, what), str(got)[:2000]):
            continue
        together = {ch["index"]: ch["token_ids"] for ch in got["choices"]}
        alone = {}
        for i in range(4):
            one = dict(extra)
            if "seed" in one:
                one["seed"] = one["seed"] + i
            status, single = http(base, dict(model=model, prompt=prompt, max_tokens=6,
                                             return_token_ids=True, **one))
            alone[i] = single["choices"][0]["token_ids"] if status == 200 else None
        separate = prefill_tokens(base, model) - before - shared
        c.check(separate == 4 * len(prompt),
                "%s: 4 requests of their own prefill the prompt 4 times (%d tokens)"
                % (model, 4 * len(prompt)), "prefill tokens counted: %d" % separate)
        c.check(together == alone,
                "%s: n=4 %s: choice i equals a request of its own (seed + i)" % (model, what),
                "    n=4:   %s\n    alone: %s" % (together, alone))


def serve(env, models, forwards):
    http_port = mslib.free_port()
    cluster = env.cluster(2, models, "logprobs", extra_args=["--http_port", str(http_port)])
    base = "http://127.0.0.1:%d" % http_port
    try:
        for model, (forward, _context) in forwards.items():
            logprobs_cases(env, base, model, forward)
            grpc_cases(env, cluster.target, model, forward)
            n_cases(env, base, model)
    finally:
        cluster.stop()


def stages(env):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(env.bin_dir)), "python"))
    state = {}

    def prepare():
        state["models"], state["forwards"] = gen.make_models(env)

    return [("import", prepare),
            ("serve on 2", lambda: serve(env, state["models"], state["forwards"]))]


if __name__ == "__main__":
    sys.exit(e2e.main("generate_logprobs", stages, doc=__doc__))
