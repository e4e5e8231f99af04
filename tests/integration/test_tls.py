#!/usr/bin/python3
"""e2e_tls: TLS, mutual TLS, bearer tokens and request limits over real
processes. Certificates from scripts/make-dev-certs.sh (one cluster CA and a
second, foreign CA); `meshserve local --workers 2 --tls_dir DIR
--auth_token_file F --max_request_bytes 1 MiB --max_tensor_elements 100000
--http_port P`:

  - the CLI with --tls_dir and the token computes linear's answer (NumPy);
  - an insecure client, or one trusting another CA, cannot reach the
    coordinator; a client trusting the CA with no certificate can;
  - token missing / wrong -> UNAUTHENTICATED, right -> OK (gRPC), and 401 /
    200 over REST; a client certificate cannot register as a worker;
  - a request over --max_request_bytes, an input over --max_tensor_elements
    -> RESOURCE_EXHAUSTED naming the limit (413 over REST), and the next
    request is served;
  - a client certificate of the cluster's CA talking straight to a worker is
    refused (PERMISSION_DENIED naming its identity), for WorkerService and
    grpc.health.v1 alike; a member certificate gets through (the control);
  - a worker whose certificates come from the other CA never joins; one with
    the cluster's certificates joins (the control);
  - an insecure coordinator says so in its start-up line.

Usage: test_tls.py --bin_dir build/bin [--keep]
"""
import json
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np

import e2e_common as e2e
import mslib

MAKE_CERTS = os.path.join(e2e.ROOT, "scripts", "make-dev-certs.sh")
TOKEN = "tls-test-token-7f3a"
LIMIT = 1 << 20  # --max_request_bytes
MAX_ELEMENTS = 100000  # --max_tensor_elements


def read(path):
    with open(path, "rb") as f:
        return f.read()


def make_certs(root, name):
    d = os.path.join(root, name)
    rc, out, err = mslib.run(["sh", MAKE_CERTS, d], timeout=120)
    if rc != 0:
        raise RuntimeError("make-dev-certs.sh failed: %s %s" % (out, err))
    return d


def channel(target, certs=None, identity=None, server_name=None):
    """A grpcio channel: insecure (certs None) or TLS trusting certs/ca.pem,
    presenting certs/<identity>.pem when identity is given."""
    import grpc
    if certs is None:
        return grpc.insecure_channel(target)
    key = read(os.path.join(certs, identity + ".key")) if identity else None
    cert = read(os.path.join(certs, identity + ".pem")) if identity else None
    creds = grpc.ssl_channel_credentials(read(os.path.join(certs, "ca.pem")), key, cert)
    options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    return grpc.secure_channel(target, creds, options=options)


def call(ch, method, request=b"", token=None, timeout=15):
    """(StatusCode, details) of one unary call with raw bytes."""
    import grpc
    metadata = [("authorization", "Bearer " + token)] if token else None
    try:
        ch.unary_unary(method, request_serializer=None, response_deserializer=None)(
            request, timeout=timeout, metadata=metadata)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details() or ""


INFER = "/inference.GRPCInferenceService/ModelInfer"
HEALTH = "/grpc.health.v1.Health/Check"
WORKER_STATUS = "/meshserve.WorkerService/Status"


def linear_request(x):
    return mslib.infer_request("linear", [("x", "FP32", list(x.shape))],
                               [x.astype(np.float32).tobytes()])


def http(method, url, body=None, token=None, context=None):
    """(status, parsed JSON or text) of one HTTP(S) request (`context`: ssl's)."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = "Bearer " + token
    req = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30, context=context) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError) as e:
        return -1, str(e)


def start_worker(bin_dir, root, name, coordinator, tls_dir):
    log = open(os.path.join(root, name + ".log"), "w")
    proc = subprocess.Popen([os.path.join(bin_dir, "meshserve-worker"), "--port", "0",
                             "--coordinator", coordinator, "--tls_dir", tls_dir],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    mslib._PROCS.append(proc)
    return proc, log.name


def wait_for(predicate, timeout_s):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def run(env):
    print("== TLS, tokens, limits (2 workers)", flush=True)
    c, cli, root = env.c, env.cli, env.root
    import grpc
    certs = make_certs(root, "certs")
    foreign = make_certs(root, "foreign")
    token_file = os.path.join(root, "token")
    with open(token_file, "w") as f:
        f.write(TOKEN + "\n")
    model_dir, cases = env.models()
    http_port = mslib.free_port()
    cluster = env.cluster(2, model_dir, "tls", extra_args=[
        "--tls_dir", certs, "--auth_token_file", token_file,
        "--max_request_bytes", str(LIMIT), "--max_tensor_elements", str(MAX_ELEMENTS),
        "--http_port", str(http_port)])
    t = cluster.target
    sec = ["--tls_dir", certs, "--auth_token_file", token_file]
    x = np.random.default_rng(1).standard_normal((16, 32)).astype(np.float32)
    reference = cases["linear"][0]({"x": x})["y"]
    try:
        coordinator_log = open(os.path.join(cluster.log_dir, "coordinator.log")).read()
        c.check(re.search(r"listening on \S+ \(mutual TLS \(CA .*ca\.pem\), client token\)",
                          coordinator_log) is not None,
                "coordinator start-up line says mutual TLS and client token", coordinator_log)

        # The CLI over TLS with the token: a real answer.
        rc, out, err, outputs = cli.infer(t, "linear", {"x": x}, extra=sec)
        if c.check(rc == 0 and "y" in outputs, "CLI infer over TLS with token",
                   "rc=%d\n%s\n%s" % (rc, out, err)):
            c.close(outputs["y"], reference, "CLI infer over TLS: y matches NumPy")
        rc, out, err = cli.run("status", "--target", t, *sec)
        workers = re.findall(r"worker \d+\s+(\S+:\d+)\s+healthy", out)
        c.check(rc == 0 and len(workers) == 2, "status over TLS lists 2 workers' addresses",
                "rc=%d\n%s\n%s" % (rc, out, err))

        # Transport: insecure and foreign-CA clients fail, CA-only clients work.
        code, msg = call(channel(t), INFER, linear_request(x), TOKEN)
        c.check(code == grpc.StatusCode.UNAVAILABLE,
                "insecure client -> TLS coordinator fails (UNAVAILABLE)", "%s %s" % (code, msg))
        rc, out, err, _ = cli.infer(t, "linear", {"x": x}, extra=["--auth_token_file",
                                                                 token_file, "--timeout_s", "5"])
        c.check(rc != 0, "insecure CLI -> TLS coordinator fails", "rc=%d %s" % (rc, err))
        code, msg = call(channel(t, foreign), INFER, linear_request(x), TOKEN)
        c.check(code == grpc.StatusCode.UNAVAILABLE,
                "client trusting another CA fails", "%s %s" % (code, msg))
        code, msg = call(channel(t, certs), INFER, linear_request(x), TOKEN)
        c.check(code == grpc.StatusCode.OK,
                "TLS client without a certificate, with token -> OK", "%s %s" % (code, msg))

        # Tokens.
        with channel(t, certs, "client") as ch:
            code, msg = call(ch, INFER, linear_request(x))
            c.check(code == grpc.StatusCode.UNAUTHENTICATED and "missing" in msg,
                    "token missing -> UNAUTHENTICATED", "%s %s" % (code, msg))
            code, msg = call(ch, INFER, linear_request(x), "not-the-token")
            c.check(code == grpc.StatusCode.UNAUTHENTICATED and "wrong" in msg,
                    "token wrong -> UNAUTHENTICATED", "%s %s" % (code, msg))
            code, msg = call(ch, INFER, linear_request(x), TOKEN)
            c.check(code == grpc.StatusCode.OK, "token right -> OK", "%s %s" % (code, msg))
            # Registering as a worker needs the member identity, token or not.
            code, msg = call(ch, "/meshserve.MembershipService/Register", b"", TOKEN)
            c.check(code == grpc.StatusCode.PERMISSION_DENIED
                    and "spiffe://meshserve/client" in msg,
                    "client cert -> MembershipService.Register refused (PERMISSION_DENIED)",
                    "%s %s" % (code, msg))
        rc, out, err, _ = cli.infer(t, "linear", {"x": x}, extra=["--tls_dir", certs])
        e2e.expect_code(c, "CLI without --auth_token_file", rc, err, "UNAUTHENTICATED")

        # The byte limit, then the next request is served.
        big = np.zeros((16, (LIMIT // 64) + 1024), np.float32)  # > 1 MiB of raw bytes
        with channel(t, certs, "client") as ch:
            code, msg = call(ch, INFER, linear_request(big), TOKEN)
            c.check(code == grpc.StatusCode.RESOURCE_EXHAUSTED and str(LIMIT) in msg,
                    "request over --max_request_bytes -> RESOURCE_EXHAUSTED naming the limit",
                    "%s %s" % (code, msg))
            wide = np.zeros((16, 8192), np.float32)  # 131072 elements, 512 KiB
            code, msg = call(ch, INFER, linear_request(wide), TOKEN)
            c.check(code == grpc.StatusCode.RESOURCE_EXHAUSTED and
                    "131072 elements" in msg and "--max_tensor_elements=%d" % MAX_ELEMENTS in msg,
                    "input over --max_tensor_elements -> RESOURCE_EXHAUSTED naming both",
                    "%s %s" % (code, msg))
        rc, out, err, outputs = cli.infer(t, "linear", {"x": x}, extra=sec)
        if c.check(rc == 0 and "y" in outputs, "the next request is served",
                   "rc=%d\n%s" % (rc, err)):
            c.close(outputs["y"], reference, "next request: y matches NumPy")

        # REST (HTTPS with --tls_dir, test_https.py): token and body limit.
        base = "https://127.0.0.1:%d" % http_port
        ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.pem"))
        body = json.dumps({"inputs": [{"name": "x", "shape": [16, 32], "datatype": "FP32",
                                       "data": x.ravel().tolist()}]}).encode()
        st, text = http("POST", base + "/v2/models/linear/infer", body, context=ctx)
        c.check(st == 401 and "missing" in text, "REST without token -> 401", "%s %s" % (st, text))
        st, text = http("POST", base + "/v2/models/linear/infer", body, "nope", context=ctx)
        c.check(st == 401 and "wrong" in text, "REST wrong token -> 401", "%s %s" % (st, text))
        st, text = http("POST", base + "/v2/models/linear/infer", body, TOKEN, context=ctx)
        ok = st == 200
        if c.check(ok, "REST right token -> 200", "%s %s" % (st, text[:300])):
            y = np.array(json.loads(text)["outputs"][0]["data"]).reshape(16, 32)
            c.close(y, reference, "REST infer: y matches NumPy")
        st, text = http("GET", base + "/v2/health/ready", context=ctx)
        c.check(st == 200, "REST health needs no token", "%s %s" % (st, text))
        st, text = http("POST", base + "/v2/models/linear/infer", b" " * (LIMIT + 1), TOKEN,
                        context=ctx)
        c.check(st == 413 and str(LIMIT) in text, "REST body over the limit -> 413 naming it",
                "%s %s" % (st, text[:300]))

        # A client certificate straight to a worker: refused; a member's: served.
        for address in workers[:1]:
            with channel(address, certs, "client", "meshserve-member") as ch:
                for method in (WORKER_STATUS, HEALTH):
                    code, msg = call(ch, method)
                    c.check(code == grpc.StatusCode.PERMISSION_DENIED
                            and "spiffe://meshserve/client" in msg,
                            "client cert -> worker %s refused (PERMISSION_DENIED)" % method,
                            "%s %s" % (code, msg))
            with channel(address, certs, None, "meshserve-member") as ch:
                code, msg = call(ch, HEALTH)
                c.check(code == grpc.StatusCode.UNAVAILABLE,
                        "no certificate -> worker: no handshake", "%s %s" % (code, msg))
            with channel(address) as ch:
                code, msg = call(ch, HEALTH)
                c.check(code == grpc.StatusCode.UNAVAILABLE,
                        "plaintext -> worker: no handshake", "%s %s" % (code, msg))
            with channel(address, certs, "member", "meshserve-member") as ch:
                code, msg = call(ch, WORKER_STATUS)
                c.check(code == grpc.StatusCode.OK, "member cert -> worker Status OK (control)",
                        "%s %s" % (code, msg))

        # A worker of another CA never joins; one of ours does.
        stranger, stranger_log = start_worker(env.bin_dir, root, "stranger", t, foreign)
        joined = wait_for(lambda: "ready id=" in open(stranger_log).read(), 6)
        rc, out, err = cli.run("status", "--target", t, *sec)
        c.check(not joined and stranger.poll() is None and
                len(re.findall(r"worker \d+\s+\S+:\d+", out)) == 2,
                "worker with a foreign CA cannot join", open(stranger_log).read()[-2000:])
        mslib.stop_process(stranger)
        friend, friend_log = start_worker(env.bin_dir, root, "friend", t, certs)
        joined = wait_for(lambda: "ready id=" in open(friend_log).read(), 20)
        c.check(joined, "worker with the cluster's CA joins (control)",
                open(friend_log).read()[-2000:])
        mslib.stop_process(friend)
    finally:
        cluster.stop()

    # Insecure stays the default and says so.
    port = mslib.free_port()
    proc = subprocess.Popen([os.path.join(env.bin_dir, "meshserve-coordinator"), "--port",
                             str(port), "--model_dir", model_dir], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    mslib._PROCS.append(proc)
    line = proc.stdout.readline()
    mslib.stop_process(proc)
    c.check("listening on" in line and "insecure" in line,
            "insecure coordinator says so in its start-up line", line)


def stages(env):
    return [("tls", lambda: run(env))]


if __name__ == "__main__":
    sys.exit(e2e.main("tls", stages, doc=__doc__))
