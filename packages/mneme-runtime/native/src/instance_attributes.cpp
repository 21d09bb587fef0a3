// RecordingWriter::set_instance_attribute / set_root_attribute: one key of a stored
// instance's (or the root's) mneme attributes replaced or added, atomically (temporary file, then rename; under the
// database's lock, as occurrence counts are), so a reader never sees a half-written
// zarr.json. The recorder writes each instance's in-application time this way at exit
// (app_timing.cpp; docs/format.md, "app_time"), and the application's profile in the
// root's ("app_profile").
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "mneme/runtime/recording_writer.hpp"

namespace fs = std::filesystem;

namespace mneme::runtime {
namespace {

size_t skip_space(const std::string& s, size_t i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  return i;
}

// Just past the JSON value that starts at `i`.
size_t value_end(const std::string& s, size_t i) {
  if (i >= s.size()) throw std::runtime_error("truncated JSON");
  if (s[i] == '"') {
    for (++i; i < s.size(); ++i) {
      if (s[i] == '\\') ++i;
      else if (s[i] == '"') return i + 1;
    }
    throw std::runtime_error("unterminated JSON string");
  }
  if (s[i] == '{' || s[i] == '[') {
    int depth = 0;
    for (; i < s.size(); ++i) {
      if (s[i] == '"') {
        i = value_end(s, i) - 1;
      } else if (s[i] == '{' || s[i] == '[') {
        ++depth;
      } else if ((s[i] == '}' || s[i] == ']') && --depth == 0) {
        return i + 1;
      }
    }
    throw std::runtime_error("unbalanced JSON");
  }
  while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] != ' ' && s[i] != '\n') ++i;
  return i;
}

struct Member {
  size_t value_begin = std::string::npos, value_end = 0;
};

// The member `key` of the object whose '{' is at `open` (value_begin npos: absent).
Member member(const std::string& s, size_t open, const std::string& key) {
  if (open >= s.size() || s[open] != '{') throw std::runtime_error("expected a JSON object");
  size_t i = skip_space(s, open + 1);
  while (i < s.size() && s[i] != '}') {
    size_t key_end = value_end(s, i);
    std::string name = s.substr(i + 1, key_end - i - 2);
    i = skip_space(s, key_end);
    if (i >= s.size() || s[i] != ':') throw std::runtime_error("expected ':' in JSON object");
    size_t begin = skip_space(s, i + 1);
    size_t end = value_end(s, begin);
    if (name == key) return {begin, end};
    i = skip_space(s, end);
    if (i < s.size() && s[i] == ',') i = skip_space(s, i + 1);
  }
  return {};
}

}  // namespace

void RecordingWriter::set_instance_attribute(const std::string& static_hash, const std::string& dynamic_hash,
                                             const std::string& key, const std::string& json_value) {
  set_node_attribute(root_ / "kernels" / static_hash / "instances" / dynamic_hash, key, json_value);
}

void RecordingWriter::set_root_attribute(const std::string& key, const std::string& json_value) {
  set_node_attribute(root_, key, json_value);
}

void RecordingWriter::set_node_attribute(const fs::path& node, const std::string& key,
                                         const std::string& json_value) {
  fs::path meta = node / "zarr.json";
  fs::path lock_path = root_ / ".mneme" / "lock";
  int fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR, 0644);
  if (fd < 0) throw std::runtime_error("cannot open " + lock_path.string());
  ::flock(fd, LOCK_EX);
  struct Unlock {
    int fd;
    ~Unlock() { ::flock(fd, LOCK_UN); ::close(fd); }
  } unlock{fd};
  std::ifstream in(meta, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + meta.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  try {
    Member attributes = member(text, skip_space(text, 0), "attributes");
    if (attributes.value_begin == std::string::npos) throw std::runtime_error("no attributes");
    Member mneme = member(text, attributes.value_begin, "mneme");
    if (mneme.value_begin == std::string::npos) throw std::runtime_error("no mneme attributes");
    Member old = member(text, mneme.value_begin, key);
    if (old.value_begin != std::string::npos) {
      text.replace(old.value_begin, old.value_end - old.value_begin, json_value);
    } else {
      size_t close = mneme.value_end - 1;  // the object's '}'
      bool empty = skip_space(text, mneme.value_begin + 1) == close;
      text.insert(close, std::string(empty ? "" : ", ") + "\"" + key + "\": " + json_value);
    }
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(meta.string() + ": malformed metadata (" + e.what() + ")");
  }
  fs::path tmp = meta.parent_path() / (".zarr.json." + std::to_string(::getpid()) + ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(text.data(), std::streamsize(text.size()));
    if (!out.flush()) throw std::runtime_error("cannot write " + tmp.string());
  }
  fs::rename(tmp, meta);
}

}  // namespace mneme::runtime
