// libFuzzer target: the worker's data plane as a hostile peer drives it. The
// input is a script of operations on one WorkerEngine: DataChunk messages
// (wire bytes, parsed, through DeliverDataChunk, the PushData stream's path,
// server/worker/grpc/worker_service.h), chunks built field by field over a few request ids and tags so that
// they collide, whole slices, and the receiving side's StartRequest, Receive
// (zero deadline), Cancel and FinishRequest.
// Invariants: never crashes; bad chunks are kInvalidArgument (chunks for a
// finished or cancelled request are OK and dropped); a slice sent in order, in
// chunks of any sizes, to a fresh request is received byte for byte, whatever
// the colliding traffic around it.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "google/protobuf/stubs/logging.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "proto/worker_service.pb.h"
#include "server/worker/grpc/worker_service.h"
#include "server/worker/rendezvous.h"
#include "server/worker/worker_engine.h"

namespace {

// A slice may not be larger than this here (the default is 16 GiB, which a
// single chunk would make the worker allocate).
constexpr int64_t kMaxSliceBytes = int64_t{1} << 20;

meshserve::WorkerEngine::Options WorkerOptions() {
  meshserve::WorkerEngine::Options options;
  options.worker_id = 0;
  options.rendezvous.max_slice_bytes = kMaxSliceBytes;
  options.rendezvous.max_remembered_requests = 8;
  options.rendezvous.orphan_ttl = absl::ZeroDuration();
  return options;
}

std::string RequestId(FuzzedDataProvider& in) {
  return absl::StrCat("r", in.ConsumeIntegralInRange<int>(0, 3));
}
std::string Tag(FuzzedDataProvider& in) {
  return absl::StrCat("t", in.ConsumeIntegralInRange<int>(0, 3));
}

absl::Status CheckChunkStatus(const absl::Status& status) {
  if (!status.ok() && status.code() != absl::StatusCode::kInvalidArgument) __builtin_trap();
  return status;
}

// A well-behaved peer: one slice in order, split at fuzzed points, to a fresh
// request; its receiver gets exactly those bytes.
void InOrderSlice(FuzzedDataProvider& in, meshserve::WorkerEngine& worker) {
  static int64_t num_fresh = 0;
  const std::string request_id = absl::StrCat("fresh", num_fresh++);
  const std::string bytes = in.ConsumeRandomLengthString(128);
  meshserve::Rendezvous& rendezvous = worker.rendezvous();
  if (!rendezvous.StartRequest(request_id).ok()) __builtin_trap();
  size_t offset = 0;
  do {  // one chunk at least (an empty slice is one empty chunk)
    const size_t n =
        bytes.empty() ? 0 : in.ConsumeIntegralInRange<size_t>(1, bytes.size() - offset);
    meshserve::DataChunk chunk;
    chunk.set_request_id(request_id);
    chunk.set_tag("t0");
    chunk.set_total_bytes(static_cast<int64_t>(bytes.size()));
    chunk.set_offset(static_cast<int64_t>(offset));
    chunk.set_data(bytes.substr(offset, n));
    chunk.set_src_worker(1);
    if (!meshserve::DeliverDataChunk(&worker, chunk).ok()) __builtin_trap();
    offset += n;
  } while (offset < bytes.size());
  auto got = rendezvous.Receive(request_id, "t0", 1, absl::Now() + absl::Seconds(1));
  if (!got.ok() || got->bytes != bytes) __builtin_trap();
  rendezvous.FinishRequest(request_id);
}

void Step(FuzzedDataProvider& in, meshserve::WorkerEngine& worker) {
  meshserve::Rendezvous& rendezvous = worker.rendezvous();
  switch (in.ConsumeIntegralInRange<int>(0, 8)) {
    case 0: {  // a DataChunk off the wire
      meshserve::DataChunk chunk;
      const std::string bytes = in.ConsumeRandomLengthString(256);
      if (!chunk.ParseFromString(bytes)) return;
      if (absl::StartsWith(chunk.request_id(), "fresh")) return;  // InOrderSlice's own
      (void)CheckChunkStatus(meshserve::DeliverDataChunk(&worker, chunk));
      return;
    }
    case 1:
    case 2: {  // a chunk over the colliding ids, offsets near the truth
      meshserve::DataChunk chunk;
      chunk.set_request_id(RequestId(in));
      chunk.set_tag(Tag(in));
      chunk.set_total_bytes(in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-2, 64)
                                             : in.ConsumeIntegral<int64_t>());
      chunk.set_offset(in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(-2, 64)
                                        : in.ConsumeIntegral<int64_t>());
      chunk.set_data(in.ConsumeRandomLengthString(64));
      chunk.set_src_worker(in.ConsumeIntegralInRange<int64_t>(-1, 3));
      chunk.set_dtype(static_cast<meshserve::DTypeProto>(in.ConsumeIntegralInRange<int>(0, 9)));
      (void)CheckChunkStatus(meshserve::DeliverDataChunk(&worker, chunk));
      return;
    }
    case 3:
      (void)CheckChunkStatus(rendezvous.DeliverSlice(RequestId(in), Tag(in),
                                                     in.ConsumeRandomLengthString(64), 1));
      return;
    case 4:
      (void)rendezvous.StartRequest(RequestId(in));
      return;
    case 5: {
      auto got = rendezvous.Receive(RequestId(in), Tag(in), 1, absl::Now());
      if (got.ok() && static_cast<int64_t>(got->bytes.size()) > kMaxSliceBytes) __builtin_trap();
      return;
    }
    case 6:
      worker.Cancel(RequestId(in), "fuzz");
      return;
    case 7:
      rendezvous.FinishRequest(RequestId(in));
      return;
    default:
      InOrderSlice(in, worker);
      return;
  }
}

}  // namespace

// Malformed strings (invalid UTF-8) are logged by protobuf on every parse: quiet.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  meshserve::WorkerEngine worker(WorkerOptions(), /*transport=*/nullptr);
  while (in.remaining_bytes() > 0) Step(in, worker);
  (void)worker.Status();
  return 0;
}
