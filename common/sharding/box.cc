#include "common/sharding/box.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "common/sharding/text_util.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/base/checked_math.h"
#include "common/base/logging.h"
#include "common/base/status_util.h"

namespace meshserve {

using sharding_internal::PrintableText;

Interval Intersect(const Interval& a, const Interval& b) {
  const int64_t begin = std::max(a.begin, b.begin);
  const int64_t end = std::min(a.end, b.end);
  // Empty results are normalised to begin == end so that equal-empty compare equal
  // in size(); begin is kept for a stable position.
  return Interval{begin, std::max(begin, end)};
}

Box Box::FromShape(absl::Span<const int64_t> shape) {
  Box box;
  box.dims_.reserve(shape.size());
  for (int64_t d : shape) box.dims_.push_back(Interval{0, d});
  return box;
}

std::vector<int64_t> Box::shape() const {
  std::vector<int64_t> out;
  out.reserve(dims_.size());
  for (const Interval& i : dims_) out.push_back(i.size());
  return out;
}

int64_t Box::NumElements() const {
  // Saturates instead of overflowing (boxes parsed from text can be huge).
  int64_t n = 1;
  for (const Interval& i : dims_) {
    if (i.size() == 0) return 0;
  }
  for (const Interval& i : dims_) {
    if (!CheckedMul(n, i.size(), &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

bool Box::IsEmpty() const {
  for (const Interval& i : dims_) {
    if (i.empty()) return true;
  }
  return false;
}

bool Box::Contains(const Box& inner) const {
  if (inner.rank() != rank()) return false;
  if (inner.IsEmpty()) return true;
  for (int d = 0; d < rank(); ++d) {
    if (inner[d].begin < dims_[d].begin || inner[d].end > dims_[d].end) {
      return false;
    }
  }
  return true;
}

std::string Box::ToString() const {
  return absl::StrCat(
      "[",
      absl::StrJoin(dims_, ", ",
                    [](std::string* out, const Interval& i) {
                      absl::StrAppend(out, i.begin, ":", i.end);
                    }),
      "]");
}

bool operator<(const Box& a, const Box& b) {
  return std::lexicographical_compare(
      a.dims_.begin(), a.dims_.end(), b.dims_.begin(), b.dims_.end(),
      [](const Interval& x, const Interval& y) {
        return x.begin != y.begin ? x.begin < y.begin : x.end < y.end;
      });
}

Box Intersect(const Box& a, const Box& b) {
  MS_DCHECK(a.rank() == b.rank());  // invariant: callers compare like with like
  const int rank = std::min(a.rank(), b.rank());
  Box out;
  Box::Dims& dims = out.mutable_dims();
  dims.reserve(rank);
  for (int d = 0; d < rank; ++d) dims.push_back(Intersect(a[d], b[d]));
  return out;
}

namespace {

// Appends a minus b (disjoint boxes) to `out`; nothing when b covers a.
void AppendDifference(const Box& a, const Box& b, std::vector<Box>* out) {
  const Box cut = Intersect(a, b);
  if (cut.IsEmpty()) {
    out->push_back(a);
    return;
  }
  Box rest = a;  // a restricted to the cut in the dims done so far
  for (int d = 0; d < a.rank(); ++d) {
    // The slabs of `rest` below and above the cut in dim d.
    for (const Interval slab : {Interval{rest[d].begin, cut[d].begin},
                                Interval{cut[d].end, rest[d].end}}) {
      if (slab.empty()) continue;
      out->push_back(rest);
      out->back()[d] = slab;
    }
    rest[d] = cut[d];
  }
}

}  // namespace

std::vector<Box> SubtractBox(const Box& a, const Box& b) {
  std::vector<Box> out;
  AppendDifference(a, b, &out);
  return out;
}

std::vector<Box> Uncovered(const Box& from, absl::Span<const Box> minus) {
  std::vector<Box> left;
  if (!from.IsEmpty()) left.push_back(from);
  for (const Box& b : minus) {
    if (left.empty()) break;
    std::vector<Box> next;
    for (const Box& piece : left) AppendDifference(piece, b, &next);
    left = std::move(next);
  }
  return left;
}

int64_t UncoveredElements(const Box& from, absl::Span<const Box> minus) {
  int64_t n = 0;
  for (const Box& piece : Uncovered(from, minus)) n += piece.NumElements();
  return n;
}

absl::StatusOr<Box> ParseBox(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  if (s.size() < 2 || s.front() != '[' || s.back() != ']') {
    return InvalidArgument("invalid box \"", PrintableText(text),
                           "\": expected \"[begin:end, ...]\"");
  }
  s = absl::StripAsciiWhitespace(s.substr(1, s.size() - 2));
  std::vector<Interval> dims;
  // "[]" is the rank-0 box: no intervals. (One return path: GCC 12 reports a
  // false -Wmaybe-uninitialized inside absl::InlinedVector when an early
  // `return Box();` moves the empty box into the StatusOr.)
  std::vector<absl::string_view> parts;
  if (!s.empty()) parts = absl::StrSplit(s, ',');
  for (absl::string_view part : parts) {
    part = absl::StripAsciiWhitespace(part);
    std::vector<absl::string_view> ends = absl::StrSplit(part, ':');
    Interval interval;
    if (ends.size() != 2 ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(ends[0]), &interval.begin) ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(ends[1]), &interval.end)) {
      return InvalidArgument("invalid box \"", PrintableText(text),
                             "\": bad interval \"", PrintableText(part),
                             "\" (expected begin:end)");
    }
    if (interval.begin < 0) {
      return InvalidArgument("invalid box \"", PrintableText(text),
                             "\": interval \"", PrintableText(part),
                             "\" has a negative begin");
    }
    if (interval.begin > interval.end) {
      return InvalidArgument("invalid box \"", PrintableText(text),
                             "\": interval \"", PrintableText(part),
                             "\" has begin > end");
    }
    dims.push_back(interval);
  }
  return Box(std::move(dims));
}

}  // namespace meshserve
