"""Helpers for meshserve's end-to-end tests: processes, files, references.

Everything runs on loopback. Every process started here is registered and
killed at exit (process group SIGTERM, then SIGKILL), even when a test fails.
Every wait is bounded in count and time.
"""
import atexit
import json
import os
import re
import signal
import socket
import struct
import subprocess
import threading
import time

import numpy as np

_PROCS = []


def _cleanup():
    for proc in _PROCS:
        stop_process(proc, grace_s=5)


atexit.register(_cleanup)


def _on_signal(signum, frame):
    # SIGTERM/SIGINT (e.g. a CTest or `timeout` stop): run the atexit cleanup.
    raise SystemExit(128 + signum)


signal.signal(signal.SIGTERM, _on_signal)


def stop_process(proc, grace_s=10):
    """SIGTERM to the process group, SIGKILL after grace_s."""
    if proc.poll() is not None:
        return proc.returncode
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return proc.wait(timeout=10)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalCluster:
    """`meshserve local` in its own process group; stdout read by a thread."""

    def __init__(self, bin_dir, workers, model_dir, log_dir, ready_timeout_s=180,
                 require_ready=True, extra_args=()):
        # --port 0: the coordinator binds a port from the OS; the ready line
        # names it (no window in which another process could take it).
        self.port = None
        self.target = None
        self.lines = []
        self.err_lines = []
        self.worker_pids = {}
        self._lock = threading.Lock()
        cmd = [os.path.join(bin_dir, "meshserve"), "local", "--workers", str(workers),
               "--model_dir", model_dir, "--port", "0", "--log_dir", log_dir,
               # Not requiring ready: the launcher must keep serving anyway.
               "--ready_timeout_s", str(ready_timeout_s if require_ready else 3600)]
        cmd += list(extra_args)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)
        _PROCS.append(self.proc)
        threading.Thread(target=self._read, args=(self.proc.stdout, self.lines),
                         daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self.err_lines),
                         daemon=True).start()
        self.log_dir = log_dir
        deadline = time.time() + ready_timeout_s + 10
        while time.time() < deadline:
            with self._lock:
                if any("ready" in l and "not ready" not in l for l in self.lines):
                    break
            if self.proc.poll() is not None:
                raise RuntimeError("meshserve local exited (%s) before ready:\n%s\n%s\n%s" % (
                    self.proc.returncode, "\n".join(self.lines), "\n".join(self.err_lines),
                    self.logs_tail()))
            time.sleep(0.1)
        else:
            if require_ready:
                raise RuntimeError("meshserve local not ready in %ss:\n%s\n%s" % (
                    ready_timeout_s, "\n".join(self.lines), self.logs_tail()))
        self.ready = any("ready" in l and "not ready" not in l for l in self.lines)
        with self._lock:
            for line in self.lines:
                m = re.search(r"coordinator ([\w.-]+):(\d+)", line)
                if m and self.port is None:
                    self.port = int(m.group(2))
                    self.target = "%s:%d" % (m.group(1), self.port)
                m = re.search(r"worker (\d+) pid (\d+)", line)
                if m:
                    self.worker_pids[int(m.group(1))] = int(m.group(2))

    def _read(self, stream, sink):
        for line in stream:
            with self._lock:
                sink.append(line.rstrip("\n"))

    def stderr_text(self):
        with self._lock:
            return "\n".join(self.err_lines)

    def logs_tail(self, n=30):
        out = []
        if not os.path.isdir(self.log_dir):
            return ""
        for name in sorted(os.listdir(self.log_dir)):
            with open(os.path.join(self.log_dir, name), errors="replace") as f:
                lines = f.read().splitlines()[-n:]
            out.append("--- %s\n%s" % (name, "\n".join(lines)))
        return "\n".join(out)

    def stop(self):
        """SIGTERM to `meshserve local` only: it must stop its children."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            rc = stop_process(self.proc)
        return rc


def run(cmd, timeout=120, check=False):
    """Runs a command; returns (returncode, stdout, stderr)."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError("command failed (%d): %s\nstdout:\n%s\nstderr:\n%s" % (
            p.returncode, " ".join(cmd), p.stdout, p.stderr))
    return p.returncode, p.stdout, p.stderr


def write_safetensors(path, tensors):
    """tensors: name -> np.ndarray (float32, or uint16 bfloat16 bits as ('BF16', arr))."""
    header = {}
    blobs = []
    offset = 0
    for name, value in tensors.items():
        dtype = "F32"
        if isinstance(value, tuple):
            dtype, value = value
        data = np.ascontiguousarray(value).tobytes()
        header[name] = {"dtype": dtype, "shape": list(value.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def to_bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (as JAX's astype)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def from_bf16_bits(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


# ---- references (float64 NumPy, written from the ops' definitions) ----

def silu(x):
    return x / (1.0 + np.exp(-x))


def rms_norm(x, scale, eps):
    # flax.nnx.RMSNorm: x * rsqrt(mean(x^2) + eps) * scale, over the last dim.
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * scale


def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


# ---- the initializer generator, re-implemented from initializers.h ----

_M64 = (1 << 64) - 1
_G = 0x9E3779B97F4A7C15


def _mix64_int(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def _mix64_np(z):
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _fnv1a64(name):
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & _M64
    return h


def init_bits(seed, name, n):
    key = _mix64_int(_mix64_int((seed + _G) & _M64) ^ _fnv1a64(name))
    i = np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        state = np.uint64(key) + (i + np.uint64(1)) * np.uint64(_G)
    return _mix64_np(state)


def fans(shape):
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    return shape[-2] * receptive, shape[-1] * receptive


def erfinv(y):
    """Inverse error function in float64: Winitzki's approximation refined by
    Newton steps on math.erf (no scipy here); exact to ~1e-15 for |y| < 1."""
    import math
    y = np.asarray(y, np.float64)
    a = 0.147
    ln = np.log(1.0 - y * y)
    first = 2.0 / (np.pi * a) + ln / 2.0
    x = np.sign(y) * np.sqrt(np.sqrt(first * first - ln / a) - first)
    erf = np.frompyfunc(math.erf, 1, 1)
    for _ in range(4):
        err = erf(x).astype(np.float64) - y
        x = x - err / (2.0 / np.sqrt(np.pi) * np.exp(-x * x))
    return x


def init_param(seed, name, shape, kind, scale=1.0, stddev=1.0):
    """Every init kind of initializers.h. uniform/xavier_uniform are exact;
    normal/lecun_normal use an exact erfinv where the C++ uses Giles' float
    polynomial (relative difference ~2e-7: compare with rtol >= 1e-6)."""
    n = int(np.prod(shape))
    if kind == "zeros":
        return np.zeros(shape, np.float32)
    if kind == "ones":
        return np.ones(shape, np.float32)
    bits = init_bits(seed, name, n)
    u24 = (bits >> np.uint64(40)).astype(np.float64) * 2.0 ** -24
    u53 = ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0 ** -53
    fan_in, fan_out = fans(shape)
    if kind == "uniform":
        v = u24 * scale
    elif kind == "xavier_uniform":
        v = (2.0 * u24 - 1.0) * np.sqrt(6.0 / (fan_in + fan_out))
    elif kind == "normal":
        v = stddev * np.sqrt(2.0) * erfinv(2.0 * u53 - 1.0)
    elif kind == "lecun_normal":
        import math
        lo, hi = math.erf(-math.sqrt(2.0)), math.erf(math.sqrt(2.0))
        t = np.sqrt(2.0) * erfinv(lo + (hi - lo) * u53)
        v = t * np.sqrt(1.0 / fan_in) / 0.87962566103423978
    else:
        raise ValueError("unknown init kind %s" % kind)
    return v.astype(np.float32).reshape(shape)


def init_params(model):
    """All params of a model file (dict) from its initializers."""
    return {name: init_param(model.get("seed", 0), name, spec["shape"], spec.get("init", "zeros"),
                             spec.get("scale", 1.0), spec.get("stddev", 1.0))
            for name, spec in model["params"].items()}


# ---- a minimal protobuf encoder for raw KServe requests ----

def _varint(n):
    out = bytearray()
    n &= _M64
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def pb_bytes(field, data):
    if isinstance(data, str):
        data = data.encode()
    return _varint((field << 3) | 2) + _varint(len(data)) + data


def pb_packed_int64(field, values):
    return pb_bytes(field, b"".join(_varint(v) for v in values))


def infer_request(model, inputs, raw):
    """ModelInferRequest bytes: inputs = [(name, datatype, shape)], raw = [bytes]."""
    msg = pb_bytes(1, model)
    for name, datatype, shape in inputs:
        tensor = pb_bytes(1, name) + pb_bytes(2, datatype) + pb_packed_int64(3, shape)
        msg += pb_bytes(5, tensor)
    for r in raw:
        msg += pb_bytes(7, r)
    return msg


# ---- fault and load tests: separate processes, a gRPC client, RSS ----

class ProcessCluster:
    """meshserve-coordinator and N meshserve-worker processes started one by
    one (not `meshserve local`), so a test can stop, kill or restart any one of
    them. Each process has its own group and log file LOG_DIR/<name>.log."""

    def __init__(self, bin_dir, workers, model_dir, log_dir, coordinator_args=(),
                 heartbeat_ms=500):
        self.bin_dir = bin_dir
        self.model_dir = model_dir
        self.log_dir = log_dir
        os.makedirs(log_dir, exist_ok=True)
        self.port = free_port()
        self.target = "127.0.0.1:%d" % self.port
        self.coordinator_args = list(coordinator_args)
        self.heartbeat_ms = heartbeat_ms
        self.min_workers = workers
        self.coordinator = None
        self.workers = []
        self._n = 0
        self.start_coordinator()
        for _ in range(workers):
            self.add_worker()

    def _spawn(self, name, cmd):
        log = open(os.path.join(self.log_dir, name + ".log"), "w")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        log.close()
        _PROCS.append(proc)
        return proc

    def start_coordinator(self):
        self._n += 1
        self.coordinator_log = "coordinator%d" % self._n
        self.coordinator = self._spawn(self.coordinator_log, [
            os.path.join(self.bin_dir, "meshserve-coordinator"), "--port", str(self.port),
            "--model_dir", self.model_dir, "--min_workers", str(self.min_workers),
            "--heartbeat_ms", str(self.heartbeat_ms)] + self.coordinator_args)
        return self.coordinator

    def add_worker(self):
        i = len(self.workers)
        proc = self._spawn("worker%d" % i, [
            os.path.join(self.bin_dir, "meshserve-worker"), "--port", "0",
            "--coordinator", self.target, "--threads", "1"])
        self.workers.append(proc)
        return proc

    def log(self, name):
        with open(os.path.join(self.log_dir, name + ".log"), errors="replace") as f:
            return f.read()

    def wait_ready(self, timeout_s=120):
        """Until the current coordinator printed its "ready" line."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if "meshserve-coordinator ready" in self.log(self.coordinator_log):
                return True
            if self.coordinator.poll() is not None:
                return False
            time.sleep(0.1)
        return False

    def logs_tail(self, n=20):
        out = []
        for name in sorted(os.listdir(self.log_dir)):
            lines = self.log(name[:-4]).splitlines()[-n:]
            out.append("--- %s\n%s" % (name, "\n".join(lines)))
        return "\n".join(out)

    def stop(self):
        for proc in self.workers + [self.coordinator]:
            if proc is not None:
                stop_process(proc, grace_s=5)


def grpc_stubs(bin_dir):
    """(grpc, inference_pb2, inference_pb2_grpc, worker_service_pb2,
    worker_service_pb2_grpc, program_pb2, tensor_pb2) from build/python."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(bin_dir)), "python"))
    import grpc
    from meshserve_client.proto import (inference_pb2, inference_pb2_grpc, program_pb2,
                                        tensor_pb2, worker_service_pb2,
                                        worker_service_pb2_grpc)
    return (grpc, inference_pb2, inference_pb2_grpc, worker_service_pb2,
            worker_service_pb2_grpc, program_pb2, tensor_pb2)


def grpc_infer_request(pb2, model, x, rid=""):
    """A float32 ModelInferRequest with one input "x"."""
    req = pb2.ModelInferRequest(model_name=model, id=rid)
    req.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
    req.raw_input_contents.append(np.ascontiguousarray(x, dtype=np.float32).tobytes())
    return req


def grpc_output(response, shape):
    return np.frombuffer(response.raw_output_contents[0], np.float32).reshape(shape)


def rss_bytes(pid):
    """Resident set size of a process (VmRSS), 0 when gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def percentile(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100.0 * (len(values) - 1))))]


# ---- the fault and load scenarios' model and traffic (test_faults*.py, test_load.py) ----
# A model with a NumPy-written checkpoint whose mesh follows the worker count,
# and a gRPC client that classifies every answer as right, wrong or a gRPC
# error code (a hang shows as the client's deadline passing).
# y = x @ kernel; x replicated, kernel and y split by columns over every
# worker ("data": -1), so each request runs on all of the model's workers.
LIN = {
    "name": "lin", "mesh": {"data": -1}, "dtype": "float32", "checkpoint": "lin.safetensors",
    "inputs": {"x": {"shape": [-1, 64], "sharding": [None, None]}},
    "params": {"kernel": {"shape": [64, 48], "sharding": [None, "data"]}},
    "layers": [{"name": "y", "op": "linear", "input": "x", "kernel": "kernel",
                "out_sharding": [None, "data"]}],
    "outputs": ["y"],
}


def write_lin_model(model_dir, model=None, kernel=None, name=None, checkpoint=None):
    """Writes `model` (LIN) with its checkpoint; returns the kernel."""
    model = dict(model or LIN)
    if name:
        model["name"] = name
    if checkpoint:
        model["checkpoint"] = checkpoint
    os.makedirs(model_dir, exist_ok=True)
    if kernel is None:
        kernel = np.random.default_rng(7).standard_normal((64, 48)).astype(np.float32) / 8
    write_safetensors(os.path.join(model_dir, model["checkpoint"]), {"kernel": kernel})
    with open(os.path.join(model_dir, model["name"] + ".json"), "w") as f:
        json.dump(model, f)
    return kernel


class LinClient:
    """One channel to the coordinator; infer() returns ("ok", seconds),
    ("wrong", detail) or (grpc code name, message)."""

    def __init__(self, bin_dir, target, kernel, model="lin"):
        (self.grpc, self.pb2, pb2_grpc) = grpc_stubs(bin_dir)[:3]
        # Reconnect within 0.5 s once a restarted coordinator listens again.
        self.channel = self.grpc.insecure_channel(target, options=[
            ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 500)])
        self.stub = pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self.kernel = kernel.astype(np.float64)
        self.model = model

    def check(self, x, response):
        y = grpc_output(response, (x.shape[0], 48))
        ref = x.astype(np.float64) @ self.kernel
        if np.allclose(y, ref, rtol=1e-5, atol=1e-5 * float(np.max(np.abs(ref)))):
            return None
        return "max |y-ref| %.3g" % float(np.max(np.abs(y - ref)))

    def infer(self, x, timeout=30, rid=""):
        start = time.time()
        try:
            r = self.stub.ModelInfer(grpc_infer_request(self.pb2, self.model, x, rid),
                                     timeout=timeout)
        except self.grpc.RpcError as e:
            return e.code().name, e.details() or ""
        wrong = self.check(x, r)
        return ("wrong", wrong) if wrong else ("ok", time.time() - start)

    def wait_served(self, timeout_s=60):
        """Until a request gets a right answer; returns the last outcome."""
        x = np.ones((1, 64), np.float32)
        deadline = time.time() + timeout_s
        outcome = ("none", "")
        while time.time() < deadline:
            outcome = self.infer(x, timeout=10)
            if outcome[0] == "ok":
                return outcome
            time.sleep(0.2)
        return outcome

    def close(self):
        self.channel.close()


class Traffic:
    """`clients` threads sending small requests (1-3 times `row_multiple` rows)
    in a loop until stop(); outcomes are collected as (sent, code, detail), `sent`
    the time the request was sent (a request sent while a server was away may
    return its error seconds later)."""

    def __init__(self, client, clients=4, timeout=30, width=64, row_multiple=1):
        self.client = client
        self.timeout = timeout
        self.width = width  # columns of x
        self.row_multiple = row_multiple  # rows of x divide by it (a sharded batch dim)
        self.outcomes = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True)
                         for i in range(clients)]
        for t in self._threads:
            t.start()

    def _loop(self, i):
        rng = np.random.default_rng(100 + i)
        while not self._stop.is_set():
            rows = self.row_multiple * (1 + int(rng.integers(0, 3)))
            x = rng.standard_normal((rows, self.width)).astype(np.float32)
            sent = time.time()
            code, detail = self.client.infer(x, timeout=self.timeout)
            with self._lock:
                self.outcomes.append((sent, code, detail))
            if code != "ok":
                time.sleep(0.05)

    def stop(self, join_s=90):
        self._stop.set()
        for t in self._threads:
            t.join(timeout=join_s)
        return not any(t.is_alive() for t in self._threads)

    def counts(self):
        with self._lock:
            out = {}
            for _, code, _ in self.outcomes:
                out[code] = out.get(code, 0) + 1
            return out

    def details(self, code, n=3):
        with self._lock:
            return [d for _, c, d in self.outcomes if c == code][:n]
# ---- parameters as state (test_params*.py, bench/bench_params.py) ----

_ST_DTYPES = {"F32": np.float32, "F64": np.float64, "BF16": np.uint16, "F16": np.float16,
              "I32": np.int32, "I64": np.int64, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}


def read_safetensors(path):
    """{name: array} of a safetensors file (BF16 as uint16 bits), and its
    metadata: returns (tensors, metadata)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=_ST_DTYPES[e["dtype"]]).reshape(e["shape"])
    return out, meta


def client_package(bin_dir):
    """The built Python client (BUILD/python/meshserve_client, with the
    generated stubs in meshserve_client.proto)."""
    import sys
    path = os.path.join(os.path.dirname(os.path.abspath(bin_dir)), "python")
    if path not in sys.path:
        sys.path.insert(0, path)
    import meshserve_client
    import meshserve_client.proto.cluster_service_pb2  # noqa: F401
    import meshserve_client.proto.cluster_service_pb2_grpc  # noqa: F401
    import meshserve_client.proto.inference_pb2  # noqa: F401
    import meshserve_client.proto.tensor_pb2  # noqa: F401
    return meshserve_client


def start_process(cmd, log_path):
    """A process in its own session with its output in `log_path`, stopped at exit."""
    log = open(log_path, "a")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    _PROCS.append(proc)
    return proc


def start_worker(bin_dir, coordinator, log_path, extra=()):
    return start_process([os.path.join(bin_dir, "meshserve-worker"), "--port", "0",
                          "--coordinator", coordinator] + list(extra), log_path)


def start_coordinator(bin_dir, port, model_dir, min_workers, log_path, extra=()):
    return start_process([os.path.join(bin_dir, "meshserve-coordinator"), "--host", "127.0.0.1",
                          "--port", str(port), "--model_dir", model_dir,
                          "--min_workers", str(min_workers)] + list(extra), log_path)


def vm_hwm_bytes(pid):
    """Peak resident set (VmHWM) of a live process, in bytes; None if gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class RequestQueue:
    """A request iterator for a gRPC stream that is fed as the call goes on:
    put() a message, close() ends the client's side."""

    def __init__(self, *first):
        import queue
        self._q = queue.Queue()
        for m in first:
            self.put(m)

    def put(self, message):
        self._q.put(message)

    def close(self):
        self._q.put(None)

    def __iter__(self):
        while True:
            item = self._q.get()
            if item is None:
                return
            yield item


def push_chunks(model, boxes, chunk_bytes=1 << 20, pb=None):
    """PushParamsChunk messages for `boxes` [(param, offset, array, dtype
    enum or None)]: each box's row-major bytes in chunk_bytes pieces; its first
    message sets model, param, offset, shape and dtype. `pb`: cluster_service_pb2."""
    for param, offset, array, dtype in boxes:
        data = np.ascontiguousarray(array).tobytes()
        step = max(1, chunk_bytes)
        for start in range(0, max(len(data), 1), step):
            msg = pb.PushParamsChunk(byte_offset=start, data=data[start:start + step])
            if start == 0:
                msg.model = model
                msg.param = param
                msg.offset.extend(int(o) for o in offset)
                msg.shape.extend(int(d) for d in array.shape)
                msg.dtype = 1 if dtype is None else dtype  # FLOAT32
            yield msg


def mlp_model(name="mlp", d_in=16, hidden=48, d_out=16, checkpoint=None, seed=3):
    """A 2-layer MLP on mesh {model: -1}: w1 [d_in, hidden] P(None, 'model'),
    w2 [hidden, d_out] P('model', None), b2 [d_out] replicated (initialised
    from the seed unless the checkpoint has it). hidden 48 types on 1, 2, 3,
    4, 6 and 8 workers."""
    model = {
        "name": name, "mesh": {"model": -1}, "dtype": "float32", "seed": seed,
        "inputs": {"x": {"shape": [-1, d_in], "sharding": [None, None]}},
        "params": {
            "w1": {"shape": [d_in, hidden], "sharding": [None, "model"], "init": "xavier_uniform"},
            "w2": {"shape": [hidden, d_out], "sharding": ["model", None], "init": "xavier_uniform"},
            "b2": {"shape": [d_out], "sharding": [None], "init": "uniform", "scale": 0.5},
        },
        "layers": [
            {"name": "h", "op": "linear", "input": "x", "kernel": "w1"},
            {"name": "a", "op": "relu", "input": "h"},
            {"name": "y", "op": "linear", "input": "a", "kernel": "w2", "bias": "b2",
             "out_sharding": [None, None]},
        ],
        "outputs": ["y"],
    }
    if checkpoint:
        model["checkpoint"] = checkpoint
    return model


def mlp_random_params(model, rng, names=None):
    """float32 params of mlp_model of the model's shapes (all, or `names`)."""
    out = {}
    for name, spec in model["params"].items():
        if names is not None and name not in names:
            continue
        shape = spec["shape"]
        fan_in = shape[0] if len(shape) > 1 else 1
        out[name] = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
    return out


def mlp_ref(params, x):
    """float64 reference of mlp_model: relu(x @ w1) @ w2 + b2."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    h = np.maximum(np.asarray(x, np.float64) @ p["w1"], 0.0)
    return h @ p["w2"] + p["b2"]
