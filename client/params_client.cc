#include "client/params_client.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/params_direct.h"
#include "common/base/parallel_for.h"
#include "common/base/shape_string.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/zero_copy/bytes_field_wire.h"
#include "common/rpc/zero_copy/raw_method.h"
#include "common/sharding/box.h"
#include "grpcpp/grpcpp.h"
#include "proto/worker_service.grpc.pb.h"

namespace meshserve {
namespace client {
namespace {

// PushParams with each chunk as a byte buffer whose data is a slice of the
// mapped file (common/rpc/zero_copy/): no read into a buffer, no copy into a
// serialised message.
constexpr char kPushParamsMethod[] = "/meshserve.ClusterService/PushParams";

}  // namespace

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

absl::StatusOr<PushResult> PushParamsFromFile(InferenceClient& client,
                                              const InferenceClient::Options& options,
                                              PushChunkReader& reader, absl::Time deadline) {
  MS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> mapped, MapFile(reader.file()));
  ChannelOptions channel_options;  // the client's channel, for a raw method
  channel_options.max_message_bytes = options.max_message_bytes;
  channel_options.credentials = options.credentials;
  channel_options.server_name_override = options.server_name_override;
  channel_options.bearer_token = options.bearer_token;
  MS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel,
                      CreateChannel(client.target(), channel_options));
  const char* base = static_cast<const char*>(mapped->addr);
  grpc::ClientContext context;
  SetDeadlineAt(&context, deadline);
  PushResult result;
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> stream = StartRawClientStream(
      channel.get(), kPushParamsMethod, &context, &result.response);
  PushParamsChunk chunk;
  absl::Status read_status;
  int64_t at = 0;
  int64_t n = 0;
  while (true) {
    absl::StatusOr<bool> more = reader.NextRange(&chunk, &at, &n);
    if (!more.ok()) {
      read_status = more.status();
      context.TryCancel();  // a half-sent push must not commit
      break;
    }
    if (!*more) break;
    result.bytes_sent += n;
    ++result.messages;
    // false: the server ended the call (Finish below returns its status).
    if (!stream->Write(EncodeWithBytesField(chunk.SerializeAsString(),
                                            PushParamsChunk::kDataFieldNumber,
                                            absl::string_view(base + at, static_cast<size_t>(n)),
                                            mapped))) {
      break;
    }
  }
  if (read_status.ok()) stream->WritesDone();
  grpc::Status status = stream->Finish();
  result.seconds = SecondsSince(start);
  MS_RETURN_IF_ERROR(read_status);
  MS_RETURN_IF_ERROR(AnnotateStatus(FromGrpcStatus(status), "PushParams on ", client.target()));
  return result;
}

namespace {

// One PullParams call into `writer` (no Finish).
absl::Status StreamPull(InferenceClient& client, const PullParamsRequest& request,
                        PulledFileWriter& writer, absl::Time deadline) {
  grpc::ClientContext context;
  SetDeadlineAt(&context, deadline);
  std::unique_ptr<grpc::ClientReader<PullParamsChunk>> stream =
      client.cluster_stub().PullParams(&context, request);
  PullParamsChunk chunk;
  absl::Status write_status;
  while (stream->Read(&chunk)) {
    write_status = writer.Add(chunk);
    if (!write_status.ok()) {
      context.TryCancel();
      break;
    }
  }
  grpc::Status status = stream->Finish();
  MS_RETURN_IF_ERROR(write_status);
  return AnnotateStatus(FromGrpcStatus(status), "PullParams on ", client.target());
}

// A planned box: the name asked for and the coordinator's plan.
struct PlannedBox {
  std::string name;
  PlanPullReply plan;
};

std::vector<int64_t> PieceShape(const PullPiece& piece) {
  std::vector<int64_t> shape;
  for (int d = 0; d < piece.box().begin_size() && d < piece.box().end_size(); ++d) {
    shape.push_back(piece.box().end(d) - piece.box().begin(d));
  }
  return shape;
}

// The plan's pieces lie inside the box and add up to it. \error kInternal.
absl::Status CheckPlan(const PlannedBox& b) {
  const PlanPullReply& plan = b.plan;
  MS_RETURN_IF_ERROR(DTypeFromProto(plan.dtype()).status(), "PlanPull of '", b.name, "'");
  const std::vector<int64_t> shape(plan.shape().begin(), plan.shape().end());
  const Box whole = Box::FromShape(shape);
  int64_t covered = 0;
  for (const PullPiece& piece : plan.pieces()) {
    const std::vector<int64_t> ps = PieceShape(piece);
    Box dst;
    for (size_t d = 0; d < ps.size() && d < static_cast<size_t>(piece.dst_offset_size()); ++d) {
      dst.mutable_dims().push_back(Interval{piece.dst_offset(static_cast<int>(d)),
                                            piece.dst_offset(static_cast<int>(d)) + ps[d]});
    }
    if (ps.size() != shape.size() || piece.box().begin_size() != piece.box().end_size() ||
        dst.rank() != whole.rank() || !whole.Contains(dst)) {
      return Internal("PlanPull of '", b.name, "': piece of '", piece.param(), "' at ",
                      ShapeToCompactString(std::vector<int64_t>(piece.dst_offset().begin(),
                                                                piece.dst_offset().end())),
                      " of shape ", ShapeToCompactString(ps), " is not inside the box ",
                      ShapeToCompactString(shape));
    }
    covered += dst.NumElements();
  }
  if (covered != whole.NumElements()) {
    return Internal("PlanPull of '", b.name, "': the pieces cover ", covered, " of the ",
                    whole.NumElements(), " elements of the box");
  }
  return absl::OkStatus();
}

// PlanPull of every name; the first answer's version pins the others.
absl::Status PlanAll(InferenceClient& client, const BoxPull& pull, absl::Time deadline,
                     std::vector<PlannedBox>* boxes) {
  int64_t version = pull.version;
  for (const std::string& name : pull.names) {
    grpc::ClientContext context;
    SetDeadlineAt(&context, deadline);
    PlanPullRequest request;
    request.set_model(pull.model);
    request.set_name(name);
    for (int64_t d : pull.offset) request.add_offset(d);
    for (int64_t d : pull.shape) request.add_shape(d);
    request.set_version(version);
    PlannedBox b{name, {}};
    MS_RETURN_IF_ERROR(FromGrpcStatus(client.cluster_stub().PlanPull(&context, request, &b.plan)),
                       "PlanPull of '", name, "' on ", client.target());
    if (version != 0 && b.plan.version() != version) {
      return Internal("PlanPull of '", name, "' answers version ", b.plan.version(),
                      ", not the version ", version, " asked for");
    }
    version = b.plan.version();
    boxes->push_back(std::move(b));
    MS_RETURN_IF_ERROR(CheckPlan(boxes->back()));
  }
  return absl::OkStatus();
}

void EndAll(InferenceClient& client, const std::string& model,
            const std::vector<PlannedBox>& boxes) {
  for (const PlannedBox& b : boxes) {
    grpc::ClientContext context;
    SetDeadlineAt(&context, absl::Now() + absl::Seconds(10));
    EndPullRequest request;
    request.set_model(model);
    request.set_lease_id(b.plan.lease_id());
    EndPullReply reply;
    client.cluster_stub().EndPull(&context, request, &reply);  // the lease expires anyway
  }
}

// One holder's pieces: (box index, piece).
struct HolderReads {
  int64_t id = -1;
  std::vector<std::pair<size_t, const PullPiece*>> pieces;
  absl::Status status;
};

// Reads each piece with ReadParam into its place in `writer`.
absl::Status ReadPieces(WorkerService::Stub& stub, const std::string& model,
                        const std::vector<PlannedBox>& boxes, const HolderReads& holder,
                        BoxFileWriter& writer, absl::Time deadline) {
  for (const auto& [index, piece] : holder.pieces) {
    const PlanPullReply& plan = boxes[index].plan;
    const std::vector<int64_t> shape = PieceShape(*piece);
    const std::vector<int64_t> dst(piece->dst_offset().begin(), piece->dst_offset().end());
    const int64_t want = Box::FromShape(shape).NumElements() *
                         DTypeSize(writer.tensors()[index].dtype);
    grpc::ClientContext context;
    SetDeadlineAt(&context, deadline);
    ReadParamRequest request;
    request.set_model(model);
    request.set_generation(plan.generation());
    request.set_version(plan.version());
    request.set_param(piece->param());
    *request.mutable_box() = piece->box();
    std::unique_ptr<grpc::ClientReader<ParamChunk>> reader = stub.ReadParam(&context, request);
    ParamChunk chunk;
    absl::Status local;
    int64_t got = 0;
    while (local.ok() && reader->Read(&chunk)) {
      local = chunk.total_bytes() == want
                  ? writer.Place(index, dst, shape, chunk.offset(), chunk.data())
                  : Internal("piece of '", piece->param(), "' announces ", chunk.total_bytes(),
                             " bytes, not ", want);
      got += static_cast<int64_t>(chunk.data().size());
    }
    if (!local.ok()) context.TryCancel();
    const absl::Status status = FromGrpcStatus(reader->Finish());
    MS_RETURN_IF_ERROR(local);
    MS_RETURN_IF_ERROR(status);
    if (got != want) {
      return Internal("piece of '", piece->param(), "' ended after ", got, " of ", want, " bytes");
    }
  }
  return absl::OkStatus();
}

// Every planned piece read from its holder at once into `path`. \error as
// PullBoxesToFile; *unreachable set when a holder cannot be reached.
absl::StatusOr<PullResult> ReadDirect(const BoxPull& pull, const std::vector<PlannedBox>& boxes,
                                      const std::string& path, absl::Time deadline,
                                      std::string* unreachable) {
  std::map<std::string, HolderReads> holders;
  std::map<std::string, int64_t> ids;
  std::vector<PulledTensor> tensors;
  for (size_t i = 0; i < boxes.size(); ++i) {
    const PlanPullReply& plan = boxes[i].plan;
    tensors.push_back(PulledTensor{boxes[i].name, *DTypeFromProto(plan.dtype()),
                                   {plan.shape().begin(), plan.shape().end()}});
    for (const PullPiece& piece : plan.pieces()) {
      holders[piece.address()].id = ids[piece.address()] = piece.worker_id();
      holders[piece.address()].pieces.emplace_back(i, &piece);
    }
  }
  MS_ASSIGN_OR_RETURN(auto channels, ConnectWorkers(ids, std::min(deadline, absl::Now() +
                                                                  pull.connect_timeout),
                                                    unreachable));
  const int64_t version = boxes.empty() ? 0 : boxes[0].plan.version();
  MS_ASSIGN_OR_RETURN(std::unique_ptr<BoxFileWriter> writer,
                      BoxFileWriter::Create(path, std::move(tensors), version));
  std::vector<std::pair<const std::string, HolderReads>*> all;
  for (auto& entry : holders) all.push_back(&entry);
  ParallelFor(all.size(), [&](size_t i) {
    std::unique_ptr<WorkerService::Stub> stub = WorkerService::NewStub(channels[all[i]->first]);
    all[i]->second.status = ReadPieces(*stub, pull.model, boxes, all[i]->second, *writer,
                                       deadline);
  });
  for (const auto& [address, holder] : holders) {
    MS_RETURN_IF_ERROR(holder.status, "ReadParam on worker ", holder.id, " at ", address);
  }
  MS_RETURN_IF_ERROR(writer->Finish());
  PullResult result;
  result.version = version;
  result.bytes = writer->data_bytes();
  result.params = pull.names;
  result.path = absl::StrCat("direct from ", holders.size(), " workers");
  return result;
}

// Through the coordinator: one PullParams call per name for a box or a
// pinned version, else one call for every name.
absl::StatusOr<PullResult> PullThroughCoordinator(InferenceClient& client, const BoxPull& pull,
                                                  const std::string& path, absl::Time deadline) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<PulledFileWriter> writer, PulledFileWriter::Create(path));
  if (pull.offset.empty() && pull.shape.empty() && pull.version == 0) {
    return PullParamsToFile(client, pull.model, pull.names, *writer, deadline);
  }
  for (const std::string& name : pull.names) {
    PullParamsRequest request;
    request.set_model(pull.model);
    request.add_params(name);
    for (int64_t d : pull.offset) request.add_offset(d);
    for (int64_t d : pull.shape) request.add_shape(d);
    request.set_version(writer->version() != 0 ? writer->version() : pull.version);
    MS_RETURN_IF_ERROR(StreamPull(client, request, *writer, deadline));
    if (!pull.shape.empty() && writer->last_shape() != pull.shape) {
      return Internal("PullParams on ", client.target(), ": the box of '", name, "' comes back ",
                      ShapeToCompactString(writer->last_shape()), ", not the shape ",
                      ShapeToCompactString(pull.shape), " asked for (a server without box "
                      "pulls?)");
    }
  }
  MS_RETURN_IF_ERROR(writer->Finish());
  PullResult result;
  result.version = writer->version();
  result.bytes = writer->data_bytes();
  result.params = writer->params();
  return result;
}

}  // namespace

absl::StatusOr<PullResult> PullParamsToFile(InferenceClient& client, absl::string_view model,
                                            const std::vector<std::string>& params,
                                            PulledFileWriter& writer, absl::Time deadline) {
  PullParamsRequest request;
  request.set_model(std::string(model));
  for (const std::string& p : params) request.add_params(p);
  const auto start = std::chrono::steady_clock::now();
  MS_RETURN_IF_ERROR(StreamPull(client, request, writer, deadline));
  const std::vector<std::string> got = writer.params();
  for (const std::string& p : params) {
    if (std::find(got.begin(), got.end(), p) == got.end()) {
      return Internal("PullParams on ", client.target(), ": param '", p,
                      "' was asked for but is not in the answer (", got.size(), " params)");
    }
  }
  MS_RETURN_IF_ERROR(writer.Finish());
  PullResult result;
  result.version = writer.version();
  result.bytes = writer.data_bytes();
  result.params = got;
  result.seconds = SecondsSince(start);
  return result;
}

absl::StatusOr<PullResult> PullBoxesToFile(InferenceClient& client, const BoxPull& pull,
                                           const std::string& path, absl::Time deadline) {
  if (pull.names.empty()) return InvalidArgument("pull: no param or tensor name given");
  const auto start = std::chrono::steady_clock::now();
  std::string why = "TLS: workers admit only cluster members";
  if (pull.direct) {
    why.clear();
    std::vector<PlannedBox> boxes;
    const absl::Status planned = PlanAll(client, pull, deadline, &boxes);
    absl::StatusOr<PullResult> result =
        planned.ok() ? ReadDirect(pull, boxes, path, deadline, &why) : planned;
    EndAll(client, pull.model, boxes);
    if (planned.code() == absl::StatusCode::kUnimplemented) why = planned.ToString();
    if (why.empty()) {
      if (result.ok()) result->seconds = SecondsSince(start);
      return result;
    }
  }
  absl::StatusOr<PullResult> result = PullThroughCoordinator(client, pull, path, deadline);
  if (!result.ok()) return result;
  result->seconds = SecondsSince(start);
  result->path = absl::StrCat("through the coordinator (", why, ")");
  return result;
}

}  // namespace client
}  // namespace meshserve
