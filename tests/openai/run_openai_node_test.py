#!/usr/bin/python3
"""The openai_node_client ctest: the official `openai` npm package (v6, pinned)
against meshserve's OpenAI-compatible routes (/v1/completions, /v1/models).

  1. installs openai@VERSION into NPM_DIR (build/test-npm-openai; reused when
     that version is there); an install failure (npm unreachable, no npm)
     FAILS the test, never skips;
  2. starts SERVER (openai_fake_server: the coordinator's HTTP server with a
     Generator over fake workers), which prints "port N";
  3. runs openai_client_check.cjs with node: whole and streamed completions
     checked against the fake model's tokens, n=2 with logprobs, the SDK's
     typed errors, the model list.

  run_openai_node_test.py --server build/tests/openai_fake_server \\
      --npm_dir build/test-npm-openai
"""
import argparse
import json
import os
import select
import subprocess
import sys

PACKAGE = "openai"
VERSION = "6.49.0"
HERE = os.path.dirname(os.path.abspath(__file__))


def installed_version(pkg):
    """The version of the package installed at `pkg`, or None."""
    try:
        with open(os.path.join(pkg, "package.json")) as f:
            return json.load(f).get("version")
    except (OSError, ValueError):
        return None


def install(npm_dir):
    """openai@VERSION in npm_dir/node_modules (installed unless already there)."""
    pkg = os.path.join(npm_dir, "node_modules", PACKAGE)
    if installed_version(pkg) == VERSION:
        return pkg
    os.makedirs(npm_dir, exist_ok=True)
    spec = f"{PACKAGE}@{VERSION}"
    print(f"+ npm i -E {spec} (into {npm_dir}, at most 300 s)", flush=True)
    try:
        r = subprocess.run(["timeout", "300", "npm", "i", "-E", spec, "--prefix", npm_dir,
                            "--no-audit", "--no-fund"], capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit("FAIL: npm is not installed; the openai client test needs it")
    if installed_version(pkg) != VERSION:
        sys.exit(f"FAIL: npm could not install {spec} (exit {r.returncode}); is the npm "
                 f"registry reachable?\n{r.stdout}\n{r.stderr}")
    return pkg


def read_port(server, timeout_s=30):
    """The N of the server's first stdout line "port N"."""
    ready, _, _ = select.select([server.stdout], [], [], timeout_s)
    if not ready:
        sys.exit(f"FAIL: the server printed no port within {timeout_s} s")
    line = server.stdout.readline().strip()
    if not line.startswith("port "):
        sys.exit(f"FAIL: expected 'port N' from the server, got {line!r}")
    return int(line.split()[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True, help="the openai_fake_server binary")
    ap.add_argument("--npm_dir", required=True, help="where the npm package is installed")
    args = ap.parse_args()
    pkg = install(os.path.abspath(args.npm_dir))
    server = subprocess.Popen([args.server], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        port = read_port(server)
        print(f"openai_fake_server on port {port}; openai@{VERSION}", flush=True)
        r = subprocess.run(["timeout", "120", "node",
                            os.path.join(HERE, "openai_client_check.cjs"), str(port), pkg])
        code = r.returncode
    finally:
        server.stdin.close()  # the server stops when its stdin closes
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    if code != 0:
        sys.exit(f"FAIL: the openai client check exited {code}")
    print("PASS")


if __name__ == "__main__":
    main()
