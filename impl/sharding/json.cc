// JSON reading through nlohmann-json into the plan reader's Value tree, and writer helpers.
#include "impl/sharding/json.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <nlohmann/json.hpp>

#include "impl/core/check.h"

namespace shardrec::sharding::json {
namespace {

constexpr int kMaxDepth = 64;

// Reads the text through nlohmann-json's SAX parser (Debian nlohmann-json3-dev) and builds the
// Value tree the plan reader walks. The iterator below records how far the parser has read, so
// values and errors carry a byte offset; number callbacks keep the literal where the library
// passes it (floats) and print the value otherwise (integers, which print back exactly).
class CountingIterator {
 public:
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator() = default;
  CountingIterator(const char* p, const char* begin, size_t* pos)
      : p_(p), begin_(begin), pos_(pos) {}
  reference operator*() const {
    *pos_ = static_cast<size_t>(p_ - begin_);
    return *p_;
  }
  CountingIterator& operator++() {
    ++p_;
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator old = *this;
    ++p_;
    return old;
  }
  bool operator==(const CountingIterator& o) const { return p_ == o.p_; }
  bool operator!=(const CountingIterator& o) const { return p_ != o.p_; }

 private:
  const char* p_ = nullptr;
  const char* begin_ = nullptr;
  size_t* pos_ = nullptr;
};

class Builder : public nlohmann::json_sax<nlohmann::json> {
 public:
  Builder(Value* root, const size_t* pos) : root_(root), pos_(pos) {}

  bool null() override { return Add(Value::Kind::kNull) != nullptr; }
  bool boolean(bool b) override {
    Value* v = Add(Value::Kind::kBool);
    v->boolean = b;
    return true;
  }
  bool number_integer(number_integer_t n) override { return Number(std::to_string(n)); }
  bool number_unsigned(number_unsigned_t n) override { return Number(std::to_string(n)); }
  bool number_float(number_float_t, const string_t& text) override { return Number(text); }
  bool string(string_t& s) override {
    Add(Value::Kind::kString)->text = std::move(s);
    return true;
  }
  bool binary(binary_t&) override { return Fail("binary values are not JSON"); }
  bool start_object(std::size_t) override { return Open(Value::Kind::kObject); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open(Value::Kind::kArray); }
  bool end_array() override { return Close(); }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    // The library's message names the token; drop its "[json.exception...] " prefix.
    std::string what = e.what();
    const size_t cut = what.find("] ");
    if (cut != std::string::npos) what = what.substr(cut + 2);
    error_ = Status::Corrupt("plan json: ", what, " at byte ", position);
    return false;
  }

  const Status& error() const { return error_; }

 private:
  Value* Add(Value::Kind kind) {
    Value* v;
    if (stack_.empty()) {
      v = root_;
    } else if (stack_.back()->kind == Value::Kind::kArray) {
      v = &stack_.back()->items.emplace_back();
    } else {
      stack_.back()->keys.push_back(std::move(key_));
      v = &stack_.back()->values.emplace_back();
    }
    v->kind = kind;
    v->offset = *pos_;
    return v;
  }
  bool Number(std::string text) {
    Add(Value::Kind::kNumber)->text = std::move(text);
    return true;
  }
  // Children are only appended to the innermost open container, so the pointers to the outer
  // ones on the stack stay valid while their vectors do not grow.
  bool Open(Value::Kind kind) {
    if (static_cast<int>(stack_.size()) >= kMaxDepth) return Fail("nesting too deep");
    stack_.push_back(Add(kind));
    return true;
  }
  bool Close() {
    stack_.pop_back();
    return true;
  }
  bool Fail(const char* what) {
    error_ = Status::Corrupt("plan json: ", what, " at byte ", *pos_);
    return false;
  }

  Value* root_;
  const size_t* pos_;
  std::vector<Value*> stack_;
  std::string key_;
  Status error_;
};

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Status Run(Value* out) {
    size_t pos = 0;
    Value root;
    Builder builder(&root, &pos);
    const char* b = s_.data();
    const bool ok = nlohmann::json::sax_parse(CountingIterator(b, b, &pos),
                                              CountingIterator(b + s_.size(), b, &pos), &builder);
    if (!ok) {
      if (!builder.error().ok()) return builder.error();
      return Status::Corrupt("plan json: malformed text at byte ", pos);
    }
    *out = std::move(root);
    return Status::Ok();
  }

 private:
  std::string_view s_;
};

Status TypeError(const Value& v, const std::string& what, const char* expected) {
  return Status::Corrupt("plan json: ", what, " must be ", expected, " (at byte ", v.offset, ")");
}

}  // namespace

const Value* Value::Find(std::string_view key) const {
  if (kind != Kind::kObject) return nullptr;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == key) return &values[i];
  }
  return nullptr;
}

Status Parse(std::string_view text, Value* out) {
  *out = Value();
  return Parser(text).Run(out);
}

Status GetInt(const Value& v, const std::string& what, int64_t* out) {
  if (v.kind != Value::Kind::kNumber) return TypeError(v, what, "an integer");
  const char* b = v.text.data();
  const char* e = b + v.text.size();
  auto [p, ec] = std::from_chars(b, e, *out);
  if (ec != std::errc() || p != e) return TypeError(v, what, "an integer in int64 range");
  return Status::Ok();
}

Status GetFloat(const Value& v, const std::string& what, float* out) {
  if (v.kind != Value::Kind::kNumber) return TypeError(v, what, "a number");
  errno = 0;
  char* end = nullptr;
  const float f = std::strtof(v.text.c_str(), &end);
  if (end != v.text.c_str() + v.text.size() || !std::isfinite(f))
    return TypeError(v, what, "a finite float");
  *out = f;
  return Status::Ok();
}

Status GetString(const Value& v, const std::string& what, std::string* out) {
  if (v.kind != Value::Kind::kString) return TypeError(v, what, "a string");
  *out = v.text;
  return Status::Ok();
}

Status GetMember(const Value& obj, const std::string& where, std::string_view key,
                 const Value** out) {
  if (obj.kind != Value::Kind::kObject) return TypeError(obj, where, "an object");
  *out = obj.Find(key);
  if (*out == nullptr)
    return Status::Corrupt("plan json: ", where, " has no member \"", key, "\" (object at byte ",
                           obj.offset, ")");
  return Status::Ok();
}

Status ExpectArray(const Value& v, const std::string& what) {
  if (v.kind != Value::Kind::kArray) return TypeError(v, what, "an array");
  return Status::Ok();
}

void AppendString(std::string* out, std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"')
      out->append("\\\"");
    else if (c == '\\')
      out->append("\\\\");
    else if (c == '\n')
      out->append("\\n");
    else if (c == '\t')
      out->append("\\t");
    else if (c == '\r')
      out->append("\\r");
    else if (u < 0x20) {
      out->append("\\u00");
      out->push_back(kHex[u >> 4]);
      out->push_back(kHex[u & 15]);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

std::string FormatFloat(float v) {
  // "-0" would come back as the integer 0 (the parser hands integers over as values, not text)
  // and lose its sign, changing the plan's hash on a round trip (found by fuzz_create).
  if (v == 0.0f && std::signbit(v)) return "-0.0";
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round-trip form
  if (ec != std::errc()) return "0";
  return std::string(buf, p);
}

}  // namespace shardrec::sharding::json
