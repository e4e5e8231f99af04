// Forwarding header: param_moves.h moved to params/param_moves.h. Kept only
// for testing/fake_worker_client.cc and testing/fake_worker_params.cc, which
// still include this path; delete it when they include the new one.
#ifndef MESHSERVE_SERVER_COORDINATOR_PARAM_MOVES_FORWARD_H_
#define MESHSERVE_SERVER_COORDINATOR_PARAM_MOVES_FORWARD_H_

#include "server/coordinator/params/param_moves.h"

#endif  // MESHSERVE_SERVER_COORDINATOR_PARAM_MOVES_FORWARD_H_
