// DecodeLayout (decode_step.h).
#include "common/program/decode_step.h"

#include <set>
#include <utility>

#include "common/base/status_macros.h"
#include "common/base/status_util.h"

namespace meshserve {

absl::Status ValidateDecodeForks(const DecodeStepIr& step) {
  std::set<int64_t> dsts;
  for (const DecodeForkIr& fork : step.forks) {
    if (fork.num_tokens < 1 || fork.dsts.empty()) {
      return InvalidArgument("decode step ", step.step, ": fork of sequence ", fork.src, " at ",
                             fork.num_tokens, " positions into ", fork.dsts.size(),
                             " sequences (both must be >= 1)");
    }
    for (int64_t dst : fork.dsts) {
      if (dst == fork.src) {
        return InvalidArgument("decode step ", step.step, ": fork of sequence ", fork.src,
                               " into itself");
      }
      if (!dsts.insert(dst).second) {
        return InvalidArgument("decode step ", step.step, ": sequence ", dst,
                               " is forked into twice");
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DecodeLayout> DecodeLayout::Create(DecodeStepIr step, int64_t token_slots,
                                                  int64_t row_slots) {
  if (token_slots < 1 || row_slots < 1) {
    return InvalidArgument("decode step ", step.step, ": a program with ", token_slots,
                           " token slots and ", row_slots, " row slots");
  }
  MS_RETURN_IF_ERROR(ValidateDecodeForks(step));
  DecodeLayout layout;
  layout.slot_span_.assign(token_slots, -1);
  layout.slot_position_.assign(token_slots, -1);
  std::set<int64_t> seqs;
  int64_t slot = 0;
  for (size_t i = 0; i < step.spans.size(); ++i) {
    const DecodeSpanIr& span = step.spans[i];
    if (span.num_tokens < 1 || span.past_len < 0) {
      return InvalidArgument("decode step ", step.step, ": sequence ", span.seq, " has ",
                             span.num_tokens, " tokens past ", span.past_len);
    }
    if (!seqs.insert(span.seq).second) {
      return InvalidArgument("decode step ", step.step, ": sequence ", span.seq,
                             " appears in two spans");
    }
    if (span.num_tokens > token_slots - slot) {
      return InvalidArgument("decode step ", step.step, ": the spans hold more than the ",
                             token_slots, " token slots of the program");
    }
    layout.span_begin_.push_back(slot);
    for (int64_t j = 0; j < span.num_tokens; ++j, ++slot) {
      layout.slot_span_[slot] = static_cast<int64_t>(i);
      layout.slot_position_[slot] = span.past_len + j;
    }
    if (!span.sample) continue;
    if (static_cast<int64_t>(layout.row_slot_.size()) == row_slots) {
      return InvalidArgument("decode step ", step.step, ": more sampled sequences than the ",
                             row_slots, " row slots of the program");
    }
    MS_RETURN_IF_ERROR(ValidateSamplingParams(span.sampling), "decode step ", step.step,
                       " sequence ", span.seq);
    layout.row_slot_.push_back(slot - 1);
    layout.row_span_.push_back(static_cast<int64_t>(i));
  }
  layout.num_tokens_ = slot;
  while (static_cast<int64_t>(layout.row_slot_.size()) < row_slots) {
    layout.row_slot_.push_back(0);
    layout.row_span_.push_back(-1);
  }
  layout.step_ = std::move(step);
  return layout;
}

}  // namespace meshserve
