// Flag parsing for the binaries' mains, with a --help that lists their flags.
//
// absl 20220623's --help lists only the flags defined in a file whose name
// matches the program's (`meshserve-worker` vs `worker_main.cc`), so it printed
// "No flags matched", and it exits with status 1. ParseFlags answers --help
// and -h itself: it prints the usage text and every flag defined in the
// binary's own `*_main.cc` files (name, help, default) to stdout and exits 0.
// Every other argument goes to absl::ParseCommandLine, with absl's usage
// config set so that --helpfull and --help=SUBSTRING work too, and --version
// prints `meshserve <version>`.
//
// Only mains call this (flags live in mains, never in libraries).
//
// Thread-safety: call once, before any other thread starts.
#ifndef MESHSERVE_COMMON_BASE_FLAGS_USAGE_H_
#define MESHSERVE_COMMON_BASE_FLAGS_USAGE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace meshserve {

// The --help text: `usage`, then the flags defined in `*_main.cc` files.
std::string FlagsHelpText(absl::string_view usage);

// `usage`: what the program does and how it is called. Exits 0 after printing
// FlagsHelpText on --help/-h; absl exits non-zero on an unknown flag or a bad
// flag value, naming it.
void ParseFlags(int argc, char** argv, absl::string_view usage);

// The start of a server binary's main (meshserve-coordinator,
// meshserve-worker): `log_level` (the main passes $MESHSERVE_LOG_LEVEL; null:
// the default) sets the log threshold, ParseFlags parses the flags with
// `usage`, and Abseil's mutex deadlock detection (its lock-order graph, on in
// Debian's build) is turned off, since it costs every nested lock on the
// request path a graph update; the unit tests keep it on.
void StartServerMain(int argc, char** argv, absl::string_view usage, const char* log_level);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_BASE_FLAGS_USAGE_H_
