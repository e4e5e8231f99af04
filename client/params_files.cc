#include "client/params_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/checked_math.h"
#include "common/base/file_io.h"
#include "common/base/shape_string.h"
#include "common/base/status_macros.h"
#include "common/base/status_util.h"
#include "common/program/ir_conv.h"
#include "nlohmann/json.hpp"

namespace meshserve {
namespace client {
namespace {

absl::Status WriteFully(std::FILE* file, const char* data, size_t size, absl::string_view path) {
  if (size > 0 && std::fwrite(data, 1, size, file) != size) {
    return Unavailable("cannot write '", path, "': ", std::strerror(errno));
  }
  return absl::OkStatus();
}

}  // namespace

// ---- push ----

absl::StatusOr<std::unique_ptr<PushChunkReader>> PushChunkReader::Open(const std::string& path,
                                                                       std::string model,
                                                                       int64_t chunk_bytes) {
  if (chunk_bytes < 8) return InvalidArgument("chunk size ", chunk_bytes, " is below 8 bytes");
  MS_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  std::unique_ptr<PushChunkReader> reader(
      new PushChunkReader(std::move(file), std::move(model), chunk_bytes));
  reader->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (reader->fd_ < 0) return NotFound("cannot open '", path, "': ", std::strerror(errno));
  reader->data_start_ = reader->file_.data_start();
  for (const SafetensorsFile::Entry& e : reader->entries()) reader->total_bytes_ += e.end - e.begin;
  return reader;
}

PushChunkReader::~PushChunkReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<bool> PushChunkReader::Next(PushParamsChunk* chunk) {
  const std::vector<SafetensorsFile::Entry>& all = entries();
  if (tensor_ >= all.size()) return false;
  const SafetensorsFile::Entry& e = all[tensor_];
  const int64_t size = e.end - e.begin;
  const bool first = byte_offset_ == 0;
  chunk->set_model(first ? model_ : "");
  chunk->set_param(first ? e.name : "");
  chunk->clear_offset();
  chunk->clear_shape();
  chunk->set_dtype(first ? static_cast<DTypeProto>(DTypeToProto(e.dtype)) : DTYPE_INVALID);
  if (first) {
    for (int64_t d : e.shape) {
      chunk->add_offset(0);
      chunk->add_shape(d);
    }
  }
  // Whole elements per chunk (chunk_bytes_ >= 8 >= any dtype size).
  const int64_t element = DTypeSize(e.dtype);
  const int64_t n = std::min(size - byte_offset_, chunk_bytes_ / element * element);
  chunk->set_byte_offset(byte_offset_);
  std::string* data = chunk->mutable_data();
  data->resize(static_cast<size_t>(n));
  MS_RETURN_IF_ERROR(PreadFully(fd_, data->data(), n, data_start_ + e.begin + byte_offset_),
                     "safetensors '", file_.path(), "' tensor '", e.name, "'");
  byte_offset_ += n;
  if (byte_offset_ >= size) {
    ++tensor_;
    byte_offset_ = 0;
  }
  return true;
}

// ---- pull ----

absl::StatusOr<std::unique_ptr<PulledFileWriter>> PulledFileWriter::Create(const std::string& path) {
  std::unique_ptr<PulledFileWriter> writer(new PulledFileWriter(path));
  const std::string data_path = path + ".data.tmp";
  writer->data_ = std::fopen(data_path.c_str(), "wb");
  if (writer->data_ == nullptr) {
    return Unavailable("cannot create '", data_path, "': ", std::strerror(errno));
  }
  return writer;
}

PulledFileWriter::~PulledFileWriter() {
  if (data_ != nullptr) std::fclose(data_);
  std::remove((path_ + ".data.tmp").c_str());
  if (!finished_) std::remove((path_ + ".tmp").c_str());
}

std::vector<std::string> PulledFileWriter::params() const {
  std::vector<std::string> names;
  for (const Param& p : params_) names.push_back(p.name);
  return names;
}

absl::Status PulledFileWriter::StartParam(const PullParamsChunk& chunk) {
  if (chunk.param().empty()) {
    return Internal("pull: a chunk without a param name starts a new param (after ",
                    params_.size(), " params)");
  }
  for (const Param& p : params_) {
    if (p.name == chunk.param()) return Internal("pull: param '", chunk.param(), "' sent twice");
  }
  if (chunk.byte_offset() != 0) {
    return Internal("pull: param '", chunk.param(), "' starts at byte_offset ",
                    chunk.byte_offset(), ", not 0");
  }
  Param p;
  p.name = chunk.param();
  absl::StatusOr<DType> dtype = DTypeFromProto(chunk.dtype());
  if (!dtype.ok()) {
    return Internal("pull: param '", p.name, "' has dtype ", static_cast<int>(chunk.dtype()), ": ",
                    dtype.status().message());
  }
  p.dtype = *dtype;
  int64_t elements = 1;
  for (int64_t d : chunk.shape()) {
    if (d < 0 || !CheckedMul(elements, d, &elements)) {
      return Internal("pull: param '", p.name, "' has a bad shape ",
                      ShapeToCompactString(chunk.shape()));
    }
    p.shape.push_back(d);
  }
  int64_t want = 0;
  if (!CheckedMul(elements, DTypeSize(p.dtype), &want) || want != chunk.total_bytes()) {
    return Internal("pull: param '", p.name, "' ", DTypeName(p.dtype),
                    ShapeToCompactString(p.shape), " announces total_bytes ",
                    chunk.total_bytes(), ", not ", want);
  }
  p.total_bytes = want;
  p.begin = data_bytes_;
  params_.push_back(std::move(p));
  return absl::OkStatus();
}

absl::Status PulledFileWriter::WriteData(const std::string& data) {
  MS_RETURN_IF_ERROR(WriteFully(data_, data.data(), data.size(), path_ + ".data.tmp"));
  data_bytes_ += static_cast<int64_t>(data.size());
  params_.back().received += static_cast<int64_t>(data.size());
  return absl::OkStatus();
}

absl::Status PulledFileWriter::Add(const PullParamsChunk& chunk) {
  if (chunk.version() != 0) {
    if (version_ != 0 && chunk.version() != version_) {
      return Internal("pull: chunk of param '", chunk.param(), "' is of version ",
                      chunk.version(), " after chunks of version ", version_);
    }
    version_ = chunk.version();
  }
  const bool continues = !params_.empty() && params_.back().received < params_.back().total_bytes;
  if (continues && !chunk.param().empty() && chunk.param() != params_.back().name) {
    return Internal("pull: param '", params_.back().name, "' ends after ",
                    params_.back().received, " of ", params_.back().total_bytes,
                    " bytes: the next chunk is of param '", chunk.param(), "'");
  }
  if (!continues) MS_RETURN_IF_ERROR(StartParam(chunk));
  Param& p = params_.back();
  if (chunk.byte_offset() != p.received) {
    return Internal("pull: param '", p.name, "' chunk at byte_offset ", chunk.byte_offset(),
                    " after ", p.received, " bytes");
  }
  if (static_cast<int64_t>(chunk.data().size()) > p.total_bytes - p.received) {
    return Internal("pull: param '", p.name, "' chunk of ", chunk.data().size(),
                    " bytes at byte_offset ", chunk.byte_offset(), " passes its ", p.total_bytes,
                    " bytes");
  }
  return WriteData(chunk.data());
}

std::string PulledFileWriter::HeaderJson() const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (version_ != 0) header["__metadata__"] = {{"version", absl::StrCat(version_)}};
  for (const Param& p : params_) {
    header[p.name] = {{"dtype", std::string(SafetensorsDTypeName(p.dtype))},
                      {"shape", p.shape},
                      {"data_offsets", {p.begin, p.begin + p.total_bytes}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data region starts 8-aligned
  return text;
}

absl::Status PulledFileWriter::Finish() {
  if (!params_.empty() && params_.back().received < params_.back().total_bytes) {
    return Internal("pull: the stream ends in param '", params_.back().name, "' after ",
                    params_.back().received, " of ", params_.back().total_bytes, " bytes");
  }
  const std::string data_path = path_ + ".data.tmp";
  const std::string tmp_path = path_ + ".tmp";
  if (std::fclose(data_) != 0) {
    data_ = nullptr;
    return Unavailable("cannot write '", data_path, "': ", std::strerror(errno));
  }
  data_ = nullptr;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(data_path.c_str(), "rb"),
                                                     &std::fclose);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(std::fopen(tmp_path.c_str(), "wb"),
                                                      &std::fclose);
  if (in == nullptr || out == nullptr) {
    return Unavailable("cannot create '", tmp_path, "': ", std::strerror(errno));
  }
  const std::string header = HeaderJson();
  char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  MS_RETURN_IF_ERROR(WriteFully(out.get(), length, 8, tmp_path));
  MS_RETURN_IF_ERROR(WriteFully(out.get(), header.data(), header.size(), tmp_path));
  std::string buffer(4 << 20, '\0');
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), in.get())) > 0) {
    MS_RETURN_IF_ERROR(WriteFully(out.get(), buffer.data(), n, tmp_path));
  }
  if (std::ferror(in.get())) return Unavailable("cannot read '", data_path, "'");
  if (std::fclose(out.release()) != 0) {
    return Unavailable("cannot write '", tmp_path, "': ", std::strerror(errno));
  }
  if (std::rename(tmp_path.c_str(), path_.c_str()) != 0) {
    return Unavailable("cannot rename '", tmp_path, "' to '", path_, "': ", std::strerror(errno));
  }
  finished_ = true;
  return absl::OkStatus();
}

}  // namespace client
}  // namespace meshserve
