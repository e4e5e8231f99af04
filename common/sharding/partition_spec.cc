#include "common/sharding/partition_spec.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/base/logging.h"
#include "common/base/status_util.h"

namespace meshserve {
namespace {

void AppendQuoted(std::string* out, const std::string& name) {
  absl::StrAppend(out, "'", name, "'");
}

}  // namespace

const PartitionSpec::Entry& PartitionSpec::entry(int dim) const {
  static const Entry* const kNone = new Entry();
  if (dim < 0 || dim >= size()) return *kNone;
  return entries_[dim];
}

std::vector<std::string> PartitionSpec::AxesUsed() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) out.insert(out.end(), e.begin(), e.end());
  return out;
}

bool PartitionSpec::IsFullyReplicated() const {
  for (const Entry& e : entries_) {
    if (!e.empty()) return false;
  }
  return true;
}

PartitionSpec PartitionSpec::PaddedTo(int rank) const {
  MS_DCHECK(size() <= rank);  // documented precondition
  std::vector<Entry> entries = entries_;
  if (static_cast<int>(entries.size()) < rank) entries.resize(rank);
  return PartitionSpec(std::move(entries), unreduced_);
}

PartitionSpec PartitionSpec::WithoutTrailingNones() const {
  std::vector<Entry> entries = entries_;
  while (!entries.empty() && entries.back().empty()) entries.pop_back();
  return PartitionSpec(std::move(entries), unreduced_);
}

PartitionSpec PartitionSpec::WithUnreduced(
    std::vector<std::string> unreduced) const {
  return PartitionSpec(entries_, std::move(unreduced));
}

std::vector<std::string> PartitionSpec::SortedUnreduced() const {
  std::vector<std::string> out = unreduced_;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string PartitionSpec::ToString() const {
  std::string out = "P(";
  for (int i = 0; i < size(); ++i) {
    if (i > 0) out += ", ";
    const Entry& e = entries_[i];
    if (e.empty()) {
      out += "None";
    } else if (e.size() == 1) {
      AppendQuoted(&out, e[0]);
    } else {
      out += "(";
      for (size_t j = 0; j < e.size(); ++j) {
        if (j > 0) out += ", ";
        AppendQuoted(&out, e[j]);
      }
      out += ")";
    }
  }
  std::vector<std::string> unreduced = SortedUnreduced();
  if (!unreduced.empty()) {
    if (size() > 0) out += ", ";
    out += "unreduced={";
    for (size_t j = 0; j < unreduced.size(); ++j) {
      if (j > 0) out += ", ";
      AppendQuoted(&out, unreduced[j]);
    }
    out += "}";
  }
  out += ")";
  return out;
}

bool operator==(const PartitionSpec& a, const PartitionSpec& b) {
  return a.entries_ == b.entries_ && a.SortedUnreduced() == b.SortedUnreduced();
}

}  // namespace meshserve
