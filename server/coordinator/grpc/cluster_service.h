// meshserve.ClusterService (Describe, Status, PushParams, PullParams: for
// clients) and
// meshserve.MembershipService (Register, Heartbeat: for workers) over the
// Coordinator. Thin handlers: parse, call the core, convert the status once.
//
// Describe also shows the KV cache of a model that generates
// (KvCacheDescribeValues): per attention layer of its decode variant
// (server/compiler/decode_model.h) two values of kind "kv_cache",
// "<layer>.k_cache" and "<layer>.v_cache", typed like every other array:
//   dtype[tokens, kv_heads, head_dim] with the sharding of the layer's keys
//   on their head and head_dim dims (heads on the model axis), dim 0 (the
//   cached positions) unsharded; tokens = the model's context length (the
//   most positions one sequence caches; 1 when no position table bounds it).
// Their `visualization` is a text block, one line per worker of the
// placement: the bytes one token takes there (the worker's devices' shards of
// [1, kv_heads, head_dim], summed), e.g.
//   bytes per token: worker 3 (devices 0,1): 768
// A model that cannot generate (InspectLm) gets none.
//
// Thread-safety: thread-safe (the Coordinator is).
#ifndef MESHSERVE_SERVER_COORDINATOR_GRPC_CLUSTER_SERVICE_H_
#define MESHSERVE_SERVER_COORDINATOR_GRPC_CLUSTER_SERVICE_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/rpc/call_gate.h"
#include "proto/cluster_service.grpc.pb.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/grpc/edge_auth.h"

namespace meshserve {

void DescribeResultToProto(const DescribeResult& result, DescribeResponse* proto);
// A push's answer (PushParams, PushDirect's commit, CommitPush).
void PushResultToProto(const PushResult& result, PushParamsResponse* response);
// The deadline a push's commit may wait until for --max_live_versions (PushParams,
// PushDirect, CommitPush): the call's, a second early so that the server's
// message (naming the versions still held) reaches the client before gRPC's
// own deadline cuts the call; InfiniteFuture for a call without one.
absl::Time PushDeadline(const grpc::ServerContext& context);

// The kv_cache values of `model` on `placement` (see the file comment); empty
// for a model that cannot generate.
// \error TypeModel's, for a decode variant that does not type on the mesh.
absl::StatusOr<std::vector<DescribeValue>> KvCacheDescribeValues(const ModelFile& model,
                                                                 const Placement& placement);
void ClusterStatusToProto(const std::vector<WorkerView>& workers,
                          const std::vector<ModelStatus>& models,
                          ClusterStatusResponse* proto);

class ClusterServiceImpl final : public ClusterService::Service {
 public:
  // `gate` and `edge` (edge_auth.h) must outlive the service.
  explicit ClusterServiceImpl(Coordinator* coordinator, CallGate* gate,
                              const EdgeOptions* edge = &DefaultEdgeOptions())
      : coordinator_(coordinator), gate_(gate), edge_(*edge) {}
  grpc::Status Describe(grpc::ServerContext*, const DescribeRequest*,
                        DescribeResponse*) override;
  grpc::Status Status(grpc::ServerContext*, const ClusterStatusRequest*,
                      ClusterStatusResponse*) override;
  grpc::Status PushParams(grpc::ServerContext*, grpc::ServerReader<PushParamsChunk>*,
                          PushParamsResponse*) override;
  grpc::Status PushDirect(grpc::ServerContext*,
                          grpc::ServerReaderWriter<PushDirectReply, PushDirectRequest>*) override;
  grpc::Status PullParams(grpc::ServerContext*, const PullParamsRequest*,
                          grpc::ServerWriter<PullParamsChunk>*) override;

  // Push sessions (cluster_params_service.cc).
  grpc::Status BeginPush(grpc::ServerContext*, const BeginPushRequest*, PushSession*) override;
  grpc::Status JoinPush(grpc::ServerContext*, const JoinPushRequest*, PushSession*) override;
  grpc::Status PlanPut(grpc::ServerContext*, const PlanPutRequest*, PlanPutReply*) override;
  grpc::Status StageThrough(grpc::ServerContext*, grpc::ServerReader<StageThroughChunk>*,
                            StageThroughReply*) override;
  grpc::Status CommitPush(grpc::ServerContext*, const CommitPushRequest*,
                          PushParamsResponse*) override;
  grpc::Status AbortPush(grpc::ServerContext*, const AbortPushRequest*,
                         AbortPushReply*) override;

  // Box pulls (cluster_params_service.cc; PullParams too).
  grpc::Status PlanPull(grpc::ServerContext*, const PlanPullRequest*, PlanPullReply*) override;
  grpc::Status EndPull(grpc::ServerContext*, const EndPullRequest*, EndPullReply*) override;

 private:
  Coordinator* const coordinator_;
  CallGate* const gate_;  // admits each call (call_gate.h)
  const EdgeOptions& edge_;
};

class MembershipServiceImpl final : public MembershipService::Service {
 public:
  explicit MembershipServiceImpl(Coordinator* coordinator, CallGate* gate,
                                 const EdgeOptions* edge = &DefaultEdgeOptions())
      : coordinator_(coordinator), gate_(gate), edge_(*edge) {}
  grpc::Status Register(grpc::ServerContext*, const RegisterRequest*,
                        RegisterResponse*) override;
  grpc::Status Heartbeat(grpc::ServerContext*, const HeartbeatRequest*,
                         HeartbeatResponse*) override;

 private:
  Coordinator* const coordinator_;
  CallGate* const gate_;  // admits each call (call_gate.h)
  const EdgeOptions& edge_;
};

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COORDINATOR_GRPC_CLUSTER_SERVICE_H_
