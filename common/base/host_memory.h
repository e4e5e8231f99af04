// The host's memory, read in one place: the worker's in-flight budget and its
// registered memory_bytes, and `meshserve local`'s KV cache default.
//
//   HostMemoryBytes()  MemTotal of /proc/meminfo ("MemTotal:  24567890 kB")
//                      * 1024; where that line is missing or unreadable,
//                      physical pages * page size (sysconf).
// A cgroup memory limit, which may be lower, is not considered.
//
// Thread-safety: thread-safe (no shared state).
#ifndef MESHSERVE_COMMON_BASE_HOST_MEMORY_H_
#define MESHSERVE_COMMON_BASE_HOST_MEMORY_H_

#include <cstdint>

namespace meshserve {

int64_t HostMemoryBytes();

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_BASE_HOST_MEMORY_H_
