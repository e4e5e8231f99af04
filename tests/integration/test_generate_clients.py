#!/usr/bin/python3
"""e2e_generate_clients: `meshserve generate` and the Python client's
MeshserveClient.generate against meshserve.GenerateService served by
generate_test_server (build/tests/: the real service over fake workers whose
model "lm" samples, after tokens t_1..t_n, an FNV-style hash of them mod 50;
weight version 7).

The reference is that hash written again here, so the streamed ids are
checked against an independent implementation: the CLI's last line with
--ids and the concatenated Python chunks equal it; finish_reason, usage and
version on the last chunk; a stop token; the server's refusals (exit 1 with
the code and message; MeshserveError) and bad flags (exit 2 naming the
flag); a Python cancel ends the call CANCELLED and the server keeps serving.

Usage: test_generate_clients.py --bin_dir build/bin
"""
import os
import subprocess
import sys

import e2e_common as e2e

MASK = (1 << 64) - 1


def next_token(tokens):
    """server/coordinator/generate/testing/fake_steps.h's NextToken."""
    h = 1469598103934665603
    for t in tokens:
        h = ((h ^ ((t + 1) & MASK)) * 1099511628211) & MASK
    return (h >> 17) % 50


def reference(prompt, max_tokens, stops=()):
    tokens, out = list(prompt), []
    while len(out) < max_tokens:
        t = next_token(tokens)
        out.append(t)
        tokens.append(t)
        if t in stops:
            break
    return out


class Server:
    """generate_test_server on a free port (stdin open: it serves until closed)."""

    def __init__(self, bin_dir, step_delay_ms):
        path = os.path.join(os.path.dirname(os.path.abspath(bin_dir)), "tests",
                            "generate_test_server")
        self.proc = subprocess.Popen([path, str(step_delay_ms)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "port":
            self.stop()
            raise RuntimeError("generate_test_server printed %r" % line)
        self.target = "127.0.0.1:%s" % line[1]

    def stop(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def generate_cli(env, target, *args):
    """`meshserve generate --target TARGET ARGS...` (a CompletedProcess)."""
    return subprocess.run([os.path.join(env.bin_dir, "meshserve"), "generate", "--target", target]
                          + list(args), capture_output=True, text=True, timeout=60)


def check_cli(env, target):
    c = env.c
    want = reference([1, 2, 3], 12)
    r = generate_cli(env, target, "--model", "lm", "--prompt_ids", "1,2,3", "--max_tokens", "12",
                     "--temperature", "0.8", "--top_k", "5", "--top_p", "0.9", "--seed", "42",
                     "--ids")
    lines = r.stdout.strip().split("\n")
    c.check(r.returncode == 0, "cli generate --ids exits 0", "    rc=%d err=%s" % (
        r.returncode, r.stderr))
    c.check(lines[-1] == " ".join(map(str, want)), "cli: the last line holds the reference ids",
            "    got %r want %r" % (lines[-1], want))
    c.check(lines[0] == " ".join(map(str, want)), "cli: the streamed ids are the reference",
            "    got %r" % lines[0])
    c.check(len(lines) == 3 and lines[1] == "finish_reason=length prompt_tokens=3 "
            "completion_tokens=12 total_tokens=15 version=7",
            "cli: finish_reason, usage and version", "    got %r" % lines)
    stop = reference([5, 6], 16)[3]
    want = reference([5, 6], 16, (stop,))
    r = generate_cli(env, target, "--model", "lm", "--prompt_ids", "5,6", "--stop_token_ids",
                     str(stop), "--ids")
    lines = r.stdout.strip().split("\n")
    c.check(r.returncode == 0 and lines[-1] == " ".join(map(str, want)) and
            lines[-2].startswith("finish_reason=stop "),
            "cli: a stop token ends the completion with finish_reason=stop",
            "    rc=%d out=%r want %r" % (r.returncode, r.stdout, want))


def check_cli_errors(env, target):
    c = env.c
    base = ("--model", "lm", "--prompt_ids", "1,2")
    for what, args, code, message in [
            ("an unknown model", ("--model", "nope", "--prompt_ids", "1"), "NOT_FOUND",
             "no model 'nope'"),
            ("temperature -1", base + ("--temperature", "-1"), "INVALID_ARGUMENT",
             "temperature -1"),
            ("top_p 2", base + ("--top_p", "2"), "INVALID_ARGUMENT", "top_p 2"),
            ("an id past the vocabulary", ("--model", "lm", "--prompt_ids", "1,50"),
             "INVALID_ARGUMENT", "outside the vocabulary [0, 50)"),
            ("a text prompt without a tokenizer", ("--model", "lm", "--prompt", "hi"),
             "INVALID_ARGUMENT", "no tokenizer")]:
        r = generate_cli(env, target, *args)
        c.check(r.returncode == 1 and code + ": " in r.stderr and message in r.stderr
                and r.stdout == "",
                "cli: %s exits 1 with %s" % (what, code),
                "    rc=%d out=%r err=%r" % (r.returncode, r.stdout, r.stderr))
    for what, args, flag in [
            ("a bad id", ("--model", "lm", "--prompt_ids", "1,x"), "--prompt_ids"),
            ("both prompts", base + ("--prompt", "hi"), "--prompt"),
            ("max_tokens 0", base + ("--max_tokens", "0"), "--max_tokens"),
            ("a bad seed", base + ("--seed", "-3"), "--seed"),
            ("an unknown flag", base + ("--bogus", "1"), "--bogus")]:
        r = generate_cli(env, target, *args)
        c.check(r.returncode == 2 and flag in r.stderr, "cli: %s exits 2 naming %s" % (what, flag),
                "    rc=%d err=%r" % (r.returncode, r.stderr))
    r = generate_cli(env, "127.0.0.1", "--model", "lm", "--prompt_ids", "1")
    c.check(r.returncode == 2 and "--target" in r.stderr, "cli: a target without port exits 2",
            "    rc=%d err=%r" % (r.returncode, r.stderr))


def check_python(env, mc, target):
    c = env.c
    with mc.MeshserveClient(target) as client:
        chunks = list(client.generate("lm", prompt_ids=[1, 2, 3], max_tokens=12, temperature=0.8,
                                      top_k=5, top_p=0.9, seed=42))
        ids = [t for ch in chunks for t in ch.token_ids]
        c.check(ids == reference([1, 2, 3], 12), "python: the chunks' ids are the reference",
                "    got %s" % ids)
        last = chunks[-1]
        c.check(last.finish_reason == "length" and last.version == 7 and last.usage is not None
                and (last.usage.prompt_tokens, last.usage.completion_tokens,
                     last.usage.total_tokens) == (3, 12, 15),
                "python: the last chunk's finish_reason, usage and version", "    %r" % last)
        c.check(all(ch.finish_reason is None and ch.usage is None and ch.text == "" and
                    ch.version == 7 for ch in chunks[:-1]),
                "python: the other chunks have no finish_reason or usage")
        ids = [t for ch in client.generate("lm", prompt_ids=[9]) for t in ch.token_ids]
        c.check(ids == reference([9], 16), "python: max_tokens defaults to 16")
        for what, kwargs, code, message in [
                ("top_p 2", dict(prompt_ids=[1], top_p=2.0), "INVALID_ARGUMENT", "top_p 2"),
                ("top_k -2", dict(prompt_ids=[1], top_k=-2), "INVALID_ARGUMENT", "top_k -2"),
                ("no prompt", dict(), "INVALID_ARGUMENT", "both empty"),
                ("an unknown model", dict(model="nope", prompt_ids=[1]), "NOT_FOUND", "nope")]:
            try:
                list(client.generate(kwargs.pop("model", "lm"), **kwargs))
                c.check(False, "python: %s raises MeshserveError" % what)
            except mc.MeshserveError as e:
                c.check(e.code.name == code and message in e.message and e.method == "Generate",
                        "python: %s raises MeshserveError %s" % (what, code),
                        "    got %s %r" % (e.code, e.message))
        stream = client.generate("lm", prompt_ids=[4], max_tokens=4000)
        first = [next(stream).token_ids[0], next(stream).token_ids[0]]
        stream.cancel()
        try:
            for _ in stream:
                pass
            c.check(False, "python: a cancelled stream raises MeshserveError CANCELLED")
        except mc.MeshserveError as e:
            c.check(e.code.name == "CANCELLED" and first == reference([4], 2),
                    "python: a cancelled stream raises MeshserveError CANCELLED",
                    "    got %s %r, first ids %s" % (e.code, e.message, first))
        ids = [t for ch in client.generate("lm", prompt_ids=[4], max_tokens=5)
               for t in ch.token_ids]
        c.check(ids == reference([4], 5), "python: the server serves on after the cancel")


def run(env):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(env.bin_dir)), "python"))
    import meshserve_client as mc
    server = Server(env.bin_dir, step_delay_ms=1)
    try:
        check_cli(env, server.target)
        check_cli_errors(env, server.target)
        check_python(env, mc, server.target)
    finally:
        server.stop()


def main():
    bin_dir = sys.argv[sys.argv.index("--bin_dir") + 1] if "--bin_dir" in sys.argv else None
    if bin_dir and not os.access(os.path.join(os.path.dirname(os.path.abspath(bin_dir)), "tests",
                                              "generate_test_server"), os.X_OK):
        print("SKIP: generate_test_server not built")
        return 77
    return e2e.main("generate_clients", lambda env: [("generate clients", lambda: run(env))],
                    needs=("meshserve",), doc=__doc__)


if __name__ == "__main__":
    sys.exit(main())
