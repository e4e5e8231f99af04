#include "common/tensor/copy_box.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/convert.h"

namespace meshserve {
namespace {

// Copies the elements of `box` between `full` (a row-major array of `shape`)
// and `packed` (row-major over `box`), in the direction `to_packed`, one
// contiguous run at a time (the innermost dims the box spans whole merge into
// one run). The request's bytes are cut and the response's written in place,
// with no intermediate Tensor; `full` is only read when to_packed.
absl::Status CopyBoxRuns(absl::Span<const int64_t> shape, int64_t elem, const Box& box,
                         char* full, char* packed, bool to_packed) {
  const int rank = box.rank();
  if (rank != static_cast<int>(shape.size()) || !Box::FromShape(shape).Contains(box)) {
    return Internal("box ", box.ToString(), " does not lie in shape of rank ", shape.size());
  }
  if (box.IsEmpty()) return absl::OkStatus();
  std::vector<int64_t> stride(rank + 1, elem);  // stride[i]: bytes per step of dim i
  for (int i = rank - 2; i >= 0; --i) stride[i] = stride[i + 1] * shape[i + 1];
  int d = rank - 1;  // dims after d are whole: one run spans them and box[d]
  while (d >= 0 && box[d].begin == 0 && box[d].end == shape[d]) --d;
  const int64_t run = d < 0 ? stride[0] * (rank > 0 ? shape[0] : 1) : box[d].size() * stride[d];
  std::vector<int64_t> idx(std::max(d, 0));
  for (int i = 0; i < d; ++i) idx[i] = box[i].begin;
  for (char* out = packed;; out += run) {
    int64_t off = d < 0 ? 0 : box[d].begin * stride[d];
    for (int i = 0; i < d; ++i) off += idx[i] * stride[i];
    std::memcpy(to_packed ? out : full + off, to_packed ? full + off : out, run);
    int i = d - 1;  // odometer over the dims before d
    while (i >= 0 && ++idx[i] == box[i].end) {
      idx[i] = box[i].begin;
      --i;
    }
    if (i < 0) return absl::OkStatus();
  }
}

}  // namespace

absl::Status ExtractBoxBytes(const char* full, absl::Span<const int64_t> shape, int64_t elem,
                             const Box& box, char* packed) {
  // Only read in this direction.
  return CopyBoxRuns(shape, elem, box, const_cast<char*>(full), packed, /*to_packed=*/true);
}

absl::Status InsertBoxBytes(char* full, absl::Span<const int64_t> shape, int64_t elem,
                            const Box& box, const char* packed) {
  // Only read in this direction.
  return CopyBoxRuns(shape, elem, box, full, const_cast<char*>(packed), /*to_packed=*/false);
}

namespace {

// A row-major walk over `sub` inside two layouts A and B (each the shape of the
// box it holds), as contiguous runs of run_elems elements. Offsets are in
// elements.
struct RunPlan {
  int64_t run_elems = 1;
  std::vector<int64_t> outer_sizes;  // dims [0, k): iterated one by one
  std::vector<int64_t> a_strides, b_strides;
  int64_t a_base = 0, b_base = 0;
};

// a_origin/b_origin: where sub.begin lies in A/B (element coordinates).
RunPlan PlanRuns(const Box& sub, absl::Span<const int64_t> a_shape,
                 absl::Span<const int64_t> a_origin, absl::Span<const int64_t> b_shape,
                 absl::Span<const int64_t> b_origin) {
  RunPlan plan;
  const int rank = sub.rank();
  const std::vector<int64_t> as = RowMajorStrides(a_shape);
  const std::vector<int64_t> bs = RowMajorStrides(b_shape);
  for (int i = 0; i < rank; ++i) {
    plan.a_base += a_origin[i] * as[i];
    plan.b_base += b_origin[i] * bs[i];
  }
  int k = rank;
  while (k > 0) {
    const int64_t n = sub[k - 1].size();
    plan.run_elems *= n;
    --k;
    if (n != a_shape[k] || n != b_shape[k]) break;
  }
  for (int i = 0; i < k; ++i) {
    plan.outer_sizes.push_back(sub[i].size());
    plan.a_strides.push_back(as[i]);
    plan.b_strides.push_back(bs[i]);
  }
  return plan;
}

// Calls fn(a_offset, b_offset) for every run, row-major.
template <typename Fn>
void ForEachRun(const RunPlan& plan, Fn fn) {
  const int k = static_cast<int>(plan.outer_sizes.size());
  for (int64_t s : plan.outer_sizes) {
    if (s == 0) return;
  }
  std::vector<int64_t> idx(k, 0);
  int64_t a = plan.a_base, b = plan.b_base;
  while (true) {
    fn(a, b);
    int d = k - 1;
    for (; d >= 0; --d) {
      ++idx[d];
      a += plan.a_strides[d];
      b += plan.b_strides[d];
      if (idx[d] < plan.outer_sizes[d]) break;
      a -= idx[d] * plan.a_strides[d];
      b -= idx[d] * plan.b_strides[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

absl::Status CheckInside(const Box& held, const Box& sub, absl::string_view what) {
  if (held.rank() != sub.rank()) {
    return InvalidArgument(what, ": sub-box ", sub.ToString(), " has rank ", sub.rank(),
                           " but the tensor holds ", held.ToString(), " of rank ",
                           held.rank());
  }
  for (const Interval& iv : sub.dims()) {
    if (iv.end < iv.begin) {
      return InvalidArgument(what, ": sub-box ", sub.ToString(), " has end < begin");
    }
  }
  if (sub.IsEmpty()) return absl::OkStatus();
  if (!held.Contains(sub)) {
    return OutOfRange(what, ": sub-box ", sub.ToString(), " is not inside the held box ",
                      held.ToString());
  }
  return absl::OkStatus();
}

absl::Status CheckAccumulable(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: case DType::kBFloat16: case DType::kFloat16:
    case DType::kFloat64: case DType::kInt32: case DType::kInt64:
      return absl::OkStatus();
    default:
      return InvalidArgument("cannot accumulate dtype ", DTypeName(dtype));
  }
}

template <typename T>
void AddTyped(const char* src, char* dst, int64_t n) {
  const T* s = reinterpret_cast<const T*>(src);
  T* d = reinterpret_cast<T*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, s + i, sizeof(T));
    d[i] += v;
  }
}

// dst[0:n] += src[0:n] elementwise (see copy_box.h for the precision rule).
void AddRun(DType dtype, const char* src, char* dst, int64_t n) {
  switch (dtype) {
    case DType::kFloat32: AddTyped<float>(src, dst, n); return;
    case DType::kFloat64: AddTyped<double>(src, dst, n); return;
    case DType::kInt32: AddTyped<int32_t>(src, dst, n); return;
    case DType::kInt64: AddTyped<int64_t>(src, dst, n); return;
    default: break;
  }
  constexpr int64_t kChunk = 1024;
  float a[kChunk], b[kChunk];
  const int64_t size = DTypeSize(dtype);
  for (int64_t off = 0; off < n; off += kChunk) {
    const int64_t m = std::min(kChunk, n - off);
    WidenToFloat(dtype, src + off * size, m, a);
    WidenToFloat(dtype, dst + off * size, m, b);
    for (int64_t i = 0; i < m; ++i) b[i] += a[i];
    NarrowFromFloat(b, m, dtype, dst + off * size);
  }
}

std::vector<int64_t> Origin(const Box& sub, const Box& held) {
  std::vector<int64_t> o(sub.rank());
  for (int i = 0; i < sub.rank(); ++i) o[i] = sub[i].begin - held[i].begin;
  return o;
}

// Copies (or, with accumulate, adds) one run of n elements from src to dst.
// The ranges may overlap only when copying (memmove).
void MoveRun(DType dtype, const char* src, char* dst, int64_t n, bool accumulate) {
  if (accumulate) {
    AddRun(dtype, src, dst, n);
  } else {
    std::memmove(dst, src, static_cast<size_t>(n * DTypeSize(dtype)));
  }
}

}  // namespace

absl::Status AppendBox(const BoxTensor& src, const Box& sub, std::string* out) {
  MS_RETURN_IF_ERROR(CheckInside(src.box, sub, "ExtractBox"));
  if (sub.IsEmpty()) return absl::OkStatus();
  const int64_t size = DTypeSize(src.tensor.dtype());
  const size_t start = out->size();
  out->resize(start + static_cast<size_t>(sub.NumElements() * size));
  const std::vector<int64_t> sub_shape = sub.shape();
  const std::vector<int64_t> zero(sub.rank(), 0);
  const RunPlan plan =
      PlanRuns(sub, src.tensor.shape(), Origin(sub, src.box), sub_shape, zero);
  const char* s = src.tensor.raw_data();
  char* d = out->data() + start;
  const size_t run_bytes = static_cast<size_t>(plan.run_elems * size);
  ForEachRun(plan, [&](int64_t a, int64_t b) {
    std::memcpy(d + b * size, s + a * size, run_bytes);
  });
  return absl::OkStatus();
}

absl::StatusOr<std::string> ExtractBox(const BoxTensor& src, const Box& sub) {
  std::string out;
  MS_RETURN_IF_ERROR(AppendBox(src, sub, &out));
  return out;
}

absl::Status InsertBox(BoxTensor* dst, const Box& sub, absl::string_view bytes,
                       bool accumulate) {
  MS_RETURN_IF_ERROR(CheckInside(dst->box, sub, "InsertBox"));
  const DType dtype = dst->tensor.dtype();
  if (accumulate) MS_RETURN_IF_ERROR(CheckAccumulable(dtype), "InsertBox");
  const int64_t size = DTypeSize(dtype);
  const int64_t expected = sub.IsEmpty() ? 0 : sub.NumElements() * size;
  if (static_cast<int64_t>(bytes.size()) != expected) {
    return InvalidArgument("InsertBox: sub-box ", sub.ToString(), " of ", DTypeShortName(dtype),
                           " needs ", expected, " bytes, got ", bytes.size());
  }
  if (sub.IsEmpty()) return absl::OkStatus();
  const std::vector<int64_t> zero(sub.rank(), 0);
  const RunPlan plan =
      PlanRuns(sub, dst->tensor.shape(), Origin(sub, dst->box), sub.shape(), zero);
  char* d = dst->tensor.raw_data();
  const char* s = bytes.data();
  ForEachRun(plan, [&](int64_t a, int64_t b) {
    MoveRun(dtype, s + b * size, d + a * size, plan.run_elems, accumulate);
  });
  return absl::OkStatus();
}

absl::Status CopyBox(const BoxTensor& src, BoxTensor* dst, const Box& sub, bool accumulate) {
  if (src.tensor.dtype() != dst->tensor.dtype()) {
    return InvalidArgument("CopyBox: source ", src.ToString(), " and destination ",
                           dst->ToString(), " have different dtypes");
  }
  MS_RETURN_IF_ERROR(CheckInside(src.box, sub, "CopyBox (source)"));
  MS_RETURN_IF_ERROR(CheckInside(dst->box, sub, "CopyBox (destination)"));
  const DType dtype = dst->tensor.dtype();
  if (accumulate) MS_RETURN_IF_ERROR(CheckAccumulable(dtype), "CopyBox");
  if (sub.IsEmpty()) return absl::OkStatus();
  const int64_t size = DTypeSize(dtype);
  const RunPlan plan = PlanRuns(sub, src.tensor.shape(), Origin(sub, src.box),
                                dst->tensor.shape(), Origin(sub, dst->box));
  const char* s = src.tensor.raw_data();
  char* d = dst->tensor.raw_data();
  ForEachRun(plan, [&](int64_t a, int64_t b) {
    MoveRun(dtype, s + a * size, d + b * size, plan.run_elems, accumulate);
  });
  return absl::OkStatus();
}

}  // namespace meshserve
