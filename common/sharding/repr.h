// Python-style reprs that JAX's messages and type strings print, in one place.
//
//   PyTupleRepr({5, 2})          "(5, 2)"      PyTupleRepr({5}) "(5,)"   "()"
//   PyTupleRepr({"x", "y"})      "('x', 'y')"  PyTupleRepr({"x"}) "('x',)"
//   EntryRepr(entry)             None | 'x' | ('x', 'y')   (one PartitionSpec entry)
//   EntriesTupleRepr(entries)    ('x', None) | ('x',) | ()
//   AxisSetRepr(axes)            x | (x,y)                 (the type-string form)
//   MeshAxisNamesRepr(mesh)      ('x', 'y')                (mesh.axis_names)
//
// InMeshOrder is the one ordering of a set of axis names used by specs and
// type strings: known axes in mesh order, then names the mesh does not have,
// sorted by name; duplicates removed.
//
// Thread-safety: pure functions.
#ifndef MESHSERVE_COMMON_SHARDING_REPR_H_
#define MESHSERVE_COMMON_SHARDING_REPR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/sharding/mesh.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {

// Python's repr of a tuple of ints (a shape): (), (5,), (5, 2).
std::string PyTupleRepr(absl::Span<const int64_t> values);
// Python's repr of a tuple of strings: (), ('x',), ('x', 'y').
std::string PyTupleRepr(absl::Span<const std::string> names);

// One spec entry as Python prints it: None, 'x', ('x', 'y').
std::string EntryRepr(const PartitionSpec::Entry& entry);
// A tuple of entries: ('x', None), ('x',), ().
std::string EntriesTupleRepr(absl::Span<const PartitionSpec::Entry> entries);

// The axis set of a type string: "x" for one axis, "(x,y)" otherwise.
std::string AxisSetRepr(absl::Span<const std::string> axes);

// mesh.axis_names as Python prints it: ('x', 'y').
std::string MeshAxisNamesRepr(const Mesh& mesh);

// `axes` in mesh order, names unknown to `mesh` last (sorted by name),
// duplicates removed.
std::vector<std::string> InMeshOrder(const Mesh& mesh, std::vector<std::string> axes);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_REPR_H_
