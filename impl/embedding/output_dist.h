// Output distribution, the mirror of input distribution: shard owners look rows up straight into
// the return message, the rows travel back to the ranks that own the samples, and those ranks
// combine them into the output in feature-configuration order. In backward the same routes run
// in reverse (the gradient's packing is the backward's, backward.h).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/comm/encoded.h"
#include "impl/core/exec.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/layout.h"
#include "impl/embedding/pair_rows.h"
#include "impl/embedding/param_store.h"

namespace shardrec::embedding {

struct StepState;  // step_state.h
class HostReduce;  // host_reduce.h

// The data-parallel tables' lookups of this rank's own samples done where their parameters live
// (a GPU collection's device), written into their columns of `out` ([rows, output_dim], host) as
// CombineOutput does on the host; the other columns are left alone.
class DataParallelLookup {
 public:
  virtual ~DataParallelLookup() = default;
  virtual Status LookupDataParallel(const RoutedBatch& rb, float* out) = 0;
};

// The return message's travelling part (everything before rb.ret_self_offset) as it goes on the
// wire when the exchange is encoded (fp16 / bf16): 16-bit elements at the fp32 message's element
// offsets, encoded by `encode` as rows are produced and decoded by `add` (dst += decoded) as they
// are consumed, so the message is never staged in fp32 on either side. Rows a rank keeps for
// itself stay fp32. The values are those of comm::EncodedAllToAllV.
struct WireRows {
  uint16_t* data = nullptr;  // null: the message travels in fp32
  comm::EncodeFn encode = nullptr;
  comm::DecodeAddFn add = nullptr;
};

// Which runs a lookup call covers: a run's rows lie wholly in one source's block of the return
// message, and this rank's own block is last (rb.ret_self_offset), so the rows that travel can be
// looked up (and sent) before this rank's own.
enum class RunSet { kAll, kTravelling, kOwn };

// This rank's own rows that the lookup writes straight into the output instead of the return
// message (no copy by the combine): per unit, whether its rows go there (OwnRowsDirect).
struct DirectRows {
  // One own run that goes there: its rows at out + offset + b * stride.
  struct Run {
    int64_t io = 0;  // the run's io offset in the return message
    float* out = nullptr;
    int64_t offset = 0;
    int64_t stride = 0;
  };
  std::vector<uint8_t> unit;
  std::vector<Run> runs;  // sorted by io offset; empty: none
};

// Sets `direct` for a pooled output `out` ([rows, output_dim], or with `places` a VBE batch's
// places, pair_rows.h): the own units that are the first, in the combine's order, to reach their
// columns and whose place has a bag for each of its rows, so that their returned rows are the
// place's rows in order. Their sums are the kernel's, which starts from +0.0f, so they equal what
// zero-then-add gave bit for bit (no sum reads -0.0f).
void OwnRowsDirect(const Layout& layout, const RoutedBatch& rb, float* out, const PairRows* places,
                   DirectRows* direct);

// Owner side: the runs in `which` of every local shard looked up into `send`
// (rb.ret_floats_total floats, laid out per source rank as the runs' io offsets say), in one
// batched kernel call; with wire.data, the rows for other ranks go there encoded instead; with
// `direct`, the own runs it lists go to their output columns instead. `jobs` is reusable scratch.
Status LookupToSend(const ExecContext& ctx, const Layout& layout, ParamStore& params,
                    const RoutedBatch& rb, std::vector<kernels::LookupJob>* jobs, float* send,
                    const WireRows& wire = {}, RunSet which = RunSet::kAll,
                    const DirectRows* direct = nullptr);

// Sample side: out ([rows, output_dim], overwritten) = the rows returned by the other ranks in
// `recv` (in rank order) and the rows this rank looked up for itself at `self` (the end of its
// own return message, rb.ret_self_offset), added in unit order (row-split partials sum in a
// fixed order), plus the data-parallel tables' lookups done locally, then the MEAN divide.
// A GPU collection passes `device`, which does the data-parallel lookups on the device (its
// parameters are there); null does them on the host. With wire.data the other ranks' rows
// are read encoded from there (and `recv` is unused). With `places` (pooled, host only) pair p's
// row b goes to places->Row(out, p, b) instead of row b of `out`, and only the places are
// written (a VBE batch's B_f rows per feature, vbe.h). `written` (per unit, or null): units whose
// rows the lookup already wrote into `out` or its places (DirectRows), which are skipped.
Status CombineOutput(const ExecContext& ctx, const Layout& layout, ParamStore& params,
                     const RoutedBatch& rb, const float* recv, const float* self,
                     std::vector<kernels::LookupJob>* jobs, float* out,
                     DataParallelLookup* device = nullptr, const WireRows& wire = {},
                     const PairRows* places = nullptr, const uint8_t* written = nullptr);

// The MEAN pairs' columns of a pooled output divided by their bags' divisors (rb.mean_div; an
// empty bag gives 0), in parallel over samples; the last step of CombineOutput, and of a forward
// combined on the device (gpu/step.h LookupCombine). Nothing for sequence collections.
// With `places`, the rows are where they say (CombineOutput).
void DivideMeans(const ExecContext& ctx, const Layout& layout, const RoutedBatch& rb, float* out,
                 const PairRows* places = nullptr);

// Floats of the forward return exchange this rank sends to / receives from each rank (its own
// block, which never travels, counts 0).
inline std::span<const size_t> ReturnSendCounts(const RoutedBatch& rb) { return rb.ret_a2a_to; }
inline std::span<const size_t> ReturnRecvCounts(const RoutedBatch& rb) { return rb.ret_a2a_from; }

// Whether the return (forward) or gradient (backward) exchange travels encoded with the rows
// encoded by the kernels that produce them (WireRows, in s.wire): world > 1, that direction's
// encoding fp16 or bf16 (FP8 blocks share a scale, so they go through comm::EncodedAllToAllV's
// staging pass). The forward's combine decodes as it adds; the backward decodes once before
// its kernels.
inline bool WireInKernels(const Layout& layout, comm::Encoding e) {
  return layout.world > 1 && comm::IsSixteenBitEncoding(e);
}

// Sizes s.ret_send and s.ret_recv for `rb`; returns the floats received.
size_t SizeReturnBuffers(StepState& s, const RoutedBatch& rb);

// The host engine's output distribution of a batch whose rows are resolved, in one call: the
// lookups (the travelling rows first, sent by the communication worker while this thread looks
// up the rows of its own samples), the return exchange over s.comm (every rank takes part), and,
// when it went through and this rank accepted its output (`local`), the combine into `out`.
// Returns the exchange's outcome. The combine writes to s.pair_rows' places when they are set.
// `reduce`, when given and active, carries an fp32 return exchange instead of the flat
// all-to-all (host_reduce.h: row splits that share a host reduce there first); null: flat.
Status LookupReturnAndCombine(StepState& s, RoutedBatch& rb, float* out, const Status& local,
                              HostReduce* reduce);

}  // namespace shardrec::embedding
