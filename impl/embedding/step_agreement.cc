// The step's agreement (step_agreement.h): creation's all-reduce, a forward's verdicts before
// its rows are resolved, the backward's and an accessor's.
#include "impl/embedding/step_agreement.h"

#include "impl/comm/agree.h"
#include "impl/embedding/dynamic/dp_agree.h"
#include "impl/embedding/timer.h"

namespace shardrec::embedding {

namespace {

// Creation's words: the plan hash and its complement, the lowest refusing rank + 1, the options
// digest and its complement, then the engine's offer.
constexpr int kCreateHead = 5;
constexpr int kCreateWords = kCreateHead + StepAgreement::kEngineWords;

}  // namespace

Status StepAgreement::Create(comm::Communicator& comm, const sharding::Plan* plan,
                             int64_t options_digest, const Status& local, int64_t* offer) {
  // One allreduce(max) agrees on the plan hash (max of h and of ~h: equal iff min == max), on
  // whether any rank failed, so every rank returns instead of waiting on a peer, on the options
  // every rank must share (their digest, the same way), and on the engine's capabilities.
  const uint64_t hash = plan->Hash();
  const int64_t digest = local.ok() ? options_digest : 0;
  int64_t agree[kCreateWords] = {static_cast<int64_t>(hash), static_cast<int64_t>(~hash),
                                 local.ok() ? 0 : comm.Rank() + 1, digest, ~digest};
  for (int i = 0; i < kEngineWords; ++i) agree[kCreateHead + i] = offer[i];
  const Status agreed =
      comm.AllReduce(agree, agree, kCreateWords, DType::kInt64, comm::ReduceOp::kMax);
  // A rank's own rejection says more than a failed agreement (e.g. a staged NCCL agreement
  // without the plugin, when the communicator is of another device).
  if (!local.ok()) return local;
  SR_RETURN_IF_ERROR(agreed);
  if (agree[2] != 0)
    return Status::InvalidArgument("rank ", agree[2] - 1,
                                   " rejected the collection configuration (its error says why)");
  if (static_cast<uint64_t>(agree[0]) != hash || ~static_cast<uint64_t>(agree[1]) != hash)
    return Status::InvalidArgument(
        "ranks were given different plans (plan hashes differ); "
        "every rank must create the collection from the same plan");
  if (agree[3] != digest || ~agree[4] != digest)
    return Status::InvalidArgument(
        "ranks were given different collection options (the seed, bounds policy, non-finite "
        "check, communication encodings, optimizer settings, or the tier cache_bytes of a "
        "column-split table whose optimizer keeps row statistics differ); every rank must create "
        "the collection with the same options (the thread count may differ)");
  for (int i = 0; i < kEngineWords; ++i) offer[i] = agree[kCreateHead + i];
  return Status::Ok();
}

void StepAgreement::Refuse(comm::Communicator& comm) {
  // No plan hash, this rank's refusal, no capabilities.
  int64_t agree[kCreateWords] = {0, 0, comm.Rank() + 1, 0, 0};
  (void)comm.AllReduce(agree, agree, kCreateWords, DType::kInt64, comm::ReduceOp::kMax);
}

bool StepAgreement::BeyondInput() const {
  return dynamic::HasDataParallelDynamic(s_.layout) && s_.dp_comm.get() != s_.comm.get();
}

bool StepAgreement::InInputExchange() const {
  // A forward of dynamic tables inserts rows, so its ranks agree first; a plain forward does so in
  // its input exchange, its data-parallel dynamic gather size announced there too. Not where a
  // data-parallel dynamic table's group is another communicator (a mesh's world): a rank that
  // refused its forward must still reach that group's agreement, so it cannot stop at its own
  // group's exchange.
  return s_.layout.has_dynamic && !BeyondInput();
}

InputTerms StepAgreement::Terms(const OutputBuffer& output) const {
  InputTerms t;
  // A rank refusing its output buffer must reach the agreement after the exchange where the
  // forward agrees there (over a mesh's data-parallel group): it refuses there instead.
  if (!s_.layout.has_dynamic || InInputExchange()) {
    t.check_output = true;
    t.output = output;
  }
  // Fixed rows: the buffers rode on the exchange, nothing is left to agree on (BeforeRows would
  // return at once). Dynamic rows always reach BeforeRows (their mode, gather sizes, a mesh).
  t.agree_before_rows = s_.layout.has_dynamic;
  if (!InInputExchange()) return t;
  t.mode = s_.training ? ForwardMode::kTraining : ForwardMode::kEvaluating;
  // AgreeDynamicForward's carried words (the data-parallel group is this communicator); 0
  // without a data-parallel dynamic table.
  t.words = [this](const RoutedBatch& rb) {
    return dynamic::DataParallelGatherWords(s_.layout, rb, s_.dynamic);
  };
  return t;
}

Status StepAgreement::BeforeRows(const Status& local, const RoutedBatch& rb, bool output_checked,
                                 bool outputs_first, std::vector<int64_t>* dp_words) {
  if (!s_.layout.has_dynamic) {
    // The output buffer comes after the input exchange in the pipelined forward, so a rank
    // refusing it cannot fail its peers' forwards there: the ranks agree on their buffers now,
    // before any row moves. A rank failing alone would leave its peers a batch to train and, in a
    // loop that skips the backward after a failed forward, a backward waiting for it.
    if (output_checked || s_.layout.world == 1 || !outputs_first) return Status::Ok();
    return AgreeOutputs(local);
  }
  // A training forward's dynamic tables insert after this: the ranks agree first that no rank
  // refused its output buffer (the pipelined forward learns it only now) and that all run one
  // mode, so a forward refused anywhere inserts nothing and ranks in different modes (one
  // inserting, one not) fail alike. Whether it runs is the plan's business (a dynamic table
  // anywhere), not this rank's shards: a rank that holds no dynamic shard still takes part. A
  // forward agreed in its input exchange brought the gather sizes with it.
  const bool dp_dynamic = dynamic::HasDataParallelDynamic(s_.layout);
  const Status agreed = rb.forward_agreed ? local : AgreeDynamicForward(local, rb, dp_words);
  if (rb.forward_agreed && s_.training && dp_dynamic) *dp_words = rb.forward_words;
  if (BeyondInput()) {
    // On a mesh the outcome, mode and counts are agreed over the data-parallel group as well.
    ScopedTimer t(&s_.timings.comm_seconds);
    const int64_t words = agreed.ok() && s_.training
                              ? dynamic::DataParallelGatherWords(s_.layout, rb, s_.dynamic)
                              : 0;
    SR_RETURN_IF_ERROR(
        dynamic::AgreeDataParallelGroup(*s_.dp_comm, agreed, s_.training, words, dp_words));
  }
  return agreed;
}

Status StepAgreement::AgreeDynamicForward(const Status& local, const RoutedBatch& rb,
                                          std::vector<int64_t>* dp_words) {
  // Under kMax: which rank refused (rank + 1, or 0), whether any rank trains, whether any rank
  // evaluates; then, for a training forward with a data-parallel dynamic table whose group is
  // this communicator, each rank's gather size at its own index (the others 0).
  const int n = s_.comm->Size();
  // The length depends on the plan alone, so ranks in different modes still reduce alike.
  const bool carry = dynamic::HasDataParallelDynamic(s_.layout) && !BeyondInput();
  std::vector<int64_t> w(carry ? 3 + static_cast<size_t>(n) : 3, 0);
  w[0] = local.ok() ? 0 : s_.comm->Rank() + 1;
  w[1] = s_.training ? 1 : 0;
  w[2] = s_.training ? 0 : 1;
  if (carry && local.ok() && s_.training)
    w[3 + static_cast<size_t>(s_.comm->Rank())] =
        dynamic::DataParallelGatherWords(s_.layout, rb, s_.dynamic);
  SR_RETURN_IF_ERROR(
      s_.comm->AllReduce(w.data(), w.data(), w.size(), DType::kInt64, comm::ReduceOp::kMax));
  if (!local.ok()) return local;
  if (w[0] != 0) return OutputRefused(w[0] - 1);
  if (w[1] != 0 && w[2] != 0) return ModesDiffer();
  if (carry && s_.training) dp_words->assign(w.begin() + 3, w.end());
  return Status::Ok();
}

Status StepAgreement::AgreeOutputs(const Status& local) {
  int64_t refusing = -1;
  {
    // Where the wait for the slowest rank showed before: the output exchange.
    ScopedTimer phase(&s_.timings.output_dist_seconds);
    ScopedTimer t(&s_.timings.comm_seconds);
    SR_RETURN_IF_ERROR(comm::FindRefusingRank(*s_.comm, !local.ok(), &refusing));
  }
  if (!local.ok()) return local;
  if (refusing >= 0) return OutputRefused(refusing);
  return Status::Ok();
}

void StepAgreement::Join(const Status& failed) {
  // A communication failure is not shared (the peers may be gone).
  if (!BeyondInput() || comm::IsExchangeFailure(failed)) return;
  // BeforeRows's AgreeDataParallelGroup as a refusing rank makes it: no gather words. This rank's
  // outcome is `failed` whatever the agreement's: a communication failure of it is left for the
  // next collective to report.
  ScopedTimer t(&s_.timings.comm_seconds);
  std::vector<int64_t> words;
  (void)dynamic::AgreeDataParallelGroup(*s_.dp_comm, failed, s_.training, /*words=*/0, &words);
}

void StepAgreement::Owe(const Status& failed) {
  if (BeyondInput() && !comm::IsExchangeFailure(failed)) owed_ = failed;
}

void StepAgreement::PayOwed() {
  if (owed_.ok()) return;
  const Status owed = std::move(owed_);
  owed_ = Status::Ok();
  Join(owed);
}

Status StepAgreement::Agree(const Status& local, const char* what, std::span<const int64_t> same,
                            const char* differ) {
  int64_t refusing = -1;
  uint64_t differs = 0;
  SR_RETURN_IF_ERROR(comm::FindRefusingRank(*s_.comm, !local.ok(), same, &refusing, &differs));
  if (!local.ok()) return local;
  if (refusing >= 0)
    return Status::InvalidArgument("rank ", refusing, " rejected ", what,
                                   " (its error says why); no rank changed any state");
  if (differs != 0)
    return Status::InvalidArgument("the ranks' arguments differ: ", differ,
                                   "; no rank changed any state");
  return Status::Ok();
}

Status StepAgreement::Backward(const Status& local) {
  const Status agreed = Agree(local, "its backward call");
  if (s_.layout.dp_tables.empty() || s_.dp_comm == nullptr || s_.dp_comm.get() == s_.comm.get())
    return agreed;
  if (comm::IsExchangeFailure(agreed)) return agreed;
  int64_t refusing = -1;
  SR_RETURN_IF_ERROR(comm::FindRefusingRank(*s_.dp_comm, !agreed.ok(), &refusing));
  if (!agreed.ok()) return agreed;
  if (refusing >= 0)
    return Status::InvalidArgument("rank ", refusing,
                                   " of the data-parallel group rejected its backward call (its "
                                   "error says why); no rank changed any state");
  return Status::Ok();
}

}  // namespace shardrec::embedding
