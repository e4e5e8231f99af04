// MarkParamOnlySteps: which steps of a compiled plan compute from the params
// alone, so that a ParamCacheMode::kUse run (program_ir.h) can skip them and
// read what a kFill run of the same program and param version kept.
//
// Notation. A buffer is (worker, device, name). A step *writes* its
// destination: compute `output` on `device`, recv `buffer` on `device`, copy
// `dst` on `dst_device` (as written: the worker rejects dst_device < 0, so no
// default is assumed). It *reads*: compute `inputs` on `device`, send `buffer`
// on `device`, copy `src` on `src_device`, output `buffer` on `device`, and an
// accumulating recv or copy also its destination. A free reads nothing. A
// send and a recv are *partners* when they carry the same tag and the recv
// runs on the send's dst_worker (a tag used by two sends or two recvs has no
// partner). A resident param is a "param/" buffer no step writes.
//
// The marking M is the largest set of steps with, for every s in M:
//   (1) s is not an output step, and a send or recv has a partner in M;
//   (2) every buffer s reads is a resident param or param-only;
//   (3) the buffer s writes or frees is param-only;
//   (4) every step that reads a buffer s writes, and is not in M, comes after
//       s in its worker's order (a kept buffer is complete before anything
//       unskipped reads it, whenever the worker captures it);
// where a buffer is *param-only* iff it is neither "in/" nor "param/", has a
// writer, and all its writers are in M. Every condition has the form
// "s in M implies t in M" or "s not in M", so markings that satisfy them are
// closed under union and the largest exists; it is computed by starting from
// every step and dropping violators until stable (a greatest fixpoint: growing
// from nothing never admits an accumulating copy or recv, which reads the
// buffer it writes, so it waits for itself). Marking is sound for
// programs in one global topological order: the value a step reads is made by
// earlier steps, all marked, which by induction read params only.
//
// Compute steps with no inputs ("zeros") depend on nothing the request sends
// (out_box is fixed per program) and are marked like params; "positions" are
// never marked: in a generation step they are the step's positions
// (common/program/decode_step.h), not a function of out_box.
// M never holds frees alone: a marked free's buffer has a writer, all marked.
//
// *Kept* buffers of a worker: its param-only buffers read by a step not in M.
// plan->kept_param_bytes is the most any worker keeps: per buffer, the
// elements of its box times its dtype's size, both from the writer that makes
// the buffer (the last compute writer, else the first writer: recv buffer_box
// and dtype, copy dst_box and dtype). An unset dtype follows the worker: a
// partial compute is float32, else a compute takes its first input's dtype and
// a copy its source's; a resident param's dtype is not in the plan and counts
// as float32 (the compiler always sets out_dtype, so compiled plans never need
// it). A rank-0 box is one element. A buffer the worker reads in place
// counts 0 bytes: its one writer is a copy of a resident param's slice that
// the worker does not make but reads from the param (ParamSliceBoxOf,
// common/program/ir_conv.h; the param taken as float32, as above), and
// every step reading it is a dot_general reading it as input 1 only (any
// other reader makes it a buffer of its own, server/worker/program_run.cc).
// E.g. the LM head's table slice of a generation step (decode_model.h).
//
// Thread-safety: pure function over the plan.
#ifndef MESHSERVE_SERVER_COMPILER_PARAM_ONLY_H_
#define MESHSERVE_SERVER_COMPILER_PARAM_ONLY_H_

#include "server/compiler/compiled_plan.h"

namespace meshserve {

// Sets every program's param_only_steps (ascending) to M of the whole plan and
// plan->kept_param_bytes (0 when nothing is marked). Malformed programs are
// not an error: steps whose buffers or tags do not add up are left unmarked.
void MarkParamOnlySteps(CompiledPlan* plan);

}  // namespace meshserve

#endif  // MESHSERVE_SERVER_COMPILER_PARAM_ONLY_H_
