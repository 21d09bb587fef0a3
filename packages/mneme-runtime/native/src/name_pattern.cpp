// A regular expression searched in names (name_pattern.hpp): the one file that compiles
// std::regex.
#include "mneme/runtime/name_pattern.hpp"

#include <regex>
#include <stdexcept>

namespace mneme::runtime {

struct NamePattern::Compiled {
  std::regex expression;
};

NamePattern::NamePattern(const std::string& expression) {
  try {
    compiled_ = std::make_unique<Compiled>(Compiled{std::regex(expression)});
  } catch (const std::regex_error& error) {
    throw std::invalid_argument(expression + " is not a regular expression: " + error.what());
  }
}

NamePattern::~NamePattern() = default;

bool NamePattern::found_in(const std::string& name) const {
  return std::regex_search(name, compiled_->expression);
}

bool NamePattern::valid(const std::string& expression) noexcept {
  try {
    std::regex compiled(expression);
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace mneme::runtime
