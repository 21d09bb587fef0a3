#include "stream_predecessors.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <unordered_map>

namespace mneme::recorder {
namespace rt = mneme::runtime;

namespace {

// Bytes of a by-value argument structure looked at for pointers.
constexpr uint32_t kStructBytesScanned = 512;

std::string trim(std::string s) {
  auto space = [](char c) { return c == ' ' || c == '\t'; };
  while (!s.empty() && space(s.back())) s.pop_back();
  size_t i = 0;
  while (i < s.size() && space(s[i])) ++i;
  return s.substr(i);
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// "float const*", "float const* __restrict__": a pointer whose pointee is const.
bool is_const_pointer(std::string type) {
  type = trim(type);
  for (const char* qualifier : {"__restrict__", "__restrict", "restrict"})
    if (ends_with(type, qualifier)) type = trim(type.substr(0, type.size() - std::strlen(qualifier)));
  if (type.empty() || type.back() != '*') return false;
  type = trim(type.substr(0, type.size() - 1));
  return ends_with(type, "const") || type.rfind("const ", 0) == 0;
}

// The allocation `value` points into: (start, size), or nothing.
std::optional<std::pair<uint64_t, uint64_t>> owner(uint64_t value,
                                                   const std::vector<const std::map<uint64_t, uint64_t>*>& maps) {
  for (const auto* map : maps) {
    auto it = map->upper_bound(value);
    if (it == map->begin()) continue;
    --it;
    if (value >= it->first && value < it->first + std::max<uint64_t>(it->second, 1)) return *it;
  }
  return std::nullopt;
}

Ranges joined(Ranges ranges) {  // overlapping ranges (several pointers into one allocation) joined
  std::sort(ranges.begin(), ranges.end());
  Ranges merged;
  for (const auto& [address, size] : ranges) {
    if (!merged.empty() && address <= merged.back().first + merged.back().second) {
      uint64_t end = std::max(merged.back().first + merged.back().second, address + size);
      merged.back().second = end - merged.back().first;
    } else {
      merged.push_back({address, size});
    }
  }
  return merged;
}

}  // namespace

std::vector<bool> const_pointer_params(const std::string& demangled) {
  size_t close = demangled.rfind(')');
  if (close == std::string::npos) return {};
  int depth = 0;
  size_t open = std::string::npos;
  for (size_t i = close + 1; i-- > 0;) {
    char c = demangled[i];
    if (c == ')') ++depth;
    if (c == '(' && --depth == 0) {
      open = i;
      break;
    }
  }
  if (open == std::string::npos) return {};
  std::vector<bool> out;
  std::string current;
  depth = 0;
  for (size_t i = open + 1; i < close; ++i) {
    char c = demangled[i];
    if (c == '<' || c == '(' || c == '[') ++depth;
    if (c == '>' || c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(is_const_pointer(current));
      current.clear();
      continue;
    }
    current += c;
  }
  if (!trim(current).empty() && trim(current) != "void") out.push_back(is_const_pointer(current));
  return out;
}

Traffic argument_traffic(const std::string& demangled, const std::vector<rt::KernelParam>& params, void** args,
                         const std::vector<const std::map<uint64_t, uint64_t>*>& allocations) {
  // Every launch of the application comes through here: a kernel's signature is split once.
  static std::unordered_map<std::string, std::vector<bool>> signatures;
  auto known = signatures.find(demangled);
  if (known == signatures.end()) known = signatures.emplace(demangled, const_pointer_params(demangled)).first;
  std::vector<bool> read_only = known->second;
  if (read_only.size() != params.size()) read_only.assign(params.size(), false);
  Traffic out;
  auto add = [&](Ranges& to, uint64_t value) {
    if (auto found = owner(value, allocations)) to.push_back({value, found->first + found->second - value});
  };
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    if (!args || !args[i]) continue;
    const auto* bytes = static_cast<const unsigned char*>(args[i]);
    if (p.is_pointer && p.size == 8) {
      uint64_t value;
      std::memcpy(&value, bytes, 8);
      add(read_only[i] ? out.reads : out.writes, value);
    } else if (p.by_value) {  // pointers inside an argument structure, at 8-byte steps
      // (its head only: frameworks put their data pointers first, then kilobytes of strides)
      for (uint32_t at = 0; at + 8 <= std::min(p.size, kStructBytesScanned); at += 8) {
        uint64_t value;
        std::memcpy(&value, bytes + at, 8);
        add(out.writes, value);
      }
    }
  }
  out.writes = joined(std::move(out.writes));
  out.reads = joined(std::move(out.reads));
  return out;
}

void StreamPredecessors::launched(uint64_t stream, const std::string& kernel, Traffic traffic, bool known) {
  last_[stream] = Launch{kernel, std::move(traffic), known};
}

void StreamPredecessors::instance(uint64_t stream, const std::string& static_hash, const std::string& dynamic_hash) {
  auto it = last_.find(stream);
  if (it != last_.end()) instances_.try_emplace({static_hash, dynamic_hash}, it->second);
}

std::string StreamPredecessors::json(const Launch& launch) {
  std::string out = "{\"kernel\": \"" + json_escaped(launch.kernel) + "\", \"writes\": ";
  if (!launch.known) return out + "null, \"reads\": null}";
  auto list = [](const Ranges& ranges) {
    std::string text = "[";
    for (size_t i = 0; i < ranges.size(); ++i)
      text += (i ? ", [" : "[") + std::to_string(ranges[i].first) + ", " + std::to_string(ranges[i].second) + "]";
    return text + "]";
  };
  return out + list(launch.traffic.writes) + ", \"reads\": " + list(launch.traffic.reads) + "}";
}

void StreamPredecessors::write(rt::RecordingWriter& writer) const {
  for (const auto& [ids, launch] : instances_) {
    if (!writer.has_instance(ids.first, ids.second)) continue;  // its launch failed: not stored
    try {
      writer.set_instance_attribute(ids.first, ids.second, "predecessor", json(launch));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mneme record: the launch before instance %s/%s not written: %s\n", ids.first.c_str(),
                   ids.second.c_str(), e.what());
    }
  }
}

std::string json_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace mneme::recorder
