// meshserve.ClusterService (Describe, Status, PushParams, PullParams: for
// clients) and
// meshserve.MembershipService (Register, Heartbeat: for workers) over the
// Coordinator. Thin handlers: parse, call the core, convert the status once.
//
// Thread-safety: thread-safe (the Coordinator is).
#ifndef MESHSERVE_SERVER_COORDINATOR_GRPC_CLUSTER_SERVICE_H_
#define MESHSERVE_SERVER_COORDINATOR_GRPC_CLUSTER_SERVICE_H_

#include "common/rpc/call_gate.h"
#include "proto/cluster_service.grpc.pb.h"
#include "server/coordinator/coordinator.h"
#include "server/coordinator/grpc/edge_auth.h"

namespace meshserve {

void DescribeResultToProto(const DescribeResult& result, DescribeResponse* proto);
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
