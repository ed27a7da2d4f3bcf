// Served models built in memory for the serving white-box tests: tables from fp32 rows encoded
// into their storage exactly as a checkpoint open does, and rows read back through the lookups'
// decoders.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "impl/serving/decode.h"
#include "impl/serving/encode.h"
#include "impl/serving/id_index.h"
#include "impl/serving/model.h"

namespace shardrec::serving::testing {

struct TableSpec {
  std::string name;
  int32_t dim = 0;
  Storage storage = Storage::kFp32;
  std::vector<float> rows;   // rows x dim, row-major
  std::vector<int64_t> ids;  // ascending: a dynamic table holding these ids; empty: fixed
};

// One pooled (sum) table per spec, each read by its own feature "f_<table>".
inline std::shared_ptr<Model> MakeModel(const std::vector<TableSpec>& specs) {
  auto m = std::make_shared<Model>();
  for (size_t i = 0; i < specs.size(); ++i) {
    const TableSpec& s = specs[i];
    m->features.push_back("f_" + s.name);
    Table t;
    t.name = s.name;
    t.dim = s.dim;
    t.storage = s.storage;
    t.features = {static_cast<int32_t>(i)};
    t.row_bytes = RowBytes(s.storage, s.dim);
    const int64_t n = static_cast<int64_t>(s.rows.size()) / s.dim;
    t.rows = n;
    const bool dynamic = !s.ids.empty();
    // A dynamic table has one more row, zero in its storage, for ids it does not hold.
    std::shared_ptr<uint8_t> buf = AlignedBuffer((n + (dynamic ? 1 : 0)) * t.row_bytes);
    EXPECT_TRUE(EncodeRows(s.rows.data(), n, s.dim, s.storage, buf.get(), s.name).ok());
    if (dynamic) {
      auto d = std::make_shared<DynamicIds>();
      d->ids = s.ids;
      EXPECT_TRUE(IdIndex::Build(d->ids.data(), n, s.name, &d->index).ok());
      t.dynamic = std::move(d);
    }
    t.data = buf.get();
    t.own = std::move(buf);
    m->tables.push_back(std::move(t));
  }
  const Status st = m->Finish();
  EXPECT_TRUE(st.ok()) << st.ToString();
  return m;
}

// Row `row` of `t` as fp32, through the decoder the lookups use.
inline std::vector<float> ReadRow(const Table& t, int64_t row) {
  std::vector<float> out(static_cast<size_t>(t.dim));
  const uint8_t* p = t.data + static_cast<uint64_t>(row) * t.row_bytes;
  const DecodeFn decode = DecoderFor(t.storage);
  if (decode == nullptr) {
    std::memcpy(out.data(), p, out.size() * sizeof(float));
  } else {
    std::vector<uint8_t> scratch(out.size() + 1);
    decode(p, t.dim, out.data(), scratch.data());
  }
  return out;
}

}  // namespace shardrec::serving::testing
