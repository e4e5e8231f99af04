"""Weight sync from training: push sessions (many ranks, many processes) and
box pulls straight from the workers that hold the params (issue 34).

    push = client.begin_push("gpt2")          # or client.join_push(model, push_id)
    push.put("h.0.attn.c_attn.weight", w)     # a box at `offset` (default: origin)
    version = push.commit()                   # all or nothing
    w = client.pull("gpt2", "wte.weight", offset=[0, 0], shape=[8, 768], out=buf)

Wire (proto/cluster_service.proto, "push sessions" and "box pulls"):
  put:  PlanPut (the coordinator checks the box and answers its pieces, each
        piece of each param cell with ONE holder) -> each piece converted to
        the param's dtype and streamed to its worker with
        WorkerService.StageParams (one stream per worker, the workers in
        parallel, ~1 MiB chunks); where a worker is unreachable the same
        chunks go through ClusterService.StageThrough.
  pull: PlanPull (pieces and their holders, at a version held under a lease)
        -> WorkerService.ReadParam per piece (one thread per worker) written
        into `out` -> EndPull. Fallback: PullParams with offset/shape/version
        (the coordinator streams the box).

Messages are built as raw protobuf bytes: a piece's header serialized once by
protobuf, then per chunk the header, the chunk's byte offset and the data
field joined in ONE copy from memoryview slices of the (converted) array; a
received chunk's data is parsed out of the message bytes and copied once into
`out`. dtypes: puts take float32, float16 (and float64) arrays, or bfloat16
as its uint16 bits; each piece is converted to the param's dtype (float32,
float16 or bfloat16; to bfloat16 rounding to nearest even, NaN stays NaN).

Native byte movers: when the C++ module _meshserve_native (client/python/
native, pybind11 + grpc++) imports, the direct StageParams and ReadParam
streams run in it instead, one thread per worker with the GIL released: a
put's piece is gathered from the (converted) array's memory straight into
each message, a pull's chunks scattered straight into `out` (a temporary of
the wire dtype first when `out` has another dtype). Planning, dtype
conversion and every fallback stay here. MESHSERVE_PYTHON_NATIVE=0 in the
environment (read at each call) forces the grpcio path.

Thread-safety: a Push may be shared by threads (each put is independent; the
notes list is guarded by a lock). Worker channels are cached per client under
a lock.
"""
import ctypes
import os
import threading
import time

import grpc
import numpy as np

from .proto import cluster_service_pb2
from .proto import tensor_pb2
from .proto import worker_service_pb2
from .tensors import from_bfloat16_bits, to_bfloat16_bits

try:
    from . import _meshserve_native
except ImportError:  # not built (no pybind11): the grpcio path
    _meshserve_native = None

CHUNK_BYTES = 1 << 20
FLOAT32, BFLOAT16, FLOAT16 = tensor_pb2.FLOAT32, tensor_pb2.BFLOAT16, tensor_pb2.FLOAT16
# Wire dtype -> NumPy dtype of its bytes (bfloat16: its uint16 bits).
WIRE_DTYPES = {FLOAT32: np.dtype("<f4"), BFLOAT16: np.dtype("<u2"), FLOAT16: np.dtype("<f2")}
_UNREACHABLE_RECHECK_S = 10.0
_STAGE_PARAMS = "/meshserve.WorkerService/StageParams"
_READ_PARAM = "/meshserve.WorkerService/ReadParam"
_STAGE_THROUGH = "/meshserve.ClusterService/StageThrough"


def native():
    """The C++ byte movers (_meshserve_native), or None when they are not
    built or MESHSERVE_PYTHON_NATIVE=0 forces the grpcio path."""
    if os.environ.get("MESHSERVE_PYTHON_NATIVE", "1") == "0":
        return None
    return _meshserve_native


def _status_code(code):
    """grpc.StatusCode of a numeric status code."""
    for status in grpc.StatusCode:
        if status.value[0] == code:
            return status
    return grpc.StatusCode.UNKNOWN


def _piece_view(array, offset, extent):
    """The view of `array` at offset with extent (no copy)."""
    index = tuple(slice(int(o), int(o) + int(e)) for o, e in zip(offset, extent))
    return array[index] if index else array


# ---- dtypes ----

def as_source_array(name, array):
    """`array` as a NumPy array of float32, float16, float64 or uint16
    (bfloat16 bits); a torch tensor is taken without copying where it can be
    (bfloat16 as its bits). TypeError naming the dtype otherwise."""
    if hasattr(array, "detach") and hasattr(array, "numpy"):  # a torch tensor
        t = array.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            import torch
            array = t.contiguous().view(torch.int16).numpy().view(np.uint16)
        else:
            array = t.numpy()
    array = np.asarray(array)
    if array.dtype.newbyteorder("=") not in (np.dtype(np.float32), np.dtype(np.float16),
                                             np.dtype(np.float64), np.dtype(np.uint16)):
        raise TypeError("put '%s': dtype %s is not float32, float16, float64 or uint16 "
                        "(bfloat16 bits)" % (name, array.dtype))
    return array


def convert(src, wire, what):
    """`src` (float32/float16/float64 or uint16 bf16 bits) as wire dtype `wire`'s
    NumPy dtype: a view when it already is, else a converted copy."""
    want = WIRE_DTYPES.get(wire)
    if want is None:
        raise ValueError("%s: param dtype %s is not float32, bfloat16 or float16" % (
            what, tensor_pb2.DTypeProto.Name(wire)))
    if src.dtype == want:
        return src
    if src.dtype == np.uint16:  # bfloat16 bits, wire float32 or float16
        return from_bfloat16_bits(src).astype(want)
    if wire == BFLOAT16:
        return to_bfloat16_bits(src.astype(np.float32))  # f16 -> f32 exact; f64 rounds to f32 first
    return src.astype(want)


def convert_into(dst, src_wire_array):
    """dst[...] = wire array (its dtype's bytes), converting to dst's dtype
    (float32, float16, float64, or uint16 = bfloat16 bits)."""
    src = src_wire_array
    if dst.dtype == src.dtype:
        dst[...] = src
    elif src.dtype == np.uint16:  # bf16 wire -> float dst
        dst[...] = from_bfloat16_bits(src)
    elif dst.dtype == np.uint16:  # float wire -> bf16 bits dst
        dst[...] = to_bfloat16_bits(src.astype(np.float32))
    else:
        dst[...] = src


# ---- raw protobuf ----

def _varint(n):
    """Protobuf's base-128 varint of n (negative: two's complement, 10 bytes)."""
    n &= (1 << 64) - 1
    groups = []
    while n > 0x7F:
        groups.append((n & 0x7F) | 0x80)
        n >>= 7
    groups.append(n)
    return bytes(groups)


def _read_varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, i
        shift += 7


def parse_data_chunk(raw, data_field, varint_fields):
    """(varints {field: value}, data memoryview) of a message with one bytes
    field `data_field` and varint fields; other length-delimited fields are
    returned in varints as memoryviews."""
    view = memoryview(raw)
    fields, data, i, n = {}, view[0:0], 0, len(raw)
    while i < n:
        key, i = _read_varint(raw, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            fields[field], i = _read_varint(raw, i)
        elif wire == 2:
            length, i = _read_varint(raw, i)
            if field == data_field:
                data = view[i:i + length]
            else:
                fields[field] = view[i:i + length]
            i += length
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError("malformed chunk: wire type %d at byte %d" % (wire, i))
    return fields, data


def _box_proto(begin, extent):
    return tensor_pb2.BoxProto(begin=[int(b) for b in begin],
                               end=[int(b) + int(e) for b, e in zip(begin, extent)])


# ---- piece bytes ----

def piece_chunks(src, src_offset, extent, wire, what, chunk_bytes=None):
    """(total bytes, iterator of (byte offset, memoryview)) of the piece of
    `src` at src_offset with `extent`, as row-major bytes of wire dtype: slices
    of the (converted) array, gathered a slab of rows at a time when the
    piece is not contiguous in `src`."""
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    index = tuple(slice(int(o), int(o) + int(e)) for o, e in zip(src_offset, extent))
    sub = src[index] if index else src
    elem = WIRE_DTYPES[wire].itemsize
    total = int(np.prod(extent, dtype=np.int64)) * elem if len(extent) else elem

    def contiguous_chunks(arr, base):
        view = memoryview(np.ascontiguousarray(arr)).cast("B")
        for start in range(0, len(view), chunk_bytes):
            yield base + start, view[start:start + chunk_bytes]

    def gen():
        if sub.flags.c_contiguous or sub.ndim == 0:
            yield from contiguous_chunks(convert(sub, wire, what), 0)
            return
        row_bytes = total // max(1, sub.shape[0])
        rows = max(1, chunk_bytes // max(1, row_bytes))
        for r in range(0, sub.shape[0], rows):
            slab = convert(np.ascontiguousarray(sub[r:r + rows]), wire, what)
            yield from contiguous_chunks(slab, r * row_bytes)
    return total, gen()


try:
    _PyBytes_FromStringAndSize = ctypes.pythonapi.PyBytes_FromStringAndSize
    _PyBytes_FromStringAndSize.restype = ctypes.py_object
    _PyBytes_FromStringAndSize.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
except (AttributeError, OSError):  # no CPython C API: messages are joined instead
    _PyBytes_FromStringAndSize = None


def _fresh_bytes(n):
    """(a new bytes object of n bytes, a writable uint8 array over it). As
    PyBytes_FromStringAndSize(NULL, n) in C: the object is filled here before
    anything else sees it (gRPC takes bytes only; this saves the copy a join
    would make, and NumPy fills it with the GIL released)."""
    message = _PyBytes_FromStringAndSize(None, n)
    address = ctypes.cast(ctypes.c_char_p(message), ctypes.c_void_p).value
    return message, np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(address))


def piece_messages(src, src_offset, extent, wire, what, prefix):
    """The messages of the piece of `src` at src_offset with `extent` (see
    piece_chunks): each `prefix(byte offset, data bytes)` + the chunk's data
    in wire dtype. Slabs of rows are gathered and converted straight into
    the message (one copy); where the C API is missing, or a row of the piece
    is over two chunks, chunks of piece_chunks are joined to their prefix."""
    chunk_bytes = CHUNK_BYTES
    index = tuple(slice(int(o), int(o) + int(e)) for o, e in zip(src_offset, extent))
    sub = src[index] if index else src
    dtype = WIRE_DTYPES[wire]
    row_bytes = (int(np.prod(extent[1:], dtype=np.int64)) * dtype.itemsize
                 if len(extent) else 0)
    if (_PyBytes_FromStringAndSize is None or sub.ndim == 0 or sub.size == 0
            or row_bytes > 2 * chunk_bytes):
        _, chunks = piece_chunks(src, src_offset, extent, wire, what)
        for off, data in chunks:
            yield b"".join((prefix(off, len(data)), data))
        return
    rows = max(1, chunk_bytes // row_bytes)
    for r in range(0, sub.shape[0], rows):
        slab = sub[r:r + rows]
        n = slab.shape[0] * row_bytes
        head = prefix(r * row_bytes, n)
        message, view = _fresh_bytes(len(head) + n)
        view[:len(head)] = np.frombuffer(head, np.uint8)
        view[len(head):].view(dtype).reshape(slab.shape)[...] = convert(slab, wire, what)
        yield message


class BoxWriter:
    """Writes the row-major wire bytes of a box, arriving as byte ranges in
    order, into `dst` (a view of the output, any strides), converting from
    wire dtype to dst's dtype. A contiguous dst of the wire dtype takes each
    chunk with one copy; otherwise whole rows (dim 0) are converted straight
    from each chunk and a partial row waits in a carry buffer (at most one
    row)."""

    def __init__(self, dst, wire_dtype):
        if dst.ndim == 0:
            dst = dst.reshape(1)
        self.dst = dst
        self.wire = wire_dtype
        self.pos = 0  # bytes received
        self.carry = bytearray()  # bytes [pos - len(carry), pos), from a row start
        self.total = int(np.prod(dst.shape, dtype=np.int64)) * wire_dtype.itemsize
        self.row_bytes = self.total // dst.shape[0] if dst.shape[0] else 0
        self.row_shape = tuple(dst.shape[1:])
        self.flat = None  # uint8 view of a contiguous dst of the wire dtype
        if dst.dtype == wire_dtype and dst.flags.c_contiguous:
            self.flat = dst.reshape(-1).view(np.uint8)

    def write(self, offset, data, what):
        if offset != self.pos or offset + len(data) > self.total:
            raise ValueError("%s: chunk at byte %d (%d bytes) out of order or past the box's %d "
                             "bytes (expected byte %d)" % (what, offset, len(data), self.total,
                                                           self.pos))
        if self.flat is not None:  # a NumPy copy: the GIL is released while it runs
            self.flat[offset:offset + len(data)] = np.frombuffer(data, np.uint8)
            self.pos += len(data)
            return
        data = memoryview(data)
        if self.carry:
            take = data[:self.row_bytes - len(self.carry)]
            self.carry += take
            data = data[len(take):]
            self.pos += len(take)
            if len(self.carry) == self.row_bytes:
                self._rows(self.carry, self.pos - self.row_bytes)
                self.carry = bytearray()
        if not len(data):
            return
        whole = (len(data) // self.row_bytes) * self.row_bytes
        if whole:
            self._rows(data[:whole], self.pos)
        self.carry += data[whole:]
        self.pos += len(data)

    def _rows(self, data, byte):
        n = len(data) // self.row_bytes
        row = byte // self.row_bytes
        src = np.frombuffer(data, dtype=self.wire).reshape((n,) + self.row_shape)
        convert_into(self.dst[row:row + n], src)

    def done(self):
        return self.pos == self.total and not self.carry


# ---- worker channels ----

class WorkerChannels:
    """gRPC channels to the workers, by address, cached; `reachable` asks a
    channel to connect (once; a failure is remembered for a few seconds)."""

    def __init__(self, options, connect_timeout_s=3.0):
        self._options = options
        self._connect_timeout_s = connect_timeout_s
        self._lock = threading.Lock()
        self._channels = {}
        self._ready = set()
        self._down = {}  # address -> time it was found unreachable

    def channel(self, address):
        with self._lock:
            ch = self._channels.get(address)
            if ch is None:
                ch = grpc.insecure_channel(address, options=self._options)
                self._channels[address] = ch
            return ch

    def reachable(self, address):
        with self._lock:
            if address in self._ready:
                return True
            since = self._down.get(address)
            if since is not None and time.monotonic() - since < _UNREACHABLE_RECHECK_S:
                return False
        try:
            grpc.channel_ready_future(self.channel(address)).result(
                timeout=self._connect_timeout_s)
        except grpc.FutureTimeoutError:
            self.mark_down(address)
            return False
        with self._lock:
            self._ready.add(address)
        return True

    def mark_down(self, address):
        with self._lock:
            self._ready.discard(address)
            self._down[address] = time.monotonic()

    def close(self):
        with self._lock:
            for ch in self._channels.values():
                ch.close()
            self._channels.clear()


def _rpc_error(client, method, e):
    from .client import MeshserveError
    return MeshserveError(e.code(), e.details(), method, client.target)


def _error(client, code, details, method):
    from .client import MeshserveError
    return MeshserveError(code, details, method, client.target)


def _stage_outcome(outcome):
    """(grpc.StatusCode, details) of a StageParams stream: a native
    (code, details) pair, or a grpcio future (waited for)."""
    if isinstance(outcome, tuple):
        return outcome
    try:
        outcome.result()
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details()


def _extent(box):
    return [int(e) - int(b) for b, e in zip(box.begin, box.end)]


# ---- push ----

def stage_messages(model, generation, version, pieces, src, name):
    """Raw StageParamChunk messages of `pieces` (PutPiece-like: param, dtype,
    src_offset, box) of the put `src`: per piece its header serialized once by
    protobuf; per ~1 MiB chunk the header, the offset and the data field."""
    for p in pieces:
        extent = _extent(p.box)
        total = int(np.prod(extent, dtype=np.int64)) * WIRE_DTYPES[p.dtype].itemsize
        header = worker_service_pb2.StageParamChunk(
            model=model, generation=generation, version=version, param=p.param, box=p.box,
            total_bytes=total).SerializeToString()
        yield from piece_messages(
            src, p.src_offset, extent, p.dtype, "put '%s' piece of '%s'" % (name, p.param),
            lambda off, n, h=header: b"".join((h, b"\x38", _varint(off), b"\x42", _varint(n))))


def start_stage(channel, model, generation, version, pieces, src, name, timeout_s):
    """WorkerService.StageParams of `pieces` on `channel`'s worker, started:
    a grpc future (its request iterator runs on gRPC's thread)."""
    stage = channel.stream_unary(
        _STAGE_PARAMS, request_serializer=None,
        response_deserializer=worker_service_pb2.StageParamsResponse.FromString)
    return stage.future(stage_messages(model, generation, version, pieces, src, name),
                        timeout=timeout_s)


class Push:
    """One push session of `model` (BeginPush or JoinPush). `push_id` (a
    string) lets other processes join; `version` is what commit() makes.
    `notes` lists (name, note) of the server's notes on puts (a buffer
    ignored, a tied name routed as its twin); `ignored` the names put that
    stage nothing (buffers the model does not read);
    `bytes_direct` / `bytes_through` count the bytes this object staged on
    the workers directly / through the coordinator. A Push is a context
    manager: leaving the block with an exception aborts it."""

    def __init__(self, client, session, direct=True):
        self._client = client
        self._direct = direct
        self.push_id = session.push_id
        self.model = session.model
        self.generation = session.generation
        self.version = session.version
        self.ttl_s = session.ttl_s
        self.notes = []
        self.ignored = []
        self.bytes_direct = 0
        self.bytes_through = 0
        self.result = None  # the PushParamsResponse of commit()
        self._lock = threading.Lock()

    def __repr__(self):
        return "Push(model=%r, push_id=%r, version=%d)" % (self.model, self.push_id, self.version)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and self.result is None:
            try:
                self.abort()
            except Exception:  # the original error is the one to see
                pass

    def put(self, name, array, offset=None, timeout_s=None):
        """Stages the box `array` of tensor `name` (a param, or a checkpoint
        tensor the model imported) at `offset` (default: the origin) on the
        workers holding it; returns once staged. A name the model ignores (a
        buffer) is skipped with a note. Raises MeshserveError (NOT_FOUND for an
        unknown name, INVALID_ARGUMENT for a bad offset or shape, a worker's
        refusal) or TypeError for a dtype other than float32, float16,
        float64 or uint16 (bfloat16 bits)."""
        c = self._client
        src = as_source_array(name, array)
        offset = [0] * src.ndim if offset is None else [int(o) for o in offset]
        request = cluster_service_pb2.PlanPutRequest(model=self.model, push_id=str(self.push_id),
                                                     name=name, offset=offset,
                                                     shape=[int(d) for d in src.shape])
        plan = c._call("PlanPut", c._cluster.PlanPut, request, timeout_s)
        with self._lock:
            if plan.note:
                self.notes.append((name, plan.note))
            if not plan.pieces:
                self.ignored.append(name)
        for p in plan.pieces:
            if p.dtype not in WIRE_DTYPES:
                raise ValueError("put '%s': param '%s' has dtype %s, not float32, bfloat16 or "
                                 "float16" % (name, p.param, tensor_pb2.DTypeProto.Name(p.dtype)))
        groups = {}
        for p in plan.pieces:
            groups.setdefault((p.worker_id, p.address), []).append(p)
        reachable = [key for key in groups
                     if self._direct and c._worker_channels().reachable(key[1])]
        mover = native()
        if mover is not None:  # {key: (code, details)}, every stream already ended
            outcomes = self._stage_native(mover, reachable, groups, src, name, timeout_s)
        else:  # {key: grpc future}
            outcomes = {key: self._start_direct(key[1], groups[key], src, name, timeout_s)
                        for key in reachable}
        errors = []
        for key, pieces in groups.items():
            try:
                outcome = outcomes.get(key)
                if outcome is not None:
                    code, details = _stage_outcome(outcome)
                    if code == grpc.StatusCode.OK:
                        self._count("bytes_direct", pieces)
                        continue
                    if code != grpc.StatusCode.UNAVAILABLE:
                        raise _error(c, code, details, "StageParams on worker %d (%s)" % key)
                    c._worker_channels().mark_down(key[1])
                self._stage_through(key[0], pieces, src, name, timeout_s)
                self._count("bytes_through", pieces)
            except Exception as e:  # every call ends before put returns
                errors.append(e)
        if errors:
            raise errors[0]

    def put_state_dict(self, state_dict, timeout_s=None):
        """put() of every (name, tensor) of a state dict, as it is; returns
        the server's notes on them ((name, note): buffers ignored, tied names)."""
        before = len(self.notes)
        for name, value in state_dict.items():
            self.put(name, value, timeout_s=timeout_s)
        return self.notes[before:]

    def commit(self, timeout_s=None):
        """CommitPush: the new version (all or nothing; a refusal raises
        MeshserveError naming an uncovered param and ends the push)."""
        c = self._client
        self.result = c._call("CommitPush", c._cluster.CommitPush,
                              cluster_service_pb2.CommitPushRequest(
                                  model=self.model, push_id=str(self.push_id)), timeout_s)
        return self.result.version

    def abort(self, timeout_s=None):
        """AbortPush: drops every rank's staged bytes of this push."""
        c = self._client
        c._call("AbortPush", c._cluster.AbortPush, cluster_service_pb2.AbortPushRequest(
            model=self.model, push_id=str(self.push_id)), timeout_s)

    def _count(self, field, pieces):
        n = sum(int(np.prod(_extent(p.box), dtype=np.int64)) * WIRE_DTYPES[p.dtype].itemsize
                for p in pieces)
        with self._lock:
            setattr(self, field, getattr(self, field) + n)

    def _stage_native(self, mover, keys, groups, src, name, timeout_s):
        """StageParams of the pieces of every worker in `keys` through the
        native module (workers in parallel): {key: (code, details)}."""
        native_groups = []
        for key in keys:
            pieces = []
            for p in groups[key]:
                extent = _extent(p.box)
                data = convert(_piece_view(src, p.src_offset, extent), p.dtype,
                               "put '%s' piece of '%s'" % (name, p.param))
                pieces.append((p.param, list(p.box.begin), list(p.box.end), data))
            native_groups.append((key[1], self.model, self.generation, self.version, pieces))
        results = mover.stage(native_groups, float(timeout_s or self._client.timeout_s or 0))
        return {key: (_status_code(code), details)
                for key, (code, details, _) in zip(keys, results)}

    def _start_direct(self, address, pieces, src, name, timeout_s):
        c = self._client
        return start_stage(c._worker_channels().channel(address), self.model, self.generation,
                           self.version, pieces, src, name, timeout_s or c.timeout_s)

    def _stage_through(self, worker_id, pieces, src, name, timeout_s):
        c = self._client
        relay = c._channel.stream_unary(
            _STAGE_THROUGH, request_serializer=None,
            response_deserializer=cluster_service_pb2.StageThroughReply.FromString)
        prefix = cluster_service_pb2.StageThroughChunk(
            push_id=str(self.push_id), worker_id=worker_id).SerializeToString() + b"\x1a"

        def messages():
            for p in pieces:
                extent = _extent(p.box)
                total = int(np.prod(extent, dtype=np.int64)) * WIRE_DTYPES[p.dtype].itemsize
                header = cluster_service_pb2.StageParamChunkRelay(
                    param=p.param, box=p.box, total_bytes=total).SerializeToString()

                def head(off, n, h=header):
                    tail = b"\x20" + _varint(off) + b"\x2a" + _varint(n)
                    return b"".join((prefix, _varint(len(h) + len(tail) + n), h, tail))
                yield from piece_messages(src, p.src_offset, extent, p.dtype,
                                          "put '%s' piece of '%s'" % (name, p.param), head)
        try:
            relay(messages(), timeout=timeout_s or c.timeout_s)
        except grpc.RpcError as e:
            raise _rpc_error(c, "StageThrough to worker %d" % worker_id, e) from None


# ---- pull ----

def _output(out, shape, wire, name):
    shape = tuple(int(d) for d in shape)
    if out is None:
        return np.empty(shape, dtype=wire)
    if not isinstance(out, np.ndarray):
        raise TypeError("pull '%s': out must be a NumPy array, got %s" % (name, type(out)))
    if tuple(out.shape) != shape:
        raise ValueError("pull '%s': out has shape %s, the box is %s" % (
            name, list(out.shape), list(shape)))
    if out.dtype.newbyteorder("=") not in (np.dtype(np.float32), np.dtype(np.float16),
                                           np.dtype(np.float64), np.dtype(np.uint16)):
        raise TypeError("pull '%s': out dtype %s is not float32, float16, float64 or uint16 "
                        "(bfloat16 bits)" % (name, out.dtype))
    if not out.flags.writeable:
        raise ValueError("pull '%s': out is read-only" % name)
    return out


def _packed_varints(view):
    raw, values, i = bytes(view), [], 0
    while i < len(raw):
        v, i = _read_varint(raw, i)
        values.append(v - (1 << 64) if v >= 1 << 63 else v)
    return values


def _read_stream(call, writer, what, data_field=3, offset_field=2):
    for raw in call:
        fields, data = parse_data_chunk(raw, data_field, ())
        writer.write(fields.get(offset_field, 0), data, what)
    if not writer.done():
        raise ValueError("%s: the stream ended at byte %d of %d" % (what, writer.pos,
                                                                    writer.total))


def pull_through(client, model, name, offset, shape, version, out, timeout_s):
    """PullParams of the box (the coordinator streams it) into out."""
    request = cluster_service_pb2.PullParamsRequest(
        model=model, params=[name], offset=[int(o) for o in offset or []],
        shape=[int(d) for d in shape or []], version=int(version or 0))
    call = client._channel.unary_stream(
        "/meshserve.ClusterService/PullParams",
        request_serializer=cluster_service_pb2.PullParamsRequest.SerializeToString,
        response_deserializer=None)(request, timeout=timeout_s or client.timeout_s)
    writer = None
    what = "PullParams of '%s'" % name
    try:
        for raw in call:
            fields, data = parse_data_chunk(raw, 6, ())
            if writer is None:
                wire = WIRE_DTYPES.get(fields.get(3, 0))
                if wire is None:
                    raise ValueError("%s: dtype %d is not float32, bfloat16 or float16" % (
                        what, fields.get(3, 0)))
                box_shape = _packed_varints(fields.get(2, b""))
                out = _output(out, box_shape, wire, name)
                writer = BoxWriter(out, wire)
            writer.write(fields.get(5, 0), data, what)
    except grpc.RpcError as e:
        raise _rpc_error(client, "PullParams", e) from None
    if writer is None or not writer.done():
        raise ValueError("%s: the stream ended early" % what)
    return out


def pull(client, model, name, offset=None, shape=None, version=None, out=None, timeout_s=None):
    """A box of tensor `name` (see MeshserveClient.pull) read from its holders
    in parallel into `out` (or a new array of the param's dtype)."""
    from .client import MeshserveError
    request = cluster_service_pb2.PlanPullRequest(
        model=model, name=name, offset=[int(o) for o in offset or []],
        shape=[int(d) for d in shape or []], version=int(version or 0))
    try:
        plan = client._call("PlanPull", client._cluster.PlanPull, request, timeout_s)
    except MeshserveError as e:
        if e.code != grpc.StatusCode.UNIMPLEMENTED:
            raise
        return pull_through(client, model, name, offset, shape, version, out, timeout_s)
    try:
        wire = WIRE_DTYPES.get(plan.dtype)
        if wire is None:
            raise ValueError("pull '%s': dtype %s is not float32, bfloat16 or float16" % (
                name, tensor_pb2.DTypeProto.Name(plan.dtype)))
        out = _output(out, plan.shape, wire, name)
        groups = {}
        for p in plan.pieces:
            groups.setdefault((p.worker_id, p.address), []).append(p)
        mover = native()
        if mover is not None:
            _read_native(mover, client, model, plan, groups, out, wire, timeout_s)
            return out
        errors = []
        threads = [threading.Thread(target=_read_group, args=(
            client, model, plan, key, pieces, out, wire, errors, timeout_s))
            for key, pieces in groups.items()]
        for t in threads[1:]:
            t.start()
        if threads:
            threads[0].run()  # this thread reads one worker's pieces itself
        for t in threads[1:]:
            t.join()
        if errors:
            raise errors[0]
        return out
    finally:
        try:
            client._call("EndPull", client._cluster.EndPull, cluster_service_pb2.EndPullRequest(
                model=model, lease_id=plan.lease_id), timeout_s)
        except MeshserveError:
            pass  # the lease expires by itself


def _read_native(mover, client, model, plan, groups, out, wire, timeout_s):
    """ReadParam of every piece through the native module (workers in
    parallel) into `out`: straight into its view when it has the wire dtype,
    else into a temporary converted after. A worker the client cannot reach,
    or found unavailable, has its (remaining) pieces read through PullParams."""
    for (worker, address), pieces in list(groups.items()):
        if not client._worker_channels().reachable(address):  # as a put: PullParams
            del groups[(worker, address)]
            for p in pieces:
                extent = _extent(p.box)
                pull_through(client, model, p.param, list(p.box.begin), extent, plan.version,
                             _piece_view(out, p.dst_offset, extent), timeout_s)
    native_groups, views = [], []
    for (worker, address), pieces in groups.items():
        items, group_views = [], []
        for p in pieces:
            extent = _extent(p.box)
            dst = _piece_view(out, p.dst_offset, extent)
            buf = dst if dst.dtype == wire else np.empty(extent, wire)
            items.append((p.param, list(p.box.begin), list(p.box.end), buf))
            group_views.append((dst, buf))
        native_groups.append((address, model, plan.generation, plan.version, int(plan.dtype),
                              items))
        views.append(group_views)
    results = mover.read(native_groups, float(timeout_s or client.timeout_s or 0))
    for ((worker, address), pieces), group_views, (code, details, failed) in zip(
            groups.items(), views, results):
        done = len(pieces) if code == 0 else failed
        for dst, buf in group_views[:done]:
            if buf is not dst:
                convert_into(dst, buf)
        if code == 0:
            continue
        what = "ReadParam of '%s' on worker %d (%s)" % (pieces[failed].param, worker, address)
        if code < 0:
            raise ValueError("%s: %s" % (what, details))
        if _status_code(code) != grpc.StatusCode.UNAVAILABLE:
            raise _error(client, _status_code(code), details, what)
        client._worker_channels().mark_down(address)
        for p, (dst, _) in zip(pieces[failed:], group_views[failed:]):
            pull_through(client, model, p.param, list(p.box.begin), _extent(p.box),
                         plan.version, dst, timeout_s)


def _read_group(client, model, plan, key, pieces, out, wire, errors, timeout_s):
    """Reads one worker's pieces in turn (ReadParam), each falling back to
    PullParams of its box when the worker is unreachable; errors appended."""
    worker, address = key
    read = client._worker_channels().channel(address).unary_stream(
        _READ_PARAM, request_serializer=worker_service_pb2.ReadParamRequest.SerializeToString,
        response_deserializer=None)
    try:
        for p in pieces:
            extent = _extent(p.box)
            dst = out[tuple(slice(int(o), int(o) + e) for o, e in zip(p.dst_offset, extent))]
            what = "ReadParam of '%s' on worker %d (%s)" % (p.param, worker, address)
            request = worker_service_pb2.ReadParamRequest(
                model=model, generation=plan.generation, version=plan.version, param=p.param,
                box=p.box)
            try:
                _read_stream(read(request, timeout=timeout_s or client.timeout_s),
                             BoxWriter(dst, wire), what)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise _rpc_error(client, what, e) from None
                client._worker_channels().mark_down(address)
                pull_through(client, model, p.param, list(p.box.begin), extent, plan.version,
                             dst, timeout_s)
    except Exception as e:
        errors.append(e)
