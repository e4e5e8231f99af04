#!/usr/bin/python3
"""e2e_rl_sync: examples/rl_sync.py (issue 34 item 4) with small settings: a
torch trainer on 2 rank processes pushes a tiny GPT-2's state_dict 3 times
(each rank putting its rows of every tensor through MeshserveClient's push
API) into `meshserve local --workers 2` while a generator process streams
greedy completions.

Checked here, from the example's own files (its summary, streams.jsonl,
init.npz and final.npz), independently of the example's checks:
  - the example exits 0 and every push committed, with increasing versions
    above the version served at the start;
  - no stream failed; every stream's chunks carry one version (sequences in
    flight finish on the version they started with); every stream started
    after commit k returned reports version >= v_k, and some do;
  - the trainer changed the weights (final != init);
  - the greedy completion taken after the last push (on the last version)
    equals the teacher-forced argmax of a NumPy float64 GPT-2 forward pass
    (test_lm_import.gpt2_forward, from Hugging Face's modeling_gpt2.py) on
    the trainer's final weights, and NOT that of the initial weights (so the
    check sees the push);
  - no process of the example is left behind.
Prints the push times and the longest token gap during each push (no
timing assertions). Skipped (77) only when python3-torch is missing.

Usage: test_rl_sync.py --bin_dir build/bin [--keep]
"""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np

import e2e_common as e2e
import mslib
import test_lm_import as lm

EXAMPLE = os.path.join(e2e.ROOT, "examples", "rl_sync.py")
PUSHES = 3
NEAR_TIE = 1e-4  # of the largest |logit|


def greedy_matches(cfg, weights, prompt, got):
    """(ok, detail): token i is the argmax of the float64 logits after
    prompt + got[:i] (a near-tie within float rounding counts)."""
    seq = list(prompt)
    for i, tok in enumerate(got):
        logits = lm.gpt2_forward(weights, cfg, np.array([seq], dtype=np.int64))[0, -1]
        best = int(np.argmax(logits))
        if tok != best and logits[best] - logits[tok] > NEAR_TIE * np.max(np.abs(logits)):
            return False, "token %d: got %d (logit %.6f), argmax %d (%.6f)" % (
                i, tok, logits[tok], best, logits[best])
        seq.append(tok)
    return True, ""


def run_example(env, work, summary_path):
    cmd = [sys.executable, EXAMPLE, "--bin_dir", env.bin_dir, "--work", work,
           "--summary", summary_path, "--pushes", str(PUSHES), "--steps_per_push", "2",
           "--lr", "1e-2", "--n_layer", "2", "--n_embd", "32", "--n_head", "4", "--vocab", "64",
           "--n_positions", "32", "--max_tokens", "12", "--gap_s", "0.5"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    mslib._PROCS.append(proc)  # its group (meshserve local, ranks, generator) is cleaned up
    out, _ = proc.communicate(timeout=200)
    print(out)
    return proc.returncode, out


def check_pushes(c, summary):
    pushes = summary["pushes"]
    versions = [p["version"] for p in pushes]
    c.check(len(pushes) == PUSHES, "%d pushes committed" % PUSHES, "    %s" % versions)
    c.check(all(x < y for x, y in zip([summary["v0"]] + versions, versions)),
            "versions increase from v%d: %s" % (summary["v0"], versions))
    for k, p in enumerate(pushes):
        print("  push %d: v%d  %.3f s (begin_push -> commit)  longest token gap during it "
              "%.1f ms" % (k + 1, p["version"], p["push_s"], 1e3 * p["pause_s"]))
    print("  token gaps outside pushes: p50 %.1f ms, max %.1f ms" % (
        1e3 * summary["gap_outside_p50_s"], 1e3 * summary["gap_outside_max_s"]))


def check_streams(c, streams, pushes):
    failed = [s["error"] for s in streams if s["error"]]
    c.check(bool(streams) and not failed, "%d streams, none failed" % len(streams), "    %s" % failed[:3])
    mixed = [s["versions"] for s in streams if len(set(s["versions"])) != 1]
    c.check(not mixed, "every stream's chunks (the last too) carry the version it started on",
            "    %s" % mixed[:3])
    for p in pushes:
        after = [s["versions"][-1] for s in streams if s["start"] > p["commit"] and s["versions"]]
        stale = [v for v in after if v < p["version"]]
        c.check(bool(after) and not stale, "streams started after the commit of v%d report it or "
                "newer (%d streams)" % (p["version"], len(after)), "    stale: %s" % stale[:5])


def check_greedy(c, summary, work):
    cfg = summary["config"]
    init = dict(np.load(os.path.join(work, "init.npz")))
    final = dict(np.load(os.path.join(work, "final.npz")))
    moved = max(float(np.max(np.abs(final[n] - init[n]))) for n in init)
    c.check(moved > 1e-3, "the trainer changed the weights (max |final - init| %.4f)" % moved)
    g = summary["greedy"]
    last = summary["pushes"][-1]["version"]
    c.check(g["version"] == last, "the final greedy stream ran on v%d" % last,
            "    got v%s" % g["version"])
    c.check(len(g["ids"]) > 0, "the final greedy stream has tokens")
    ok, why = greedy_matches(cfg, final, g["prompt"], g["ids"])
    c.check(ok, "greedy after the last push equals NumPy's teacher forcing on the trainer's "
            "final weights", "    " + why)
    stale, _ = greedy_matches(cfg, init, g["prompt"], g["ids"])
    c.check(not stale, "and differs from teacher forcing on the initial weights (the check "
            "sees the push)")


def stages(env):
    work = os.path.join(env.root, "run")
    summary_path = os.path.join(env.root, "summary.json")

    def run():
        c = env.c
        rc, out = run_example(env, work, summary_path)
        c.check(rc == 0, "examples/rl_sync.py exits 0", "    rc %s" % rc)
        if not os.path.exists(summary_path):
            c.check(False, "the example wrote its summary")
            return
        with open(summary_path) as f:
            summary = json.load(f)
        with open(os.path.join(work, "streams.jsonl")) as f:
            streams = [json.loads(line) for line in f]
        check_pushes(c, summary)
        check_streams(c, streams, summary["pushes"])
        check_greedy(c, summary, work)

    return [("rl_sync", run)]


def main():
    if importlib.util.find_spec("torch") is None:
        print("SKIP: e2e_rl_sync needs PyTorch for %s (Debian: python3-torch; "
              "scripts/setup.sh installs it)" % sys.executable)
        return 77
    return e2e.main("rl_sync", stages, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main())
