#include "server/coordinator/infer_request.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/shape_string.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/sharding/partition_spec.h"

namespace meshserve {
namespace {

bool IsIdPair(DType a, DType b) {
  return (a == DType::kInt32 && b == DType::kInt64) || (a == DType::kInt64 && b == DType::kInt32);
}

// The value of element i of an int32 or int64 tensor's bytes.
int64_t IdAt(const NamedTensor& in, size_t i) {
  if (in.dtype == DType::kInt32) {
    int32_t v;
    std::memcpy(&v, in.bytes.data() + i * sizeof(v), sizeof(v));
    return v;
  }
  int64_t v;
  std::memcpy(&v, in.bytes.data() + i * sizeof(v), sizeof(v));
  return v;
}

// `in` (validated, INT32 or INT64) in dtype `to`.
absl::StatusOr<std::shared_ptr<const NamedTensor>> ConvertIds(const ModelFile& model,
                                                             const NamedTensor& in, DType to) {
  auto out = std::make_shared<NamedTensor>();
  out->name = in.name;
  out->dtype = to;
  out->shape = in.shape;
  const size_t n = in.bytes.size() / DTypeSize(in.dtype);
  out->bytes.resize(n * DTypeSize(to));
  for (size_t i = 0; i < n; ++i) {
    const int64_t v = IdAt(in, i);
    if (to == DType::kInt32) {
      if (v < INT32_MIN || v > INT32_MAX) {
        return InvalidArgument("model '", model.name, "' input '", in.name, "': element ", i,
                               " = ", v, " is outside the int32 range of the input");
      }
      const int32_t w = static_cast<int32_t>(v);
      std::memcpy(&out->bytes[i * sizeof(w)], &w, sizeof(w));
    } else {
      std::memcpy(&out->bytes[i * sizeof(v)], &v, sizeof(v));
    }
  }
  return std::shared_ptr<const NamedTensor>(std::move(out));
}

// Ids read straight from an input by an embed layer lie in [0, vocab).
absl::Status CheckEmbedIds(const ModelFile& model, const NamedTensor& in) {
  for (const LayerDef& l : model.layers) {
    const ParamDef* table = model.FindParam(l.table);
    if (l.kind != ModelOp::kEmbed || l.inputs[0] != in.name || table == nullptr) continue;
    const int64_t vocab = table->shape[0];
    const size_t n = in.bytes.size() / DTypeSize(in.dtype);
    for (size_t i = 0; i < n; ++i) {
      const int64_t id = IdAt(in, i);
      if (id < 0 || id >= vocab) {
        return InvalidArgument("model '", model.name, "' input '", in.name, "': id ", id,
                               " (element ", i, ") is outside [0, ", vocab,
                               ") of embed layer '", l.name, "'");
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateInput(const ModelFile& model, const InputDef& def,
                           const NamedTensor& in) {
  const std::string where = absl::StrCat("model '", model.name, "' input '", in.name, "'");
  if (in.dtype != def.dtype && !IsIdPair(in.dtype, def.dtype)) {
    return InvalidArgument(where, ": dtype ", DTypeName(in.dtype), ", expected ",
                           DTypeName(def.dtype));
  }
  if (in.shape.size() != def.shape.size()) {
    return InvalidArgument(where, ": shape ", ShapeToCompactString(in.shape), " has rank ",
                           in.shape.size(), ", expected rank ", def.shape.size(), " ",
                           ShapeToCompactString(def.shape));
  }
  for (size_t i = 0; i < in.shape.size(); ++i) {
    if (in.shape[i] < 1) {
      return InvalidArgument(where, ": shape ", ShapeToCompactString(in.shape), " dim ", i, " is ",
                             in.shape[i], ", must be >= 1");
    }
    if (def.shape[i] != -1 && def.shape[i] != in.shape[i]) {
      return InvalidArgument(where, ": shape ", ShapeToCompactString(in.shape), " dim ", i, " is ",
                             in.shape[i], ", expected ", def.shape[i], " (model shape ",
                             ShapeToCompactString(def.shape), ")");
    }
  }
  int64_t bytes = DTypeSize(in.dtype);
  for (int64_t d : in.shape) {
    if (__builtin_mul_overflow(bytes, d, &bytes)) {
      return InvalidArgument(where, ": shape ", ShapeToCompactString(in.shape), " overflows int64");
    }
  }
  if (static_cast<int64_t>(in.bytes.size()) != bytes) {
    return InvalidArgument(where, ": ", in.bytes.size(), " bytes of data, expected ", bytes,
                           " (shape ", ShapeToCompactString(in.shape), " ", DTypeName(in.dtype),
                           ")");
  }
  return absl::OkStatus();
}

absl::Status ValidateOutputs(const ModelFile& model, const InferRequest& request,
                             std::vector<std::string>* outputs, OutShardings* specs) {
  const std::string known = absl::StrJoin(model.outputs, ", ");
  auto is_output = [&](const std::string& name) {
    return std::find(model.outputs.begin(), model.outputs.end(), name) != model.outputs.end();
  };
  for (const std::string& name : request.requested_outputs) {
    if (!is_output(name)) {
      return InvalidArgument("model '", model.name, "' has no output '", name,
                             "' (outputs: ", known, ")");
    }
  }
  for (const std::string& name : model.outputs) {
    const auto& req = request.requested_outputs;
    if (req.empty() || std::find(req.begin(), req.end(), name) != req.end()) {
      outputs->push_back(name);
    }
  }
  for (const auto& [name, text] : request.out_shardings) {
    if (!is_output(name)) {
      return InvalidArgument("out_sharding for unknown output '", name, "' of model '",
                             model.name, "' (outputs: ", known, ")");
    }
    absl::StatusOr<PartitionSpec> spec = ParsePartitionSpec(text);
    if (!spec.ok()) {
      return InvalidArgument("output '", name, "': bad out_sharding '", text,
                             "': ", spec.status().message());
    }
    (*specs)[name] = *std::move(spec);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ValidatedRequest> ValidateInferRequest(
    std::shared_ptr<const ModelFile> model_file, const InferRequest& request) {
  if (model_file == nullptr) return Internal("request for model '", request.model, "': no model");
  ValidatedRequest v;
  v.model = std::move(model_file);
  const ModelFile& model = *v.model;
  for (const NamedTensor& in : request.inputs) {
    const InputDef* def = model.FindInput(in.name);
    if (def == nullptr) {
      std::vector<std::string> names;
      for (const InputDef& d : model.inputs) names.push_back(d.name);
      return InvalidArgument("model '", model.name, "' has no input '", in.name,
                             "' (inputs: ", absl::StrJoin(names, ", "), ")");
    }
    if (!v.inputs.emplace(in.name, &in).second) {
      return InvalidArgument("input '", in.name, "' given twice");
    }
    MS_RETURN_IF_ERROR(ValidateInput(model, *def, in));
    if (in.dtype != def->dtype) {
      MS_ASSIGN_OR_RETURN(std::shared_ptr<const NamedTensor> c, ConvertIds(model, in, def->dtype));
      v.inputs[in.name] = c.get();
      v.converted.push_back(std::move(c));
    }
    if (def->dtype == DType::kInt32 || def->dtype == DType::kInt64) {
      MS_RETURN_IF_ERROR(CheckEmbedIds(model, *v.inputs[in.name]));
    }
    v.shapes[in.name] = in.shape;
  }
  for (const InputDef& def : model.inputs) {
    if (!v.inputs.count(def.name)) {
      return InvalidArgument("model '", model.name, "': missing input '", def.name, "'");
    }
  }
  MS_RETURN_IF_ERROR(ValidateOutputs(model, request, &v.outputs, &v.out_specs));
  std::vector<std::string> key;
  for (const auto& [name, shape] : v.shapes) key.push_back(name + ShapeToCompactString(shape));
  for (const auto& [name, spec] : v.out_specs) key.push_back(name + "=" + spec.ToString());
  v.cache_key_suffix = absl::StrJoin(key, ";");
  return v;
}

}  // namespace meshserve
