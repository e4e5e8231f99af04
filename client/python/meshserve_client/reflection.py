"""gRPC server reflection (grpc.reflection.v1alpha), the way grpcurl asks.

Debian's python3-grpcio has no grpc_reflection module, so the few messages
this needs are declared here, in a private descriptor pool (nothing is
registered in the default pool), with the field numbers of
grpc/reflection/v1alpha/reflection.proto:

    ServerReflectionRequest  { string host = 1;
                               oneof { string file_containing_symbol = 4;
                                       string list_services = 7; } }
    ServerReflectionResponse { string valid_host = 1;
                               oneof { FileDescriptorResponse file_descriptor_response = 4;
                                       ListServiceResponse list_services_response = 6;
                                       ErrorResponse error_response = 7; } }
    FileDescriptorResponse   { repeated bytes file_descriptor_proto = 1; }
    ListServiceResponse      { repeated ServiceResponse service = 1; }
    ServiceResponse          { string name = 1; }
    ErrorResponse            { int32 error_code = 1; string error_message = 2; }

    list_services("localhost:8500")  # ['grpc.health.v1.Health', 'inference....', ...]
"""
import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

METHOD = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
_PACKAGE = "grpc.reflection.v1alpha"

_F = descriptor_pb2.FieldDescriptorProto
# message -> [(field, number, type, label, message type or None, in the oneof)]
_MESSAGES = {
    "ServerReflectionRequest": [
        ("host", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, False),
        ("file_containing_symbol", 4, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, True),
        ("list_services", 7, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, True),
    ],
    "ServerReflectionResponse": [
        ("valid_host", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, False),
        ("file_descriptor_response", 4, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL,
         "FileDescriptorResponse", True),
        ("list_services_response", 6, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL,
         "ListServiceResponse", True),
        ("error_response", 7, _F.TYPE_MESSAGE, _F.LABEL_OPTIONAL, "ErrorResponse", True),
    ],
    "FileDescriptorResponse": [
        ("file_descriptor_proto", 1, _F.TYPE_BYTES, _F.LABEL_REPEATED, None, False)],
    "ListServiceResponse": [
        ("service", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "ServiceResponse", False)],
    "ServiceResponse": [("name", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, False)],
    "ErrorResponse": [
        ("error_code", 1, _F.TYPE_INT32, _F.LABEL_OPTIONAL, None, False),
        ("error_message", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, False),
    ],
}


def _build_classes():
    file_proto = descriptor_pb2.FileDescriptorProto(
        name="meshserve_client/reflection_v1alpha.proto", package=_PACKAGE, syntax="proto3")
    for message, fields in _MESSAGES.items():
        m = file_proto.message_type.add(name=message)
        if any(f[5] for f in fields):
            m.oneof_decl.add(name="message")
        for name, number, type_, label, type_name, in_oneof in fields:
            f = m.field.add(name=name, number=number, type=type_, label=label)
            if type_name:
                f.type_name = ".%s.%s" % (_PACKAGE, type_name)
            if in_oneof:
                f.oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    factory = message_factory.MessageFactory(pool)
    # GetMessageClass from protobuf 4.22 on; GetPrototype before (Debian 12: 4.21).
    get = getattr(message_factory, "GetMessageClass", None) or factory.GetPrototype
    return {name: get(pool.FindMessageTypeByName("%s.%s" % (_PACKAGE, name)))
            for name in _MESSAGES}


_CLASSES = _build_classes()


class ReflectionError(Exception):
    """The server answered with an ErrorResponse, or the RPC failed."""


def _ask(target, timeout_s, **request_fields):
    request = _CLASSES["ServerReflectionRequest"](**request_fields)
    with grpc.insecure_channel(target) as channel:
        call = channel.stream_stream(
            METHOD, request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=_CLASSES["ServerReflectionResponse"].FromString)
        try:
            responses = list(call(iter([request]), timeout=timeout_s))
        except grpc.RpcError as e:
            raise ReflectionError("%s on %s: %s: %s" % (
                METHOD, target, e.code().name, e.details())) from None
    if len(responses) != 1:
        raise ReflectionError("%s on %s: %d responses to one request" % (
            METHOD, target, len(responses)))
    response = responses[0]
    if response.WhichOneof("message") == "error_response":
        raise ReflectionError("%s on %s: error %d: %s" % (
            METHOD, target, response.error_response.error_code,
            response.error_response.error_message))
    return response


def list_services(target, timeout_s=10.0):
    """The full names of the services `target` serves, sorted."""
    response = _ask(target, timeout_s, list_services="*")
    return sorted(s.name for s in response.list_services_response.service)


def file_containing_symbol(target, symbol, timeout_s=10.0):
    """The FileDescriptorProtos (descriptor_pb2) that define `symbol` (e.g.
    'inference.GRPCInferenceService') and the files it imports."""
    response = _ask(target, timeout_s, file_containing_symbol=symbol)
    return [descriptor_pb2.FileDescriptorProto.FromString(b)
            for b in response.file_descriptor_response.file_descriptor_proto]
