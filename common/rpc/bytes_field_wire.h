// Forwarding header: the wire code moved to common/rpc/zero_copy/
// (bytes_field_wire.h there; README.md says why it exists). Kept only for
// tests/fuzz/bytes_field_wire_fuzz.cc, which still includes this path;
// delete this file once that include names the new one.
#ifndef MESHSERVE_COMMON_RPC_BYTES_FIELD_WIRE_H_
#define MESHSERVE_COMMON_RPC_BYTES_FIELD_WIRE_H_

#include "common/rpc/zero_copy/bytes_field_wire.h"

#endif  // MESHSERVE_COMMON_RPC_BYTES_FIELD_WIRE_H_
