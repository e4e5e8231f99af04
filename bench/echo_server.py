#!/usr/bin/python3
"""A bare gRPC echo of meshserve's ModelInfer, the baseline of the tiny-model
benchmark (run_performance.py): a grpcio generic handler that answers
/inference.GRPCInferenceService/ModelInfer with the request's input bytes as
its one output (same name "y", dtype and shape), so `meshserve bench` can
drive it like a cluster. No model, no workers: one parse and one reply.

Usage: echo_server.py --port P --python_dir build/python [--threads 16]
Prints "echo ready on PORT" once serving; stops on SIGTERM.
"""
import argparse
import signal
import sys
import threading
from concurrent import futures


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--python_dir", required=True, help="build/python (the generated stubs)")
    ap.add_argument("--threads", type=int, default=16)
    args = ap.parse_args()
    sys.path.insert(0, args.python_dir)
    import grpc
    from meshserve_client.proto import inference_pb2

    def model_infer(request, context):
        response = inference_pb2.ModelInferResponse(model_name=request.model_name,
                                                    model_version="1", id=request.id)
        if request.inputs:
            first = request.inputs[0]
            response.outputs.add(name="y", datatype=first.datatype, shape=first.shape)
            response.raw_output_contents.append(request.raw_input_contents[0])
        return response

    handler = grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(
            model_infer, request_deserializer=inference_pb2.ModelInferRequest.FromString,
            response_serializer=inference_pb2.ModelInferResponse.SerializeToString),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.threads))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port("127.0.0.1:%d" % args.port)
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    print("echo ready on %d" % args.port, flush=True)
    stop.wait()
    server.stop(1)


if __name__ == "__main__":
    main()
