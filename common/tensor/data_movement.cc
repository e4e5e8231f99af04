// Data-movement kernels: Transpose, Reshape, Embed (see kernels.h).
#include <cstring>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/convert.h"
#include "common/tensor/kernel_util.h"
#include "common/tensor/kernels.h"

namespace meshserve {

absl::StatusOr<Tensor> Transpose(const Tensor& x, absl::Span<const int64_t> perm) {
  MS_RETURN_IF_ERROR(kernel_internal::CheckPermutation("Transpose", perm, x.rank()),
                     "input ", x.ToString());
  std::vector<int64_t> out_shape;
  for (int64_t p : perm) out_shape.push_back(x.dim(static_cast<int>(p)));
  Tensor out = Tensor::Zeros(x.dtype(), out_shape);
  kernel_internal::TransposeBytes(x.raw_data(), x.shape(), perm, DTypeSize(x.dtype()),
                                  out.raw_data());
  return out;
}

absl::StatusOr<std::vector<int64_t>> ResolveReshape(absl::Span<const int64_t> from,
                                                    absl::Span<const int64_t> to) {
  MS_ASSIGN_OR_RETURN(int64_t n, NumElementsOfShape(from));
  std::vector<int64_t> out(to.begin(), to.end());
  int unknown = -1;
  int64_t known = 1;
  for (size_t i = 0; i < to.size(); ++i) {
    if (to[i] == -1) {
      if (unknown >= 0) {
        return InvalidArgument("Reshape: target ", ShapeToString(to), " has more than one -1");
      }
      unknown = static_cast<int>(i);
    } else if (to[i] < 0) {
      return InvalidArgument("Reshape: target ", ShapeToString(to), " has a negative dim");
    } else {
      known *= to[i];
    }
  }
  if (unknown >= 0) {
    if (known == 0 || n % known != 0) {
      return InvalidArgument("Reshape: cannot reshape ", ShapeToString(from), " (", n,
                             " elements) to ", ShapeToString(to));
    }
    out[unknown] = n / known;
  } else if (known != n) {
    return InvalidArgument("Reshape: cannot reshape ", ShapeToString(from), " (", n,
                           " elements) to ", ShapeToString(to), " (", known, " elements)");
  }
  return out;
}

absl::StatusOr<Tensor> Reshape(Tensor&& x, absl::Span<const int64_t> shape) {
  MS_ASSIGN_OR_RETURN(std::vector<int64_t> resolved, ResolveReshape(x.shape(), shape));
  Tensor out = std::move(x);
  MS_RETURN_IF_ERROR(out.SetShape(resolved));
  return out;
}

absl::StatusOr<Tensor> Reshape(const Tensor& x, absl::Span<const int64_t> shape) {
  return Reshape(Tensor(x), shape);
}

absl::StatusOr<Tensor> Embed(const Tensor& ids, const BoxTensor& table, DType out_dtype) {
  if (ids.dtype() != DType::kInt32 && ids.dtype() != DType::kInt64) {
    return InvalidArgument("Embed: ids ", ids.ToString(), " must be int32 or int64");
  }
  if (table.tensor.rank() != 2 || table.box.rank() != 2) {
    return InvalidArgument("Embed: table ", table.ToString(), " must be rank 2 [vocab, features]");
  }
  MS_RETURN_IF_ERROR(kernel_internal::CheckFloat("Embed", "table", table.tensor.dtype()));
  MS_RETURN_IF_ERROR(kernel_internal::CheckFloat("Embed", "out_dtype", out_dtype));
  const int64_t features = table.tensor.dim(1);
  std::vector<int64_t> out_shape = ids.shape();
  out_shape.push_back(features);
  MS_ASSIGN_OR_RETURN(Tensor out, Tensor::Create(out_dtype, out_shape));
  const Interval vocab = table.box[0];
  const int64_t in_row = features * DTypeSize(table.tensor.dtype());
  const int64_t out_row = features * DTypeSize(out_dtype);
  for (int64_t i = 0; i < ids.NumElements(); ++i) {
    const int64_t id = ids.dtype() == DType::kInt32 ? ids.data<int32_t>()[i]
                                                     : ids.data<int64_t>()[i];
    if (!vocab.Contains(id)) continue;  // zero row: another shard holds it
    ConvertElements(table.tensor.dtype(), table.tensor.raw_data() + (id - vocab.begin) * in_row,
                    features, out_dtype, out.raw_data() + i * out_row);
  }
  return out;
}

}  // namespace meshserve
