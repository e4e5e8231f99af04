// DecodeStepIr <-> DecodeStep (decode_step_proto.h).
#include "common/program/decode_step_proto.h"

namespace meshserve {

DecodeStepIr DecodeStepFromProto(const DecodeStep& proto) {
  DecodeStepIr ir;
  ir.step = proto.step();
  for (const DecodeSpan& s : proto.spans()) {
    DecodeSpanIr span;
    span.seq = s.seq();
    span.past_len = s.past_len();
    span.num_tokens = s.num_tokens();
    span.sample = s.sample();
    span.sampling.temperature = s.temperature();
    span.sampling.top_k = s.top_k();
    span.sampling.top_p = s.top_p();
    span.sampling.seed = s.seed();
    span.sampling.num_logprobs = s.num_logprobs();
    ir.spans.push_back(span);
  }
  ir.release.assign(proto.release().begin(), proto.release().end());
  for (const DecodeFork& f : proto.forks()) {
    ir.forks.push_back({f.src(), {f.dsts().begin(), f.dsts().end()}, f.num_tokens()});
  }
  return ir;
}

void DecodeStepToProto(const DecodeStepIr& ir, DecodeStep* proto) {
  proto->set_step(ir.step);
  for (const DecodeSpanIr& span : ir.spans) {
    DecodeSpan* s = proto->add_spans();
    s->set_seq(span.seq);
    s->set_past_len(span.past_len);
    s->set_num_tokens(span.num_tokens);
    s->set_sample(span.sample);
    s->set_temperature(span.sampling.temperature);
    s->set_top_k(span.sampling.top_k);
    s->set_top_p(span.sampling.top_p);
    s->set_seed(span.sampling.seed);
    s->set_num_logprobs(span.sampling.num_logprobs);
  }
  for (int64_t seq : ir.release) proto->add_release(seq);
  for (const DecodeForkIr& fork : ir.forks) {
    DecodeFork* f = proto->add_forks();
    f->set_src(fork.src);
    for (int64_t dst : fork.dsts) f->add_dsts(dst);
    f->set_num_tokens(fork.num_tokens);
  }
}

}  // namespace meshserve
