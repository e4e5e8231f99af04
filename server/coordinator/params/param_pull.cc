// ParamPulls (param_pull.h): box pulls planned for the client (leases) or
// streamed through the coordinator in slabs.
#include "server/coordinator/params/param_pull.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/shape_string.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "common/tensor/copy_box.h"
#include "server/coordinator/params/param_moves.h"
#include "server/coordinator/params/tensor_names.h"

namespace meshserve {
namespace {

// Box `b` moved by `delta` (per dim).
Box Shifted(const Box& b, absl::Span<const int64_t> delta) {
  Box out = b;
  for (int d = 0; d < out.rank(); ++d) out[d] = {b[d].begin + delta[d], b[d].end + delta[d]};
  return out;
}

std::vector<int64_t> Begins(const Box& b) {
  std::vector<int64_t> out;
  for (int d = 0; d < b.rank(); ++d) out.push_back(b[d].begin);
  return out;
}

std::vector<int64_t> Negated(std::vector<int64_t> v) {
  for (int64_t& x : v) x = -x;
  return v;
}

// Calls `slab` for each slab of `shape` in row-major order: a run of whole
// rows of the innermost dims of at most chunk_bytes (one element at least).
absl::Status ForEachSlab(const std::vector<int64_t>& shape, int64_t elem, int64_t chunk_bytes,
                         const std::function<absl::Status(const Box&)>& slab) {
  const int n = static_cast<int>(shape.size());
  if (n == 0) return slab(Box());
  int k = n - 1;
  int64_t inner = elem;  // bytes of one index of dim k
  while (k > 0 && inner * shape[k] <= chunk_bytes) inner *= shape[k--];
  const int64_t rows = std::max<int64_t>(1, chunk_bytes / inner);
  std::vector<int64_t> idx(k, 0);  // over dims < k
  while (true) {
    for (int64_t j = 0; j < shape[k]; j += rows) {
      Box b = Box::FromShape(shape);
      for (int d = 0; d < k; ++d) b[d] = {idx[d], idx[d] + 1};
      b[k] = {j, std::min(j + rows, shape[k])};
      MS_RETURN_IF_ERROR(slab(b));
    }
    int d = k - 1;
    while (d >= 0 && ++idx[d] == shape[d]) idx[d--] = 0;
    if (d < 0) return absl::OkStatus();
  }
}

}  // namespace

ParamPulls::ParamPulls(PullSource source, PullOptions options)
    : source_(std::move(source)), options_(std::move(options)) {
  if (options_.expiry_thread) expiry_ = std::thread([this] { ExpiryLoop(); });
}

ParamPulls::~ParamPulls() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (expiry_.joinable()) expiry_.join();
}

void ParamPulls::ExpiryLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Seconds(1));
      if (stop_) return;
    }
    ExpireLeases();
  }
}

void ParamPulls::ExpireLeases() {
  std::vector<std::shared_ptr<const Placement>> dropped;  // released outside the lock
  absl::MutexLock lock(&mu_);
  const absl::Time now = options_.now();
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.expires > now) {
      ++it;
      continue;
    }
    dropped.push_back(std::move(it->second.placement));
    it = leases_.erase(it);
  }
}

int64_t ParamPulls::active_leases() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(leases_.size());
}

absl::StatusOr<std::shared_ptr<const Placement>> ParamPulls::PlacementAt(
    const std::string& model, int64_t version) {
  std::shared_ptr<const Placement> current = source_.current(model);
  if (current == nullptr) return Unavailable("model '", model, "' is not placed yet");
  {
    absl::MutexLock lock(&mu_);
    for (auto it = seen_.begin(); it != seen_.end();) {
      it = it->second.expired() ? seen_.erase(it) : std::next(it);
    }
    seen_[{model, current->version}] = current;
    if (version == 0 || version == current->version) return current;
    for (const auto& [id, lease] : leases_) {
      if (lease.model == model && lease.placement->version == version) return lease.placement;
    }
    auto it = seen_.find({model, version});
    if (it != seen_.end()) {
      if (std::shared_ptr<const Placement> p = it->second.lock()) return p;
    }
  }
  const std::map<int64_t, int64_t> held = source_.held_versions(model);
  if (held.count(version) > 0) {
    // Held by a sequence: resident on the current layout (file comment),
    // and pinned while the returned placement lives.
    std::shared_ptr<const void> pin = source_.pin ? source_.pin(model, version) : nullptr;
    auto* copy = new Placement(*current);
    copy->version = version;
    return std::shared_ptr<const Placement>(copy, [pin](const Placement* p) { delete p; });
  }
  std::vector<std::string> listed = {absl::StrCat(current->version, " (current)")};
  for (const auto& [v, holders] : held) {
    if (v != current->version) listed.push_back(absl::StrCat(v, " (", holders, " holders)"));
  }
  return NotFound("model '", model, "' version ", version,
                  " is not held any more; versions held: ", absl::StrJoin(listed, ", "));
}

absl::StatusOr<ParamPulls::Planned> ParamPulls::Plan(const BoxPullRequest& request) {
  if (request.version < 0) {
    return InvalidArgument("pull of model '", request.model, "': version ", request.version,
                           " (0: the current one; else a version >= 1)");
  }
  MS_ASSIGN_OR_RETURN(std::shared_ptr<const ModelFile> model, source_.model(request.model));
  MS_ASSIGN_OR_RETURN(ResolvedBox r,
                      ResolveTensorBox(*model, request.name, request.offset, request.shape));
  if (r.ignored) return NotFound(r.note, ": the server holds no bytes of it");
  if (r.uncovered > 0) {
    return FailedPrecondition("model '", request.model, "' tensor '", request.name, "': ",
                              r.uncovered, " elements of the box at offset ",
                              ShapeToString(r.offset), " of shape ", ShapeToString(r.shape),
                              " are read by no param, so the server holds no bytes of them");
  }
  Planned planned;
  MS_ASSIGN_OR_RETURN(planned.placement, PlacementAt(request.model, request.version));
  const Placement& p = *planned.placement;
  planned.shape = r.shape;
  for (size_t i = 0; i < r.pieces.size(); ++i) {
    const TensorPiece& piece = r.pieces[i];
    if (piece.dtype != r.pieces[0].dtype) {
      return FailedPrecondition("model '", request.model, "' tensor '", request.name,
                                "' spans params of different dtypes ('", r.pieces[0].param,
                                "', '", piece.param, "'): pull them one by one");
    }
    planned.dtype = piece.dtype;
    MS_ASSIGN_OR_RETURN(std::vector<CellHolders> cells,
                        PlacementCells(*model->FindParam(piece.param), p));
    for (const CellHolders& cell : cells) {
      const Box inter = Intersect(cell.box, piece.box);
      if (inter.IsEmpty()) continue;
      Cut cut{piece.param, inter, piece.dst_offset, {}};
      for (int d = 0; d < inter.rank(); ++d) cut.dst_offset[d] += inter[d].begin - piece.box[d].begin;
      for (const auto* ids : {&cell.primaries, &cell.replicas}) {
        for (int64_t id : *ids) {
          if (source_.alive(id)) cut.holders.push_back(id);
        }
      }
      if (cut.holders.empty()) {
        return Unavailable("model '", request.model, "' version ", p.version, " param '",
                           piece.param, "' box ", inter.ToString(), ": no live holder");
      }
      planned.cuts.push_back(std::move(cut));
    }
  }
  return planned;
}

absl::StatusOr<PullPlan> ParamPulls::PlanPull(const BoxPullRequest& request) {
  MS_ASSIGN_OR_RETURN(Planned planned, Plan(request));
  const Placement& p = *planned.placement;
  PullPlan plan;
  plan.lease_s = absl::ToDoubleSeconds(options_.lease);
  plan.generation = p.generation;
  plan.version = p.version;
  plan.dtype = planned.dtype;
  plan.shape = planned.shape;
  std::map<int64_t, int64_t> assigned;  // bytes per worker in this plan
  for (const Cut& cut : planned.cuts) {
    int64_t best = cut.holders.front();
    for (int64_t id : cut.holders) {
      if (assigned[id] < assigned[best]) best = id;
    }
    assigned[best] += cut.box.NumElements() * DTypeSize(planned.dtype);
    plan.pieces.push_back({cut.param, cut.dst_offset, cut.box, best, p.worker_addresses.at(best)});
  }
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(leases_.size()) >= options_.max_leases) {
    return ResourceExhausted("pull of model '", request.model, "': ", leases_.size(),
                             " pull leases are active, the limit; end some (EndPull) or wait ",
                             plan.lease_s, " s for them to expire");
  }
  static thread_local std::mt19937_64 random{std::random_device{}()};
  plan.lease_id = absl::StrFormat("pull-%d-%016x", next_lease_++, random());
  leases_[plan.lease_id] = {request.model, planned.placement, options_.now() + options_.lease};
  return plan;
}

absl::Status ParamPulls::EndPull(const std::string& model, const std::string& lease_id) {
  std::shared_ptr<const Placement> dropped;  // released outside the lock
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end() || it->second.model != model) {
    return NotFound("pull lease '", lease_id, "' of model '", model,
                    "' is not active (ended, expired after ", absl::FormatDuration(options_.lease),
                    ", or of another model)");
  }
  dropped = std::move(it->second.placement);
  leases_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ParamPulls::ReadCut(const Planned& planned, const Cut& cut,
                                                const Box& inter) {
  // The same elements in the param: cut.box's begin + (inter - dst_offset).
  const Box wanted = Shifted(Shifted(inter, Negated(cut.dst_offset)), Begins(cut.box));
  const Placement& p = *planned.placement;
  const int64_t elem = DTypeSize(planned.dtype);
  absl::Status last = Unavailable("param '", cut.param, "' box ", wanted.ToString(),
                                  ": no live holder");
  for (int64_t id : cut.holders) {
    if (!source_.alive(id)) continue;
    absl::StatusOr<std::shared_ptr<WorkerClient>> client =
        source_.client(id, p.worker_addresses.at(id));
    absl::StatusOr<std::string> bytes =
        client.ok() ? (*client)->ReadParam(
                          {p.model, p.generation, p.version, cut.param, BoxToIr(wanted)},
                          options_.read_timeout)
                    : client.status();
    if (bytes.ok() && static_cast<int64_t>(bytes->size()) != wanted.NumElements() * elem) {
      bytes = Internal("worker ", id, " returned ", bytes->size(), " bytes for box ",
                       wanted.ToString(), " of param '", cut.param, "'");
    }
    if (!bytes.ok()) {
      last = AnnotateStatus(bytes.status(), "ReadParam on worker ", id);
      continue;
    }
    return bytes;
  }
  return last;
}

absl::Status ParamPulls::PullBox(const BoxPullRequest& request,
                                 const std::function<absl::Status(BoxPullChunk)>& sink) {
  // planned.placement pins the version while the box streams.
  MS_ASSIGN_OR_RETURN(Planned planned, Plan(request));
  const int64_t elem = DTypeSize(planned.dtype);
  const int64_t total = Box::FromShape(planned.shape).NumElements() * elem;
  int64_t offset = 0;
  return ForEachSlab(planned.shape, elem, options_.chunk_bytes, [&](const Box& slab) {
    const size_t slab_bytes = static_cast<size_t>(slab.NumElements() * elem);
    std::string buffer;
    for (const Cut& cut : planned.cuts) {
      const Box inter =
          Intersect(Shifted(Box::FromShape(cut.box.shape()), cut.dst_offset), slab);
      if (inter.IsEmpty()) continue;
      MS_ASSIGN_OR_RETURN(std::string bytes, ReadCut(planned, cut, inter), "pull of model '",
                          request.model, "' tensor '", request.name, "'");
      if (inter == slab) {  // one cut holds the whole slab: its bytes are the chunk
        buffer = std::move(bytes);
        break;
      }
      buffer.resize(slab_bytes);
      MS_RETURN_IF_ERROR(InsertBoxBytes(buffer.data(), slab.shape(), elem,
                                        Shifted(inter, Negated(Begins(slab))), bytes.data()));
    }
    buffer.resize(slab_bytes);
    BoxPullChunk chunk;
    chunk.name = request.name;
    chunk.byte_offset = offset;
    chunk.first = offset == 0;
    if (chunk.first) {
      chunk.shape = planned.shape;
      chunk.dtype = planned.dtype;
      chunk.total_bytes = total;
      chunk.version = planned.placement->version;
    }
    offset += static_cast<int64_t>(buffer.size());
    chunk.data = std::move(buffer);
    return sink(std::move(chunk));
  });
}

}  // namespace meshserve
