// A generation step as the workers see it (worker_service.proto DecodeStep):
// which sequences the packed tokens of a decode program belong to, where they
// sit in their sequences, and which rows are sampled with what parameters.
//
// A decode program is compiled for buckets: input_ids [1, T] (T token slots)
// and R sampled-row slots. A step packs its spans' tokens in span order into
// slots 0 .. num_tokens - 1; slots past num_tokens are padding (their
// attention reads and writes no cache, their outputs are ignored). The
// sampled rows are the last token of each span with `sample`, numbered in
// span order; rows past their count are padding (they repeat slot 0 and the
// coordinator ignores what they sample).
//
//   spans  [{seq 7, past 0, 3 tokens, sample}, {seq 9, past 12, 1 token, sample}]
//   slots  0 1 2 | 3 | pad ...      positions 0 1 2 | 12 | -
//   rows   slot 2 (seq 7), slot 3 (seq 9), pad ...
//
// Forks run first, then releases, then the spans: a choice forked from a
// source fed the prompt but its last token, then fed that token itself.
//
// Thread-safety: values.
#ifndef MESHSERVE_COMMON_PROGRAM_DECODE_STEP_H_
#define MESHSERVE_COMMON_PROGRAM_DECODE_STEP_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/sampling/sampling_params.h"

namespace meshserve {

struct DecodeSpanIr {
  int64_t seq = 0;
  int64_t past_len = 0;
  int64_t num_tokens = 0;
  bool sample = false;
  SamplingParams sampling;
};

// n choices of one prompt share its prefill: each of `dsts` gets a copy of
// the first num_tokens positions of `src`'s cache (KvCacheStore::Fork).
struct DecodeForkIr {
  int64_t src = 0;
  std::vector<int64_t> dsts;
  int64_t num_tokens = 0;
};

struct DecodeStepIr {
  int64_t step = 0;
  std::vector<DecodeSpanIr> spans;
  std::vector<int64_t> release;  // sequences freed before the step
  std::vector<DecodeForkIr> forks;  // run before the releases
};

// The forks of `step` checked. \error kInvalidArgument naming the value: a
//   fork with num_tokens < 1 or no dsts, a dst equal to its src, a sequence
//   forked into twice.
absl::Status ValidateDecodeForks(const DecodeStepIr& step);

// A step checked against a program's buckets, with each slot's sequence and
// position worked out once.
class DecodeLayout {
 public:
  // \error kInvalidArgument naming the value: ValidateDecodeForks', a span
  //   with num_tokens < 1 or past_len < 0, a sequence in two spans, more tokens than `token_slots`,
  //   more sampled spans than `row_slots`, bad sampling parameters.
  static absl::StatusOr<DecodeLayout> Create(DecodeStepIr step, int64_t token_slots,
                                             int64_t row_slots);

  const DecodeStepIr& step() const { return step_; }
  int64_t token_slots() const { return static_cast<int64_t>(slot_span_.size()); }
  int64_t num_tokens() const { return num_tokens_; }
  // The span of slot t, or -1 for padding; its position in its sequence.
  int64_t SpanOfSlot(int64_t t) const { return slot_span_[t]; }
  int64_t PositionOfSlot(int64_t t) const { return slot_position_[t]; }
  // The first slot of span i.
  int64_t SpanBegin(int64_t i) const { return span_begin_[i]; }
  // Row r's slot (row_slots of them; padding rows read slot 0) and span (-1:
  // padding).
  const std::vector<int64_t>& row_slots() const { return row_slot_; }
  const std::vector<int64_t>& row_spans() const { return row_span_; }

 private:
  DecodeStepIr step_;
  int64_t num_tokens_ = 0;
  std::vector<int64_t> slot_span_, slot_position_, span_begin_, row_slot_, row_span_;
};

}  // namespace meshserve

#endif  // MESHSERVE_COMMON_PROGRAM_DECODE_STEP_H_
