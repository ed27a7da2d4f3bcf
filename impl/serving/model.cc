// A served model's layout (pooled pairs or sequence tables), the shape check of a reload, and the
// storage types' row sizes and names.
#include "impl/serving/model.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <set>
#include <string>
#include <vector>

namespace shardrec::serving {

const char* StorageName(Storage s) {
  if (s == Storage::kAsTrained) return "as_trained";
  if (!IsValidStorage(static_cast<int32_t>(s))) return "unknown";
  return RowFormatName(FormatOf(s));
}

bool StorageFromName(const std::string& name, Storage* out) {
  for (int32_t v = 1; IsValidStorage(v); ++v) {
    if (name == StorageName(static_cast<Storage>(v))) {
      *out = static_cast<Storage>(v);
      return true;
    }
  }
  return false;
}

uint64_t RowBytes(Storage s, int32_t dim) {
  if (s == Storage::kAsTrained || !IsValidStorage(static_cast<int32_t>(s))) return 0;
  return shardrec::RowBytes(FormatOf(s), dim);
}

std::shared_ptr<uint8_t> AlignedBuffer(size_t bytes) {
  // A buffer of 2 MiB or more is 2 MiB-aligned and advised MADV_HUGEPAGE before it is first
  // touched: lookups read random rows, and with 4 KiB pages nearly every row of a table larger
  // than the TLB's reach costs a page walk (many systems run THP in "madvise" mode, where nothing
  // else gets huge pages). A refusal leaves ordinary pages.
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t align = bytes >= kHuge ? kHuge : kAlign;
  const size_t n = (bytes + align - 1) / align * align;
  void* p = n == 0 ? nullptr : std::aligned_alloc(align, n);
  if (n != 0 && p == nullptr) return nullptr;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (p != nullptr && align == kHuge) madvise(p, n, MADV_HUGEPAGE);
#endif
  if (p != nullptr) std::memset(p, 0, n);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

Status Model::Finish() {
  if (tables.empty()) return Status::InvalidArgument("the model has no tables");
  const auto F = static_cast<int32_t>(features.size());
  // The plan's rules (plan_validate.cc), which a file's header could break: names are unique and
  // not empty (deltas and lookups find tables by name), every table reads a feature at most once
  // and at least one, and every feature is read.
  std::set<std::string> names;
  for (size_t f = 0; f < features.size(); ++f) {
    if (features[f].empty()) return Status::InvalidArgument("feature ", f, " has an empty name");
    if (!names.insert(features[f]).second)
      return Status::InvalidArgument("feature name '", features[f], "' is given twice");
  }
  names.clear();
  std::vector<bool> read(features.size(), false);
  int32_t none = 0;
  for (const Table& t : tables) {
    if (t.name.empty()) return Status::InvalidArgument("a table has an empty name");
    if (!names.insert(t.name).second)
      return Status::InvalidArgument("table name '", t.name, "' is given twice");
    if (t.rows < (t.dynamic ? 0 : 1) || t.dim < 1)
      return Status::InvalidArgument("table ", t.name, ": rows ", t.rows, " and dim ", t.dim,
                                     " must be positive");
    if (t.features.empty()) return Status::InvalidArgument("table ", t.name, " reads no feature");
    std::set<int32_t> own;
    for (int32_t f : t.features) {
      if (f < 0 || f >= F)
        return Status::InvalidArgument("table ", t.name, " reads feature ", f, " of ", F);
      if (!own.insert(f).second)
        return Status::InvalidArgument("table ", t.name, " lists feature ", features[f], " twice");
      read[f] = true;
    }
    if (t.pooling == Pooling::kNone) ++none;
    if (t.row_bytes != RowBytes(t.storage, t.dim))
      return Status::InvalidArgument("table ", t.name, ": row of ", t.row_bytes,
                                     " bytes, its storage needs ", RowBytes(t.storage, t.dim));
  }
  for (int32_t f = 0; f < F; ++f)
    if (!read[f]) return Status::InvalidArgument("feature ", features[f], " is read by no table");
  if (none != 0 && none != static_cast<int32_t>(tables.size()))
    return Status::Unsupported("the model mixes pooled and sequence (NONE) tables");
  sequence = none != 0;
  pairs.clear();
  feature_table.assign(features.size(), -1);
  output_dim = 0;
  for (int32_t f = 0; f < F; ++f) {
    for (size_t t = 0; t < tables.size(); ++t) {
      bool reads = false;
      for (int32_t g : tables[t].features) reads = reads || g == f;
      if (!reads) continue;
      if (sequence) {
        if (feature_table[f] >= 0)
          return Status::InvalidArgument("feature ", features[f],
                                         " is read by two tables of a sequence model");
        if (tables[t].dim != tables[0].dim)
          return Status::InvalidArgument("table ", tables[t].name, " has dim ", tables[t].dim,
                                         "; a sequence model's tables share one dim (",
                                         tables[0].dim, ")");
        feature_table[f] = static_cast<int32_t>(t);
      } else {
        pairs.push_back({f, static_cast<int32_t>(t), output_dim});
        output_dim += tables[t].dim;
      }
    }
  }
  if (sequence) output_dim = tables[0].dim;
  return Status::Ok();
}

namespace {

// One table as a reload refusal names it: everything SameShape compares, so the served and the
// new description differ where the tables do.
std::string DescribeForReload(const Table& t, const std::vector<std::string>& feature_names) {
  std::string d = t.name + " (" + (t.dynamic ? "dynamic, " : "") + std::to_string(t.rows) + " x " +
                  std::to_string(t.dim) + ", pooling " +
                  std::to_string(static_cast<int32_t>(t.pooling)) + ", " + StorageName(t.storage) +
                  ", read by";
  for (size_t k = 0; k < t.features.size(); ++k) {
    const auto f = static_cast<size_t>(t.features[k]);
    d += (k == 0 ? " " : ", ") + (f < feature_names.size() ? feature_names[f] : std::to_string(f));
  }
  return d + ")";
}

}  // namespace

Status Model::SameShape(const Model& o) const {
  if (features != o.features)
    return Status::InvalidArgument("the new version's features differ from the served ones");
  if (tables.size() != o.tables.size())
    return Status::InvalidArgument("the new version has ", o.tables.size(), " tables, the served ",
                                   tables.size());
  for (size_t i = 0; i < tables.size(); ++i) {
    const Table& a = tables[i];
    const Table& b = o.tables[i];
    const bool dynamic = a.dynamic != nullptr;
    if (a.name != b.name || dynamic != (b.dynamic != nullptr) || (!dynamic && a.rows != b.rows) ||
        a.dim != b.dim || a.pooling != b.pooling || a.storage != b.storage ||
        a.features != b.features)
      return Status::InvalidArgument("table ", i, " differs: served ",
                                     DescribeForReload(a, features), ", new ",
                                     DescribeForReload(b, o.features));
  }
  return Status::Ok();
}

}  // namespace shardrec::serving
