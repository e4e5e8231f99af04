#!/usr/bin/python3
"""e2e_https: the HTTP ports serve HTTPS with --tls_dir, over real processes.
Certificates from scripts/make-dev-certs.sh (the cluster's CA and a foreign
one); `meshserve local --workers 2 --tls_dir DIR --auth_token_file F
--http_port P`, clients in Python's ssl module:

  - the start-up line says "http on HOST:P (https)";
  - GET /v2/health/ready over https trusting DIR/ca.pem -> 200 {"ready": true},
    by 127.0.0.1 and by localhost (both in the member certificate's SANs);
  - POST /v2/models/linear/infer over https with the bearer token -> the NumPy
    reference; without it -> 401 (the token still applies);
  - plaintext http to the port gets no HTTP answer; https trusting only the
    system's roots, or the foreign CA, fails certificate verification;
  - /metrics over https parses as Prometheus text and counts the requests;
  - a worker's own --http_port /metrics with --tls_dir: https only, parses;
  - a coordinator or worker whose member.key is another identity's key exits
    non-zero with FAILED_PRECONDITION naming both files (no crash); a
    coordinator without --tls_dir says "(plaintext)" and answers http.

Usage: test_https.py --bin_dir build/bin [--keep]
"""
import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np

import e2e_common as e2e
import mslib
import test_tls as tls  # make_certs, and gRPC channels with a member certificate

TOKEN = "https-test-token-51c2"
# name{labels} value [timestamp], as Prometheus' text format 0.0.4 writes it.
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"'
                    r',?)*\})? (-?[0-9.eE+-]+|NaN|[+-]Inf)( -?[0-9]+)?$')


def fetch(url, context=None, body=None, token=None, timeout=30):
    """(HTTP status, body text), or (None, the error) when no HTTP answer came."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    req = urllib.request.Request(url, data=body, headers=headers,
                                 method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except urllib.error.URLError as e:
        return None, e.reason
    except (OSError, http.client.HTTPException) as e:
        return None, e


def is_verify_failure(error):
    return isinstance(error, ssl.SSLCertVerificationError) and \
        "certificate verify failed" in str(error)


def parse_exposition(text):
    """{(name, labels text): value}; raises ValueError on a malformed line."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        m = SAMPLE.match(line)
        if m is None:
            raise ValueError("not a Prometheus sample line: %r" % line)
        samples[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return samples


def wait_https(url, context, timeout_s=60):
    deadline = time.time() + timeout_s
    while True:
        status, text = fetch(url, context, timeout=5)
        if status is not None or time.time() > deadline:
            return status, text
        time.sleep(0.3)


def spawn(cmd, log_path):
    """A process in its own group, stopped by mslib's cleanup."""
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    mslib._PROCS.append(proc)
    return proc


def check_plaintext_and_verification(c, port, foreign, what):
    status, err = fetch("http://127.0.0.1:%d/metrics" % port)
    c.check(status is None, "%s: plaintext http gets no HTTP answer" % what,
            "    %s %s" % (status, err))
    status, err = fetch("https://127.0.0.1:%d/metrics" % port, ssl.create_default_context())
    c.check(status is None and is_verify_failure(err),
            "%s: https trusting only the system's roots fails verification" % what,
            "    %s %r" % (status, err))
    other = ssl.create_default_context(cafile=os.path.join(foreign, "ca.pem"))
    status, err = fetch("https://127.0.0.1:%d/metrics" % port, other)
    c.check(status is None and is_verify_failure(err),
            "%s: https trusting another CA fails verification" % what,
            "    %s %r" % (status, err))


def check_metrics(c, url, context, family, at_least, what):
    status, text = fetch(url, context)
    if not c.check(status == 200, "%s: /metrics over https -> 200" % what,
                   "    %s %s" % (status, text)):
        return
    try:
        samples = parse_exposition(text)
    except ValueError as e:
        c.check(False, "%s: /metrics over https parses" % what, "    %s" % e)
        return
    total = sum(v for (name, _), v in samples.items() if name == family)
    c.check(len(samples) > 0 and total >= at_least,
            "%s: /metrics over https parses (%d samples, %s = %g >= %d)"
            % (what, len(samples), family, total, at_least), text[:1500])


def run_cluster(env, certs, foreign):
    c, root = env.c, env.root
    model_dir, cases = env.models()
    port = mslib.free_port()
    token_file = os.path.join(root, "token")
    with open(token_file, "w") as f:
        f.write(TOKEN + "\n")
    cluster = env.cluster(2, model_dir, "https", extra_args=[
        "--tls_dir", certs, "--auth_token_file", token_file, "--http_port", str(port)])
    trust = ssl.create_default_context(cafile=os.path.join(certs, "ca.pem"))
    x = np.random.default_rng(7).standard_normal((8, 32)).astype(np.float32)
    reference = cases["linear"][0]({"x": x})["y"]
    try:
        log = open(os.path.join(cluster.log_dir, "coordinator.log")).read()
        c.check("meshserve-coordinator http on 127.0.0.1:%d (https)" % port in log,
                "start-up line: http on 127.0.0.1:%d (https)" % port, log[-2000:])
        for host in ("127.0.0.1", "localhost"):
            status, text = fetch("https://%s:%d/v2/health/ready" % (host, port), trust)
            c.check(status == 200 and json.loads(text) == {"ready": True},
                    "GET https://%s/v2/health/ready trusting ca.pem -> 200" % host,
                    "    %s %s" % (status, text))
        url = "https://127.0.0.1:%d/v2/models/linear/infer" % port
        body = json.dumps({"inputs": [{"name": "x", "shape": [8, 32], "datatype": "FP32",
                                       "data": x.ravel().tolist()}]}).encode()
        status, text = fetch(url, trust, body, TOKEN)
        if c.check(status == 200, "POST infer over https with the token -> 200",
                   "    %s %s" % (status, text[:500])):
            out = json.loads(text)["outputs"][0]
            y = np.asarray(out["data"], np.float64).reshape(out["shape"])
            c.close(y, reference, "infer over https: y matches NumPy")
        status, text = fetch(url, trust, body)
        c.check(status == 401 and "missing" in text,
                "POST infer over https without the token -> 401", "    %s %s" % (status, text))
        check_plaintext_and_verification(c, port, foreign, "coordinator")
        check_metrics(c, "https://127.0.0.1:%d/metrics" % port, trust,
                      "meshserve_inference_requests_total", 1, "coordinator")
    finally:
        cluster.stop()


def run_worker(env, certs, foreign):
    c, root = env.c, env.root
    port = mslib.free_port()
    log = os.path.join(root, "worker-https.log")
    proc = spawn([os.path.join(env.bin_dir, "meshserve-worker"), "--port", "0",
                  "--http_port", str(port), "--tls_dir", certs], log)
    trust = ssl.create_default_context(cafile=os.path.join(certs, "ca.pem"))
    try:
        status, text = wait_https("https://127.0.0.1:%d/metrics" % port, trust)
        c.check(status == 200, "worker: /metrics answers over https", "    %s %s\n%s" % (
            status, text, open(log).read()[-2000:]))
        c.check("metrics on 127.0.0.1:%d (https)" % port in open(log).read(),
                "worker log: metrics on 127.0.0.1:%d (https)" % port, open(log).read()[-2000:])
        # One counted WorkerService call (an empty UnloadModel: answered, OK or
        # not), so that the worker's calls counter has a sample.
        m = re.search(r"ready id=-1 address=(\S+)", open(log).read())
        code = None
        if m:
            with tls.channel(m.group(1), certs, "member", "meshserve-member") as ch:
                code, _ = tls.call(ch, "/meshserve.WorkerService/UnloadModel")
        c.check(code is not None and code.name not in ("UNAVAILABLE", "DEADLINE_EXCEEDED"),
                "worker: a member's UnloadModel call is answered (%s)" % code,
                "    %s\n%s" % (code, open(log).read()[-2000:]))
        check_metrics(c, "https://127.0.0.1:%d/metrics" % port, trust,
                      "meshserve_worker_calls_total", 1, "worker")
        check_plaintext_and_verification(c, port, foreign, "worker")
    finally:
        mslib.stop_process(proc)


def run_bad_key_and_plaintext(env, certs):
    c, root = env.c, env.root
    model_dir, _ = env.models()
    # member.pem with the client's key: the pair does not match.
    bad = os.path.join(root, "bad-key")
    os.makedirs(bad)
    for name in ("ca.pem", "member.pem"):
        shutil.copy(os.path.join(certs, name), bad)
    shutil.copy(os.path.join(certs, "client.key"), os.path.join(bad, "member.key"))
    coordinator = os.path.join(env.bin_dir, "meshserve-coordinator")
    worker = os.path.join(env.bin_dir, "meshserve-worker")
    for what, cmd in (("coordinator", [coordinator, "--model_dir", model_dir]),
                      ("worker", [worker])):
        p = subprocess.run(cmd + ["--port", "0", "--http_port", str(mslib.free_port()),
                                  "--tls_dir", bad],
                           capture_output=True, text=True, timeout=60)
        last = (p.stderr.strip().splitlines() or [""])[-1]
        c.check(p.returncode > 0 and os.path.join(bad, "member.key") in last
                and "member.pem" in last and "FAILED_PRECONDITION" in last,
                "%s: member.key not member.pem's key -> exit %d, FAILED_PRECONDITION naming "
                "both files" % (what, p.returncode),
                "    rc=%d\n%s%s" % (p.returncode, p.stdout, p.stderr))
        print("  %s says: %s" % (what, last), flush=True)

    port = mslib.free_port()
    proc = subprocess.Popen([coordinator, "--port", "0", "--http_port", str(port),
                             "--model_dir", model_dir], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    mslib._PROCS.append(proc)
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        want = "meshserve-coordinator http on 127.0.0.1:%d (plaintext)" % port
        c.check(any(want in l for l in lines), "without --tls_dir: " + want, "".join(lines))
        status, text = fetch("http://127.0.0.1:%d/v2/health/live" % port)
        c.check(status == 200, "without --tls_dir: plaintext http -> 200",
                "    %s %s" % (status, text))
    finally:
        mslib.stop_process(proc)


def run(env):
    print("== HTTPS on the HTTP ports (--tls_dir)", flush=True)
    certs = tls.make_certs(env.root, "certs")
    foreign = tls.make_certs(env.root, "foreign")
    run_cluster(env, certs, foreign)
    run_worker(env, certs, foreign)
    run_bad_key_and_plaintext(env, certs)


def stages(env):
    return [("https", lambda: run(env))]


if __name__ == "__main__":
    sys.exit(e2e.main("https", stages, doc=__doc__))
