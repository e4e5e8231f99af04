#include "common/tensor/npy.h"

#include <cctype>
#include <cstring>
#include <fstream>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/checked_math.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

// The Python dict literal of a .npy header, restricted to what numpy writes:
// string keys; values are strings, True/False, or tuples of ints.
struct NpyHeader {
  std::optional<std::string> descr;
  std::optional<bool> fortran_order;
  std::optional<std::vector<int64_t>> shape;
};

class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<NpyHeader> Parse() {
    NpyHeader h;
    MS_RETURN_IF_ERROR(Expect('{'));
    while (true) {
      SkipSpace();
      if (Peek() == '}') break;
      MS_ASSIGN_OR_RETURN(std::string key, String());
      MS_RETURN_IF_ERROR(Expect(':'));
      SkipSpace();
      if (key == "descr") {
        MS_ASSIGN_OR_RETURN(h.descr, String());
      } else if (key == "fortran_order") {
        MS_ASSIGN_OR_RETURN(h.fortran_order, Bool());
      } else if (key == "shape") {
        MS_ASSIGN_OR_RETURN(h.shape, Tuple());
      } else {
        return Error(absl::StrCat("unknown key '", key, "'"));
      }
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
        continue;
      }
      if (Peek() != '}') return Error("expected ',' or '}'");
    }
    ++pos_;
    SkipSpace();
    if (pos_ != text_.size()) return Error("trailing characters after the dict");
    return h;
  }

 private:
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  absl::Status Error(absl::string_view what) const {
    return InvalidArgument("malformed header at offset ", pos_, ": ", what);
  }
  absl::Status Expect(char c) {
    SkipSpace();
    if (Peek() != c) return Error(absl::StrCat("expected '", std::string(1, c), "'"));
    ++pos_;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> String() {
    SkipSpace();
    const char quote = Peek();
    if (quote != '\'' && quote != '"') return Error("expected a string");
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == absl::string_view::npos) return Error("unterminated string");
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return s;
  }
  absl::StatusOr<bool> Bool() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    return Error("expected True or False");
  }
  absl::StatusOr<std::vector<int64_t>> Tuple() {
    MS_RETURN_IF_ERROR(Expect('('));
    std::vector<int64_t> dims;
    while (true) {
      SkipSpace();
      if (Peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(Peek()))) return Error("expected a dim");
      int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(Peek()))) {
        if (!CheckedMul(v, 10, &v) || !CheckedAdd(v, Peek() - '0', &v)) {
          return Error("dim too large");
        }
        ++pos_;
      }
      if (Peek() == 'L') ++pos_;  // Python 2 longs
      dims.push_back(v);
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() != ')') {
        return Error("expected ',' or ')'");
      }
    }
    ++pos_;
    return dims;
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

// The .npy descrs we read and write: kind (the descr without its byte-order
// character) and dtype. bfloat16 has no NumPy dtype and is written as <f4.
struct DescrKind {
  absl::string_view kind;
  DType dtype;
  char order;  // the byte-order character we write
};
constexpr DescrKind kDescrKinds[] = {
    {"f4", DType::kFloat32, '<'}, {"f8", DType::kFloat64, '<'}, {"f2", DType::kFloat16, '<'},
    {"i4", DType::kInt32, '<'},   {"i8", DType::kInt64, '<'},   {"i1", DType::kInt8, '|'},
    {"u1", DType::kUInt8, '|'},   {"b1", DType::kBool, '|'},
};

absl::StatusOr<DType> DTypeFromDescr(absl::string_view descr) {
  if (descr.size() >= 2) {
    const char order = descr[0];
    const absl::string_view kind = descr.substr(1);
    if (order == '>' && kind != "i1" && kind != "u1" && kind != "b1") {
      return InvalidArgument("big-endian descr '", descr,
                             "' is not supported (save with dtype.newbyteorder('<'))");
    }
    if (order == '<' || order == '=' || order == '|' || order == '>') {
      for (const DescrKind& d : kDescrKinds) {
        if (d.kind == kind) return d.dtype;
      }
    }
  }
  return InvalidArgument("unsupported descr '", descr,
                         "' (supported: <f4 <f8 <f2 <i4 <i8 |i1 |u1 |b1)");
}

std::string DescrOf(DType dtype) {
  const DType written = dtype == DType::kBFloat16 ? DType::kFloat32 : dtype;
  for (const DescrKind& d : kDescrKinds) {
    if (d.dtype == written) return absl::StrCat(std::string(1, d.order), d.kind);
  }
  return "<f4";
}

absl::StatusOr<NpyLayout> ParseNpyLayoutImpl(absl::string_view bytes) {
  if (bytes.size() < 10 || bytes.substr(0, kMagicLen) != absl::string_view(kMagic, kMagicLen)) {
    return InvalidArgument("not a .npy file (bad magic)");
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_start, header_len;
  if (major == 1) {
    header_start = 10;
    header_len = static_cast<unsigned char>(bytes[8]) |
                 (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return absl::DataLossError("file ends inside the header length");
    header_start = 12;
    header_len = 0;
    for (int i = 3; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[8 + i]);
  } else {
    return InvalidArgument("unsupported .npy format version ", major);
  }
  if (header_len > bytes.size() - header_start) {
    return absl::DataLossError(absl::StrCat("header of ", header_len, " bytes but only ",
                                            bytes.size() - header_start, " follow (truncated?)"));
  }
  MS_ASSIGN_OR_RETURN(NpyHeader h, HeaderParser(bytes.substr(header_start, header_len)).Parse());
  if (!h.descr || !h.fortran_order || !h.shape) {
    return InvalidArgument("header lacks descr, fortran_order or shape");
  }
  MS_ASSIGN_OR_RETURN(DType dtype, DTypeFromDescr(*h.descr));
  if (*h.fortran_order) {
    return InvalidArgument("fortran_order=True is not supported (save a C-order array: ",
                           "np.ascontiguousarray)");
  }
  MS_ASSIGN_OR_RETURN(int64_t n, NumElementsOfShape(*h.shape));
  int64_t need;
  if (!CheckedMul(n, DTypeSize(dtype), &need)) {
    return InvalidArgument("shape ", ShapeToString(*h.shape), " is too large");
  }
  const absl::string_view data = bytes.substr(header_start + header_len);
  if (static_cast<int64_t>(data.size()) < need) {
    return absl::DataLossError(absl::StrCat("shape ", ShapeToString(*h.shape), " of ", *h.descr,
                                            " needs ", need, " data bytes, file has ",
                                            data.size(), " (truncated?)"));
  }
  if (static_cast<int64_t>(data.size()) > need) {
    return InvalidArgument("shape ", ShapeToString(*h.shape), " of ", *h.descr, " needs ", need,
                           " data bytes, file has ", data.size());
  }
  return NpyLayout{dtype, *std::move(h.shape), header_start + header_len};
}

}  // namespace

absl::StatusOr<NpyLayout> ParseNpyLayout(absl::string_view bytes, absl::string_view name) {
  absl::StatusOr<NpyLayout> layout = ParseNpyLayoutImpl(bytes);
  if (!layout.ok()) return AnnotateStatus(layout.status(), "npy '", name, "'");
  return layout;
}

absl::StatusOr<Tensor> ParseNpy(absl::string_view bytes, absl::string_view name) {
  MS_ASSIGN_OR_RETURN(NpyLayout layout, ParseNpyLayout(bytes, name));
  return Tensor::FromBytes(layout.dtype, layout.shape, bytes.substr(layout.data_offset));
}

std::string EncodeNpyHeader(DType dtype, absl::Span<const int64_t> dims) {
  std::string shape;
  if (dims.size() == 1) {
    shape = absl::StrCat("(", dims[0], ",)");
  } else {
    shape = absl::StrCat("(", absl::StrJoin(dims, ", "), ")");
  }
  std::string dict = absl::StrCat("{'descr': '", DescrOf(dtype),
                                  "', 'fortran_order': False, 'shape': ", shape, ", }");
  // Version 1 unless the padded header needs more than 65535 bytes.
  size_t prefix = 10;
  size_t total = prefix + dict.size() + 1;
  total = CeilOfRatio(static_cast<int64_t>(total), 64) * 64;
  int major = 1;
  if (total - prefix > 65535) {
    major = 2;
    prefix = 12;
    total = CeilOfRatio(static_cast<int64_t>(prefix + dict.size() + 1), 64) * 64;
  }
  const size_t header_len = total - prefix;
  dict.append(header_len - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::string out(kMagic, kMagicLen);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  for (size_t i = 0; i < prefix - 8; ++i) out.push_back(static_cast<char>((header_len >> (8 * i)) & 0xFF));
  out += dict;
  return out;
}

std::string EncodeNpy(const Tensor& tensor) {
  std::string out = EncodeNpyHeader(tensor.dtype(), tensor.shape());
  if (tensor.dtype() == DType::kBFloat16) {
    const std::vector<float> widened = tensor.ToFloatVector();
    out.append(reinterpret_cast<const char*>(widened.data()), widened.size() * sizeof(float));
  } else {
    out.append(tensor.bytes().data(), tensor.bytes().size());
  }
  return out;
}

absl::StatusOr<Tensor> ReadNpy(absl::string_view path) {
  MS_ASSIGN_OR_RETURN(std::string file, ReadFileToString(path), "npy");
  return ParseNpy(file, path);
}

absl::Status WriteNpy(absl::string_view path, const Tensor& tensor) {
  if (tensor.dtype() != DType::kBFloat16) {
    return WriteNpyBytes(path, tensor.dtype(), tensor.shape(), tensor.bytes());
  }
  const std::vector<float> widened = tensor.ToFloatVector();
  return WriteNpyBytes(path, DType::kFloat32, tensor.shape(),
                       absl::string_view(reinterpret_cast<const char*>(widened.data()),
                                         widened.size() * sizeof(float)));
}

absl::Status WriteNpyBytes(absl::string_view path, DType dtype, absl::Span<const int64_t> dims,
                           absl::string_view data) {
  if (dtype == DType::kBFloat16) {
    return InvalidArgument("npy '", path, "': bfloat16 bytes (widen them to float32 first)");
  }
  const std::string header = EncodeNpyHeader(dtype, dims);
  std::ofstream out(std::string(path), std::ios::binary | std::ios::trunc);
  if (!out) return Unavailable("npy '", path, "': cannot open for writing");
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  if (!out) return Unavailable("npy '", path, "': write failed");
  return absl::OkStatus();
}

}  // namespace meshserve
