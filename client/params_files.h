// Safetensors files streamed to and from a coordinator's PushParams /
// PullParams (proto/cluster_service.proto), without holding a file in memory:
//
//   PushChunkReader   a .safetensors file as PushParamsChunk messages: every
//                     tensor one whole box (offset 0, shape = the tensor's
//                     shape, its dtype), in order of name, in chunks of at
//                     most `chunk_bytes` read with pread as they are sent.
//                     The first chunk of a box sets model, param, offset,
//                     shape and dtype; every chunk carries byte_offset (its
//                     place in the box's row-major bytes) and data.
//   PulledFileWriter  PullParamsChunk messages as a .safetensors file: data
//                     is appended to PATH.data.tmp as it arrives; Finish
//                     writes the header and the data to PATH.tmp and renames
//                     it to PATH (a failed pull leaves no PATH). Tensors are
//                     stored in arrival order (the model's param order).
//
//   BoxFileWriter     pulled boxes (PlanPull + WorkerService.ReadParam, or a
//                     PullParams box) as a .safetensors file whose tensors
//                     are known up front: Create writes the header and sizes
//                     PATH.tmp; Place writes a chunk of a piece's row-major
//                     bytes straight into its place in a tensor (pwrite of
//                     each run of the chunk that is contiguous in the file:
//                     a piece spanning every trailing dim of the tensor is
//                     one run per chunk, else one run per row of the piece),
//                     so memory stays one chunk however large the box; Finish
//                     checks that every byte was placed and renames to PATH.
//                     Placement math: element e of a piece of shape s at
//                     offset o in a tensor of shape t (strides st, row-major)
//                     has multi-index i = unravel(e, s) and lands at element
//                     sum_d (o_d + i_d) * st_d of the tensor's data.
//
// The writer checks the stream: a param's first chunk names a new param and
// gives its shape, a valid dtype and total_bytes == elements * dtype size;
// chunks of a param arrive in order (byte_offset == bytes so far) and do not
// pass total_bytes; a param given twice, a chunk before any param, a param
// left short, or two versions in one stream are kInternal (a server that does
// not keep the contract), naming the param and the counts.
//
// Thread-safety: PushChunkReader and PulledFileWriter are not thread-safe;
// use one from one thread. BoxFileWriter::Place is thread-safe (pwrite of
// disjoint ranges, an atomic byte count); Create and Finish are not.
#ifndef MESHSERVE_CLIENT_PARAMS_FILES_H_
#define MESHSERVE_CLIENT_PARAMS_FILES_H_

#include <cstdint>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/tensor/safetensors.h"
#include "proto/cluster_service.pb.h"

namespace meshserve {
namespace client {

inline constexpr int64_t kParamChunkBytes = int64_t{1} << 20;

class PushChunkReader {
 public:
  // Opens and validates `path` (SafetensorsFile::Open: headers only).
  // \error kNotFound naming the path when it cannot be opened;
  //   kInvalidArgument for a malformed file or chunk_bytes < 8.
  static absl::StatusOr<std::unique_ptr<PushChunkReader>> Open(const std::string& path,
                                                               std::string model,
                                                               int64_t chunk_bytes = kParamChunkBytes);
  ~PushChunkReader();
  PushChunkReader(const PushChunkReader&) = delete;
  PushChunkReader& operator=(const PushChunkReader&) = delete;

  const std::vector<SafetensorsFile::Entry>& entries() const { return file_.entries(); }
  const SafetensorsFile& file() const { return file_; }
  int64_t total_bytes() const { return total_bytes_; }

  // Next without reading the data: *chunk gets every field but data (left
  // empty), and the data is the `*size` bytes at `*file_offset` of the file.
  absl::StatusOr<bool> NextRange(PushParamsChunk* chunk, int64_t* file_offset, int64_t* size);

  // Fills *chunk with the next chunk (its data buffer is reused); false at
  // the end of the last tensor. A zero-byte tensor is one chunk without data.
  // \error kDataLoss naming the file and the tensor on a short read.
  absl::StatusOr<bool> Next(PushParamsChunk* chunk);

 private:
  PushChunkReader(SafetensorsFile file, std::string model, int64_t chunk_bytes)
      : file_(std::move(file)), model_(std::move(model)), chunk_bytes_(chunk_bytes) {}

  SafetensorsFile file_;
  std::string model_;
  int64_t chunk_bytes_;
  int fd_ = -1;
  int64_t data_start_ = 0;  // 8 + header length
  int64_t total_bytes_ = 0;
  size_t tensor_ = 0;       // entries()[tensor_] is being read
  int64_t byte_offset_ = 0;  // within it
};

class PulledFileWriter {
 public:
  // \error kUnavailable naming the path when PATH.data.tmp cannot be created.
  static absl::StatusOr<std::unique_ptr<PulledFileWriter>> Create(const std::string& path);
  ~PulledFileWriter();  // removes the temp files (and no PATH unless Finish)
  PulledFileWriter(const PulledFileWriter&) = delete;
  PulledFileWriter& operator=(const PulledFileWriter&) = delete;

  // \error see the file comment; kUnavailable on a write failure.
  absl::Status Add(const PullParamsChunk& chunk);
  // Writes PATH. \error kInternal when the last param is short;
  //   kUnavailable naming the path on an I/O failure.
  absl::Status Finish();

  int64_t version() const { return version_; }  // 0: none seen
  int64_t data_bytes() const { return data_bytes_; }
  std::vector<std::string> params() const;
  // The shape of the last param started (empty before any).
  std::vector<int64_t> last_shape() const {
    return params_.empty() ? std::vector<int64_t>{} : params_.back().shape;
  }

 private:
  struct Param {
    std::string name;
    DType dtype = DType::kFloat32;
    std::vector<int64_t> shape;
    int64_t begin = 0;  // in the data region
    int64_t total_bytes = 0;
    int64_t received = 0;
  };
  explicit PulledFileWriter(std::string path) : path_(std::move(path)) {}
  absl::Status StartParam(const PullParamsChunk& chunk);
  absl::Status WriteData(const std::string& data);
  std::string HeaderJson() const;

  std::string path_;
  std::FILE* data_ = nullptr;  // PATH.data.tmp
  std::vector<Param> params_;
  int64_t data_bytes_ = 0;
  int64_t version_ = 0;
  bool finished_ = false;
};

// One tensor of a box pull's file.
struct PulledTensor {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
};

class BoxFileWriter {
 public:
  // `version` (0: none) goes in the metadata. \error kInvalidArgument for a
  //   tensor named twice or a negative dim; kUnavailable naming PATH.tmp when
  //   it cannot be created or sized.
  static absl::StatusOr<std::unique_ptr<BoxFileWriter>> Create(
      const std::string& path, std::vector<PulledTensor> tensors, int64_t version);
  ~BoxFileWriter();  // removes PATH.tmp unless Finish succeeded
  BoxFileWriter(const BoxFileWriter&) = delete;
  BoxFileWriter& operator=(const BoxFileWriter&) = delete;

  // `data` is bytes [byte_offset, byte_offset + data.size()) of the row-major
  // bytes of a piece of shape `piece_shape` at `dst_offset` in tensor
  // `tensor`. \error kOutOfRange for a tensor index outside the file, a piece
  //   outside the tensor or bytes past the piece's end; kInvalidArgument for
  //   a rank that is not the tensor's or bytes not on element boundaries;
  //   kUnavailable on a write failure (all naming the tensor and the values).
  absl::Status Place(size_t tensor, absl::Span<const int64_t> dst_offset,
                     absl::Span<const int64_t> piece_shape, int64_t byte_offset,
                     absl::string_view data);
  // \error kDataLoss naming the first tensor with bytes not placed (counts
  //   given); kUnavailable on an I/O failure.
  absl::Status Finish();

  const std::vector<PulledTensor>& tensors() const { return tensors_; }
  int64_t data_bytes() const;  // of every tensor

 private:
  BoxFileWriter(std::string path, std::vector<PulledTensor> tensors)
      : path_(std::move(path)), tensors_(std::move(tensors)), placed_(tensors_.size()) {}

  std::string path_;
  std::vector<PulledTensor> tensors_;
  std::vector<int64_t> begin_;           // each tensor's first byte in the file
  std::vector<std::atomic<int64_t>> placed_;  // bytes placed per tensor
  int fd_ = -1;                          // PATH.tmp
  bool finished_ = false;
};

}  // namespace client
}  // namespace meshserve

#endif  // MESHSERVE_CLIENT_PARAMS_FILES_H_
