// Parameter arenas of a collection: allocation, plan-independent initialisation, row access and
// the views that 2D sync and checkpoints read.
#include "impl/embedding/param_store.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "impl/core/check.h"
#include "impl/core/element.h"
#include "impl/core/fp8.h"
#include "impl/core/half.h"
#include "impl/core/host_memory.h"
#include "impl/core/prefetch.h"
#include "impl/core/rng.h"

namespace shardrec::embedding {

using sharding::InitConfig;

Status ParamStore::Allocate(const Layout* layout, bool huge_pages, const Device& device) {
  layout_ = layout;
  device_ = device;
  step_ = 0;
  if (on_device()) {
    // The device kernels read and update fp32, fp16 and bf16 rows only. Every rank checks the
    // whole plan, so all refuse alike.
    for (const auto& t : layout_->plan->tables)
      if (IsFp8DType(t.dtype))
        return Status::Unsupported("table '", t.name, "' stores ", DTypeName(t.dtype),
                                   " rows: GPU collections do not take FP8 tables (docs/",
                                   "semantics.md, FP8 weights); create the collection on the host");
    return AllocateDevice();
  }
  const uint64_t fp32_bytes = sizeof(float) * (layout_->weights_size + layout_->states_size);
  const uint64_t half_bytes =
      2 * (layout_->weights_fp16_size + layout_->weights_bf16_size) + layout_->weights_fp8_size;
  // Every weight is written right away and every state row as training reaches it, so arenas
  // the host cannot hold would end in the OOM killer, not in an error: refuse them here. The
  // claim is held until Initialise has written the weights.
  if (Status s = claim_.Claim(fp32_bytes + half_bytes,
                              "this rank's tables (weights and optimizer states)");
      !s.ok())
    return Status(s.code(), StrCat(s.message(), "; use more ranks or hosts, 16-bit weights or a ",
                                   "lighter optimizer"));
  SR_RETURN_IF_ERROR(params_.Allocate(fp32_bytes, huge_pages));
  SR_RETURN_IF_ERROR(weights_fp16_.Allocate(2 * layout_->weights_fp16_size, huge_pages));
  SR_RETURN_IF_ERROR(weights_bf16_.Allocate(2 * layout_->weights_bf16_size, huge_pages));
  SR_RETURN_IF_ERROR(weights_fp8_.Allocate(layout_->weights_fp8_size, huge_pages));
  step_ = 0;
  return Status::Ok();
}

ParamStore::InitRange ParamStore::InitOf(const LocalShard& ls) const {
  const auto& cfg = layout_->plan->tables[ls.table];
  InitRange r;
  r.low = cfg.init.low;
  r.high = cfg.init.high;
  if (cfg.init.kind == InitConfig::Kind::kDefault) {
    r.high = static_cast<float>(std::sqrt(1.0 / static_cast<double>(cfg.rows)));
    r.low = -r.high;
  }
  r.constant = cfg.init.kind == InitConfig::Kind::kConstant;
  r.key = layout_->tables[ls.table].key;
  return r;
}

void ParamStore::InitRow(const InitRange& init, uint64_t seed, const LocalShard& ls,
                         uint64_t key_row, float* out) {
  const uint64_t grow = key_row;
  for (int32_t c = 0; c < ls.cols; ++c) {
    const uint64_t col = static_cast<uint64_t>(ls.col_offset + c);
    out[c] = init.constant
                 ? init.low
                 : init.low + (init.high - init.low) * UniformAt(seed, init.key, grow, col);
  }
}

Status ParamStore::Initialise(uint64_t seed, const ExecContext& ctx,
                              const std::function<Status()>& interrupted) {
  if (on_device()) return InitialiseDevice(seed);
  std::atomic<bool> stop{false};
  for (const LocalShard& ls : layout_->local) {
    // A dynamic shard's slots are initialised when an id takes them; its zero row stays zero.
    if (layout_->tables[ls.table].dynamic) continue;
    const InitRange init = InitOf(ls);
    // Rows are independent, so they are filled in parallel; the fp32 value is drawn first and
    // rounded to the storage type. A chunk may be every row (no pool), so the interruption is
    // asked every kBlock rows.
    constexpr int64_t kBlock = 8192;
    ctx.ParallelFor(0, ls.rows, 1024, [&](int64_t r0, int64_t r1) {
      std::vector<float> row(static_cast<size_t>(ls.cols));
      for (int64_t b0 = r0; b0 < r1; b0 += kBlock) {
        if (stop.load(std::memory_order_relaxed)) return;
        if (interrupted && !interrupted().ok()) {
          stop.store(true, std::memory_order_relaxed);
          return;
        }
        for (int64_t r = b0; r < std::min(r1, b0 + kBlock); ++r) {
          InitRow(init, seed, ls, static_cast<uint64_t>(ls.row_offset + r), row.data());
          WriteRow(ls, r, row.data());
        }
      }
    });
    if (stop.load()) break;
  }
  if (stop.load()) return interrupted();
  // The weights are written, so MemAvailable now shows them. (The optimizer states are written
  // as training reaches their rows; the check at Allocate covered them once.)
  claim_.Release();
  return Status::Ok();
}

namespace {

// The clones' resolver is an ifunc, which the dynamic loader runs while relocating
// libshardrec.so, before ThreadSanitizer's runtime is up: under TSan it crashed every program at
// load, so that build has the default version only.
#if defined(__SANITIZE_THREAD__)
#define SHARDREC_DRAW_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SHARDREC_DRAW_CLONES
#endif
#endif
#ifndef SHARDREC_DRAW_CLONES
#define SHARDREC_DRAW_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#endif

// low + span * UniformAt(seed, key, row, col) for each column, given Mix64(col) per column;
// `mixed` is scratch of `cols` values. The AVX-512 clone (8 lanes of 64-bit multiplies) gives the
// same values as the default one: the integer mixes are exact, and the float steps (an exact
// conversion of 24 bits, a scaling by 2^-24, one multiply and one add, never fused: this module
// builds with -ffp-contract=off) round the same in any lane width. One pass per mix: an element's
// three mixes form a chain of six multiplies (about 100 cycles), and with the chain in one loop the
// scheduler held too few iterations to overlap them (110 cycles per 16 columns measured); each
// pass's elements are independent, so a pass runs at the multiplier's throughput.
SHARDREC_DRAW_CLONES void DrawUniform(uint64_t seed, uint64_t key, uint64_t row,
                                      const uint64_t* col_mix, size_t cols, uint64_t* mixed,
                                      float low, float span, float* out) {
  for (size_t c = 0; c < cols; ++c) mixed[c] = Mix64(row ^ col_mix[c]);
  for (size_t c = 0; c < cols; ++c) mixed[c] = Mix64(key ^ mixed[c]);
  // The 24 bits are below 2^24: as int32 they convert in one instruction, to the same value.
  for (size_t c = 0; c < cols; ++c)
    out[c] = low + span * (static_cast<float>(static_cast<int32_t>(Mix64(seed ^ mixed[c]) >> 40)) *
                           (1.0f / 16777216.0f));
}

}  // namespace

void ParamStore::InitRowsForIds(const LocalShard& ls, std::span<const int32_t> slots,
                                std::span<const int64_t> ids, uint64_t seed) {
  // Called once per dynamic shard and forward with every row it created (thousands per step under
  // eviction), so it draws exactly what InitRow draws with less work: no allocation, the range
  // once, and the innermost mix of UniformAt, which depends on the column alone, once per shard's
  // columns per thread. An evicted slot's row and state have not been touched for a while: they
  // are asked of the cache for writing a few rows ahead, so those misses overlap the drawing.
  SR_CHECK(!on_device() && slots.size() == ids.size());
  if (slots.empty()) return;
  thread_local std::vector<float> values;
  thread_local std::vector<uint64_t> col_mix;
  thread_local std::vector<uint64_t> mixed;
  thread_local int64_t mixed_offset = -1;
  const size_t cols = static_cast<size_t>(ls.cols);
  values.resize(cols);
  mixed.resize(cols);
  const InitRange init = InitOf(ls);
  if (!init.constant && (mixed_offset != ls.col_offset || col_mix.size() != cols)) {
    col_mix.resize(cols);
    for (size_t c = 0; c < cols; ++c) col_mix[c] = Mix64(static_cast<uint64_t>(ls.col_offset) + c);
    mixed_offset = ls.col_offset;
  }
  const auto& specs = layout_->tables[ls.table].state_specs;
  char* const weight_base = static_cast<char*>(ShardWeights(ls));
  const size_t row_bytes = static_cast<size_t>(WeightRowStride(ls)) * DTypeSize(ls.dtype);
  auto prefetch = [&](int64_t row) {
    core::PrefetchLinesForWrite(weight_base + static_cast<size_t>(row) * row_bytes,
                                static_cast<int64_t>(row_bytes));
    for (size_t k = 0; k < specs.size(); ++k) {
      const size_t width = specs[k].row_wise ? 1 : cols;
      core::PrefetchLinesForWrite(State(ls, k) + row * width,
                                  static_cast<int64_t>(width * sizeof(float)));
    }
  };
  constexpr size_t kAhead = 4;
  for (size_t i = 0; i < std::min(kAhead, slots.size()); ++i) prefetch(slots[i]);
  const float span = init.high - init.low;
  const bool fp32 = ls.dtype == DType::kFloat32;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (i + kAhead < slots.size()) prefetch(slots[i + kAhead]);
    // fp32 rows take the values in place; 16-bit ones are rounded from them by WriteRow.
    float* out =
        fp32 ? reinterpret_cast<float*>(weight_base + static_cast<size_t>(slots[i]) * row_bytes)
             : values.data();
    if (init.constant) {
      std::fill(out, out + cols, init.low);
    } else {
      DrawUniform(seed, init.key, static_cast<uint64_t>(ids[i]), col_mix.data(), cols, mixed.data(),
                  init.low, span, out);
    }
    if (!fp32) WriteRow(ls, slots[i], values.data());
    ClearState(ls, slots[i]);
  }
}

void ParamStore::ClearRow(const LocalShard& ls, int64_t row) {
  const std::vector<float> zeros(static_cast<size_t>(ls.cols), 0.0f);
  WriteRow(ls, row, zeros.data());
  ClearState(ls, row);
}

void ParamStore::ClearState(const LocalShard& ls, int64_t row) {
  const auto& specs = layout_->tables[ls.table].state_specs;
  for (size_t k = 0; k < specs.size(); ++k) {
    const size_t width = specs[k].row_wise ? 1 : static_cast<size_t>(ls.cols);
    float* at = State(ls, k) + static_cast<size_t>(row) * width;
    std::fill(at, at + width, 0.0f);
  }
}

void* ParamStore::ShardWeights(const LocalShard& ls) {
  switch (ls.dtype) {
    case DType::kFloat16:
      return fp16() + ls.weight_offset;
    case DType::kBFloat16:
      return bf16() + ls.weight_offset;
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      return weights_fp8_.as<uint8_t>() + ls.weight_offset;
    default:
      return weights() + ls.weight_offset;
  }
}

kernels::WeightsView ParamStore::View(const LocalShard& ls) {
  return kernels::WeightsView{ShardWeights(ls), ls.dtype, ls.rows, ls.cols, WeightRowStride(ls)};
}

void ParamStore::ReadRow(const LocalShard& ls, int64_t row, float* out) {
  // Device arenas are reached through ReadShard / WriteShard only; on a GPU this would fault.
  SR_CHECK(!on_device());
  const size_t at = static_cast<size_t>(row) * static_cast<size_t>(WeightRowStride(ls));
  const int32_t n = ls.cols;
  if (IsFp8DType(ls.dtype)) {
    DecodeFp8Row(Fp8KindOf(ls.dtype), static_cast<const uint8_t*>(ShardWeights(ls)) + at, n, out);
  } else if (ls.dtype == DType::kFloat16) {
    const uint16_t* src = static_cast<const uint16_t*>(ShardWeights(ls)) + at;
    for (int32_t c = 0; c < n; ++c) out[c] = HalfToFloat(src[c]);
  } else if (ls.dtype == DType::kBFloat16) {
    const uint16_t* src = static_cast<const uint16_t*>(ShardWeights(ls)) + at;
    for (int32_t c = 0; c < n; ++c) out[c] = BFloat16ToFloat(src[c]);
  } else {
    const float* src = static_cast<const float*>(ShardWeights(ls)) + at;
    for (int32_t c = 0; c < n; ++c) out[c] = src[c];
  }
}

void ParamStore::WriteRow(const LocalShard& ls, int64_t row, const float* in) {
  // Device arenas are reached through ReadShard / WriteShard only; on a GPU this would fault.
  SR_CHECK(!on_device());
  const size_t at = static_cast<size_t>(row) * static_cast<size_t>(WeightRowStride(ls));
  const int32_t n = ls.cols;
  if (IsFp8DType(ls.dtype)) {
    EncodeFp8Row(Fp8KindOf(ls.dtype), in, n, static_cast<uint8_t*>(ShardWeights(ls)) + at);
  } else if (ls.dtype == DType::kFloat16) {
    uint16_t* dst = static_cast<uint16_t*>(ShardWeights(ls)) + at;
    for (int32_t c = 0; c < n; ++c) dst[c] = FloatToHalf(in[c]);
  } else if (ls.dtype == DType::kBFloat16) {
    uint16_t* dst = static_cast<uint16_t*>(ShardWeights(ls)) + at;
    for (int32_t c = 0; c < n; ++c) dst[c] = FloatToBFloat16(in[c]);
  } else {
    float* dst = static_cast<float*>(ShardWeights(ls)) + at;
    for (int32_t c = 0; c < n; ++c) dst[c] = in[c];
  }
}

Status ParamStore::ReadShard(const LocalShard& ls, int32_t state, float* out) {
  const bool row_wise = state >= 0 && layout_->tables[ls.table].state_specs[state].row_wise;
  const size_t n = static_cast<size_t>(ls.rows) * (row_wise ? 1 : static_cast<size_t>(ls.cols));
  if (n == 0) return Status::Ok();
  if (state >= 0) {
    if (on_device()) return CopyRows(ls, state, 0, ls.rows, out, false);
    std::memcpy(out, State(ls, static_cast<size_t>(state)), sizeof(float) * n);
    return Status::Ok();
  }
  if (!on_device() || ls.dtype == DType::kFloat32) {
    if (on_device()) return CopyRows(ls, state, 0, ls.rows, out, false);
    for (int64_t r = 0; r < ls.rows; ++r) ReadRow(ls, r, out + r * ls.cols);
    return Status::Ok();
  }
  std::vector<uint16_t> raw(n);
  SR_RETURN_IF_ERROR(CopyRows(ls, state, 0, ls.rows, raw.data(), false));
  const bool fp16 = ls.dtype == DType::kFloat16;
  for (size_t i = 0; i < n; ++i) out[i] = fp16 ? HalfToFloat(raw[i]) : BFloat16ToFloat(raw[i]);
  return Status::Ok();
}

Status ParamStore::WriteShard(const LocalShard& ls, int32_t state, const float* in) {
  const bool row_wise = state >= 0 && layout_->tables[ls.table].state_specs[state].row_wise;
  const size_t n = static_cast<size_t>(ls.rows) * (row_wise ? 1 : static_cast<size_t>(ls.cols));
  if (n == 0) return Status::Ok();
  if (state >= 0 || ls.dtype == DType::kFloat32) {
    if (on_device()) return CopyRows(ls, state, 0, ls.rows, const_cast<float*>(in), true);
    float* dst =
        state >= 0 ? State(ls, static_cast<size_t>(state)) : static_cast<float*>(ShardWeights(ls));
    std::memcpy(dst, in, sizeof(float) * n);
    return Status::Ok();
  }
  if (!on_device()) {
    for (int64_t r = 0; r < ls.rows; ++r) WriteRow(ls, r, in + r * ls.cols);
    return Status::Ok();
  }
  std::vector<uint16_t> raw(n);
  const bool fp16 = ls.dtype == DType::kFloat16;
  for (size_t i = 0; i < n; ++i) raw[i] = fp16 ? FloatToHalf(in[i]) : FloatToBFloat16(in[i]);
  return CopyRows(ls, state, 0, ls.rows, raw.data(), true);
}

optim::ShardParams ParamStore::Params(int32_t local) {
  const LocalShard& ls = layout_->local[local];
  optim::ShardParams p;
  p.weights = ShardWeights(ls);
  p.dtype = ls.dtype;
  p.rows = ls.rows;
  p.cols = ls.cols;
  p.stride = WeightRowStride(ls);
  for (size_t s = 0; s < ls.state_offsets.size(); ++s) p.states.push_back(State(ls, s));
  p.table_key = layout_->tables[ls.table].key;
  p.row_offset = ls.row_offset;
  p.col_offset = ls.col_offset;
  if (static_cast<size_t>(local) < row_keys_.size() && row_keys_[local].first != nullptr) {
    p.row_ids = row_keys_[local].first;
    p.num_row_ids = row_keys_[local].second;
  }
  return p;
}

void ParamStore::SetRowKeys(int32_t local, const int64_t* keys, int64_t n) {
  if (row_keys_.size() < layout_->local.size()) row_keys_.resize(layout_->local.size());
  row_keys_[local] = {keys, n};
}

void ParamStore::InitialValues(const LocalShard& ls, uint64_t key_row, uint64_t seed,
                               float* out) const {
  InitRow(InitOf(ls), seed, ls, key_row, out);
  if (ls.dtype == DType::kFloat32) return;
  if (IsFp8DType(ls.dtype)) {
    std::vector<uint8_t> row(static_cast<size_t>(Fp8RowBytes(ls.cols)));
    EncodeFp8Row(Fp8KindOf(ls.dtype), out, ls.cols, row.data());
    DecodeFp8Row(Fp8KindOf(ls.dtype), row.data(), ls.cols, out);
    return;
  }
  for (int32_t c = 0; c < ls.cols; ++c) {
    uint8_t bits[2];
    StoreElement(ls.dtype, out[c], bits);
    out[c] = LoadElement(ls.dtype, bits);
  }
}

std::vector<ParamBuffer> ParamStore::Buffers() {
  std::vector<ParamBuffer> out = {
      {ParamKind::kWeights, DType::kFloat32, device_, weights(), layout_->weights_size},
      {ParamKind::kOptimizerState, DType::kFloat32, device_, states(), layout_->states_size}};
  if (layout_->weights_fp16_size > 0)
    out.push_back(
        {ParamKind::kWeights, DType::kFloat16, device_, fp16(), layout_->weights_fp16_size});
  if (layout_->weights_bf16_size > 0)
    out.push_back(
        {ParamKind::kWeights, DType::kBFloat16, device_, bf16(), layout_->weights_bf16_size});
  // FP8 rows (E4M3 and E5M2 in one byte arena): a 2D sync averages their decoded rows instead
  // (replica/fp8_sync.h), as averaging codes under different scales means nothing.
  if (layout_->weights_fp8_size > 0)
    out.push_back({ParamKind::kWeights, DType::kUInt8, device_, weights_fp8_.as<uint8_t>(),
                   layout_->weights_fp8_size});
  out.push_back({ParamKind::kCounter, DType::kInt64, Device::Host(), &step_, 1});
  return out;
}

std::vector<ShardTensor> ParamStore::ShardTensors() {
  std::vector<ShardTensor> out;
  const auto& plan = *layout_->plan;
  for (const LocalShard& ls : layout_->local) {
    const auto& cfg = plan.tables[ls.table];
    ShardTensor t;
    t.device = device_;
    t.table = ls.table;
    t.table_name = cfg.name;
    t.shard = ls.shard;
    t.data_parallel = layout_->tables[ls.table].data_parallel;
    t.full_rows = cfg.rows;
    t.row_offset = ls.row_offset;
    t.rows = ls.rows;
    t.kind = ParamKind::kWeights;
    t.dtype = ls.dtype;
    t.name = "weights";
    t.full_cols = cfg.dim;
    t.col_offset = ls.col_offset;
    t.cols = ls.cols;
    t.data = ShardWeights(ls);
    t.row_stride = WeightRowStride(ls);
    t.local = static_cast<int32_t>(&ls - layout_->local.data());
    t.state = -1;
    out.push_back(t);
    const auto& specs = layout_->tables[ls.table].state_specs;
    for (size_t s = 0; s < specs.size(); ++s) {
      const auto& spec = specs[s];
      t.kind = ParamKind::kOptimizerState;
      t.dtype = DType::kFloat32;
      t.name = spec.name;
      t.full_cols = spec.row_wise ? 1 : cfg.dim;
      t.col_offset = spec.row_wise ? 0 : ls.col_offset;
      t.cols = spec.row_wise ? 1 : ls.cols;
      t.data = State(ls, s);
      t.row_stride = t.cols;
      t.duplicate = spec.row_wise && ls.col_offset != 0;
      t.state = static_cast<int32_t>(s);
      out.push_back(t);
    }
  }
  return out;
}

}  // namespace shardrec::embedding
