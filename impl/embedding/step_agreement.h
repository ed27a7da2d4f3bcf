// Every cross-rank verdict of a collection's step, in one object the collection owns: creation
// (the plan, the shared options, the engine's offer), a forward's refusal and mode (riding on the
// input exchange where it can, one all-reduce before the lookups where it cannot, and the
// data-parallel dynamic tables' group beyond the input exchange), the backward's and an
// accessor's. Engines do the work of a step; they never decide whether or where ranks agree.
//
// Why one object: a rank that refuses anything must still take part in every collective its
// peers make for that call, in the same order, or they wait out their timeout. Keeping the whole
// protocol here makes that order one reading, whatever the engine and whatever the rows
// (fixed or dynamic).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "impl/comm/communicator.h"
#include "impl/core/status.h"
#include "impl/embedding/input_dist.h"
#include "impl/embedding/step_state.h"
#include "impl/sharding/types.h"

namespace shardrec::embedding {

class StepAgreement {
 public:
  // Words an engine offers at creation (Engine::offer): 0 where this rank's options and
  // communicators allow a path every rank must take alike, 1 where they do not.
  static constexpr int kEngineWords = 2;

  explicit StepAgreement(StepState* s) : s_(*s) {}
  StepAgreement(const StepAgreement&) = delete;
  StepAgreement& operator=(const StepAgreement&) = delete;

  // --- Creation ---
  // One all-reduce(max) over `comm` of the plan hash, the lowest refusing rank, the digest of the
  // options every rank must share and the engine's offer (`offer`, replaced by what every rank
  // allows). `local` is this rank's verdict; it is returned on this rank whatever the others'.
  static Status Create(comm::Communicator& comm, const sharding::Plan* plan, int64_t options_digest,
                       const Status& local, int64_t* offer);
  // Create's agreement as a rank that has no plan makes it (RefuseCreate).
  static void Refuse(comm::Communicator& comm);

  // --- A forward ---
  // The terms of a forward's input exchange, given its output buffer (Forward knows it first):
  // this rank's verdict on the buffer rides on the exchange, and a forward whose ranks must agree
  // on it before rows are inserted (dynamic tables) announces its mode there, unless the
  // agreement must reach a group beyond the input exchange's ranks (a mesh's data-parallel
  // dynamic tables; the verdict then waits for BeforeRows). A forward of fixed rows needs no
  // agreement after the exchange (agree_before_rows false): its buffers rode on it.
  InputTerms Terms(const OutputBuffer& output) const;
  // Between the input exchange and the row resolution: the ranks agree on the forward where they
  // have not yet (`output_checked`: its output buffer rode on the input exchange). A forward of
  // dynamic tables agrees on the output buffers and mode (one all-reduce, or the exchange's),
  // then its data-parallel group beyond the input exchange; for a training forward *dp_words then
  // holds every rank's data-parallel gather size. A forward of fixed rows agrees on its
  // buffers when the engine does not let a refusing rank fail alone (`outputs_first`). Not OK:
  // the forward stops on every rank before any row moves.
  Status BeforeRows(const Status& local, const RoutedBatch& rb, bool output_checked,
                    bool outputs_first, std::vector<int64_t>* dp_words);
  // A forward that failed before BeforeRows on this rank (`failed`): where the agreement reaches
  // ranks beyond the input exchange, this rank still takes part there, so they fail with it.
  // Join takes part now (Forward: the others reach it in the same call); Owe keeps it for the
  // first forward call of any kind after the failed one (the pipelined calls learn of a failure
  // before the point of the call sequence where the other ranks reach it); PayOwed pays it.
  void Join(const Status& failed);
  void Owe(const Status& failed);
  void PayOwed();

  // --- The backward and the accessors ---
  // Collective over s.comm: returns `local` on this rank, or an error naming a rank that failed.
  // With `same` (values every rank must give alike), also InvalidArgument on every rank when they
  // differ (`differ` says what the ranks must agree on), in the same all-reduce.
  Status Agree(const Status& local, const char* what, std::span<const int64_t> same = {},
               const char* differ = "");
  // A backward's agreement: Agree over s.comm, then, where data-parallel tables reduce their
  // gradients over another communicator (a 2D mesh's world), the same over it carrying s.comm's
  // verdict, so that a backward refused in one sharding group fails every group before any
  // state changes. A communication failure of the first is not carried.
  Status Backward(const Status& local);

 private:
  // Whether a forward's agreement reaches a group beyond the input exchange's ranks.
  bool BeyondInput() const;
  // Whether a forward of dynamic tables agrees in its input exchange.
  bool InInputExchange() const;
  // The one all-reduce of a forward of dynamic tables not agreed in its input exchange.
  Status AgreeDynamicForward(const Status& local, const RoutedBatch& rb,
                             std::vector<int64_t>* dp_words);
  // The pipelined forward's agreement on the ranks' output buffers (fixed rows).
  Status AgreeOutputs(const Status& local);

  StepState& s_;
  Status owed_;  // a refusal not yet shared beyond the input exchange (Owe), or OK
};

}  // namespace shardrec::embedding
