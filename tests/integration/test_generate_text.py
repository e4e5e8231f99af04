#!/usr/bin/python3
"""e2e_generate_text: text prompts and completion text through the model's
tokenizer (issue #32 item 5), over real processes.

A tiny GPT-2 checkpoint (random weights, test_lm_import.py's writer) whose
vocabulary is a byte-level BPE built here: the 256 byte tokens spelled as
GPT-2's bytes_to_unicode maps them, plus a few merges (vocab.json +
merges.txt; the model's vocab_size is the vocabulary's size), and a
generation_config.json whose eos_token_id overrides config.json's.
  - `meshserve import` writes NAME.tokenizer/ beside NAME.json with the files,
    and the model file's generation.eos_token_ids is generation_config's;
  - greedy `meshserve generate --prompt TEXT` gives the ids of the same
    generation with --prompt_ids of TEXT's encoding (a BPE written here from
    the same files, GPT-2's bpe() loop), and the text the CLI prints, the
    Python client's chunks and HTTP /v1/completions' `text` (whole and
    streamed) all equal the generated ids' bytes decoded with
    errors="replace";
  - a model without NAME.tokenizer/ refuses a text prompt (gRPC
    INVALID_ARGUMENT, HTTP 400) and one whose folder does not load refuses it
    with the loader's message, and both still serve id prompts.

Usage: test_generate_text.py --bin_dir build/bin
"""
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np

import e2e_common as e2e
import mslib
import test_lm_import as lm

MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or"),
          ("Ġ", "t"), ("Ġt", "h"), ("e", "r"), ("Ġth", "er"), ("Ġ", "h"), ("Ġh", "e"),
          ("Ġhe", "ll")]
PROMPTS = ["hello world hello", "the other world, there!"]
MAX_TOKENS = 12
PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    """GPT-2's table: byte -> a printable character."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


BYTE_CHARS = bytes_to_unicode()
CHAR_BYTES = {ch: b for b, ch in BYTE_CHARS.items()}


def make_vocab():
    vocab = {}
    for b in range(256):  # ids in GPT-2's table order
        vocab[BYTE_CHARS[b]] = len(vocab)
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    return vocab


def bpe(word, ranks):
    """GPT-2's bpe(): merge the lowest-ranked pair (leftmost first) until none."""
    parts = list(word)
    while len(parts) > 1:
        pairs = [(ranks.get((parts[i], parts[i + 1]), 1 << 30), i) for i in range(len(parts) - 1)]
        rank, _ = min(pairs)
        if rank == 1 << 30:
            break
        first, second = MERGES[rank]
        out, i = [], 0
        while i < len(parts):
            if i < len(parts) - 1 and parts[i] == first and parts[i + 1] == second:
                out.append(first + second)
                i += 2
            else:
                out.append(parts[i])
                i += 1
        parts = out
    return parts


def encode(text, vocab):
    ranks = {m: i for i, m in enumerate(MERGES)}
    ids = []
    for piece in PAT.findall(text):  # ASCII prompts: GPT-2's pattern in plain `re`
        word = "".join(BYTE_CHARS[b] for b in piece.encode("utf-8"))
        ids.extend(vocab[t] for t in bpe(word, ranks))
    return ids


def decode(ids, vocab):
    inverse = {i: t for t, i in vocab.items()}
    raw = b"".join(bytes(CHAR_BYTES[ch] for ch in inverse[i]) for i in ids)
    return raw.decode("utf-8", errors="replace")


def write_checkpoint(root, vocab):
    cfg = dict(lm.GPT2_CONFIG, vocab_size=len(vocab), eos_token_id=0)
    hf = os.path.join(root, "hf", "tiny")
    lm.write_hf_dir(hf, cfg, lm.gpt2_weights(np.random.default_rng(11), cfg))
    with open(os.path.join(hf, "vocab.json"), "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(hf, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n" + "".join("%s %s\n" % m for m in MERGES))
    with open(os.path.join(hf, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [len(vocab) - 1], "bos_token_id": 0}, f)
    return hf


def prepare(env, state):
    c, cli = env.c, env.cli
    vocab = make_vocab()
    hf = write_checkpoint(env.root, vocab)
    models = os.path.join(env.root, "models")
    for extra in ((), ("--name", "broken_tok")):
        rc, out, err = cli.run("import", "--hf_dir", hf, "--out_dir", models, *extra, timeout=120)
        c.check(rc == 0, "import %s" % (" ".join(extra) or "tiny"), out + err)
    # The same checkpoint without tokenizer files.
    bare = os.path.join(env.root, "hf", "bare")
    os.makedirs(bare)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(hf, f), bare)
    rc, out, err = cli.run("import", "--hf_dir", bare, "--out_dir", models, timeout=120)
    c.check(rc == 0, "import bare", out + err)
    tok = os.path.join(models, "tiny.tokenizer")
    copied = sorted(os.listdir(tok)) if os.path.isdir(tok) else []
    c.check(copied == ["generation_config.json", "merges.txt", "vocab.json"],
            "import writes tiny.tokenizer/ with the tokenizer files", str(copied))
    c.check(not os.path.exists(os.path.join(models, "bare.tokenizer")),
            "no bare.tokenizer/ for a checkpoint without tokenizer files")
    with open(os.path.join(models, "tiny.json")) as f:
        eos = json.load(f).get("generation", {}).get("eos_token_ids")
    c.check(eos == [len(vocab) - 1], "generation_config's eos_token_id overrides config.json's",
            str(eos))
    with open(os.path.join(models, "broken_tok.tokenizer", "vocab.json"), "w") as f:
        f.write("{not json")
    state.update(vocab=vocab, models=models)


def cli_generate(env, target, model, prompt_flag, prompt):
    """(rc, printed text, ids, stderr) of a greedy `meshserve generate --ids`."""
    cmd = [env.cli.bin, "generate", "--target", target, "--model", model, prompt_flag, prompt,
           "--max_tokens", str(MAX_TOKENS), "--temperature", "0", "--ids"]
    p = subprocess.run(cmd, capture_output=True, timeout=120)
    out = p.stdout.decode("utf-8")  # strict: the CLI prints valid UTF-8
    err = p.stderr.decode("utf-8", errors="replace")
    if p.returncode != 0:
        return p.returncode, None, None, err
    head, _, ids_line = out.rstrip("\n").rpartition("\n")
    text, _, _ = head.rpartition("\nfinish_reason=")
    return 0, text, [int(t) for t in ids_line.split()], err + "\nstdout: %r" % out


def http(base, body):
    """(status, parsed JSON or SSE text) of POST /v1/completions."""
    req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            raw = r.read().decode("utf-8")
            return r.status, raw if body.get("stream") else json.loads(raw)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", errors="replace")


def streamed_text(sse):
    texts = []
    for line in sse.split("\n"):
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in json.loads(line[6:]).get("choices", []):
                texts.append(choice.get("text", ""))
    return "".join(texts)


def check_prompt(env, mc, target, base, vocab, prompt):
    c = env.c
    want_prompt = encode(prompt, vocab)
    rc, text, ids, err = cli_generate(env, target, "tiny", "--prompt", prompt)
    if not c.check(rc == 0 and len(ids) >= 1, "cli: text prompt %r is served" % prompt, err):
        return
    rc2, text2, ids2, err2 = cli_generate(env, target, "tiny", "--prompt_ids",
                                          ",".join(map(str, want_prompt)))
    c.check(rc2 == 0 and ids2 == ids,
            "cli: %r gives the ids of --prompt_ids %s" % (prompt, want_prompt),
            "    text: %s\n    ids:  %s\n%s" % (ids, ids2, err2))
    want = decode(ids, vocab)
    with mc.MeshserveClient(target) as client:
        chunks = list(client.generate("tiny", prompt=prompt, max_tokens=MAX_TOKENS,
                                      temperature=0))
    # A text prompt: the CLI prints text only (a chunk whose bytes are held
    # back prints nothing).
    c.check(text == want, "cli: the printed text of %r is its ids' bytes decoded" % prompt,
            "    got  %r\n    want %r" % (text, want))
    got_ids = [t for ch in chunks for t in ch.token_ids]
    got = "".join(ch.text for ch in chunks)
    c.check(got_ids == ids and got == want and chunks[-1].usage.prompt_tokens == len(want_prompt),
            "python: chunks of %r carry the text, %d prompt tokens" % (prompt, len(want_prompt)),
            "    got %r %s (usage %s)\n    want %r %s" % (got, got_ids, chunks[-1].usage, want, ids))
    body = {"model": "tiny", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
            "return_token_ids": True}
    status, whole = http(base, body)
    ok = (status == 200 and whole["choices"][0]["text"] == want and
          whole["choices"][0].get("token_ids") == ids and
          whole["choices"][0].get("prompt_token_ids") == want_prompt)
    c.check(ok, "http: /v1/completions text, token_ids and prompt_token_ids of %r" % prompt, "    %s %r\n    want %r" % (
        status, whole, want))
    status, sse = http(base, dict(body, stream=True))
    c.check(status == 200 and streamed_text(sse) == want,
            "http: streamed text of %r" % prompt, "    %s %r\n    want %r" % (status, sse, want))


def check_refusals(env, target, base):
    c = env.c
    for model, phrase in (("bare", "no tokenizer"), ("broken_tok", "vocab.json")):
        rc, _, _, err = cli_generate(env, target, model, "--prompt", "hello")
        c.check(rc not in (0, 2) and "INVALID_ARGUMENT" in err and phrase in err,
                "cli: %s refuses a text prompt naming %r" % (model, phrase), err)
        status, body = http(base, {"model": model, "prompt": "hello", "max_tokens": 2})
        c.check(status == 400 and phrase in str(body),
                "http: %s answers 400 to a text prompt" % model, "    %s %s" % (status, body))
        rc, _, ids, err = cli_generate(env, target, model, "--prompt_ids", "1,2")
        c.check(rc == 0 and len(ids) >= 1, "cli: %s still serves id prompts" % model, err)


def serve(env, state):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(env.bin_dir)), "python"))
    import meshserve_client as mc
    port = mslib.free_port()
    cluster = env.cluster(2, state["models"], "gentext", extra_args=["--http_port", str(port)])
    base = "http://127.0.0.1:%d" % port
    try:
        for prompt in PROMPTS:
            check_prompt(env, mc, cluster.target, base, state["vocab"], prompt)
        check_refusals(env, cluster.target, base)
    finally:
        cluster.stop()


def stages(env):
    state = {}
    return [("import", lambda: prepare(env, state)), ("serve", lambda: serve(env, state))]


if __name__ == "__main__":
    sys.exit(e2e.main("generate_text", stages, doc=__doc__))
