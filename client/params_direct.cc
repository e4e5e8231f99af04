#include "client/params_direct.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/dtype.h"
#include "common/base/parallel_for.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/rpc/channel.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/zero_copy/bytes_field_wire.h"
#include "common/rpc/zero_copy/raw_method.h"
#include "common/sharding/box.h"
#include "common/tensor/copy_box.h"
#include "common/tensor/safetensors.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "proto/cluster_service.grpc.pb.h"
#include "proto/worker_service.pb.h"

namespace meshserve {
namespace client {
namespace {

// StageParams with each chunk as a byte buffer (common/rpc/zero_copy/:
// bytes_field_wire.h, raw_method.h): a chunk's data is a slice of the mapped
// file or of its one copy.
constexpr char kStageParamsMethod[] = "/meshserve.WorkerService/StageParams";

template <typename... Parts>
absl::Status FileDataLoss(const Parts&... parts) {
  return absl::DataLossError(absl::StrCat(parts...));
}

struct Route {
  const SafetensorsFile::Entry* entry = nullptr;
  Box piece;
};

// Streams `routes` to one worker: each piece in row slabs of about
// chunk_bytes. Returns the data bytes sent.
absl::StatusOr<int64_t> StageOnWorker(grpc::ChannelInterface* channel, const PushDirectReply& plan,
                                      const std::string& model, const std::vector<Route>& routes,
                                      const std::shared_ptr<MappedFile>& file,
                                      int64_t chunk_bytes, absl::Time deadline,
                                      int64_t* messages) {
  grpc::ClientContext context;
  SetDeadlineAt(&context, deadline);
  StageParamsResponse response;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer =
      StartRawClientStream(channel, kStageParamsMethod, &context, &response);
  int64_t sent = 0;
  absl::Status local;
  bool broken = false;
  for (const Route& r : routes) {
    const SafetensorsFile::Entry& e = *r.entry;
    const int64_t elem = DTypeSize(e.dtype);
    const int64_t total = r.piece.NumElements() * elem;
    if (total == 0) continue;
    const int rank = r.piece.rank();
    const int64_t rows = rank == 0 ? 1 : r.piece.dims()[0].size();
    const int64_t row_bytes = total / rows;
    bool contiguous = true;  // a slab of rows is one run of the file
    for (int d = 1; d < rank; ++d) {
      contiguous = contiguous && r.piece.dims()[d].size() == e.shape[static_cast<size_t>(d)];
    }
    StageParamChunk header;
    header.set_model(model);
    header.set_generation(plan.generation());
    header.set_version(plan.version());
    header.set_param(e.name);
    for (const Interval& d : r.piece.dims()) {
      header.mutable_box()->add_begin(d.begin);
      header.mutable_box()->add_end(d.end);
    }
    header.set_total_bytes(total);
    const int64_t slab_rows = std::max<int64_t>(1, chunk_bytes / row_bytes);
    for (int64_t row = 0; row < rows && !broken && local.ok(); row += slab_rows) {
      const int64_t n = std::min(slab_rows, rows - row);
      absl::string_view slab;
      std::shared_ptr<const void> keep;
      if (contiguous) {
        const int64_t first = rank == 0 ? 0 : r.piece.dims()[0].begin + row;
        slab = absl::string_view(file->data() + e.begin + first * row_bytes,
                                 static_cast<size_t>(n * row_bytes));
        keep = file;
      } else {
        Box rows_box = r.piece;
        rows_box.mutable_dims()[0] = Interval{r.piece.dims()[0].begin + row,
                                              r.piece.dims()[0].begin + row + n};
        // Not zero-filled first: every byte is written by the extraction.
        std::shared_ptr<char> copy(new char[static_cast<size_t>(n * row_bytes)],
                                   std::default_delete<char[]>());
        local = ExtractBoxBytes(file->data() + e.begin, e.shape, elem, rows_box, copy.get());
        if (!local.ok()) break;
        slab = absl::string_view(copy.get(), static_cast<size_t>(n * row_bytes));
        keep = std::move(copy);
      }
      // A row longer than chunk_bytes goes in several messages.
      for (int64_t at = 0; at < static_cast<int64_t>(slab.size()); at += chunk_bytes) {
        header.set_offset(row * row_bytes + at);
        const absl::string_view part = slab.substr(static_cast<size_t>(at),
                                                   static_cast<size_t>(chunk_bytes));
        if (!writer->Write(EncodeWithBytesField(header.SerializeAsString(),
                                                StageParamChunk::kDataFieldNumber, part, keep))) {
          broken = true;  // the cause comes with Finish
          break;
        }
        sent += static_cast<int64_t>(part.size());
        ++*messages;
      }
    }
    if (broken || !local.ok()) break;
  }
  if (!local.ok()) context.TryCancel();
  if (!broken) writer->WritesDone();
  const grpc::Status status = writer->Finish();
  MS_RETURN_IF_ERROR(local);
  MS_RETURN_IF_ERROR(FromGrpcStatus(status));
  return sent;
}

// Every tensor of the file as one whole box.
PushDirectRequest BoxesRequest(const std::string& model,
                               const std::vector<SafetensorsFile::Entry>& entries) {
  PushDirectRequest request;
  request.set_model(model);
  for (const SafetensorsFile::Entry& e : entries) {
    PushParamsChunk* box = request.add_boxes();
    box->set_param(e.name);
    box->set_dtype(static_cast<DTypeProto>(DTypeToProto(e.dtype)));
    for (int64_t d : e.shape) {
      box->add_offset(0);
      box->add_shape(d);
    }
  }
  return request;
}

// One worker's share of a plan.
struct WorkerShare {
  int64_t id = -1;
  std::vector<Route> routes;
  std::shared_ptr<grpc::Channel> channel;
  absl::StatusOr<int64_t> sent = int64_t{0};
  int64_t messages = 0;
};

// The plan's routes by worker address, each checked against its tensor.
// \error kInternal naming a route outside the file's tensors.
absl::StatusOr<std::map<std::string, WorkerShare>> SharesOf(
    const PushDirectReply& plan, const std::vector<SafetensorsFile::Entry>& entries,
    const std::string& path) {
  std::map<std::string, WorkerShare> shares;
  for (const PushRoute& r : plan.routes()) {
    const bool known = r.box() >= 0 && r.box() < static_cast<int>(entries.size());
    Box piece;
    for (int d = 0; known && d < r.offset_size() && d < r.shape_size(); ++d) {
      piece.mutable_dims().push_back(Interval{r.offset(d), r.offset(d) + r.shape(d)});
    }
    if (!known || r.offset_size() != r.shape_size() ||
        !Box::FromShape(entries[static_cast<size_t>(r.box())].shape).Contains(piece)) {
      return Internal("route to worker ", r.worker_id(), " names box ", r.box(), " piece ",
                      piece.ToString(), ", not inside a tensor of '", path, "'");
    }
    WorkerShare& share = shares[r.address()];
    share.id = r.worker_id();
    share.routes.push_back(Route{&entries[static_cast<size_t>(r.box())], piece});
  }
  return shares;
}

}  // namespace

MappedFile::~MappedFile() {
  if (addr != nullptr) ::munmap(addr, size);
}

absl::StatusOr<std::shared_ptr<MappedFile>> MapFile(const SafetensorsFile& file) {
  const std::string& path = file.path();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound("cannot open '", path, "': ", std::strerror(errno));
  auto mapped = std::make_shared<MappedFile>();
  struct stat st {};
  absl::Status s;
  mapped->data_start = file.data_start();
  if (::fstat(fd, &st) != 0) {
    s = FileDataLoss("cannot stat '", path, "': ", std::strerror(errno));
  } else {
    mapped->size = static_cast<size_t>(st.st_size);
    mapped->addr = ::mmap(nullptr, mapped->size, PROT_READ, MAP_SHARED, fd, 0);
    if (mapped->addr == MAP_FAILED) {
      mapped->addr = nullptr;
      s = FileDataLoss("cannot map '", path, "': ", std::strerror(errno));
    }
  }
  ::close(fd);
  MS_RETURN_IF_ERROR(s);
  for (const SafetensorsFile::Entry& e : file.entries()) {
    if (mapped->data_start + e.end > st.st_size) {
      return FileDataLoss("'", path, "' is ", st.st_size, " bytes, too short for tensor '", e.name,
                      "' (its data ends at byte ", mapped->data_start + e.end, ")");
    }
  }
  return mapped;
}

absl::StatusOr<std::map<std::string, std::shared_ptr<grpc::Channel>>> ConnectWorkers(
    const std::map<std::string, int64_t>& workers, absl::Time by, std::string* unreachable) {
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels;
  for (const auto& [address, id] : workers) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateChannel(address);
    if (channel.ok()) (*channel)->GetState(/*try_to_connect=*/true);
    channels[address] = channel.ok() ? *channel : nullptr;
  }
  for (const auto& [address, id] : workers) {
    const std::shared_ptr<grpc::Channel>& channel = channels[address];
    if (channel == nullptr || !channel->WaitForConnected(absl::ToChronoTime(by))) {
      *unreachable = absl::StrCat("worker ", id, " at ", address, " is not reachable from here");
      return Unavailable(*unreachable);
    }
  }
  return channels;
}

absl::StatusOr<PushResult> PushDirectFromFile(InferenceClient& client, const std::string& path,
                                              const std::string& model,
                                              const DirectPushOptions& options,
                                              absl::Time deadline, std::string* fallback_reason) {
  fallback_reason->clear();
  if (options.chunk_bytes < 8) {
    return InvalidArgument("chunk size ", options.chunk_bytes, " is below 8 bytes");
  }
  MS_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  MS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> mapped, MapFile(file));
  const std::vector<SafetensorsFile::Entry>& entries = file.entries();
  PushResult result;
  const auto start = std::chrono::steady_clock::now();
  grpc::ClientContext context;
  SetDeadlineAt(&context, deadline);
  std::unique_ptr<grpc::ClientReaderWriter<PushDirectRequest, PushDirectReply>> stream =
      client.cluster_stub().PushDirect(&context);
  const std::string rpc = absl::StrCat("PushDirect on ", client.target());
  auto server_status = [&]() -> absl::Status {
    absl::Status s = FromGrpcStatus(stream->Finish());
    if (s.ok()) s = Internal("the server ended the call without its answer");
    if (s.code() == absl::StatusCode::kUnimplemented) *fallback_reason = s.ToString();
    return AnnotateStatus(s, rpc);
  };
  auto cancel = [&](absl::Status s) {
    context.TryCancel();  // the coordinator aborts the push
    stream->Finish();
    return s;
  };
  PushDirectRequest request = BoxesRequest(model, entries);
  PushDirectReply plan;
  if (!stream->Write(request) || !stream->Read(&plan)) return server_status();
  absl::StatusOr<std::map<std::string, WorkerShare>> shares = SharesOf(plan, entries, path);
  if (!shares.ok()) return cancel(AnnotateStatus(shares.status(), rpc));
  // Every worker reachable before any byte goes out; then all workers at once.
  std::map<std::string, int64_t> ids;
  for (const auto& [address, share] : *shares) ids[address] = share.id;
  auto channels = ConnectWorkers(
      ids, std::min(deadline, absl::Now() + options.connect_timeout), fallback_reason);
  if (!channels.ok()) {
    return cancel(AnnotateStatus(Unavailable(*fallback_reason, "; nothing was pushed"), rpc));
  }
  for (auto& [address, share] : *shares) share.channel = (*channels)[address];
  std::vector<WorkerShare*> staging;
  for (auto& [address, share] : *shares) staging.push_back(&share);
  ParallelFor(staging.size(), [&](size_t i) {
    WorkerShare* s = staging[i];
    s->sent = StageOnWorker(s->channel.get(), plan, model, s->routes, mapped,
                            options.chunk_bytes, deadline, &s->messages);
  });
  for (const auto& [address, share] : *shares) {
    if (!share.sent.ok()) {
      return cancel(AnnotateStatus(share.sent.status(), "StageParams on worker ", share.id,
                                   " at ", address));
    }
    result.bytes_sent += *share.sent;
    result.messages += share.messages;
  }
  result.workers = static_cast<int>(shares->size());
  for (const SafetensorsFile::Entry& e : entries) result.bytes_tensors += e.end - e.begin;
  request.Clear();
  request.set_commit(true);
  PushDirectReply done;
  if (!stream->Write(request) || !stream->Read(&done)) return server_status();
  stream->WritesDone();
  MS_RETURN_IF_ERROR(AnnotateStatus(FromGrpcStatus(stream->Finish()), rpc));
  result.response = done.result();
  result.seconds = SecondsSince(start);
  return result;
}

}  // namespace client
}  // namespace meshserve
