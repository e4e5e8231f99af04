#include "common/rpc/zero_copy/param_chunk_reader.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/rpc/channel.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace meshserve {
namespace {

using ::meshserve::testing::IsOk;
using ::meshserve::testing::StatusIs;

// A peer that answers every call with `messages` (raw bytes, each one
// message) after reading the request, then OK.
class ScriptedPeer : public grpc::CallbackGenericService {
 public:
  explicit ScriptedPeer(std::vector<std::string> messages) : messages_(std::move(messages)) {}

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    class Reactor : public grpc::ServerGenericBidiReactor {
     public:
      explicit Reactor(const std::vector<std::string>& messages) : messages_(messages) {
        StartRead(&request_);
      }
      void OnReadDone(bool) override { Next(); }
      void OnWriteDone(bool ok) override {
        if (!ok) return Finish(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
        Next();
      }
      void OnDone() override { delete this; }

     private:
      void Next() {
        if (next_ == messages_.size()) return Finish(grpc::Status::OK);
        grpc::Slice slice(messages_[next_++]);
        out_ = grpc::ByteBuffer(&slice, 1);
        StartWrite(&out_);
      }
      const std::vector<std::string>& messages_;
      size_t next_ = 0;
      grpc::ByteBuffer request_, out_;
    };
    return new Reactor(messages_);
  }

 private:
  const std::vector<std::string> messages_;
};

class ParamChunkReaderTest : public ::testing::Test {
 protected:
  void Serve(std::vector<std::string> messages) {
    peer_ = std::make_unique<ScriptedPeer>(std::move(messages));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterCallbackGenericService(peer_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        CreateChannel(absl::StrCat("127.0.0.1:", port));
    ASSERT_TRUE(channel.ok()) << channel.status();
    channel_ = *channel;
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }
  // The pieces handed to the sink (their data copied into `data`).
  ParamReadOutcome Read(std::vector<ParamChunkPiece>* pieces,
                        absl::Status sink_error = absl::OkStatus()) {
    grpc::ClientContext context;
    ReadParamRequest request;
    request.set_param("w");
    return ReadParamChunks(channel_.get(), &context, request,
                           [&](const ParamChunkPiece& piece) {
                             pieces->push_back(piece);
                             data_.emplace_back(piece.data);  // a view into the call's buffers
                             pieces->back().data = {};
                             return sink_error;
                           });
  }

  std::vector<std::string> data_;
  std::unique_ptr<ScriptedPeer> peer_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

std::string Chunk(int64_t total, int64_t offset, const std::string& data) {
  ParamChunk chunk;
  chunk.set_total_bytes(total);
  chunk.set_offset(offset);
  chunk.set_dtype(FLOAT32);
  chunk.set_data(data);
  return chunk.SerializeAsString();
}

TEST_F(ParamChunkReaderTest, HandsEveryPieceInOrderWithItsOffset) {
  Serve({Chunk(12, 0, "abcdefgh"), Chunk(12, 8, "ijkl"), Chunk(0, 0, "")});
  std::vector<ParamChunkPiece> pieces;
  ParamReadOutcome read = Read(&pieces);
  EXPECT_THAT(read.chunks, IsOk());
  EXPECT_THAT(read.call, IsOk());
  EXPECT_TRUE(read.any_chunk);
  ASSERT_EQ(pieces.size(), 3u);  // small messages arrive in one slice each
  EXPECT_EQ(pieces[0].offset, 0);
  EXPECT_EQ(pieces[1].offset, 8);
  EXPECT_EQ(pieces[1].total_bytes, 12);
  EXPECT_EQ(pieces[1].dtype, DType::kFloat32);
  EXPECT_EQ(pieces[2].total_bytes, 0);  // a chunk without data: one empty piece
  EXPECT_THAT(data_, ::testing::ElementsAre("abcdefgh", "ijkl", ""));
}

TEST_F(ParamChunkReaderTest, AMessageThatIsNoParamChunkEndsTheReadNamingWhere) {
  Serve({Chunk(8, 0, "abcd"), std::string("\x08\x05\x1A\x09" "ab", 6), Chunk(8, 4, "efgh")});
  std::vector<ParamChunkPiece> pieces;
  ParamReadOutcome read = Read(&pieces);
  EXPECT_THAT(read.chunks, StatusIs(absl::StatusCode::kInvalidArgument,
                                    "a ParamChunk: field 3 at byte 2 has length 9 past the end"));
  EXPECT_EQ(pieces.size(), 1u);  // the good chunk before it, nothing after
  EXPECT_TRUE(read.any_chunk);
}

TEST_F(ParamChunkReaderTest, ADTypeNumberTensorProtoLacksEndsTheReadNamingIt) {
  ParamChunk unset, unknown;
  unset.set_total_bytes(8);
  unset.set_data("abcd");  // DTYPE_INVALID: no dtype, as later chunks send
  unknown.set_total_bytes(8);
  unknown.set_offset(4);
  unknown.set_dtype(static_cast<DTypeProto>(42));
  unknown.set_data("efgh");
  Serve({unset.SerializeAsString(), unknown.SerializeAsString()});
  std::vector<ParamChunkPiece> pieces;
  ParamReadOutcome read = Read(&pieces);
  EXPECT_THAT(read.chunks, StatusIs(absl::StatusCode::kInvalidArgument, "dtype 42"));
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].dtype, std::nullopt);
}

TEST_F(ParamChunkReaderTest, TheSinksErrorCancelsTheCallAndIsReturned) {
  Serve({Chunk(8, 0, "abcd"), Chunk(8, 4, "efgh")});
  std::vector<ParamChunkPiece> pieces;
  ParamReadOutcome read = Read(&pieces, absl::DataLossError("sink refused"));
  EXPECT_THAT(read.chunks, StatusIs(absl::StatusCode::kDataLoss, "sink refused"));
  EXPECT_EQ(pieces.size(), 1u);
}

TEST_F(ParamChunkReaderTest, NoPeerIsUnavailableWithNoChunk) {
  Serve({});
  server_->Shutdown();
  server_.reset();
  std::vector<ParamChunkPiece> pieces;
  ParamReadOutcome read = Read(&pieces);
  EXPECT_FALSE(read.any_chunk);
  EXPECT_THAT(read.chunks, IsOk());
  EXPECT_THAT(read.call, StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace meshserve
