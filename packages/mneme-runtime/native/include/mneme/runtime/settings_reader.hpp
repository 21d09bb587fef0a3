// Reading settings from the environment: the parser behind native_settings.hpp (generated
// from mneme/runtime/native_settings.py, which names every variable the recorder, the
// launch swapper and the CUPTI kernel timer read).
//
// A library reads its section once, on first touch (`read<settings::Record>(error)` in a
// function-local static), and ends the process when `error` is not empty: one line,
// "MNEME_RECORD_MAX=abc is not a whole number in [0, 2147483647]; unset it or give one".
// An unset or empty variable keeps the field's default.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

namespace mneme::runtime {

// "1073741824", "64M", "0.5G", "8GiB" (binary units); 0 when not a size.
uint64_t parse_size(const std::string& text);

namespace settings {

class Reader {
 public:
  // Where values come from: getenv, or a table in tests.
  using Lookup = const char* (*)(const char* name);
  explicit Reader(Lookup lookup = nullptr);

  // 1/0 (also true/false, yes/no, on/off, any case).
  void flag(const char* name, bool& value);
  // A whole number in [low, high]; 0x... is hexadecimal.
  void integer(const char* name, int64_t& value, int64_t low, int64_t high);
  // A whole number of bytes (not negative); 0x... is hexadecimal.
  void bytes(const char* name, uint64_t& value);
  // Bytes, or with a binary unit (parse_size): 512M, 8G.
  void size(const char* name, uint64_t& value);
  // A number of seconds, not negative.
  void seconds(const char* name, double& value);
  // One of `choices`.
  void choice(const char* name, std::string& value, std::initializer_list<const char*> choices);
  // A regular expression (ECMAScript: name_pattern.hpp).
  void regex(const char* name, std::string& value);
  // "all", or whole numbers separated by commas.
  void ranks(const char* name, std::string& value);
  // Any text (a path).
  void text(const char* name, std::string& value);

  // The first malformed value's line, or "".
  const std::string& error() const { return error_; }

 private:
  const char* get(const char* name) const;  // nullptr when unset or empty
  void refuse(const char* name, const char* text, const std::string& expected);

  Lookup lookup_;
  std::string error_;
};

// A section of native_settings.hpp read from the environment; `error` gets the first
// malformed value's line ("" when every value is well formed).
template <class Section>
Section read(std::string& error, Reader::Lookup lookup = nullptr) {
  Reader reader(lookup);
  Section section;
  section.read(reader);
  error = reader.error();
  return section;
}

}  // namespace settings
}  // namespace mneme::runtime
