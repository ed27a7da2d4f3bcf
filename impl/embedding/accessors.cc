// Full-table accessors: weights and optimizer states gathered to (or scattered from) every
// rank, so pretrained tables and checkpoints load into any plan.
#include <cstring>

#include "impl/embedding/collection.h"

namespace shardrec::embedding {

Status EmbeddingCollection::FindTable(const std::string& table, int32_t* index) const {
  // No table has an empty name (plans refuse one), so "" is what the C API passes for NULL; the
  // collective accessors refuse it as a bad argument, agreed with the peers like any other.
  if (table.empty()) return Status::InvalidArgument("table must not be NULL or empty");
  *index = s_.layout.plan->TableIndex(table);
  if (*index < 0) return Status::NotFound("no table named '", table, "' in the plan");
  return Status::Ok();
}

Status EmbeddingCollection::FindState(int32_t table, const std::string& state,
                                      int32_t* index) const {
  if (state.empty()) return Status::InvalidArgument("state must not be NULL or empty");
  const auto& specs = s_.layout.tables[table].state_specs;
  std::string known;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (state == specs[i].name) {
      *index = static_cast<int32_t>(i);
      return Status::Ok();
    }
    known += (i ? ", " : "") + std::string(specs[i].name);
  }
  return Status::NotFound("the optimizer of table '", s_.layout.plan->tables[table].name, "' (",
                          optim::OptimizerName(s_.table_optim[table].type), ") has no state '",
                          state, "' (its states: ", known.empty() ? "none" : known, ")");
}

namespace {

// Elements of a full tensor: [rows] for row-wise states, else [rows, dim].
size_t FullSize(const sharding::TableConfig& t, bool row_wise) {
  return static_cast<size_t>(t.rows) * (row_wise ? 1 : static_cast<size_t>(t.dim));
}

}  // namespace

// state < 0 selects the weights.
Status EmbeddingCollection::Gather(int32_t table, int32_t state, float* out) {
  const auto& cfg = s_.layout.plan->tables[table];
  const auto& shards = s_.layout.plan->table_plans[table].shards;
  const TableLayout& tl = s_.layout.tables[table];
  const bool row_wise = state >= 0 && s_.layout.tables[table].state_specs[state].row_wise;
  const auto piece = [&](const sharding::Shard& s) -> size_t {
    return static_cast<size_t>(s.rows) * (row_wise ? 1 : static_cast<size_t>(s.cols));
  };
  // A local shard's weights or state as fp32, in its own row-major order (weights of 16-bit
  // tables widen exactly; a GPU collection's are copied through the host).
  const auto copy_local = [&](int32_t local, float* dst) {
    // A tiered shard's rows are in its cache, write-back queue and store (docs/disk-tier.md).
    if (s_.tiered != nullptr && s_.tiered->ShardOf(local) >= 0)
      return s_.tiered->ReadShard(local, state, dst);
    return s_.params.ReadShard(s_.layout.local[local], state, dst);
  };
  if (tl.data_parallel) return copy_local(tl.shard_local[s_.layout.rank], out);
  std::vector<size_t> counts(s_.layout.world, 0);
  std::vector<float> send;
  for (size_t s = 0; s < shards.size(); ++s) {
    if (shards[s].rows == 0) continue;
    counts[shards[s].rank] += piece(shards[s]);
    if (shards[s].rank == s_.layout.rank) {
      const size_t at = send.size();
      send.resize(at + piece(shards[s]));
      SR_RETURN_IF_ERROR(copy_local(tl.shard_local[s], send.data() + at));
    }
  }
  size_t total = 0;
  for (size_t c : counts) total += c;
  std::vector<float> recv(total);
  SR_RETURN_IF_ERROR(
      s_.comm->AllGatherV(send.data(), send.size(), recv.data(), counts, DType::kFloat32));
  std::vector<size_t> cursor(s_.layout.world, 0);
  for (int32_t r = 1; r < s_.layout.world; ++r) cursor[r] = cursor[r - 1] + counts[r - 1];
  for (size_t s = 0; s < shards.size(); ++s) {
    const auto& sh = shards[s];
    if (sh.rows == 0) continue;
    const float* src = recv.data() + cursor[sh.rank];
    cursor[sh.rank] += piece(sh);
    for (int64_t r = 0; r < sh.rows; ++r) {
      if (row_wise) {
        out[sh.row_offset + r] = src[r];
      } else {
        std::memcpy(out + (sh.row_offset + r) * cfg.dim + sh.col_offset, src + r * sh.cols,
                    sizeof(float) * sh.cols);
      }
    }
  }
  return Status::Ok();
}

Status EmbeddingCollection::Scatter(int32_t table, int32_t state, const float* in) {
  const auto& cfg = s_.layout.plan->tables[table];
  const bool row_wise = state >= 0 && s_.layout.tables[table].state_specs[state].row_wise;
  std::vector<float> piece;
  for (size_t i = 0; i < s_.layout.local.size(); ++i) {
    const LocalShard& ls = s_.layout.local[i];
    if (ls.table != table) continue;
    // A tiered shard holds cache slots: its rows are the plan's (docs/disk-tier.md).
    const int32_t tiered = s_.tiered != nullptr ? s_.tiered->ShardOf(static_cast<int32_t>(i)) : -1;
    const int64_t rows = tiered >= 0 ? s_.tiered->Rows(static_cast<int32_t>(i)) : ls.rows;
    // The shard's block of the full tensor, dense; 16-bit weights are rounded to nearest even on
    // the way in.
    const int64_t width = row_wise ? 1 : ls.cols;
    piece.resize(static_cast<size_t>(rows * width));
    for (int64_t r = 0; r < rows; ++r) {
      if (row_wise) {
        piece[r] = in[ls.row_offset + r];
      } else {
        std::memcpy(piece.data() + r * width, in + (ls.row_offset + r) * cfg.dim + ls.col_offset,
                    sizeof(float) * ls.cols);
      }
    }
    if (tiered >= 0) {
      SR_RETURN_IF_ERROR(s_.tiered->WriteShard(static_cast<int32_t>(i), state, piece.data()));
      continue;
    }
    SR_RETURN_IF_ERROR(s_.params.WriteShard(ls, state, piece.data()));
  }
  return Status::Ok();
}

Status EmbeddingCollection::AgreeOnTable(const Status& local, const char* what, int32_t table,
                                         int32_t state) {
  // The ranks' gathers and scatters are sized by the table (and state) each names: ranks naming
  // different ones would exchange mismatched messages, which Gloo answers by ending the process.
  const int64_t same[] = {table, state};
  const std::string differ =
      StrCat("every rank must name the same table (and optimizer state) in ", what);
  return agreement_.Agree(local, what, same, differ.c_str());
}

Status EmbeddingCollection::GetWeights(const std::string& table, float* out, size_t len) {
  int32_t t = -1, s = -1;
  // The device work of stream-ordered calls is done (and its outcome learnt) first.
  Status local = engine_->Settle(SettlePoint::kWait);
  if (local.ok()) local = CheckAccess(table, nullptr, out, len, "out", &t, &s);
  SR_RETURN_IF_ERROR(AgreeOnTable(local, "its get_weights call", t, s));
  return Gather(t, -1, out);
}

Status EmbeddingCollection::SetWeights(const std::string& table, const float* in, size_t len) {
  int32_t t = -1, s = -1;
  // The device work of stream-ordered calls is done (and its outcome learnt) first.
  Status local = engine_->Settle(SettlePoint::kWait);
  if (local.ok()) local = CheckAccess(table, nullptr, in, len, "weights", &t, &s);
  SR_RETURN_IF_ERROR(AgreeOnTable(local, "its set_weights call", t, s));
  return Scatter(t, -1, in);
}

Status EmbeddingCollection::CheckAccess(const std::string& table, const std::string* state,
                                        const float* data, size_t len, const char* what, int32_t* t,
                                        int32_t* s) const {
  SR_RETURN_IF_ERROR(FindTable(table, t));
  if (s_.layout.tables[*t].dynamic)
    return Status::Unsupported("table '", table, "' is dynamic: its rows are keyed by id, so the ",
                               what == std::string("out") ? "get" : "set",
                               " accessors of a full [rows, dim] table do not apply "
                               "(docs/dynamic-tables.md)");
  *s = -1;
  if (state != nullptr) SR_RETURN_IF_ERROR(FindState(*t, *state, s));
  const bool row_wise = state != nullptr && s_.layout.tables[*t].state_specs[*s].row_wise;
  const size_t need = FullSize(s_.layout.plan->tables[*t], row_wise);
  if (len != need) {
    if (state == nullptr) {
      return Status::InvalidArgument("table '", table, "': len is ", len,
                                     ", expected rows x dim = ", need);
    }
    return Status::InvalidArgument("table '", table, "' state '", *state, "': len is ", len,
                                   ", expected ", need);
  }
  if (data == nullptr) return Status::InvalidArgument(what, " must not be NULL");
  return Status::Ok();
}

Status EmbeddingCollection::GetState(const std::string& table, const std::string& state, float* out,
                                     size_t len) {
  int32_t t = -1, s = -1;
  // The device work of stream-ordered calls is done (and its outcome learnt) first.
  Status local = engine_->Settle(SettlePoint::kWait);
  if (local.ok()) local = CheckAccess(table, &state, out, len, "out", &t, &s);
  SR_RETURN_IF_ERROR(AgreeOnTable(local, "its get_state call", t, s));
  return Gather(t, s, out);
}

Status EmbeddingCollection::SetState(const std::string& table, const std::string& state,
                                     const float* in, size_t len) {
  int32_t t = -1, s = -1;
  // The device work of stream-ordered calls is done (and its outcome learnt) first.
  Status local = engine_->Settle(SettlePoint::kWait);
  if (local.ok()) local = CheckAccess(table, &state, in, len, "state values", &t, &s);
  SR_RETURN_IF_ERROR(AgreeOnTable(local, "its set_state call", t, s));
  return Scatter(t, s, in);
}

Status EmbeddingCollection::SetNumSteps(int64_t steps) {
  if (steps < 0 || steps > ParamStore::kMaxStep)
    return Status::InvalidArgument("steps must be in [0, ", ParamStore::kMaxStep, "] (2^53), got ",
                                   steps);
  // A rejection learnt later would take a step back from the value set here.
  SR_RETURN_IF_ERROR(engine_->Settle(SettlePoint::kWait));
  s_.params.set_step(steps);
  return Status::Ok();
}

}  // namespace shardrec::embedding
