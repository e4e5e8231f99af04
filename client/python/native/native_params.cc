// _meshserve_native: the byte-moving calls of the Python client's push and
// pull (client/python/meshserve_client/params.py) in C++, so a 256 MiB put or
// pull is not bound by grpcio's per-message Python work. Python still plans
// (PlanPut / PlanPull), converts dtypes and handles fallbacks; this module
// only streams bytes to and from the workers, one thread per worker, with the
// GIL released.
//
//   stage(groups, timeout_s) -> [(code, message, bytes)]   WorkerService.StageParams
//     groups: [(address, model, generation, version, [(param, begin, end, src)])]
//   read(groups, timeout_s) -> [(code, message, piece)]     WorkerService.ReadParam
//     groups: [(address, model, generation, version, dtype, [(param, begin, end, dst)])]
//
// src / dst are buffers (NumPy views, any strides) of the piece's box in the
// wire dtype. Their bytes are the box's row-major bytes: byte p of the box is
// run r = p / run_bytes, byte p % run_bytes of that run, where a run is the
// longest contiguous tail of dims (run_bytes = itemsize * prod(shape[k:]),
// strides[i] == shape[i+1] * strides[i+1] for i >= k) and run r's address is
// base + sum over i < k of index_i(r) * strides[i] (r unravelled over
// shape[:k], row-major; native_wire.h). A put sends each ~1 MiB chunk's runs
// as slices over the buffer's memory when runs are >= 64 KiB (no copy; the
// call returns once gRPC dropped them), else gathers the chunk into the
// message's slice (one copy); the message is the header bytes, the offset and
// the data field (proto/worker_service.proto StageParamChunk, encoded here);
// a pull scatters each received chunk's data field (ParamChunk) from gRPC's
// slices straight into dst (one copy). code is a grpc status code (0 = OK),
// or -1 for a stream this client refuses (chunk out of order, wrong dtype,
// short stream; Python raises ValueError); piece is the index of the piece
// that failed (read), so Python can fall back from there.
//
// Messages are encoded by hand (a few varint fields), not with the generated
// C++ classes: the Python protobuf runtime in the same process must not meet
// a second copy of meshserve's descriptors.
//
// Thread-safety: stage and read may be called from several Python threads at
// once; the channel cache is guarded by a mutex; each group runs on its own
// thread and touches only its own pieces' buffers.
#include <grpc/slice.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/sync_stream.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "native_wire.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

using meshserve::pynative::PutBytes;
using meshserve::pynative::PutInt;
using meshserve::pynative::PutVarint;
using meshserve::pynative::SliceReader;
using meshserve::pynative::SliceViews;
using meshserve::pynative::StridedBytes;

constexpr int64_t kChunkBytes = 1 << 20;
constexpr int64_t kViewRunBytes = 64 << 10;  // runs this long are sent without a copy
constexpr int kRefused = -1;  // a stream this client refuses (Python: ValueError)
const char kStageMethod[] = "/meshserve.WorkerService/StageParams";
const char kReadMethod[] = "/meshserve.WorkerService/ReadParam";

struct Piece {
  std::string param;
  std::vector<int64_t> begin, end;
  StridedBytes bytes;
};

struct Group {
  std::string address, model;
  int64_t generation = 0, version = 0, dtype = 0;
  std::vector<Piece> pieces;
};

struct Outcome {
  int code = 0;
  std::string message;
  int64_t count = 0;  // stage: bytes staged; read: the failed piece's index
};

// ---- protobuf wire encoding ----

std::string BoxProto(const Piece& p) {
  std::string begin, end, box;
  for (int64_t v : p.begin) PutVarint(&begin, static_cast<uint64_t>(v));
  for (int64_t v : p.end) PutVarint(&end, static_cast<uint64_t>(v));
  PutBytes(&box, 1, begin);
  PutBytes(&box, 2, end);
  return box;
}

// Fields 1-5 of StageParamChunk and ReadParamRequest (model, generation,
// version, param, box) are the same.
std::string PieceHeader(const Group& g, const Piece& p) {
  std::string out;
  PutBytes(&out, 1, g.model);
  PutInt(&out, 2, g.generation);
  PutInt(&out, 3, g.version);
  PutBytes(&out, 4, p.param);
  PutBytes(&out, 5, BoxProto(p));
  return out;
}

// ---- channels ----

std::shared_ptr<grpc::Channel> ChannelFor(const std::string& address) {
  static std::mutex mu;
  static auto* channels = new std::map<std::string, std::shared_ptr<grpc::Channel>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& channel = (*channels)[address];
  if (channel == nullptr) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  return channel;
}

void SetDeadline(grpc::ClientContext* context, double timeout_s) {
  if (timeout_s > 0) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6)));
  }
}

// ---- stage ----

// One StageParamChunk: header, total_bytes, offset, data = box bytes
// [pos, pos + n): the data as views of the buffer's memory when its runs are
// long (`views` counts them), else gathered after the prefix in one slice.
grpc::ByteBuffer StageMessage(const std::string& header, const Piece& p, int64_t pos,
                              int64_t n, SliceViews* views) {
  std::string prefix = header;
  PutInt(&prefix, 6, p.bytes.total_bytes);
  PutInt(&prefix, 7, pos);
  PutVarint(&prefix, (8 << 3) | 2);
  PutVarint(&prefix, static_cast<uint64_t>(n));
  bool view = p.bytes.run_bytes >= kViewRunBytes;
  grpc_slice slice = grpc_slice_malloc(prefix.size() + (view ? 0 : n));
  char* out = reinterpret_cast<char*>(GRPC_SLICE_START_PTR(slice));
  std::memcpy(out, prefix.data(), prefix.size());
  std::vector<grpc::Slice> slices;
  slices.emplace_back(slice, grpc::Slice::STEAL_REF);
  if (view) {
    views->Append(p.bytes, pos, n, &slices);
  } else {
    p.bytes.Copy(pos, n, out + prefix.size(), nullptr);
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// The StageParams stream of g's pieces; the call's resources are released on
// return (views may still be held until then).
Outcome StageStream(const Group& g, double timeout_s, SliceViews* views) {
  std::shared_ptr<grpc::Channel> channel = ChannelFor(g.address);
  grpc::ClientContext context;
  SetDeadline(&context, timeout_s);
  grpc::ByteBuffer response;
  grpc::internal::RpcMethod method(kStageMethod, grpc::internal::RpcMethod::CLIENT_STREAMING,
                                   channel);
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel.get(), method,
                                                                    &context, &response));
  Outcome outcome;
  bool open = true;
  for (const Piece& p : g.pieces) {
    std::string header = PieceHeader(g, p);
    for (int64_t pos = 0; open && pos < p.bytes.total_bytes; pos += kChunkBytes) {
      int64_t n = std::min(kChunkBytes, p.bytes.total_bytes - pos);
      open = writer->Write(StageMessage(header, p, pos, n, views));
      if (open) outcome.count += n;
    }
  }
  if (open) writer->WritesDone();
  grpc::Status status = writer->Finish();
  outcome.code = status.error_code();
  outcome.message = status.error_message();
  return outcome;
}

// StageStream, returning once gRPC holds no view of the buffers.
Outcome Stage(const Group& g, double timeout_s) {
  SliceViews views;
  Outcome outcome = StageStream(g, timeout_s, &views);
  views.Wait();
  return outcome;
}

// ---- read ----

// Writes one ParamChunk into p's buffer at *pos; an error message, or "".
std::string TakeChunk(const grpc::ByteBuffer& message, const Piece& p, int64_t dtype,
                      int64_t* pos) {
  uint64_t fields[5] = {0, 0, 0, 0, 0};
  SliceReader reader(message);
  SliceReader data = reader;
  uint64_t data_bytes = 0;
  while (!reader.Done()) {
    uint64_t key = 0, value = 0;
    if (!reader.Varint(&key)) return "malformed chunk";
    uint64_t field = key >> 3, wire = key & 7;
    if (wire == 0 && reader.Varint(&value)) {
      if (field < 5) fields[field] = value;
    } else if (wire == 2 && reader.Varint(&value)) {
      if (field == 3) {
        data = reader;
        data_bytes = value;
      }
      if (!reader.Take(value, [](const char*, uint64_t) {})) return "truncated chunk";
    } else {
      return "malformed chunk (wire type " + std::to_string(wire) + ")";
    }
  }
  int64_t offset = static_cast<int64_t>(fields[2]);
  if (fields[4] != 0 && static_cast<int64_t>(fields[4]) != dtype) {
    return "chunk dtype " + std::to_string(fields[4]) + ", the plan's is " +
           std::to_string(dtype);
  }
  if (offset != *pos || offset + static_cast<int64_t>(data_bytes) > p.bytes.total_bytes) {
    return "chunk at byte " + std::to_string(offset) + " (" + std::to_string(data_bytes) +
           " bytes) out of order or past the box's " + std::to_string(p.bytes.total_bytes) +
           " bytes (expected byte " + std::to_string(*pos) + ")";
  }
  data.Take(data_bytes, [&](const char* bytes, uint64_t n) {
    p.bytes.Copy(*pos, static_cast<int64_t>(n), nullptr, bytes);
    *pos += static_cast<int64_t>(n);
  });
  return "";
}

// ReadParam of one piece into its buffer.
Outcome ReadPiece(const Group& g, const Piece& p, double timeout_s) {
  std::shared_ptr<grpc::Channel> channel = ChannelFor(g.address);
  grpc::ClientContext context;
  SetDeadline(&context, timeout_s);
  std::string request_bytes = PieceHeader(g, p);
  grpc::Slice request_slice(request_bytes);
  grpc::ByteBuffer request(&request_slice, 1);
  grpc::internal::RpcMethod method(kReadMethod, grpc::internal::RpcMethod::SERVER_STREAMING,
                                   channel);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(channel.get(), method,
                                                                    &context, request));
  Outcome outcome;
  int64_t pos = 0;
  grpc::ByteBuffer message;
  while (outcome.message.empty() && reader->Read(&message)) {
    outcome.message = TakeChunk(message, p, g.dtype, &pos);
  }
  if (!outcome.message.empty()) {
    context.TryCancel();
    reader->Finish();
    outcome.code = kRefused;
    return outcome;
  }
  grpc::Status status = reader->Finish();
  outcome.code = status.error_code();
  outcome.message = status.error_message();
  if (status.ok() && pos != p.bytes.total_bytes) {
    outcome.code = kRefused;
    outcome.message = "the stream ended at byte " + std::to_string(pos) + " of " +
                      std::to_string(p.bytes.total_bytes);
  }
  return outcome;
}

Outcome Read(const Group& g, double timeout_s) {
  for (size_t i = 0; i < g.pieces.size(); ++i) {
    Outcome outcome = ReadPiece(g, g.pieces[i], timeout_s);
    if (outcome.code != 0) {
      outcome.count = static_cast<int64_t>(i);
      return outcome;
    }
  }
  return Outcome{};
}

// ---- Python ----

// Groups from Python tuples; `buffers` keeps each piece's buffer view until
// the caller (holding the GIL) drops it.
// `reading`: read()'s groups (a dtype; writable buffers).
std::vector<Group> GroupsOf(const py::list& groups, bool reading,
                            std::vector<py::buffer_info>* buffers) {
  std::vector<Group> out;
  for (py::handle item : groups) {
    py::tuple t = py::reinterpret_borrow<py::tuple>(item);
    Group g;
    g.address = t[0].cast<std::string>();
    g.model = t[1].cast<std::string>();
    g.generation = t[2].cast<int64_t>();
    g.version = t[3].cast<int64_t>();
    if (reading) g.dtype = t[4].cast<int64_t>();
    for (py::handle piece_item : py::reinterpret_borrow<py::list>(t[reading ? 5 : 4])) {
      py::tuple pt = py::reinterpret_borrow<py::tuple>(piece_item);
      Piece p;
      p.param = pt[0].cast<std::string>();
      p.begin = pt[1].cast<std::vector<int64_t>>();
      p.end = pt[2].cast<std::vector<int64_t>>();
      buffers->push_back(pt[3].cast<py::buffer>().request(reading));
      const py::buffer_info& info = buffers->back();
      p.bytes = StridedBytes::Of(info.ptr, info.itemsize, info.shape, info.strides);
      g.pieces.push_back(std::move(p));
    }
    out.push_back(std::move(g));
  }
  return out;
}

// Runs fn on every group, one thread per group, the GIL released.
template <typename Fn>
std::vector<std::tuple<int, std::string, int64_t>> RunGroups(const std::vector<Group>& groups,
                                                             Fn fn) {
  std::vector<Outcome> outcomes(groups.size());
  {
    py::gil_scoped_release release;
    std::vector<std::thread> threads;
    for (size_t i = 1; i < groups.size(); ++i) {
      threads.emplace_back([&, i] { outcomes[i] = fn(groups[i]); });
    }
    if (!groups.empty()) outcomes[0] = fn(groups[0]);
    for (std::thread& t : threads) t.join();
  }
  std::vector<std::tuple<int, std::string, int64_t>> result;
  for (const Outcome& o : outcomes) result.emplace_back(o.code, o.message, o.count);
  return result;
}

// m.name(groups, timeout_s): fn(group, timeout_s) for every group (see the top).
template <typename Fn>
void Def(py::module_& m, const char* name, bool reading, Fn fn) {
  m.def(
      name,
      [reading, fn](const py::list& groups, double timeout_s) {
        std::vector<py::buffer_info> buffers;
        std::vector<Group> parsed = GroupsOf(groups, reading, &buffers);
        return RunGroups(parsed, [&](const Group& g) { return fn(g, timeout_s); });
      },
      py::arg("groups"), py::arg("timeout_s"));
}

}  // namespace

PYBIND11_MODULE(_meshserve_native, m) {
  m.doc() = "meshserve_client's byte movers: StageParams and ReadParam streams in C++";
  Def(m, "stage", false, Stage);
  Def(m, "read", true, Read);
}
