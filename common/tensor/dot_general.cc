// DotGeneral and Linear (see kernels.h). The kernel is chosen by the local
// shape, per batch [M, K] x [K, N]:
//   M <= 16 (AVX-512; else 8) float32 weights, M <= 128 bfloat16 weights
//   (M = 1 too: 1.4-2.5x faster than cblas_sgemv, docs/kernels.md)
//                                     GemmSmallM (gemm_small_m.h: streams the
//                                     weight once for all rows, bf16 read as bf16)
//   other non-float32 weights in place  widened by panels, cblas_sgemm
//   the rest                          cblas_sgemm
// DotGeneralInPlace (dot_general.h): GemmSmallM at the weight's row stride,
// or cblas_sgemm with it as its leading dimension.
// cblas_sgemm packs the whole weight on every call, which dominates small M.
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/tensor/blas.h"
#include "common/tensor/convert.h"
#include "common/tensor/dot_general.h"
#include "common/tensor/gemm_small_m.h"
#include "common/tensor/kernel_util.h"
#include "common/tensor/kernels.h"

namespace meshserve {
namespace {

using kernel_internal::CheckFloat;
using kernel_internal::FinishFloat32;
using kernel_internal::TransposeBytes;

// Checks that `contracting` and `batch` are distinct dims of a rank-`rank`
// operand and returns the remaining (free) dims in order.
absl::StatusOr<std::vector<int64_t>> FreeDims(absl::string_view role, int rank,
                                              absl::Span<const int64_t> contracting,
                                              absl::Span<const int64_t> batch) {
  std::vector<bool> used(rank, false);
  for (absl::Span<const int64_t> list : {contracting, batch}) {
    for (int64_t d : list) {
      if (d < 0 || d >= rank) {
        return InvalidArgument("DotGeneral: ", role, " dim ", d, " is out of range for rank ",
                               rank);
      }
      if (used[d]) {
        return InvalidArgument("DotGeneral: ", role, " dim ", d,
                               " appears more than once in contracting ",
                               ShapeToString(contracting), " / batch ", ShapeToString(batch));
      }
      used[d] = true;
    }
  }
  std::vector<int64_t> free;
  for (int d = 0; d < rank; ++d) {
    if (!used[d]) free.push_back(d);
  }
  return free;
}

std::vector<int64_t> Concat(std::initializer_list<absl::Span<const int64_t>> parts) {
  std::vector<int64_t> out;
  for (auto p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

bool IsIdentity(absl::Span<const int64_t> perm) {
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

int64_t Product(const Tensor& t, absl::Span<const int64_t> dims) {
  int64_t p = 1;
  for (int64_t d : dims) p *= t.dim(static_cast<int>(d));
  return p;
}

// An operand as a float32 buffer in layout [B, X, Y] (or [B, Y, X] when
// *transposed), with X the "outer" group and Y the "inner" group of a GEMM.
struct Operand {
  std::optional<Tensor> storage;
  const float* data = nullptr;
  bool transposed = false;
};

// `natural` = batch + x_dims + y_dims; `swapped` = batch + y_dims + x_dims.
Operand PrepareOperand(const Tensor& t, const std::vector<int64_t>& natural,
                       const std::vector<int64_t>& swapped) {
  Operand op;
  const Tensor* src = &t;
  std::optional<Tensor> permuted;
  if (IsIdentity(natural)) {
    op.transposed = false;
  } else if (IsIdentity(swapped)) {
    op.transposed = true;
  } else {
    std::vector<int64_t> out_shape;
    for (int64_t d : natural) out_shape.push_back(t.dim(static_cast<int>(d)));
    permuted.emplace(Tensor::Zeros(t.dtype(), out_shape));
    TransposeBytes(t.raw_data(), t.shape(), natural, DTypeSize(t.dtype()),
                   permuted->raw_data());
    src = &*permuted;
  }
  if (src->dtype() == DType::kFloat32) {
    if (permuted.has_value()) {
      op.storage = std::move(permuted);
      op.data = op.storage->data<float>();
    } else {
      op.data = t.data<float>();
    }
  } else {
    op.storage.emplace(Tensor::Zeros(DType::kFloat32, src->shape()));
    WidenToFloat(src->dtype(), src->raw_data(), src->NumElements(),
                 op.storage->data<float>());
    op.data = op.storage->data<float>();
  }
  return op;
}

// C[B, M, N] = A . W for a W (rhs) that is not float32 and needs no
// permutation: W is widened one block of kBlockRows x kBlockCols at a time
// into one L2-sized buffer, never whole, and each block is one sgemm (beta = 1
// after the first block of rows). Widening a [2048, 8192] bf16 weight whole
// wrote 64 MiB of fresh float32 pages per call; on a small batch the page
// faults cost ~40x the GEMM itself (bench/gemm_bench, M = 8). Blocks split K
// as well as N: full-K panels of a K = 8192 weight were 64 columns wide, and
// each panel's sgemm re-packed all of A (bench/kernel_ratio_bench, M = 64).
constexpr int64_t kBlockRows = 512, kBlockCols = 512;  // 1 MiB of float32

void GemmWideningRhsByPanels(const Operand& a, int64_t B, int64_t M, int64_t K,
                             int64_t N, const Tensor& w, bool w_transposed, float* c) {
  const int64_t elem = DTypeSize(w.dtype());
  const char* src = static_cast<const char*>(w.raw_data());
  const int64_t kb = std::min(K, kBlockRows), nb = std::min(N, std::max(kBlockCols, M));
  std::unique_ptr<float[]> panel(new float[static_cast<size_t>(kb * nb)]);
  const SmallMIsa isa = DefaultSmallMIsa();
  auto widen = [&w, isa](const char* from, int64_t n, float* to) {
    if (w.dtype() == DType::kBFloat16) {
      WidenBFloat16(reinterpret_cast<const uint16_t*>(from), n, to, isa);
    } else {
      WidenToFloat(w.dtype(), from, n, to);
    }
  };
  for (int64_t i = 0; i < B; ++i) {
    const char* wi = src + i * K * N * elem;
    for (int64_t j0 = 0; j0 < N; j0 += nb) {
      const int64_t cols = std::min(nb, N - j0);
      for (int64_t k0 = 0; k0 < K; k0 += kb) {
        const int64_t rows = std::min(kb, K - k0);
        if (w_transposed) {  // W is [N, K]: the block is [cols, rows]
          for (int64_t j = 0; j < cols; ++j) {
            widen(wi + ((j0 + j) * K + k0) * elem, rows, panel.get() + j * rows);
          }
        } else {  // W is [K, N]: the block is [rows, cols]
          for (int64_t k = 0; k < rows; ++k) {
            widen(wi + ((k0 + k) * N + j0) * elem, cols, panel.get() + k * cols);
          }
        }
        const float* ai = a.data + i * M * K + (a.transposed ? k0 * M : k0);
        cblas_sgemm(CblasRowMajor, a.transposed ? CblasTrans : CblasNoTrans,
                    w_transposed ? CblasTrans : CblasNoTrans, static_cast<int>(M),
                    static_cast<int>(cols), static_cast<int>(rows), 1.0f, ai,
                    static_cast<int>(a.transposed ? M : K), panel.get(),
                    static_cast<int>(w_transposed ? rows : cols), k0 == 0 ? 0.0f : 1.0f,
                    c + i * M * N + j0, static_cast<int>(N));
      }
    }
  }
}

// Whether SmallMDot takes an [M, K] x [K, N] product: one row always; up to the measured crossovers of
// gemm_small_m.h (SmallMMaxRows) for float32 weights, or bf16 weights used in place. Other
// weight dtypes in place keep the widening-by-panels path.
bool UseSmallM(int64_t M, DType rhs_dtype, bool rhs_in_place) {
  const bool f32_or_bf16 = rhs_dtype == DType::kFloat32 || rhs_dtype == DType::kBFloat16;
  if (M == 1) return f32_or_bf16 || !rhs_in_place;
  const SmallMIsa isa = DefaultSmallMIsa();
  if (rhs_dtype == DType::kBFloat16 && rhs_in_place) {
    return M <= SmallMMaxRows(DType::kBFloat16, isa);
  }
  if (rhs_dtype == DType::kFloat32 || !rhs_in_place) {
    return M <= SmallMMaxRows(DType::kFloat32, isa);
  }
  return false;
}

// C[B, M, N] for a small M (UseSmallM), by GemmSmallM. The weights are used in place when float32, or
// bfloat16 in either layout (`rhs_natural` / `rhs_swapped` as in
// PrepareOperand); others (a permuted rhs) are first made a float32 copy.
void SmallMDot(const Operand& a, int64_t B, int64_t M, int64_t K, int64_t N, const Tensor& rhs,
               const std::vector<int64_t>& rhs_natural, const std::vector<int64_t>& rhs_swapped,
               float* c) {
  Operand b;
  SmallMWeights w;
  int64_t w_elem = 4;
  if (rhs.dtype() == DType::kBFloat16 && (IsIdentity(rhs_natural) || IsIdentity(rhs_swapped))) {
    w = {rhs.raw_data(), DType::kBFloat16, !IsIdentity(rhs_natural)};
    w_elem = 2;
  } else {
    b = PrepareOperand(rhs, rhs_natural, rhs_swapped);
    w = {b.data, DType::kFloat32, b.transposed};
  }
  // The kernels read A as row-major [M, K]; a transposed A ([K, M]) is
  // copied (M x K is small next to the weight). For M = 1 both are the same.
  std::vector<float> a_rows;
  if (a.transposed && M > 1) {
    a_rows.resize(static_cast<size_t>(B * M * K));
    const int64_t perm[] = {0, 2, 1};
    const int64_t shape[] = {B, K, M};
    TransposeBytes(reinterpret_cast<const char*>(a.data), shape, perm, sizeof(float),
                   reinterpret_cast<char*>(a_rows.data()));
  }
  const float* a_data = a_rows.empty() ? a.data : a_rows.data();
  const int threads = BlasThreads();
  for (int64_t i = 0; i < B; ++i) {
    const float* ai = a_data + i * M * K;
    const void* wi = static_cast<const char*>(w.data) + i * K * N * w_elem;
    GemmSmallM(ai, M, K, {wi, w.dtype, w.transposed}, N, c + i * M * N, threads,
               DefaultSmallMIsa());
  }
}

}  // namespace

bool IsFloatDType(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kBFloat16 ||
         dtype == DType::kFloat16 || dtype == DType::kFloat64;
}

absl::StatusOr<Tensor> DotGeneral(const Tensor& lhs, const Tensor& rhs,
                                  absl::Span<const int64_t> lhs_contracting,
                                  absl::Span<const int64_t> rhs_contracting,
                                  absl::Span<const int64_t> lhs_batch,
                                  absl::Span<const int64_t> rhs_batch, DType out_dtype) {
  MS_RETURN_IF_ERROR(CheckFloat("DotGeneral", "lhs", lhs.dtype()));
  MS_RETURN_IF_ERROR(CheckFloat("DotGeneral", "rhs", rhs.dtype()));
  MS_RETURN_IF_ERROR(CheckFloat("DotGeneral", "out_dtype", out_dtype));
  const std::string dims_text =
      absl::StrCat("lhs ", lhs.ToString(), " rhs ", rhs.ToString(), " contracting ",
                   ShapeToString(lhs_contracting), "/", ShapeToString(rhs_contracting), " batch ",
                   ShapeToString(lhs_batch), "/", ShapeToString(rhs_batch));
  if (lhs_contracting.size() != rhs_contracting.size() ||
      lhs_batch.size() != rhs_batch.size()) {
    return InvalidArgument("DotGeneral: ", dims_text,
                           ": lhs and rhs need as many contracting and batch dims");
  }
  MS_ASSIGN_OR_RETURN(std::vector<int64_t> lhs_free,
                      FreeDims("lhs", lhs.rank(), lhs_contracting, lhs_batch), dims_text);
  MS_ASSIGN_OR_RETURN(std::vector<int64_t> rhs_free,
                      FreeDims("rhs", rhs.rank(), rhs_contracting, rhs_batch), dims_text);
  for (size_t i = 0; i < lhs_contracting.size(); ++i) {
    if (lhs.dim(lhs_contracting[i]) != rhs.dim(rhs_contracting[i])) {
      return InvalidArgument("DotGeneral: ", dims_text, ": contracting dim sizes differ (",
                             lhs.dim(lhs_contracting[i]), " vs ",
                             rhs.dim(rhs_contracting[i]), ")");
    }
  }
  for (size_t i = 0; i < lhs_batch.size(); ++i) {
    if (lhs.dim(lhs_batch[i]) != rhs.dim(rhs_batch[i])) {
      return InvalidArgument("DotGeneral: ", dims_text, ": batch dim sizes differ (",
                             lhs.dim(lhs_batch[i]), " vs ", rhs.dim(rhs_batch[i]), ")");
    }
  }
  const int64_t B = Product(lhs, lhs_batch);
  const int64_t M = Product(lhs, lhs_free);
  const int64_t K = Product(lhs, lhs_contracting);
  const int64_t N = Product(rhs, rhs_free);
  constexpr int64_t kMaxBlas = std::numeric_limits<int32_t>::max();
  if (M > kMaxBlas || N > kMaxBlas || K > kMaxBlas) {
    return InvalidArgument("DotGeneral: ", dims_text, ": M=", M, " N=", N, " K=", K,
                           " exceed the BLAS int range");
  }
  std::vector<int64_t> out_shape;
  for (int64_t d : lhs_batch) out_shape.push_back(lhs.dim(d));
  for (int64_t d : lhs_free) out_shape.push_back(lhs.dim(d));
  for (int64_t d : rhs_free) out_shape.push_back(rhs.dim(d));
  const std::vector<int64_t> rhs_natural = Concat({rhs_batch, rhs_contracting, rhs_free});
  const std::vector<int64_t> rhs_swapped = Concat({rhs_batch, rhs_free, rhs_contracting});
  const bool rhs_in_place = IsIdentity(rhs_natural) || IsIdentity(rhs_swapped);
  const bool small_m = K > 0 && UseSmallM(M, rhs.dtype(), rhs_in_place);
  // GemmSmallM writes every element, so its output skips the zero fill (a
  // 16-row step's GPT-2 head: 3.2 MB per call); BLAS paths keep it.
  MS_ASSIGN_OR_RETURN(Tensor out,
                      small_m ? Tensor::CreateUninitialized(DType::kFloat32, out_shape)
                                   : Tensor::Create(DType::kFloat32, out_shape),
                      dims_text);
  if (out.NumElements() == 0 || K == 0) return FinishFloat32(std::move(out), out_dtype);

  // lhs as [B, M, K] (or [B, K, M] transposed); rhs as [B, K, N] (or [B, N, K]).
  const Operand a = PrepareOperand(lhs, Concat({lhs_batch, lhs_free, lhs_contracting}),
                                   Concat({lhs_batch, lhs_contracting, lhs_free}));
  if (small_m) {
    SmallMDot(a, B, M, K, N, rhs, rhs_natural, rhs_swapped, out.data<float>());
    return FinishFloat32(std::move(out), out_dtype);
  }
  if (rhs.dtype() != DType::kFloat32 && rhs_in_place) {
    GemmWideningRhsByPanels(a, B, M, K, N, rhs, !IsIdentity(rhs_natural),
                            out.data<float>());
    return FinishFloat32(std::move(out), out_dtype);
  }
  const Operand b = PrepareOperand(rhs, rhs_natural, rhs_swapped);
  const int lda = static_cast<int>(a.transposed ? M : K);
  const int ldb = static_cast<int>(b.transposed ? K : N);
  float* c = out.data<float>();
  for (int64_t i = 0; i < B; ++i) {
    cblas_sgemm(CblasRowMajor, a.transposed ? CblasTrans : CblasNoTrans,
                b.transposed ? CblasTrans : CblasNoTrans, static_cast<int>(M),
                static_cast<int>(N), static_cast<int>(K), 1.0f, a.data + i * M * K, lda,
                b.data + i * K * N, ldb, 0.0f, c + i * M * N, static_cast<int>(N));
  }
  return FinishFloat32(std::move(out), out_dtype);
}

absl::StatusOr<Tensor> DotGeneralInPlace(const Tensor& lhs, const StridedMatrix& w,
                                         int64_t w_contracting, DType out_dtype) {
  MS_RETURN_IF_ERROR(CheckFloat("DotGeneralInPlace", "lhs", lhs.dtype()));
  MS_RETURN_IF_ERROR(CheckFloat("DotGeneralInPlace", "out_dtype", out_dtype));
  const std::string text = absl::StrCat("lhs ", lhs.ToString(), " weight [", w.rows, ", ",
                                        w.cols, "] row_stride ", w.row_stride,
                                        " contracting ", w_contracting);
  if (lhs.rank() < 1 || (w_contracting != 0 && w_contracting != 1) || w.rows < 0 ||
      w.cols < 0 || w.row_stride < w.cols) {
    return InvalidArgument("DotGeneralInPlace: ", text,
                           ": needs lhs rank >= 1, contracting 0 or 1, row_stride >= cols");
  }
  const int64_t K = lhs.dim(lhs.rank() - 1);
  const int64_t N = w_contracting == 1 ? w.rows : w.cols;
  if ((w_contracting == 1 ? w.cols : w.rows) != K) {
    return InvalidArgument("DotGeneralInPlace: ", text, ": contracting dim sizes differ");
  }
  const int64_t M = K == 0 ? 0 : lhs.NumElements() / K;
  constexpr int64_t kMaxBlas = std::numeric_limits<int32_t>::max();
  if (M > kMaxBlas || N > kMaxBlas || K > kMaxBlas || w.row_stride > kMaxBlas) {
    return InvalidArgument("DotGeneralInPlace: ", text, ": exceeds the BLAS int range");
  }
  std::vector<int64_t> out_shape(lhs.shape().begin(), lhs.shape().end() - 1);
  out_shape.push_back(N);
  const bool w_nk = w_contracting == 1;  // W is [N, K]
  // GemmSmallM (below) writes every element: no zero fill. It takes one row
  // too: cblas_sgemv was 2.2-2.6x slower on [N, K] weights at K = 384-768 (a
  // GPT-2 head slice: 15.3 vs 6.3 ms) and 1.4-2.1x on [K, N] ones
  // (docs/kernels.md).
  const bool gemm_small_m =
      K > 0 && M <= SmallMMaxRows(DType::kFloat32, DefaultSmallMIsa());
  MS_ASSIGN_OR_RETURN(Tensor out,
                      gemm_small_m ? Tensor::CreateUninitialized(DType::kFloat32, out_shape)
                                   : Tensor::Create(DType::kFloat32, out_shape),
                      text);
  if (out.NumElements() == 0 || K == 0) return FinishFloat32(std::move(out), out_dtype);
  std::optional<Tensor> widened;
  if (lhs.dtype() != DType::kFloat32) {
    MS_ASSIGN_OR_RETURN(widened, ConvertDType(lhs, DType::kFloat32));
  }
  const float* a = widened.has_value() ? widened->data<float>() : lhs.data<float>();
  const int ld = static_cast<int>(w.row_stride);
  if (gemm_small_m) {
    // Streamed once for all rows, as DotGeneral, in place at its row stride
    // (a slice of columns too: cblas_sgemm would pack the whole slice per call).
    GemmSmallM(a, M, K, {w.data, DType::kFloat32, w_nk, w.row_stride}, N, out.data<float>(),
               BlasThreads(), DefaultSmallMIsa());
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, w_nk ? CblasTrans : CblasNoTrans,
                static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0f, a,
                static_cast<int>(K), w.data, ld, 0.0f, out.data<float>(), static_cast<int>(N));
  }
  return FinishFloat32(std::move(out), out_dtype);
}

absl::StatusOr<Tensor> Linear(const Tensor& x, const Tensor& kernel, const Tensor* bias,
                              DType out_dtype) {
  if (x.rank() < 1 || kernel.rank() != 2) {
    return InvalidArgument("Linear: input ", x.ToString(), " and kernel ", kernel.ToString(),
                           ": need input rank >= 1 and a rank-2 kernel [in, out]");
  }
  const int64_t contract[] = {x.rank() - 1};
  const int64_t kernel_in[] = {0};
  if (bias == nullptr) return DotGeneral(x, kernel, contract, kernel_in, {}, {}, out_dtype);
  if (bias->rank() != 1 || bias->dim(0) != kernel.dim(1)) {
    return InvalidArgument("Linear: bias ", bias->ToString(), " does not match kernel ",
                           kernel.ToString());
  }
  MS_ASSIGN_OR_RETURN(Tensor y,
                      DotGeneral(x, kernel, contract, kernel_in, {}, {}, DType::kFloat32));
  return Add(y, *bias, out_dtype);
}

}  // namespace meshserve
