// The JSON value the plan text form is read into (parsed by nlohmann-json), and writer helpers.
// Numbers keep their source text so integers up to int64 and floats round-trip exactly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "impl/core/status.h"

namespace shardrec::sharding::json {

struct Value {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;          // kNumber: the literal; kString: the decoded UTF-8
  std::vector<Value> items;  // kArray
  // kObject, in source order: member i is keys[i] -> values[i] (two vectors: a pair holding the
  // still-incomplete Value is not allowed by every standard library).
  std::vector<std::string> keys;
  std::vector<Value> values;
  size_t offset = 0;  // byte offset in the source, for errors

  // Member lookup (first match); nullptr if absent or not an object.
  const Value* Find(std::string_view key) const;
};

// Parses exactly one JSON value (surrounding whitespace allowed). Errors are Code::kCorrupt with
// the byte offset. Nesting deeper than 64 levels is rejected (no stack exhaustion on bad input).
Status Parse(std::string_view text, Value* out);

// Typed access with Corrupt errors naming `what` (e.g. "tables[2].rows").
Status GetInt(const Value& v, const std::string& what, int64_t* out);
Status GetFloat(const Value& v, const std::string& what, float* out);
Status GetString(const Value& v, const std::string& what, std::string* out);
// Member `key` of object `obj` (Corrupt if `obj` is not an object or the key is missing).
Status GetMember(const Value& obj, const std::string& where, std::string_view key,
                 const Value** out);
Status ExpectArray(const Value& v, const std::string& what);

// Writer helpers.
void AppendString(std::string* out, std::string_view s);  // quoted and escaped
// Shortest decimal text that reads back to the same float ("0.1", "1", "1e-05").
std::string FormatFloat(float v);

}  // namespace shardrec::sharding::json
