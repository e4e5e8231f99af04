#!/usr/bin/python3
"""e2e_cli_help: every binary answers --help (and -h) with its usage and its
flags on stdout and exit status 0, and rejects an unknown flag with a non-zero
status naming it.

Usage: test_cli_help.py --bin_dir build/bin
"""
import os
import subprocess
import sys

import e2e_common as e2e

# binary -> flags its --help must list
EXPECTED = {
    "meshserve-worker": ["--port", "--host", "--advertise", "--coordinator", "--cores",
                         "--threads"],
    "meshserve-coordinator": ["--port", "--host", "--model_dir", "--min_workers",
                              "--heartbeat_ms"],
}


def run_binary(env, binary, *args):
    return subprocess.run([os.path.join(env.bin_dir, binary)] + list(args), capture_output=True, text=True,
                          timeout=60)


def check_help(env, binary, flags):
    c = env.c
    for arg in ("--help", "-h"):
        r = run_binary(env, binary, arg)
        c.check(r.returncode == 0, "%s %s exits 0" % (binary, arg),
                "rc=%d stderr=%s" % (r.returncode, r.stderr[-300:]))
        c.check(binary in r.stdout, "%s %s names the program" % (binary, arg), r.stdout[:300])
        missing = [f for f in flags if f not in r.stdout]
        c.check(not missing, "%s %s lists its flags" % (binary, arg),
                "missing %s in:\n%s" % (missing, r.stdout))
    r = run_binary(env, binary, "--no_such_flag=1")
    c.check(r.returncode != 0 and "no_such_flag" in r.stderr + r.stdout,
            "%s rejects an unknown flag, naming it" % binary,
            "rc=%d out=%s err=%s" % (r.returncode, r.stdout[-200:], r.stderr[-200:]))


def stages(env):
    return [("%s --help" % b, lambda b=b, f=f: check_help(env, b, f))
            for b, f in sorted(EXPECTED.items())]


if __name__ == "__main__":
    sys.exit(e2e.main("cli_help", stages, needs=tuple(EXPECTED), doc=__doc__))
