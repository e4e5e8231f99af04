// PartitionSpec: per tensor dim, the mesh axes it is split over.
//
// As jax.sharding.PartitionSpec: each entry is None (the dim is not split), one
// axis name, or a tuple of names (split over several axes, major to minor). The
// spec may be shorter than the rank (missing trailing entries are None). A spec
// may also carry `unreduced` axes: the value is a partial sum over them
// (P('x', None, unreduced={'y'}), printed {U:y} in type strings).
//
// Canonical form (jaxlib CanonicalizePartition), applied by every factory here:
//   ()          -> None
//   ('x',)      -> 'x'        so P(('x',), ('y',)) == P('x', 'y')
//   nested tuples are rejected.
// Trailing Nones are kept as written (ToString shows them); use
// `PaddedTo(rank)` / `WithoutTrailingNones()` to compare at a given rank.
//
// Text form (round-trips through ParsePartitionSpec), JAX's syntax:
//   P()                       fully replicated
//   P('fsdp', None, 'model')
//   P(('x', 'y'), None)
//   P('x', unreduced={'y'})
// The parser also accepts "PartitionSpec(...)", double quotes, and a bare list
// without "P".
//
// Thread-safety: immutable value type.
#ifndef MESHSERVE_COMMON_SHARDING_PARTITION_SPEC_H_
#define MESHSERVE_COMMON_SHARDING_PARTITION_SPEC_H_

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace meshserve {

class PartitionSpec {
 public:
  // One dim's entry: the axis names, major to minor; empty means None.
  using Entry = std::vector<std::string>;

  PartitionSpec() = default;  // P()
  // Entries as given (empty entry = None); unreduced axes in any order
  // (stored as given, de-duplicated by the validating factories elsewhere).
  explicit PartitionSpec(std::vector<Entry> entries,
                         std::vector<std::string> unreduced = {})
      : entries_(std::move(entries)), unreduced_(std::move(unreduced)) {}

  const std::vector<Entry>& entries() const { return entries_; }
  int size() const { return static_cast<int>(entries_.size()); }
  // Entry of `dim`; None (empty) for dims past the end.
  const Entry& entry(int dim) const;
  const std::vector<std::string>& unreduced() const { return unreduced_; }

  // Every axis named in the entries, in dim order then major to minor.
  std::vector<std::string> AxesUsed() const;
  // True when no entry names an axis (unreduced axes are not considered).
  bool IsFullyReplicated() const;

  // Padded with None (or truncated? never: precondition size() <= rank) to rank.
  PartitionSpec PaddedTo(int rank) const;
  PartitionSpec WithoutTrailingNones() const;
  PartitionSpec WithUnreduced(std::vector<std::string> unreduced) const;

  // "P('fsdp', None, 'model')", "P(('x', 'y'), None)", "P('x', unreduced={'y'})".
  std::string ToString() const;

  // Equality is on entries (as written, after canonicalisation) and the
  // unreduced set (order-insensitive).
  friend bool operator==(const PartitionSpec& a, const PartitionSpec& b);
  friend bool operator!=(const PartitionSpec& a, const PartitionSpec& b) {
    return !(a == b);
  }
  template <typename H>
  friend H AbslHashValue(H h, const PartitionSpec& s) {
    return H::combine(std::move(h), s.entries_, s.SortedUnreduced());
  }
  friend std::ostream& operator<<(std::ostream& os, const PartitionSpec& s) {
    return os << s.ToString();
  }

 private:
  std::vector<std::string> SortedUnreduced() const;

  std::vector<Entry> entries_;
  std::vector<std::string> unreduced_;
};

// Parses JAX syntax (see the file comment) and canonicalises.
// \error kInvalidArgument naming the text and the position of the problem:
//   unbalanced brackets, nested tuples, a non-string entry, bad unreduced=.
absl::StatusOr<PartitionSpec> ParsePartitionSpec(absl::string_view text);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_PARTITION_SPEC_H_
