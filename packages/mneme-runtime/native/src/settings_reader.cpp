// Settings from the environment, validated (settings_reader.hpp).
#include "mneme/runtime/settings_reader.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "mneme/runtime/name_pattern.hpp"

namespace mneme::runtime {

uint64_t parse_size(const std::string& text) {
  if (text.empty()) return 0;
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  if (errno || end == text.c_str() || !(value > 0) || !std::isfinite(value)) return 0;
  std::string unit(end);
  for (auto& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();            // "GB", "MiB"
  if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();             // "Gi"
  double scale = 1;
  if (unit == "K") scale = 1024.0;
  else if (unit == "M") scale = 1024.0 * 1024;
  else if (unit == "G") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty()) return 0;
  double bytes = value * scale;
  return bytes >= 1 && bytes < 1.8e19 ? uint64_t(bytes) : 0;
}

namespace settings {

namespace {

const char* from_environment(const char* name) { return std::getenv(name); }

std::string lower(const char* text) {
  std::string out(text);
  for (auto& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// A whole number, all of `text`, base 0 (0x... hexadecimal); false when it is not one.
bool whole(const char* text, long long& value) {
  errno = 0;
  char* end = nullptr;
  value = std::strtoll(text, &end, 0);
  return !errno && end != text && !*end;
}

}  // namespace

Reader::Reader(Lookup lookup) : lookup_(lookup ? lookup : from_environment) {}

const char* Reader::get(const char* name) const {
  const char* text = lookup_(name);
  return text && *text ? text : nullptr;
}

void Reader::refuse(const char* name, const char* text, const std::string& expected) {
  if (error_.empty()) error_ = std::string(name) + "=" + text + " is not " + expected + "; unset it or give one";
}

void Reader::flag(const char* name, bool& value) {
  const char* text = get(name);
  if (!text) return;
  std::string v = lower(text);
  if (v == "1" || v == "true" || v == "yes" || v == "on") value = true;
  else if (v == "0" || v == "false" || v == "no" || v == "off") value = false;
  else refuse(name, text, "a flag (1 or 0)");
}

void Reader::integer(const char* name, int64_t& value, int64_t low, int64_t high) {
  const char* text = get(name);
  if (!text) return;
  long long v = 0;
  if (whole(text, v) && v >= low && v <= high) value = v;
  else refuse(name, text, "a whole number in [" + std::to_string(low) + ", " + std::to_string(high) + "]");
}

void Reader::bytes(const char* name, uint64_t& value) {
  const char* text = get(name);
  if (!text) return;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text, &end, 0);
  if (errno || end == text || *end || std::strchr(text, '-')) refuse(name, text, "a whole number of bytes");
  else value = v;
}

void Reader::size(const char* name, uint64_t& value) {
  const char* text = get(name);
  if (!text) return;
  if (uint64_t v = parse_size(text)) value = v;
  else refuse(name, text, "a size (bytes, or e.g. 512M, 8G)");
}

void Reader::seconds(const char* name, double& value) {
  const char* text = get(name);
  if (!text) return;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (errno || end == text || *end || !(v >= 0) || !std::isfinite(v)) refuse(name, text, "a number of seconds");
  else value = v;
}

void Reader::choice(const char* name, std::string& value, std::initializer_list<const char*> choices) {
  const char* text = get(name);
  if (!text) return;
  std::string all;
  for (const char* c : choices) {
    if (std::strcmp(c, text) == 0) {
      value = text;
      return;
    }
    all += (all.empty() ? "" : ", ") + std::string(c);
  }
  refuse(name, text, "one of " + all);
}

void Reader::regex(const char* name, std::string& value) {
  const char* text = get(name);
  if (!text) return;
  if (NamePattern::valid(text)) {
    value = text;
  } else {
    refuse(name, text, "a regular expression (ECMAScript)");
  }
}

void Reader::ranks(const char* name, std::string& value) {
  const char* text = get(name);
  if (!text) return;
  if (std::strcmp(text, "all") == 0) {
    value = text;
    return;
  }
  std::string list(text);
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    long long rank = 0;
    if (!item.empty() && (!whole(item.c_str(), rank) || rank < 0)) {
      refuse(name, text, "all or a list of ranks (e.g. 0,2)");
      return;
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  value = text;
}

void Reader::text(const char* name, std::string& value) {
  if (const char* text = get(name)) value = text;
}

}  // namespace settings
}  // namespace mneme::runtime
