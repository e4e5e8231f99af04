// The precompiled header of every test (MESHSERVE_TEST_PCH,
// cmake/meshserve_helpers.cmake): the standard, abseil and GoogleTest headers
// that nearly every test includes, parsed once instead of once per test. Only
// headers without link-time needs belong here (no gRPC: its headers register
// a static initializer that needs libgrpc++).
#ifndef MESHSERVE_TESTS_TESTING_TEST_PCH_H_
#define MESHSERVE_TESTS_TESTING_TEST_PCH_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#endif  // MESHSERVE_TESTS_TESTING_TEST_PCH_H_
