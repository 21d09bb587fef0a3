// A regular expression (ECMAScript) searched in names: which kernels the recorder records
// (MNEME_RECORD_FILTER, `mneme record --kernel`).
//
// std::regex stays inside name_pattern.cpp: its templates, instantiated and optimised in
// every file that included a header using them (the recorder's eleven), cost each of
// those files seconds of compile time.
#pragma once

#include <memory>
#include <string>

namespace mneme::runtime {

class NamePattern {
 public:
  // Throws std::invalid_argument when `expression` is not a regular expression.
  explicit NamePattern(const std::string& expression);
  ~NamePattern();
  NamePattern(const NamePattern&) = delete;
  NamePattern& operator=(const NamePattern&) = delete;

  // Whether the expression matches somewhere in `name`.
  bool found_in(const std::string& name) const;

  static bool valid(const std::string& expression) noexcept;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace mneme::runtime
