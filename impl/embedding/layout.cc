// Builds the static routing of a collection from its plan.
#include "impl/embedding/layout.h"

#include <algorithm>
#include <map>

#include "impl/core/rng.h"

namespace shardrec::embedding {

using sharding::PoolingType;
using sharding::ShardingType;

namespace {

Status CheckTables(const sharding::Plan& plan, Layout* l) {
  if (plan.tables.empty()) return Status::InvalidArgument("plan has no tables");
  if (plan.table_plans.size() != plan.tables.size())
    return Status::InvalidArgument("plan has ", plan.tables.size(), " tables but ",
                                   plan.table_plans.size(), " table plans");
  size_t num_none = 0;
  for (const auto& t : plan.tables) {
    if (!IsWeightDType(t.dtype))
      return Status::Unsupported("table '", t.name, "': weight dtype ", DTypeName(t.dtype),
                                 " is not supported (float32, float16, bfloat16, fp8_e4m3 or "
                                 "fp8_e5m2)");
    // An FP8 row's one scale covers the whole row: a row split over shards would take a scale
    // per part, and its rounding would depend on the plan.
    if (IsFp8DType(t.dtype) && t.dynamic.enabled)
      return Status::Unsupported("table '", t.name, "': dynamic tables do not take ",
                                 DTypeName(t.dtype), " weights yet (fp32, fp16 or bf16)");
    if (t.pooling == PoolingType::kNone) ++num_none;
  }
  if (num_none != 0 && num_none != plan.tables.size())
    return Status::Unsupported(
        "a collection is either pooled (SUM/MEAN tables) or sequence (NONE tables); this plan "
        "mixes both: make one collection per kind");
  l->sequence = num_none != 0;
  if (l->sequence) {
    const int32_t dim = plan.tables[0].dim;
    std::vector<int> readers(plan.features.size(), 0);
    for (const auto& t : plan.tables) {
      if (t.dim != dim)
        return Status::Unsupported("sequence collection: table '", t.name, "' has dim ", t.dim,
                                   " but table '", plan.tables[0].name, "' has ", dim,
                                   "; all NONE-pooled tables must share one dim");
      for (int32_t f : t.features) {
        if (f >= 0 && static_cast<size_t>(f) < readers.size() && ++readers[f] > 1)
          return Status::Unsupported("sequence collection: feature '", plan.features[f].name,
                                     "' is read by more than one table");
      }
    }
    l->output_dim = dim;
  }
  return Status::Ok();
}

void BuildPairs(const sharding::Plan& plan, Layout* l) {
  const size_t nf = plan.features.size();
  l->feature_pairs.assign(nf, {});
  int64_t offset = 0;
  for (size_t f = 0; f < nf; ++f) {
    for (size_t t = 0; t < plan.tables.size(); ++t) {
      const auto& feats = plan.tables[t].features;
      if (std::find(feats.begin(), feats.end(), static_cast<int32_t>(f)) == feats.end()) continue;
      Pair p;
      p.feature = static_cast<int32_t>(f);
      p.table = static_cast<int32_t>(t);
      p.mean = plan.tables[t].pooling == PoolingType::kMean;
      p.out_offset = l->sequence ? 0 : offset;
      if (!l->sequence) offset += plan.tables[t].dim;
      l->feature_pairs[f].push_back(static_cast<int32_t>(l->pairs.size()));
      l->pairs.push_back(p);
    }
  }
  if (!l->sequence) l->output_dim = offset;
}

Status BuildTables(const sharding::Plan& plan, Layout* l) {
  const int32_t rank = l->rank;
  l->tables.resize(plan.tables.size());
  for (size_t t = 0; t < plan.tables.size(); ++t) {
    const auto& cfg = plan.tables[t];
    const auto& tp = plan.table_plans[t];
    TableLayout& tl = l->tables[t];
    tl.key = HashName(cfg.name);
    tl.data_parallel = tp.type == ShardingType::kDataParallel;
    tl.dynamic = cfg.dynamic.enabled;
    l->has_dynamic = l->has_dynamic || tl.dynamic;
    // Every sharding type takes a dynamic table (docs/dynamic-tables.md, "Placement"): the
    // sharded ones route an id to its row block by hash, and a data-parallel one agrees on each
    // training forward's inserts over the data-parallel group (dynamic/dp_agree.h).
    tl.shard_local.assign(tp.shards.size(), -1);
    for (size_t s = 0; s < tp.shards.size(); ++s) {
      const auto& sh = tp.shards[s];
      if (sh.rank < 0 || sh.rank >= l->world)
        return Status::InvalidArgument("table '", cfg.name, "': shard ", s, " is on rank ", sh.rank,
                                       " outside the world of ", l->world);
      if (sh.rows == 0) continue;
      if (sh.cols <= 0 || sh.rows < 0)
        return Status::InvalidArgument("table '", cfg.name, "': shard ", s, " is empty");
      // A dynamic shard numbers its slots (and its zero row) in 32 bits.
      if (tl.dynamic && sh.rows >= INT32_MAX)
        return Status::Unsupported("table '", cfg.name, "': shard ", s,
                                   " of the dynamic table has ", sh.rows, " slots; at most ",
                                   INT32_MAX - 1, " per shard");
      if (tl.data_parallel) continue;
      auto it = std::find_if(tl.blocks.begin(), tl.blocks.end(),
                             [&](const RowBlock& b) { return b.row_offset == sh.row_offset; });
      if (it == tl.blocks.end()) {
        tl.blocks.push_back({sh.row_offset, sh.rows, {}});
        it = tl.blocks.end() - 1;
      } else if (it->rows != sh.rows) {
        return Status::InvalidArgument("table '", cfg.name, "': column shards of the rows from ",
                                       sh.row_offset, " differ in height");
      }
      it->shards.push_back(static_cast<int32_t>(s));
    }
    if (tl.data_parallel) {
      if (static_cast<int32_t>(tp.shards.size()) != l->world)
        return Status::InvalidArgument("data-parallel table '", cfg.name,
                                       "' must have one shard "
                                       "per rank");
      l->dp_tables.push_back(static_cast<int32_t>(t));
      if (tl.dynamic) l->dp_dynamic_tables.push_back(static_cast<int32_t>(t));
      l->dp_grad_size += static_cast<size_t>(cfg.rows) * (static_cast<size_t>(cfg.dim) + 1);
    }
    std::sort(tl.blocks.begin(), tl.blocks.end(),
              [](const RowBlock& a, const RowBlock& b) { return a.row_offset < b.row_offset; });
    int64_t covered = 0;
    for (auto& b : tl.blocks) {
      std::sort(b.shards.begin(), b.shards.end(), [&](int32_t x, int32_t y) {
        return tp.shards[x].col_offset < tp.shards[y].col_offset;
      });
      if (b.row_offset != covered)
        return Status::InvalidArgument("table '", cfg.name, "': rows ", covered,
                                       " and up are not covered by a shard");
      covered += b.rows;
      if (b.shards.size() > 1) tl.split_columns = true;
      if (b.shards.size() > 1 && IsFp8DType(cfg.dtype))
        return Status::Unsupported(
            "table '", cfg.name, "': ", DTypeName(cfg.dtype),
            " rows are not split into column shards (one scale covers the whole row, so a "
            "column split would change the rounding): use TW, RW, TWRW or DP sharding");
    }
    if (!tl.data_parallel && covered != cfg.rows)
      return Status::InvalidArgument("table '", cfg.name, "': shards cover ", covered, " of ",
                                     cfg.rows, " rows");
    // Local storage: the DP copy of this rank, or every non-empty shard placed here.
    for (size_t s = 0; s < tp.shards.size(); ++s) {
      const auto& sh = tp.shards[s];
      bool mine = tl.data_parallel ? static_cast<int32_t>(s) == rank : sh.rank == rank;
      if (!mine || sh.rows == 0) continue;
      LocalShard ls;
      ls.table = static_cast<int32_t>(t);
      ls.shard = static_cast<int32_t>(s);
      ls.row_offset = sh.row_offset;
      ls.rows = sh.rows + (tl.dynamic ? 1 : 0);  // a dynamic shard's zero row last
      ls.col_offset = sh.col_offset;
      ls.cols = sh.cols;
      ls.dtype = cfg.dtype;
      tl.shard_local[s] = static_cast<int32_t>(l->local.size());
      l->local.push_back(std::move(ls));
    }
  }
  LayOutArenas(l);
  return Status::Ok();
}

void BuildUnits(const sharding::Plan& plan, Layout* l) {
  l->unit_of.assign(l->pairs.size(), {});
  l->units_to_rank.assign(l->world, {});
  for (size_t p = 0; p < l->pairs.size(); ++p) {
    const int32_t t = l->pairs[p].table;
    const auto& tp = plan.table_plans[t];
    l->unit_of[p].assign(tp.shards.size(), -1);
    if (l->tables[t].data_parallel) {
      l->dp_pairs.push_back(static_cast<int32_t>(p));
      continue;
    }
    for (size_t s = 0; s < tp.shards.size(); ++s) {
      const auto& sh = tp.shards[s];
      if (sh.rows == 0) continue;
      Unit u;
      u.pair = static_cast<int32_t>(p);
      u.table = t;
      u.shard = static_cast<int32_t>(s);
      u.rank = sh.rank;
      u.local = sh.rank == l->rank ? l->tables[t].shard_local[s] : -1;
      u.col_offset = sh.col_offset;
      u.cols = sh.cols;
      l->unit_of[p][s] = static_cast<int32_t>(l->units.size());
      l->units_to_rank[sh.rank].push_back(static_cast<int32_t>(l->units.size()));
      l->units.push_back(u);
    }
  }
}

// Every column shard sends its partial row statistics to each sibling of the same row block.
void BuildStatMessages(const sharding::Plan& plan, Layout* l) {
  for (size_t t = 0; t < l->tables.size(); ++t) {
    const auto& tl = l->tables[t];
    if (tl.num_row_stats == 0 || tl.data_parallel || !tl.split_columns) continue;
    const auto& shards = plan.table_plans[t].shards;
    for (const auto& b : tl.blocks) {
      for (int32_t from : b.shards) {
        for (int32_t to : b.shards) {
          if (from == to) continue;
          l->stat_messages.push_back(
              {static_cast<int32_t>(t), from, to, shards[from].rank, shards[to].rank});
        }
      }
    }
  }
}

}  // namespace

int32_t FindRowBlock(const TableLayout& tl, int64_t row) {
  auto it = std::upper_bound(tl.blocks.begin(), tl.blocks.end(), row,
                             [](int64_t r, const RowBlock& b) { return r < b.row_offset; });
  return static_cast<int32_t>(it - tl.blocks.begin()) - 1;
}

void LayOutArenas(Layout* l) {
  l->weights_size = l->weights_fp16_size = l->weights_bf16_size = l->weights_fp8_size = 0;
  l->states_size = 0;
  for (LocalShard& ls : l->local) {
    size_t* arena = ls.dtype == DType::kFloat16    ? &l->weights_fp16_size
                    : ls.dtype == DType::kBFloat16 ? &l->weights_bf16_size
                    : IsFp8DType(ls.dtype)         ? &l->weights_fp8_size
                                                   : &l->weights_size;
    ls.weight_offset = *arena;
    *arena += static_cast<size_t>(ls.rows) * static_cast<size_t>(WeightRowStride(ls));
  }
  for (LocalShard& ls : l->local) {
    ls.state_offsets.clear();
    for (const auto& spec : l->tables[ls.table].state_specs) {
      ls.state_offsets.push_back(l->states_size);
      l->states_size += static_cast<size_t>(ls.rows) * (spec.row_wise ? 1 : ls.cols);
    }
  }
}

Status BuildLayout(std::shared_ptr<const sharding::Plan> plan, int32_t rank,
                   const std::vector<optim::OptimizerType>& optimizers, Layout* out) {
  Layout l;
  l.plan = std::move(plan);
  l.rank = rank;
  l.world = l.plan->world_size;
  if (rank < 0 || rank >= l.world)
    return Status::InvalidArgument("rank ", rank, " is outside the plan's world of ", l.world);
  if (optimizers.size() != l.plan->tables.size())
    return Status::Internal("layout: ", optimizers.size(), " optimizers for ",
                            l.plan->tables.size(), " tables");
  for (const auto& t : l.plan->tables) {
    for (int32_t f : t.features) {
      if (f < 0 || static_cast<size_t>(f) >= l.plan->features.size())
        return Status::InvalidArgument("table '", t.name, "' reads unknown feature index ", f);
    }
  }
  SR_RETURN_IF_ERROR(CheckTables(*l.plan, &l));
  BuildPairs(*l.plan, &l);
  l.tables.resize(l.plan->tables.size());
  for (size_t t = 0; t < optimizers.size(); ++t) {
    l.tables[t].state_specs = optim::StateSpecs(optimizers[t]);
    l.tables[t].num_row_stats = optim::NumRowStats(optimizers[t]);
  }
  SR_RETURN_IF_ERROR(BuildTables(*l.plan, &l));
  BuildUnits(*l.plan, &l);
  BuildStatMessages(*l.plan, &l);
  *out = std::move(l);
  return Status::Ok();
}

}  // namespace shardrec::embedding
