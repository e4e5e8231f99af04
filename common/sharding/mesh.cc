#include "common/sharding/mesh.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "common/sharding/text_util.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/checked_math.h"
#include "common/base/logging.h"
#include "common/base/status_util.h"

namespace meshserve {

using sharding_internal::PrintableText;
namespace {

bool IsIdentifier(absl::string_view name) {
  if (name.empty()) return false;
  if (!(absl::ascii_isalpha(name[0]) || name[0] == '_')) return false;
  for (char c : name) {
    if (!(absl::ascii_isalnum(c) || c == '_')) return false;
  }
  return true;
}

}  // namespace

absl::string_view AxisTypeName(AxisType type) {
  switch (type) {
    case AxisType::kExplicit:
      return "Explicit";
    case AxisType::kAuto:
      return "Auto";
    case AxisType::kManual:
      return "Manual";
  }
  return "Unknown";
}

absl::StatusOr<AxisType> ParseAxisType(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  // Accept "AxisType.Explicit" as Python prints it, and any letter case.
  if (absl::StartsWith(s, "AxisType.")) s.remove_prefix(9);
  for (AxisType t : {AxisType::kExplicit, AxisType::kAuto, AxisType::kManual}) {
    if (absl::EqualsIgnoreCase(s, AxisTypeName(t))) return t;
  }
  return InvalidArgument("unknown axis type \"", PrintableText(text),
                         "\" (expected Explicit, Auto or Manual)");
}

absl::StatusOr<Mesh> Mesh::Create(std::vector<MeshAxis> axes) {
  absl::flat_hash_set<absl::string_view> seen;
  int64_t num_devices = 1;
  for (size_t i = 0; i < axes.size(); ++i) {
    const MeshAxis& axis = axes[i];
    if (axis.name.empty()) {
      return InvalidArgument("mesh axis ", i, " has an empty name");
    }
    if (!IsIdentifier(axis.name)) {
      return InvalidArgument("mesh axis name \"", PrintableText(axis.name),
                             "\" is not an identifier");
    }
    if (!seen.insert(axis.name).second) {
      return InvalidArgument("duplicate mesh axis name '", axis.name, "'");
    }
    if (axis.size < 1) {
      return InvalidArgument("mesh axis '", axis.name, "' has size ", axis.size,
                             "; sizes must be >= 1");
    }
    if (axis.type != AxisType::kExplicit && axis.type != AxisType::kAuto &&
        axis.type != AxisType::kManual) {
      return InvalidArgument("mesh axis '", axis.name, "' has an invalid type ",
                             static_cast<int>(axis.type));
    }
    if (!CheckedMul(num_devices, axis.size, &num_devices)) {
      return InvalidArgument("mesh device count overflows int64 at axis '",
                             axis.name, "' (size ", axis.size, ")");
    }
  }
  return Mesh(std::move(axes), num_devices);
}

std::optional<int> Mesh::AxisIndex(absl::string_view name) const {
  for (int i = 0; i < num_axes(); ++i) {
    if (axes_[i].name == name) return i;
  }
  return std::nullopt;
}

bool Mesh::HasExplicitAxes() const {
  for (const MeshAxis& a : axes_) {
    if (a.type == AxisType::kExplicit) return true;
  }
  return false;
}

absl::StatusOr<std::vector<int64_t>> Mesh::CoordsOfDevice(int64_t device) const {
  if (device < 0 || device >= num_devices_) {
    return OutOfRange("device ", device, " is outside ", ToString(), " (",
                      num_devices_, " devices)");
  }
  return UncheckedCoordsOfDevice(device);
}

std::vector<int64_t> Mesh::UncheckedCoordsOfDevice(int64_t device) const {
  MS_DCHECK(device >= 0 && device < num_devices_);  // documented precondition
  std::vector<int64_t> coords(axes_.size());
  for (int i = num_axes() - 1; i >= 0; --i) {
    coords[i] = device % axes_[i].size;
    device /= axes_[i].size;
  }
  return coords;
}

absl::StatusOr<int64_t> Mesh::DeviceAtCoords(
    absl::Span<const int64_t> coords) const {
  if (static_cast<int>(coords.size()) != num_axes()) {
    return OutOfRange("got ", coords.size(), " coordinates for ", ToString(),
                      " with ", num_axes(), " axes");
  }
  int64_t device = 0;
  for (int i = 0; i < num_axes(); ++i) {
    if (coords[i] < 0 || coords[i] >= axes_[i].size) {
      return OutOfRange("coordinate ", coords[i], " along axis '", axes_[i].name,
                        "' is outside [0, ", axes_[i].size, ") in ", ToString());
    }
    device = device * axes_[i].size + coords[i];
  }
  return device;
}

Mesh Mesh::WithAxisTypes(absl::Span<const std::string> names,
                         AxisType type) const {
  std::vector<MeshAxis> axes = axes_;
  for (MeshAxis& a : axes) {
    for (const std::string& n : names) {
      if (a.name == n) a.type = type;
    }
  }
  return Mesh(std::move(axes), num_devices_);
}

std::string Mesh::ToString() const {
  std::string out = "mesh[";
  for (int i = 0; i < num_axes(); ++i) {
    const MeshAxis& a = axes_[i];
    absl::StrAppend(&out, i == 0 ? "" : ",", a.name, "=", a.size);
    if (a.type != AxisType::kExplicit) {
      absl::StrAppend(&out, ":", AxisTypeName(a.type));
    }
  }
  out += "]";
  return out;
}

absl::StatusOr<Mesh> ParseMesh(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  if (absl::StartsWith(s, "mesh")) {
    absl::string_view rest = absl::StripLeadingAsciiWhitespace(s.substr(4));
    if (!rest.empty() && rest.front() == '[') s = rest;
  }
  if (!s.empty() && s.front() == '[') {
    if (s.back() != ']') {
      return InvalidArgument("invalid mesh \"", PrintableText(text),
                             "\": missing closing ']'");
    }
    s = absl::StripAsciiWhitespace(s.substr(1, s.size() - 2));
  }
  std::vector<MeshAxis> axes;
  if (!s.empty()) {
    for (absl::string_view part : absl::StrSplit(s, ',')) {
      part = absl::StripAsciiWhitespace(part);
      std::vector<absl::string_view> kv = absl::StrSplit(part, '=');
      if (kv.size() != 2) {
        return InvalidArgument("invalid mesh \"", PrintableText(text),
                               "\": bad axis \"", PrintableText(part),
                               "\" (expected name=size[:Type])");
      }
      MeshAxis axis;
      axis.name = std::string(absl::StripAsciiWhitespace(kv[0]));
      std::vector<absl::string_view> size_type = absl::StrSplit(kv[1], ':');
      if (size_type.size() > 2 ||
          !absl::SimpleAtoi(absl::StripAsciiWhitespace(size_type[0]),
                            &axis.size)) {
        return InvalidArgument("invalid mesh \"", PrintableText(text),
                               "\": bad size in \"", PrintableText(part), "\"");
      }
      if (size_type.size() == 2) {
        auto type = ParseAxisType(size_type[1]);
        if (!type.ok()) {
          return InvalidArgument("invalid mesh \"", PrintableText(text),
                                 "\": ", type.status().message());
        }
        axis.type = *type;
      }
      axes.push_back(std::move(axis));
    }
  }
  auto mesh = Mesh::Create(std::move(axes));
  if (!mesh.ok()) {
    return AnnotateStatus(mesh.status(), "invalid mesh \"", PrintableText(text),
                          "\"");
  }
  return mesh;
}

}  // namespace meshserve
