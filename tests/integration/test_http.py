#!/usr/bin/python3
"""e2e_http: the coordinator's HTTP port on a 2-worker `meshserve local
--http_port P`: KServe v2 REST (answers equal gRPC's and NumPy's, errors carry
the protocol's HTTP status and {"error": ...}), Prometheus /metrics (accepted
by `promtool check metrics`, counters move with traffic; a worker's own
/metrics too), a real Prometheus server scraping it (its query API returns the
request count), and the status page in headless Chromium (workers and a
sharding grid shown; the screenshot is kept in build/test-artifacts/status.png).

Needs Debian's curl, prometheus (prometheus, promtool) and chromium: without
them the scenario is skipped (exit 77).

Usage: test_http.py --bin_dir build/bin [--keep]
"""
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

import numpy as np

import e2e_common as e2e
import mslib

TOOLS = ("curl", "prometheus", "promtool", "chromium")


def curl(url, body=None, timeout=60):
    """(HTTP status, body text, seconds) of GET url, or POST when body is given."""
    cmd = ["curl", "-sS", "-o", "-", "-w", "\n%{http_code}", "--max-time", str(timeout)]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
    start = time.time()
    p = subprocess.run(cmd + [url], input=body, capture_output=True, text=True,
                       timeout=timeout + 10)
    elapsed = time.time() - start
    text, _, code = p.stdout.rpartition("\n")
    return int(code or 0), text, elapsed


def infer_body(inputs, out_shardings=None):
    req = {"id": "rest-1", "inputs": [
        {"name": n, "shape": list(v.shape), "datatype": "FP32", "data": v.tolist()}
        for n, v in inputs.items()]}
    if out_shardings:
        req["outputs"] = [{"name": n, "parameters": {"out_sharding": s}}
                          for n, s in out_shardings.items()]
    return json.dumps(req)


def metric_value(text, name, labels):
    """The value of series name{labels...} in an exposition, or None."""
    want = ",".join('%s="%s"' % kv for kv in labels.items())
    for line in text.splitlines():
        if line.startswith("%s{%s}" % (name, want)):
            return float(line.rsplit(" ", 1)[1])
    return None


def promtool_check(exposition):
    """(rc, its output) of `promtool check metrics` on an exposition text."""
    p = subprocess.run(["promtool", "check", "metrics"], input=exposition,
                       capture_output=True, text=True, timeout=60)
    return p.returncode, "rc=%d %s%s" % (p.returncode, p.stdout, p.stderr)


def spawn(cmd, log_path):
    """A process in its own group, stopped by mslib's cleanup."""
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    mslib._PROCS.append(proc)
    return proc


def wait_http(url, timeout_s=60):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.read().decode()
        except OSError:
            time.sleep(0.3)
    raise RuntimeError("%s did not answer in %ss" % (url, timeout_s))


def check_rest(env, base, target, cases):
    c, cli = env.c, env.cli
    code, text, _ = curl(base + "/v2/health/live")
    c.check(code == 200 and json.loads(text) == {"live": True}, "REST live", text)
    code, text, _ = curl(base + "/v2/health/ready")
    c.check(code == 200 and json.loads(text)["ready"], "REST ready", text)
    code, text, _ = curl(base + "/v2")
    c.check(code == 200 and json.loads(text)["name"] == "meshserve", "REST server metadata", text)
    code, text, _ = curl(base + "/v2/models/linear")
    meta = json.loads(text) if code == 200 else {}
    c.check(meta.get("inputs", [{}])[0].get("shape") == [-1, 32], "REST model metadata", text)
    code, text, _ = curl(base + "/v2/models/linear/ready")
    c.check(code == 200 and json.loads(text)["ready"], "REST model ready", text)
    for model in ("linear", "swiglu_small"):
        ref_fn, requests = cases[model]
        inputs, shardings, types = requests[1]
        code, text, rest_s = curl(base + "/v2/models/%s/infer" % model,
                                  infer_body(inputs, shardings))
        if not c.check(code == 200, "REST infer %s -> 200" % model, text[:2000]):
            continue
        out = json.loads(text)["outputs"][0]
        y_rest = np.asarray(out["data"], np.float32).reshape(out["shape"])
        start = time.time()
        rc, _, err, outs = cli.infer(target, model, inputs, shardings)
        grpc_s = time.time() - start
        c.check(rc == 0, "gRPC infer %s" % model, err)
        c.check(out["parameters"]["type"] == types["y"],
                "REST %s output type %s" % (model, out["parameters"]["type"]))
        if rc == 0:
            c.check(np.array_equal(y_rest, outs["y"]), "REST %s == gRPC answer" % model,
                    "max diff %g" % np.max(np.abs(y_rest - outs["y"])))
        c.close(y_rest, ref_fn(inputs)["y"], "REST %s == NumPy reference" % model)
        print("  REST %s: %.1f ms (curl); gRPC: %.1f ms (meshserve infer, with its start-up)"
              % (model, rest_s * 1000, grpc_s * 1000), flush=True)


def check_rest_errors(env, base):
    c = env.c
    x = np.ones((16, 32), np.float32)

    def expect(what, path, body, status, needle):
        code, text, _ = curl(base + path, body)
        try:
            err = json.loads(text).get("error", "")
        except ValueError:
            err = None
        c.check(code == status and err is not None and needle in err,
                "REST %s -> %d {\"error\"}" % (what, status), "    %d %s" % (code, text))

    expect("unknown model", "/v2/models/nope/infer", infer_body({"x": x}), 404, "nope")
    expect("unknown model metadata", "/v2/models/nope", None, 404, "nope")
    expect("wrong shape", "/v2/models/linear/infer",
           infer_body({"x": np.ones((16, 31), np.float32)}), 400, "dim")
    expect("bad out_sharding", "/v2/models/linear/infer",
           infer_body({"x": x}, {"y": "P('nope')"}), 400, "nope")
    expect("malformed JSON", "/v2/models/linear/infer", "{", 400, "JSON")
    expect("data of the wrong type", "/v2/models/linear/infer",
           json.dumps({"inputs": [{"name": "x", "shape": [1, 32], "datatype": "FP32",
                                   "data": ["a"] * 32}]}), 400, "number")
    expect("model that failed to load", "/v2/models/broken/infer", infer_body({"x": x}),
           412, "broken")
    expect("unknown route", "/v3/nothing", None, 404, "no route")


def check_metrics(env, base, cases):
    c = env.c
    _, before, _ = curl(base + "/metrics")
    n0 = metric_value(before, "meshserve_inference_requests_total", {"model": "linear"}) or 0
    inputs, shardings, _ = cases["linear"][1][0]
    for _ in range(3):
        curl(base + "/v2/models/linear/infer", infer_body(inputs, shardings))
    code, after, _ = curl(base + "/metrics")
    rc, lint = promtool_check(after)
    c.check(code == 200 and rc == 0, "promtool check metrics accepts /metrics", lint)
    n1 = metric_value(after, "meshserve_inference_requests_total", {"model": "linear"})
    c.check(n1 == n0 + 3, "requests_total{model=linear} moved by 3 (%s -> %s)" % (n0, n1))
    count = metric_value(after, "meshserve_inference_request_duration_seconds_count",
                         {"model": "linear"})
    c.check(count is not None and count >= n1 - 1e-9, "latency histogram counts the requests",
            "count=%s" % count)
    for name in ("meshserve_inference_failures_total", "meshserve_inference_in_flight",
                 "meshserve_inference_queue_duration_seconds_bucket",
                 "meshserve_inference_compute_duration_seconds_bucket",
                 "meshserve_transfer_bytes_total", "meshserve_placement_events_total",
                 "meshserve_placement_duration_seconds_bucket", "meshserve_worker_up"):
        c.check(("\n" + name + "{") in after, "/metrics has %s" % name)
    names = sorted({l.split("{")[0].split(" ")[0] for l in after.splitlines()
                    if l.startswith("meshserve_")})
    print("  metric series names: %s" % ", ".join(names), flush=True)
    return n1


def check_worker_metrics(env, root):
    c = env.c
    port = mslib.free_port()
    spawn([os.path.join(env.bin_dir, "meshserve-worker"), "--port", "0", "--http_port",
           str(port)], os.path.join(root, "worker-http.log"))
    text = wait_http("http://127.0.0.1:%d/metrics" % port)
    rc, lint = promtool_check(text)
    c.check(rc == 0 and "meshserve_worker_calls_total" in text,
            "a worker's --http_port /metrics passes promtool", lint + "\n" + text[:500])
    c.check("meshserve_worker_compute_seconds_total" in text,
            "a worker's /metrics has its compute (GEMM) time family", text[:800])


def check_prometheus(env, http_port, expected, root):
    c = env.c
    port = mslib.free_port()
    config = os.path.join(root, "prometheus.yml")
    with open(config, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: meshserve\n"
                "    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % http_port)
    spawn(["prometheus", "--config.file=" + config,
           "--storage.tsdb.path=" + os.path.join(root, "prometheus-data"),
           "--web.listen-address=127.0.0.1:%d" % port],
          os.path.join(root, "prometheus.log"))
    url = ("http://127.0.0.1:%d/api/v1/query?query=meshserve_inference_requests_total"
           % port)
    deadline = time.time() + 90
    got = None
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                result = json.loads(r.read().decode())["data"]["result"]
            for series in result:
                if series["metric"].get("model") == "linear":
                    got = float(series["value"][1])
            if got is not None and got >= expected:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.5)
    c.check(got is not None and got >= expected,
            "Prometheus scraped the cluster: its query API returns "
            "meshserve_inference_requests_total{model=linear} = %s (>= %s)" % (got, expected))


def check_status_page(env, base, root):
    c = env.c
    chrome = ["chromium", "--headless", "--no-sandbox", "--disable-gpu",
              "--disable-dev-shm-usage", "--user-data-dir=" + os.path.join(root, "chromium"),
              "--virtual-time-budget=5000"]
    url = base + "/#model=swiglu_small"
    p = subprocess.run(chrome + ["--dump-dom", url], capture_output=True, text=True,
                       timeout=120)
    dom = p.stdout
    c.check('data-worker="0"' in dom and 'data-worker="1"' in dom,
            "status page (Chromium) shows both workers", dom[:1500] + p.stderr[-1500:])
    c.check("Sharding of swiglu_small" in dom and dom.count('class="tile"') >= 2
            and "CPU 0" in dom, "status page shows swiglu_small's sharding grid", dom[-3000:])
    c.check("fsdp=" in dom and "model=" in dom, "status page shows the mesh as text")
    artifacts = os.path.join(os.path.dirname(os.path.abspath(env.bin_dir)), "test-artifacts")
    os.makedirs(artifacts, exist_ok=True)
    shot = os.path.join(artifacts, "status.png")
    if os.path.exists(shot):
        os.remove(shot)
    p = subprocess.run(chrome + ["--window-size=1280,1400", "--hide-scrollbars",
                                 "--screenshot=" + shot, url],
                       capture_output=True, text=True, timeout=120)
    c.check(os.path.exists(shot) and os.path.getsize(shot) > 10000,
            "status page screenshot kept in %s" % shot, p.stderr[-1500:])


def run(env):
    print("== HTTP: REST, /metrics, Prometheus, status page (2 workers)", flush=True)
    model_dir, cases = env.models()
    with open(os.path.join(model_dir, "broken.json"), "w") as f:
        f.write("{")  # a model that fails to load: FAILED_PRECONDITION
    http_port = mslib.free_port()
    cluster = env.cluster(2, model_dir, "http", extra_args=["--http_port", str(http_port)])
    base = "http://127.0.0.1:%d" % http_port
    try:
        check_rest(env, base, cluster.target, cases)
        check_rest_errors(env, base)
        requests = check_metrics(env, base, cases)
        check_worker_metrics(env, env.root)
        check_prometheus(env, http_port, requests or 1, env.root)
        check_status_page(env, base, env.root)
    finally:
        cluster.stop()


if __name__ == "__main__":
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        print("SKIP: %s not installed (scripts/setup.sh installs them)" % ", ".join(missing))
        sys.exit(77)
    sys.exit(e2e.main("http", lambda env: [("http", lambda: run(env))], doc=__doc__))
