// Minimal JSON parser and writer helpers (RFC 8259 subset: no duplicate-key detection needed).
#include "impl/sharding/json.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "impl/core/check.h"

namespace shardrec::sharding::json {
namespace {

constexpr int kMaxDepth = 64;

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Status Run(Value* out) {
    SkipSpace();
    SR_RETURN_IF_ERROR(ParseValue(out, 0));
    SkipSpace();
    if (pos_ != s_.size()) return Error("unexpected text after the JSON value");
    return Status::Ok();
  }

 private:
  Status Error(const std::string& what) const {
    return Status::Corrupt("plan json: ", what, " at byte ", pos_);
  }
  void SkipSpace() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool Literal(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) return false;
    pos_ += lit.size();
    return true;
  }

  Status ParseValue(Value* v, int depth) {
    if (depth > kMaxDepth) return Error("nesting too deep");
    if (pos_ >= s_.size()) return Error("unexpected end of text");
    v->offset = pos_;
    const char c = s_[pos_];
    if (c == '{') return ParseObject(v, depth);
    if (c == '[') return ParseArray(v, depth);
    if (c == '"') {
      v->kind = Value::Kind::kString;
      return ParseString(&v->text);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber(v);
    if (Literal("true")) {
      v->kind = Value::Kind::kBool;
      v->boolean = true;
      return Status::Ok();
    }
    if (Literal("false")) {
      v->kind = Value::Kind::kBool;
      return Status::Ok();
    }
    if (Literal("null")) {
      v->kind = Value::Kind::kNull;
      return Status::Ok();
    }
    return Error(StrCat("unexpected character '", c, "'"));
  }

  Status ParseObject(Value* v, int depth) {
    v->kind = Value::Kind::kObject;
    ++pos_;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return Status::Ok();
    }
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected a member name");
      std::string key;
      SR_RETURN_IF_ERROR(ParseString(&key));
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != ':') return Error("expected ':'");
      ++pos_;
      SkipSpace();
      Value member;
      SR_RETURN_IF_ERROR(ParseValue(&member, depth + 1));
      v->keys.push_back(std::move(key));
      v->values.push_back(std::move(member));
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return Status::Ok();
      }
      return Error("expected ',' or '}'");
    }
  }

  Status ParseArray(Value* v, int depth) {
    v->kind = Value::Kind::kArray;
    ++pos_;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return Status::Ok();
    }
    while (true) {
      SkipSpace();
      Value item;
      SR_RETURN_IF_ERROR(ParseValue(&item, depth + 1));
      v->items.push_back(std::move(item));
      SkipSpace();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return Status::Ok();
      }
      return Error("expected ',' or ']'");
    }
  }

  Status ParseNumber(Value* v) {
    const size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      size_t n = 0;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
        ++pos_;
        ++n;
      }
      return n;
    };
    if (digits() == 0) return Error("malformed number");
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) return Error("malformed number");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) return Error("malformed number");
    }
    v->kind = Value::Kind::kNumber;
    v->text = std::string(s_.substr(start, pos_ - start));
    return Status::Ok();
  }

  Status Hex4(uint32_t* out) {
    if (pos_ + 4 > s_.size()) return Error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= c - '0';
      else if (c >= 'a' && c <= 'f')
        v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        v |= c - 'A' + 10;
      else
        return Error("bad hex digit in \\u escape");
    }
    *out = v;
    return Status::Ok();
  }

  static void AppendUtf8(std::string* out, uint32_t cp) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  Status ParseString(std::string* out) {
    ++pos_;  // opening quote
    out->clear();
    while (true) {
      if (pos_ >= s_.size()) return Error("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return Status::Ok();
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return Error("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp = 0;
          SR_RETURN_IF_ERROR(Hex4(&cp));
          if (cp >= 0xD800 && cp < 0xDC00) {
            uint32_t lo = 0;
            if (!Literal("\\u")) return Error("unpaired surrogate");
            SR_RETURN_IF_ERROR(Hex4(&lo));
            if (lo < 0xDC00 || lo >= 0xE000) return Error("unpaired surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return Error("unpaired surrogate");
          }
          AppendUtf8(out, cp);
          break;
        }
        default:
          return Error(StrCat("bad escape '\\", e, "'"));
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
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
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), v);  // shortest round-trip form
  if (ec != std::errc()) return "0";
  return std::string(buf, p);
}

}  // namespace shardrec::sharding::json
