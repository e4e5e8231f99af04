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

// Checked at BoxFileWriter::Create (no overflow).
int64_t TensorBytes(const PulledTensor& t) {
  int64_t bytes = DTypeSize(t.dtype);
  for (int64_t d : t.shape) bytes *= d;
  return bytes;
}

// The safetensors prefix: 8-byte little-endian length, then the JSON header
// (version in the metadata unless 0), padded so that the data starts
// 8-aligned. begins[i] is tensors[i]'s first byte in the data region.
std::string SafetensorsPrefix(int64_t version, const std::vector<PulledTensor>& tensors,
                              const std::vector<int64_t>& begins) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (version != 0) header["__metadata__"] = {{"version", absl::StrCat(version)}};
  for (size_t i = 0; i < tensors.size(); ++i) {
    const PulledTensor& t = tensors[i];
    const int64_t bytes = TensorBytes(t);
    header[t.name] = {{"dtype", std::string(SafetensorsDTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {begins[i], begins[i] + bytes}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  return prefix + text;
}

absl::Status PwriteFully(int fd, const char* data, int64_t size, int64_t offset,
                         absl::string_view path) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, data, static_cast<size_t>(size), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Unavailable("cannot write '", path, "': ", std::strerror(errno));
    data += n;
    size -= n;
    offset += n;
  }
  return absl::OkStatus();
}

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

absl::StatusOr<bool> PushChunkReader::NextRange(PushParamsChunk* chunk, int64_t* file_offset,
                                                int64_t* size) {
  const std::vector<SafetensorsFile::Entry>& all = entries();
  if (tensor_ >= all.size()) return false;
  const SafetensorsFile::Entry& e = all[tensor_];
  const int64_t tensor_bytes = e.end - e.begin;
  const bool first = byte_offset_ == 0;
  chunk->set_model(first ? model_ : "");
  chunk->set_param(first ? e.name : "");
  chunk->clear_offset();
  chunk->clear_shape();
  chunk->clear_data();
  chunk->set_dtype(first ? static_cast<DTypeProto>(DTypeToProto(e.dtype)) : DTYPE_INVALID);
  if (first) {
    for (int64_t d : e.shape) {
      chunk->add_offset(0);
      chunk->add_shape(d);
    }
  }
  // Whole elements per chunk (chunk_bytes_ >= 8 >= any dtype size).
  const int64_t element = DTypeSize(e.dtype);
  *size = std::min(tensor_bytes - byte_offset_, chunk_bytes_ / element * element);
  *file_offset = data_start_ + e.begin + byte_offset_;
  chunk->set_byte_offset(byte_offset_);
  byte_offset_ += *size;
  if (byte_offset_ >= tensor_bytes) {
    ++tensor_;
    byte_offset_ = 0;
  }
  return true;
}

absl::StatusOr<bool> PushChunkReader::Next(PushParamsChunk* chunk) {
  const size_t tensor = tensor_;
  int64_t at = 0;
  int64_t n = 0;
  MS_ASSIGN_OR_RETURN(bool more, NextRange(chunk, &at, &n));
  if (!more) return false;
  std::string* data = chunk->mutable_data();
  data->resize(static_cast<size_t>(n));
  MS_RETURN_IF_ERROR(PreadFully(fd_, data->data(), n, at), "safetensors '", file_.path(),
                     "' tensor '", entries()[tensor].name, "'");
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
  std::vector<PulledTensor> tensors;
  std::vector<int64_t> begins;
  for (const Param& p : params_) {
    tensors.push_back(PulledTensor{p.name, p.dtype, p.shape});
    begins.push_back(p.begin);
  }
  return SafetensorsPrefix(version_, tensors, begins);
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

// ---- box pull ----

absl::StatusOr<std::unique_ptr<BoxFileWriter>> BoxFileWriter::Create(
    const std::string& path, std::vector<PulledTensor> tensors, int64_t version) {
  std::vector<int64_t> begins;
  int64_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const PulledTensor& t = tensors[i];
    for (size_t j = 0; j < i; ++j) {
      if (tensors[j].name == t.name) return InvalidArgument("pull: tensor '", t.name, "' twice");
    }
    int64_t bytes = DTypeSize(t.dtype);
    for (int64_t d : t.shape) {
      if (d < 0 || !CheckedMul(bytes, d, &bytes)) {
        return InvalidArgument("pull: tensor '", t.name, "' has a bad shape ",
                               ShapeToCompactString(t.shape));
      }
    }
    begins.push_back(total);
    total += bytes;
  }
  std::unique_ptr<BoxFileWriter> writer(new BoxFileWriter(path, std::move(tensors)));
  const std::string tmp = path + ".tmp";
  writer->fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (writer->fd_ < 0) return Unavailable("cannot create '", tmp, "': ", std::strerror(errno));
  const std::string prefix = SafetensorsPrefix(version, writer->tensors_, begins);
  const int64_t start = static_cast<int64_t>(prefix.size());
  for (int64_t& b : begins) b += start;
  writer->begin_ = std::move(begins);
  MS_RETURN_IF_ERROR(PwriteFully(writer->fd_, prefix.data(), start, 0, tmp));
  if (::ftruncate(writer->fd_, static_cast<off_t>(start + total)) != 0) {
    return Unavailable("cannot size '", tmp, "' to ", start + total, " bytes: ",
                       std::strerror(errno));
  }
  return writer;
}

BoxFileWriter::~BoxFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) std::remove((path_ + ".tmp").c_str());
}

int64_t BoxFileWriter::data_bytes() const {
  int64_t total = 0;
  for (const PulledTensor& t : tensors_) total += TensorBytes(t);
  return total;
}

absl::Status BoxFileWriter::Place(size_t tensor, absl::Span<const int64_t> dst_offset,
                                  absl::Span<const int64_t> piece_shape, int64_t byte_offset,
                                  absl::string_view data) {
  if (tensor >= tensors_.size()) {
    return OutOfRange("pull: tensor index ", tensor, " is outside the file's ", tensors_.size(),
                      " tensors");
  }
  const PulledTensor& t = tensors_[tensor];
  const size_t rank = t.shape.size();
  if (dst_offset.size() != rank || piece_shape.size() != rank) {
    return InvalidArgument("pull: piece at ", ShapeToCompactString(dst_offset), " of shape ",
                           ShapeToCompactString(piece_shape), " is not of rank ", rank,
                           " (tensor '", t.name, "')");
  }
  int64_t elements = 1;
  for (size_t d = 0; d < rank; ++d) {
    if (dst_offset[d] < 0 || piece_shape[d] < 0 || dst_offset[d] > t.shape[d] - piece_shape[d]) {
      return OutOfRange("pull: piece at ", ShapeToCompactString(dst_offset), " of shape ",
                        ShapeToCompactString(piece_shape), " is outside tensor '", t.name,
                        "' of shape ", ShapeToCompactString(t.shape));
    }
    elements *= piece_shape[d];
  }
  const int64_t elem = DTypeSize(t.dtype);
  const int64_t size = static_cast<int64_t>(data.size());
  if (byte_offset % elem != 0 || size % elem != 0) {
    return InvalidArgument("pull: ", size, " bytes at byte ", byte_offset, " of a piece of '",
                           t.name, "' are not whole ", DTypeName(t.dtype), " elements");
  }
  if (byte_offset < 0 || byte_offset > elements * elem - size) {
    return OutOfRange("pull: ", size, " bytes at byte ", byte_offset, " pass the ",
                      elements * elem, " bytes of the piece of '", t.name, "' at ",
                      ShapeToCompactString(dst_offset));
  }
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * t.shape[d];
  // Dims after k span the whole tensor: a piece's elements come in runs of
  // piece_shape[k] * stride[k] that are contiguous in the file.
  size_t k = rank == 0 ? 0 : rank - 1;
  while (k > 0 && piece_shape[k] == t.shape[k]) --k;
  const int64_t run = rank == 0 ? 1 : piece_shape[k] * stride[k];
  const char* src = data.data();
  for (int64_t e = byte_offset / elem, end = e + size / elem; e < end;) {
    const int64_t n = std::min(run - e % run, end - e);
    int64_t rest = e;
    int64_t dst = 0;
    for (size_t d = rank; d-- > 0;) {
      dst += (dst_offset[d] + rest % piece_shape[d]) * stride[d];
      rest /= piece_shape[d];
    }
    MS_RETURN_IF_ERROR(
        PwriteFully(fd_, src, n * elem, begin_[tensor] + dst * elem, path_ + ".tmp"));
    src += n * elem;
    e += n;
  }
  placed_[tensor] += size;
  return absl::OkStatus();
}

absl::Status BoxFileWriter::Finish() {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const int64_t bytes = TensorBytes(tensors_[i]);
    if (placed_[i].load() != bytes) {
      return absl::DataLossError(absl::StrCat("pull: tensor '", tensors_[i].name, "' got ",
                                              placed_[i].load(), " of its ", bytes, " bytes"));
    }
  }
  const std::string tmp = path_ + ".tmp";
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Unavailable("cannot write '", tmp, "': ", std::strerror(errno));
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    return Unavailable("cannot rename '", tmp, "' to '", path_, "': ", std::strerror(errno));
  }
  finished_ = true;
  return absl::OkStatus();
}

}  // namespace client
}  // namespace meshserve
