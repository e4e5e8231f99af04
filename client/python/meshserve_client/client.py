"""MeshserveClient: the Open Inference Protocol (KServe v2), meshserve's
ClusterService and GenerateService over gRPC, with NumPy arrays in and out.

    from meshserve_client import MeshserveClient
    c = MeshserveClient("localhost:8500")
    y = c.infer("linear", {"x": x})["y"]
    y = c.infer("linear", {"x": x}, out_sharding={"y": "P(None, 'data')"})["y"]
    for chunk in c.generate("lm", prompt_ids=[1, 2, 3], max_tokens=8):
        print(chunk.token_ids, chunk.text, chunk.finish_reason)

Every RPC error is raised as MeshserveError, which carries the gRPC status
code and the server's message. Thread-safety: one client may be shared by
threads (gRPC channels and stubs are thread-safe; the metadata cache is
guarded by a lock).
"""
import itertools
import threading

import grpc

from . import tensors
from .proto import cluster_service_pb2
from .proto import cluster_service_pb2_grpc
from .proto import generate_pb2
from .proto import generate_pb2_grpc
from .proto import inference_pb2
from .proto import inference_pb2_grpc

# Tensors travel whole in single messages: the server's limit (1 GiB).
MAX_MESSAGE_BYTES = 1 << 30


class MeshserveError(Exception):
    """A failed RPC: `code` (grpc.StatusCode), `message` (the server's), `method`."""

    def __init__(self, code, message, method, target):
        self.code = code
        self.message = message
        self.method = method
        self.target = target
        super().__init__("%s: %s (%s on %s)" % (code.name, message, method, target))


class InferResult:
    """One answer: `outputs` {name: array}, `types` {name: JAX type string of
    the output's sharding, e.g. 'float32[16@data,32]'}, the model and request id."""

    def __init__(self, model, request_id, outputs, types):
        self.model = model
        self.id = request_id
        self.outputs = outputs
        self.types = types


class GenerateUsage:
    """Token counts of a completion: prompt, completion and their total."""

    def __init__(self, prompt_tokens, completion_tokens, total_tokens):
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.total_tokens = total_tokens

    def __repr__(self):
        return "GenerateUsage(prompt_tokens=%d, completion_tokens=%d, total_tokens=%d)" % (
            self.prompt_tokens, self.completion_tokens, self.total_tokens)


class GenerateChunk:
    """One streamed piece of a completion: `token_ids` (list of int), `text`
    ("" while the model has no tokenizer), `logprobs` (parallel to token_ids
    when asked for), `top_logprobs` (parallel to token_ids when logprobs = N
    >= 1: each position's N most likely tokens as (id, logprob) pairs, most
    likely first), `version` (the weight version the sequence runs on).
    The last chunk also has `finish_reason` ("stop" or "length") and `usage`
    (GenerateUsage); on the others they are None."""

    def __init__(self, message):
        self.token_ids = list(message.token_ids)
        self.text = message.text
        self.logprobs = list(message.logprobs)
        self.top_logprobs = [list(zip(t.token_ids, t.logprobs)) for t in message.top_logprobs]
        self.version = message.version
        self.finish_reason = message.finish_reason or None
        self.usage = None
        if self.finish_reason is not None:
            u = message.usage
            self.usage = GenerateUsage(u.prompt_tokens, u.completion_tokens, u.total_tokens)

    def __repr__(self):
        return "GenerateChunk(token_ids=%r, text=%r, finish_reason=%r, usage=%r, version=%d)" % (
            self.token_ids, self.text, self.finish_reason, self.usage, self.version)


class GenerateStream:
    """The chunks of one Generate call, as they arrive (an iterator). A failed
    call raises MeshserveError from the iteration; cancel() ends the call (and
    the sequence on the server)."""

    def __init__(self, call, target):
        self._call = call
        self._target = target

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return GenerateChunk(next(self._call))
        except grpc.RpcError as e:
            raise MeshserveError(e.code(), e.details(), "Generate", self._target) from None

    def cancel(self):
        self._call.cancel()


class MeshserveClient:
    """A channel to a meshserve coordinator ("host:port")."""

    def __init__(self, target, timeout_s=60.0):
        self.target = target
        self.timeout_s = timeout_s
        options = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
        self._channel = grpc.insecure_channel(target, options=options)
        self._inference = inference_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        self._cluster = cluster_service_pb2_grpc.ClusterServiceStub(self._channel)
        self._generate = generate_pb2_grpc.GenerateServiceStub(self._channel)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._metadata = {}  # model -> ModelMetadataResponse
        self._workers = None  # params.WorkerChannels, made by the first push or pull

    def close(self):
        with self._lock:
            workers, self._workers = self._workers, None
        if workers is not None:
            workers.close()
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, stub_method, request, timeout_s):
        try:
            return stub_method(request, timeout=timeout_s or self.timeout_s)
        except grpc.RpcError as e:
            raise MeshserveError(e.code(), e.details(), method, self.target) from None

    # ---- health ----

    def live(self, timeout_s=None):
        """ServerLive: the coordinator answers."""
        return self._call("ServerLive", self._inference.ServerLive,
                          inference_pb2.ServerLiveRequest(), timeout_s).live

    def ready(self, model=None, timeout_s=None):
        """ServerReady (every model placed), or ModelReady for `model`."""
        if model is None:
            return self._call("ServerReady", self._inference.ServerReady,
                              inference_pb2.ServerReadyRequest(), timeout_s).ready
        return self._call("ModelReady", self._inference.ModelReady,
                          inference_pb2.ModelReadyRequest(name=model), timeout_s).ready

    # ---- models ----

    def metadata(self, model, timeout_s=None):
        """ModelMetadata (inputs and outputs with datatypes and shapes); cached."""
        with self._lock:
            cached = self._metadata.get(model)
        if cached is not None:
            return cached
        response = self._call("ModelMetadata", self._inference.ModelMetadata,
                              inference_pb2.ModelMetadataRequest(name=model), timeout_s)
        with self._lock:
            self._metadata[model] = response
        return response

    def infer(self, model, inputs, out_sharding=None, timeout_s=None):
        """Runs `model` on `inputs` {name: array}; returns {output: array}.

        out_sharding {output: spec in JAX syntax, e.g. "P('data', None)"}
        chooses how the named outputs are laid out across the devices (see
        infer_result for the resulting type strings)."""
        return self.infer_result(model, inputs, out_sharding, timeout_s).outputs

    def infer_result(self, model, inputs, out_sharding=None, timeout_s=None):
        """infer, returning an InferResult (outputs and their type strings)."""
        request = inference_pb2.ModelInferRequest(model_name=model,
                                                  id="py-%d" % next(self._ids))
        want, output_names = self._declared(model, timeout_s)
        for name, array in inputs.items():
            datatype, shape, raw = tensors.encode_input(name, array, want.get(name))
            request.inputs.add(name=name, datatype=datatype, shape=shape)
            request.raw_input_contents.append(raw)
        if out_sharding:
            # Asking for some outputs means asking for all of them: name every
            # declared one, and the unknown ones too (the server reports them).
            names = output_names + [n for n in out_sharding if n not in output_names]
            for name in names:
                output = request.outputs.add(name=name)
                if name in out_sharding:
                    output.parameters["out_sharding"].string_param = out_sharding[name]
        response = self._call("ModelInfer", self._inference.ModelInfer, request, timeout_s)
        return _decode_response(response)

    def _declared(self, model, timeout_s):
        """({input: datatype}, [output names]) from the metadata; empty when
        it cannot be read (ModelInfer then reports why)."""
        try:
            md = self.metadata(model, timeout_s)
        except MeshserveError:
            return {}, []
        return {t.name: t.datatype for t in md.inputs}, [t.name for t in md.outputs]

    # ---- the cluster ----

    def describe(self, model, input_shapes=None, timeout_s=None):
        """ClusterService.Describe: the model typed at `input_shapes`
        {input: dims}; a DescribeResponse (mesh, values with their sharded
        type strings, collectives, and `text`, the human rendering)."""
        request = cluster_service_pb2.DescribeRequest(model=model)
        for name, dims in (input_shapes or {}).items():
            request.input_shapes[name].dims.extend(int(d) for d in dims)
        return self._call("Describe", self._cluster.Describe, request, timeout_s)

    def status(self, timeout_s=None):
        """ClusterService.Status: a ClusterStatusResponse (workers with their
        placements, models with their state and mesh)."""
        return self._call("Status", self._cluster.Status,
                          cluster_service_pb2.ClusterStatusRequest(), timeout_s)


    # ---- parameters: push sessions and box pulls (meshserve_client.params) ----

    def begin_push(self, model, direct=True, timeout_s=None):
        """BeginPush: a params.Push of a new version of `model`; its
        `push_id` lets other processes join_push it. direct=False stages
        every byte through the coordinator (StageThrough)."""
        from . import params
        session = self._call("BeginPush", self._cluster.BeginPush,
                             cluster_service_pb2.BeginPushRequest(model=model), timeout_s)
        return params.Push(self, session, direct)

    def join_push(self, model, push_id, direct=True, timeout_s=None):
        """JoinPush: the params.Push of the session `push_id` (as begin_push
        gave it, or str() of it) begun by any process."""
        from . import params
        session = self._call("JoinPush", self._cluster.JoinPush, cluster_service_pb2.JoinPushRequest(
            model=model, push_id=str(push_id)), timeout_s)
        return params.Push(self, session, direct)

    def pull(self, model, name, offset=None, shape=None, version=None, out=None, timeout_s=None):
        """A box of param (or imported checkpoint tensor) `name`: at `offset`
        (default the origin) of `shape` (default the rest of the tensor), at
        `version` (default the current one; a version no longer held raises
        MeshserveError NOT_FOUND), read from the workers holding it in
        parallel. Into `out` when given (float32, float16, float64 or uint16 =
        bfloat16 bits, of the box's shape; converted), else a new array of the
        param's dtype (bfloat16 as uint16 bits). Returns the array."""
        from . import params
        return params.pull(self, model, name, offset, shape, version, out, timeout_s)

    def _worker_channels(self):
        from . import params
        with self._lock:
            if self._workers is None:
                self._workers = params.WorkerChannels(
                    [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                     ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)])
            return self._workers

    # ---- generation ----

    def generate(self, model, prompt=None, prompt_ids=None, max_tokens=16, temperature=1.0,
                 top_k=0, top_p=1.0, seed=None, stop_token_ids=None, ignore_eos=False,
                 logprobs=None, timeout_s=None, stop=None):
        """GenerateService.Generate: one completion of `prompt` (text, needs
        the model's tokenizer) or `prompt_ids` (token ids), streamed. Returns
        a GenerateStream: an iterator of GenerateChunk, the last one with
        finish_reason, usage and version. temperature 0 is greedy; top_k 0 or
        -1 and top_p 1 are off; seed None lets the server draw one; logprobs
        N (0..20) returns the sampled tokens' log-probabilities. stop: a
        string or a list of strings (needs the model's tokenizer): the
        completion ends with finish_reason "stop" at the token whose text
        completes one, and the chunks' text ends before it. The server
        refuses bad values (MeshserveError INVALID_ARGUMENT naming the field;
        NOT_FOUND for an unknown model; RESOURCE_EXHAUSTED when full).
        timeout_s None: no deadline."""
        request = generate_pb2.GenerateRequest(
            model=model, max_tokens=int(max_tokens), temperature=float(temperature),
            top_k=int(top_k), top_p=float(top_p), ignore_eos=bool(ignore_eos))
        if prompt is not None:
            request.prompt = prompt
        if prompt_ids is not None:
            request.prompt_ids.extend(int(i) for i in prompt_ids)
        if seed is not None:
            request.seed = int(seed)
        if stop_token_ids:
            request.stop_token_ids.extend(int(i) for i in stop_token_ids)
        if logprobs is not None:
            request.logprobs = int(logprobs)
        if stop is not None:
            request.stop.extend([stop] if isinstance(stop, str) else [str(s) for s in stop])
        return GenerateStream(self._generate.Generate(request, timeout=timeout_s), self.target)


def _decode_response(response):
    if response.raw_output_contents and len(response.raw_output_contents) != len(
            response.outputs):
        raise ValueError("malformed reply: %d outputs but %d raw_output_contents" % (
            len(response.outputs), len(response.raw_output_contents)))
    outputs, types = {}, {}
    for i, out in enumerate(response.outputs):
        if not response.raw_output_contents:
            raise ValueError("output '%s' sent without raw_output_contents" % out.name)
        outputs[out.name] = tensors.decode_output(out.name, out.datatype, list(out.shape),
                                                  response.raw_output_contents[i])
        if "type" in out.parameters:
            types[out.name] = out.parameters["type"].string_param
    return InferResult(response.model_name, response.id, outputs, types)
