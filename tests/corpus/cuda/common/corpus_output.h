// Results a program prints that do not depend on scheduling: compared between a plain run
// and a run under `mneme record` (the application must compute the same thing).
//   corpus-output <name> <value>
#pragma once

#include <cstdio>

namespace corpus {

inline void output(const char *name, unsigned long long value) {
  std::printf("corpus-output %s %016llx\n", name, value);
  std::fflush(stdout);
}

inline void output(const char *name, double value, int significant_digits) {
  std::printf("corpus-output %s %.*e\n", name, significant_digits - 1, value);
  std::fflush(stdout);
}

}  // namespace corpus
