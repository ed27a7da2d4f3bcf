// Input distribution: validates a local batch, routes every id to the shards holding its row
// (all column shards of its row block), exchanges the ids with the shard owners, and describes
// the received ids as runs of bags per local shard. Also records what comes back to whom.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/core/check.h"
#include "impl/core/exec.h"
#include "impl/core/status.h"
#include "impl/embedding/bag_index.h"
#include "impl/embedding/batch.h"
#include "impl/embedding/kernels/kernels.h"
#include "impl/embedding/layout.h"

namespace shardrec::embedding {

// The ids one local shard received, as runs of bags: one run per (source rank, unit), in that
// order, pointing straight into the receive buffer. Pooled runs keep only non-empty bags;
// sequence runs (offsets null) hold one id per output row. A run's outputs (and, in backward,
// its gradients) are contiguous rows of the shard's width in the return buffer.
struct ShardRuns {
  std::vector<kernels::BagRun> runs;
  int64_t num_ids = 0;
};

// Where a run of a batch whose ids travelled between device buffers (input.h) finds its
// ids (and how many it has): byte offsets of its rows and weights (-1: unweighted) in the batch's
// device block of received messages, or of its send block when the ids are this rank's own; the
// index of its CSR offsets in the block's offsets (-1: sequence runs have none).
struct RunPlace {
  bool self = false;
  int64_t ids = 0;  // ids of the run
  int64_t rows_at = 0;
  int64_t weights_at = -1;
  int64_t offsets_at = -1;
};

// One (source rank, unit) whose bag lengths the device turns into CSR offsets
// (simt/unpack_body.h): where its lengths are (as RunPlace::rows_at), its batch size, where its
// offsets go (-1: none, the unit got no bags) and the counts its source announced.
struct UnpackPlace {
  int32_t source = 0;
  bool self = false;
  int64_t lengths_at = 0;
  int64_t batch = 0;
  int64_t offsets_at = -1;
  int64_t ids = 0;
  int64_t bags = 0;
};

// Everything about one batch in flight on this rank. Reused from batch to batch (vectors keep
// their capacity).
struct RoutedBatch {
  // Sender side: this rank's samples.
  int64_t batch_size = 0;
  int64_t num_values = 0;
  bool weighted = false;
  std::vector<int64_t> counts_send;      // kCountFields per rank
  std::vector<int64_t> unit_slots;       // per unit: its lengths in the message (empty: batch_size)
  std::vector<size_t> send_bytes;        // per destination
  std::vector<uint8_t> send;             // lengths (int32), rows (int64), weights (float) per dest
  std::vector<int64_t> ret_count;        // per unit: rows that come back
  std::vector<int64_t> ret_target;       // (destination, unit, row) order: output row of each
  std::vector<size_t> ret_floats_from;   // per destination: floats that come back
  std::vector<float> mean_div;           // [pair * batch_size + b] (MEAN pairs; 0 = empty bag)
  std::vector<int64_t> dp_offsets;       // per DP pair: batch_size + 1 offsets into dp_rows
  std::vector<size_t> dp_offsets_begin;  // per DP pair (index in Layout::dp_pairs)
  std::vector<int64_t> dp_rows;          // rows of DP tables (full-table copies)
  std::vector<float> dp_weights;         // empty when unweighted
  std::vector<int64_t> dp_pos;           // sequence: output row of each DP id

  // Owner side: the ids this rank looks up.
  std::vector<int64_t> counts_recv;  // kCountFields per rank
  std::vector<size_t> recv_bytes;    // per source
  std::vector<uint8_t> recv;
  std::vector<ShardRuns> shards;      // per local shard
  std::vector<int64_t> bag_offsets;   // CSR storage of every pooled run
  std::vector<size_t> ret_floats_to;  // per source: floats this rank returns
  size_t ret_floats_total = 0;
  // The rows this rank looks up for its own samples never travel: they are last in the return
  // message (from ret_self_offset on), the combine reads them there, and in backward their
  // gradients are written there directly. The return exchange's counts leave them out.
  size_t ret_self_offset = 0;
  std::vector<size_t> ret_a2a_to;    // ret_floats_to without this rank's own block
  std::vector<size_t> ret_a2a_from;  // ret_floats_from without this rank's own block
  double worker_seconds = 0;         // time the communication worker spent on this batch

  // The device input distribution (input.h): the ids travel between device buffers, so
  // `recv` stays empty and the runs' pointers are null on the host; run_at (parallel to each
  // shard's runs) says where the device finds them, in the block of batch slot `device_slot`.
  bool device_input = false;
  bool send_on_device = false;  // the routed messages are in the slot block only (device route)
  int32_t device_slot = 0;
  std::vector<int64_t> unit_counts_recv;      // per source: (ids, bags) per unit of this rank
  std::vector<std::vector<RunPlace>> run_at;  // per local shard, per run
  std::vector<UnpackPlace> unpack;            // pooled: per (source, unit) with samples
  size_t csr_entries = 0;                     // int64 CSR offsets of all runs

  // Scratch of the counting pass, reused between batches.
  std::vector<int32_t> unit_lengths;  // [unit * batch_size + b]
  std::vector<int64_t> unit_ids;      // ids per unit
  std::vector<int64_t> unit_cursor;   // fill position per unit
  std::vector<Status> pair_status;    // per pair, while routing in parallel
  std::vector<size_t> a2a_send;       // the id exchange's counts (this rank's own block 0)
  std::vector<size_t> a2a_recv;
  size_t self_offset = 0;  // where this rank's message to itself starts in `send` (last)

  // Set by ExchangeInput: every rank announced the same ForwardMode (none announced kNone) and
  // none rejected, so the forward that follows needs no agreement of its own; then
  // forward_words[r] is the word count rank r announced beside its mode.
  bool forward_agreed = false;
  std::vector<int64_t> forward_words;
};

// What a rank's forward announces in the count exchange when its ranks agree there on the forward
// (its output buffer checked before the exchange, and its training mode), instead of in a
// collective of their own after it: kNone when the forward agrees later (a started input
// distribution, whose output buffer comes with its second call) or needs no agreement.
enum class ForwardMode : int64_t { kNone = 0, kTraining = 1, kEvaluating = 2 };

// Per-rank fields of the count exchange: rejected flag, batch size, ids sent, the message's form
// (FormWord: weighted, and its lengths' layout), ForwardMode, the words announced with it.
constexpr size_t kCountFields = 6;

// What the input exchange of a two-rank collection keeps from batch to batch, alike on both
// ranks: the bytes of ids each direction's first round carries (the last message's size and a
// margin). Each message travels with its counts in one round when it fits, and its rest in a
// second round only when it does not (ExchangeInput). Owned by the collection (StepState), used
// by one exchange at a time.
struct InputCaps {
  size_t to = 0;    // message bytes this rank sends its peer in the first round
  size_t from = 0;  // message bytes it receives from its peer in the first round
};

// The error of a forward whose ranks differ in training mode, on every rank.
Status ModesDiffer();
// The error of a forward on every rank but `rank`, which refused its output buffer.
Status OutputRefused(int64_t rank);

// The byte layout of one routed message: lengths (int32, unit-major), then rows (int64), then
// weights (float, when weighted), each section 8-byte aligned.
struct MessageLayout {
  size_t rows = 0;     // byte offset of the rows
  size_t weights = 0;  // byte offset of the weights
  size_t bytes = 0;
};
MessageLayout LayoutOf(size_t units, int64_t batch, int64_t ids, bool weighted);

// A VBE batch's messages (Batch::feature_bags) carry each unit's own number of length slots: the
// lengths section holds one int32 slot count per unit, then each unit's lengths (the first bags
// of its feature, the later ones being empty), so a padded bag costs nothing on the wire. The
// count exchange's form word says which layout a message has: bit 0 weighted; the bits above it
// 0 for the plain layout (batch_size slots per unit, LayoutOf) or 1 + the message's length slots
// (the sum of its units' counts). The device route sends plain messages only.
int64_t FormWord(bool weighted, int64_t slots /* -1: the plain layout */);
bool FormWeighted(int64_t form);
// The message's length slots, or -1 for the plain layout.
int64_t FormSlots(int64_t form);
// The layout of a message of either form from its counts (kCountFields words; batch size, ids,
// form); a per-unit message's lengths section is 4 * (units + slots) bytes, 8-byte aligned.
MessageLayout LayoutOfCounts(size_t units, const int64_t* counts);

// The bag lengths of one received message, unit by unit in the order of its destination's units
// (Layout::units_to_rank), in either form. Borrows the message.
class MessageLengths {
 public:
  MessageLengths(const uint8_t* msg, size_t units, const int64_t* counts);
  // Whether the per-unit slot counts are sound (each in [0, batch size], summing to the
  // announced slots): a malformed message is an internal error of its sender.
  bool Sound() const;
  // The next unit's lengths; `*n` receives their count (bag b of the unit is sample b).
  const int32_t* Next(int64_t* n);

 private:
  const int32_t* slots_ = nullptr;  // per unit (per-unit form), else null
  const int32_t* next_ = nullptr;
  size_t units_ = 0;
  size_t unit_ = 0;
  int64_t batch_ = 0;
  int64_t total_ = 0;
};

// Sender side (used by input_route.cc): the layout of this rank's message to `dest` carrying `ids`
// ids, and its lengths section written at `msg` from rb->unit_lengths, in the form rb->unit_slots
// gives (empty: plain).
MessageLayout SendLayout(const Layout& layout, const RoutedBatch& rb, int32_t dest, int64_t ids);
int64_t SendForm(const Layout& layout, const RoutedBatch& rb, int32_t dest);
void WriteLengths(const Layout& layout, const RoutedBatch& rb, int32_t dest, uint8_t* msg);
// Sets rb->unit_slots from batch.feature_bags (cleared for a plain batch).
void SetUnitSlots(const Layout& layout, const Batch& batch, RoutedBatch* rb);

// How a batch is checked while it is routed.
struct RouteOptions {
  BoundsPolicy bounds = BoundsPolicy::kError;
  bool check_non_finite = true;  // reject NaN/infinite per-id weights
};

struct DeviceOutput;  // step_state.h

// A forward's output buffer, judged against the batch it is for (CheckOutputBuffer).
struct OutputBuffer {
  const float* out = nullptr;
  size_t out_len = 0;
  const DeviceOutput* device_out = nullptr;  // the output is device memory (`out` on the device)
  bool device_allowed = false;               // the collection writes device outputs there
};

// What a forward's input exchange carries for the step's agreement (StepAgreement::Terms, read
// by Engine::DistributeInput): with `check_output`, this rank's verdict on `output` for its own
// batch rides on the exchange as a rejection of the batch (after the batch's own checks); the
// training mode announced (kNone: not agreed there) and, for a training forward this rank
// accepted, the words announced beside it; `agree_before_rows`: the ranks still agree after the
// exchange (StepAgreement::BeforeRows).
struct InputTerms {
  bool check_output = false;
  OutputBuffer output;
  ForwardMode mode = ForwardMode::kNone;
  std::function<int64_t(const RoutedBatch&)> words;
  bool agree_before_rows = true;
};

// --- Validation (input_check.cc) ---
// This rank's verdict on a forward's output buffer for its own batch of `batch_size` samples and
// `num_values` ids: [rows, output_dim] floats (rows: samples, or ids for a sequence collection),
// not null unless empty, device memory only where the collection writes it.
Status CheckOutputBuffer(const Layout& layout, const OutputBuffer& buffer, int64_t batch_size,
                         int64_t num_values);

// The checks of a batch before any id is routed: its fields (CheckBatchFields), its lengths
// (none negative, summing to num_values) and, with `check_non_finite`, its weights.
// With `output`, also this rank's verdict on that buffer for the batch, by its own sizes, into
// `*output_verdict` (only when the batch passed: the batch's rejection comes first).
Status CheckBatch(const Layout& layout, const Batch& batch, bool check_non_finite,
                  const OutputBuffer* output = nullptr, Status* output_verdict = nullptr);

// The checks of CheckBatch that read no buffer (sizes, null pointers, dtypes), first in its
// order; the device route (route.h) runs them on the host before its kernels.
Status CheckBatchFields(const sharding::Plan& plan, const Batch& batch);

// RouteBatch's rejections, shared with the device route so that both say the same words: bag k
// (feature-major) has a negative length; the lengths do not sum to num_values; the weight at
// value position i (in bag k) is not finite; id `id` at value position i of `sample` is outside
// the table `table` read by `feature`.
Status NegativeLengthError(const sharding::Plan& plan, int64_t batch_size, size_t k, int32_t len);
Status LengthSumError(size_t sum, size_t num_values);
Status NonFiniteWeightError(const sharding::Plan& plan, int64_t batch_size, size_t k, size_t i,
                            float w);
Status IdOutOfRangeError(const sharding::Plan& plan, int32_t feature, int32_t table, int64_t sample,
                         size_t i, int64_t id);

// --- Routing (input_route.cc) ---
// Checks `batch` (CheckBatch) and routes it (RouteCheckedBatch). With `output`, a batch routed
// without error is then judged by its output buffer (CheckOutputBuffer's verdict, computed with
// the batch's checks): a forward's whole verdict on its own inputs in one call.
Status RouteBatch(const ExecContext& ctx, const Layout& layout, const RouteOptions& options,
                  const Batch& batch, RoutedBatch* rb, const OutputBuffer* output = nullptr);

// Routes a batch CheckBatch accepted into `rb` (sender side), checking its ids: each id is
// written once, straight into its message. Pairs whose ids all go to the same units (one row
// block, no id dropped) are read once, in the writing pass; the others are counted first (the
// messages' sizes depend on their ids), then written. On failure nothing outside `rb` has
// changed and the message names the feature, sample, position and id. Pairs are routed in
// parallel on `ctx` (each pair owns its units); the result and any error message are those of
// a sequential walk.
Status RouteCheckedBatch(const ExecContext& ctx, const Layout& layout, BoundsPolicy bounds,
                         const Batch& batch, RoutedBatch* rb);

// --- Exchange and unpack (input_exchange.cc) ---
// The collective part: exchanges counts (and the rejected flag, so a rejecting rank and its
// peers all stop here) and then the routed ids over `comm`. `local_error` is this rank's
// rejection of its input (OK if none): it is returned unchanged, and peers learn which rank
// rejected its batch. `mode` and `words` are announced to every peer (RoutedBatch::forward_agreed,
// forward_words); ranks that all announce a mode but not the same one fail alike (ModesDiffer).
// With `caps` (non-null, the same object for every exchange of this communicator) and two ranks,
// the counts ride in one round with the ids (a message larger than the caps says sends its rest
// in a second round); otherwise the counts go first, in a round of their own. Every rank must
// pass `caps` alike.
Status ExchangeInput(const Layout& layout, comm::Communicator& comm, const Status& local_error,
                     RoutedBatch* rb, ForwardMode mode = ForwardMode::kNone, int64_t words = 0,
                     InputCaps* caps = nullptr);

// ExchangeInput then, when it went through, UnpackInput: the input distribution's collective
// part, announcing `terms.mode` and, for a training forward this rank accepted, `terms.words`;
// the exchange's time is added to `*comm_seconds`; `caps` as ExchangeInput's.
Status ExchangeAndUnpack(const Layout& layout, comm::Communicator& comm, const Status& local,
                         RoutedBatch* rb, const InputTerms& terms, double* comm_seconds,
                         InputCaps* caps = nullptr);

// Owner side: describes the received ids as runs per local shard and sizes the return message.
// Runs keep (source rank, unit) order; their rows in the return message are grouped per source
// in rank order, except this rank's own, which come last (RoutedBatch::ret_self_offset).
Status UnpackInput(const Layout& layout, RoutedBatch* rb);

// The end of both owner-side descriptions (UnpackInput, and input.h's for ids that
// travelled between device buffers), given the return message's size float_base with its blocks
// in source order: moves this rank's own block to the end (runs of later sources move down by its
// size, its runs behind everything else) and sets the return all-to-all's counts without it.
// Internal error if the floats this rank routed to itself and those it received disagree.
Status PlaceOwnReturnLast(const Layout& layout, size_t float_base, RoutedBatch* rb);

}  // namespace shardrec::embedding
