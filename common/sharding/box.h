// Half-open intervals and n-d boxes over a tensor's index space.
//
// An Interval is [begin, end) with begin <= end; it is empty when begin == end.
// A Box is one Interval per dim (dynamic rank). A rank-0 box has one element.
//
//   Intersect([0,4)x[0,8), [2,6)x[4,12)) == [2,4)x[4,8)
//   Box::FromShape({4, 8}) == [0,4)x[0,8);  NumElements == 32
//
// Text form (round-trips through ParseBox): "[0:4, 2:8]"; rank 0 is "[]".
//
// Subtraction: a box minus a box is at most 2 * rank disjoint boxes (per dim
// d, the slab below and above the cut, restricted to the cut in dims < d);
// Uncovered cuts a list of disjoint pieces by each box in turn.
//
//   SubtractBox([0:4, 0:6], [1:3, 2:4])
//     == {[0:1, 0:6], [3:4, 0:6], [1:3, 0:2], [1:3, 4:6]}
//   Uncovered([0:4, 0:6], {[0:2, 0:6], [1:3, 2:4]})
//     == {[3:4, 0:6], [2:3, 0:2], [2:3, 4:6]}   (10 elements, disjoint)
//
// Boxes of rank <= 4 keep their intervals inline (no heap allocation): plans
// hold one Box per transfer, and a full all-gather has about a million.
#ifndef MESHSERVE_COMMON_SHARDING_BOX_H_
#define MESHSERVE_COMMON_SHARDING_BOX_H_

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace meshserve {

struct Interval {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive

  int64_t size() const { return end > begin ? end - begin : 0; }
  bool empty() const { return end <= begin; }
  bool Contains(int64_t i) const { return begin <= i && i < end; }

  friend bool operator==(const Interval& a, const Interval& b) {
    return a.begin == b.begin && a.end == b.end;
  }
  friend bool operator!=(const Interval& a, const Interval& b) { return !(a == b); }
  template <typename H>
  friend H AbslHashValue(H h, const Interval& i) {
    return H::combine(std::move(h), i.begin, i.end);
  }
};

// The intersection; empty (begin == end) when they do not overlap.
Interval Intersect(const Interval& a, const Interval& b);

class Box {
 public:
  using Dims = absl::InlinedVector<Interval, 4>;

  Box() = default;  // rank 0
  explicit Box(absl::Span<const Interval> dims) : dims_(dims.begin(), dims.end()) {}
  explicit Box(std::initializer_list<Interval> dims) : dims_(dims) {}
  // [0, shape[i]) per dim.
  static Box FromShape(absl::Span<const int64_t> shape);

  int rank() const { return static_cast<int>(dims_.size()); }
  absl::Span<const Interval> dims() const { return dims_; }
  Dims& mutable_dims() { return dims_; }
  const Interval& operator[](int dim) const { return dims_[dim]; }
  Interval& operator[](int dim) { return dims_[dim]; }

  // Per-dim sizes.
  std::vector<int64_t> shape() const;
  int64_t NumElements() const;  // saturates at INT64_MAX
  bool IsEmpty() const;  // any dim empty (rank 0 is never empty)
  // True when `inner` lies inside this box (same rank; empty inner is contained).
  bool Contains(const Box& inner) const;

  std::string ToString() const;  // "[0:4, 2:8]"

  friend bool operator==(const Box& a, const Box& b) { return a.dims_ == b.dims_; }
  friend bool operator!=(const Box& a, const Box& b) { return !(a == b); }
  friend bool operator<(const Box& a, const Box& b);  // lexicographic, for sorting
  template <typename H>
  friend H AbslHashValue(H h, const Box& b) {
    return H::combine(std::move(h), absl::MakeConstSpan(b.dims_));
  }
  friend std::ostream& operator<<(std::ostream& os, const Box& b) {
    return os << b.ToString();
  }

 private:
  Dims dims_;
};

// Dim-wise intersection. Precondition (DCHECK): equal ranks.
Box Intersect(const Box& a, const Box& b);

// a minus b as disjoint boxes: {a} when they do not overlap (also when `a` is
// empty), empty when b covers a. Precondition: equal ranks.
std::vector<Box> SubtractBox(const Box& a, const Box& b);

// Disjoint boxes covering exactly the elements of `from` that no box of
// `minus` covers (empty when `from` is covered or empty). Precondition:
// equal ranks.
std::vector<Box> Uncovered(const Box& from, absl::Span<const Box> minus);

// The number of elements of `from` inside none of `minus`.
int64_t UncoveredElements(const Box& from, absl::Span<const Box> minus);

// Parses the ToString() form. \error kInvalidArgument naming the text (also
// for a negative begin or begin > end).
absl::StatusOr<Box> ParseBox(absl::string_view text);

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_SHARDING_BOX_H_
