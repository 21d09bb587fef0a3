/* Two libraries defining one symbol: dlsym(RTLD_NEXT) from the first must find the second's
 * (a library that interposes on another, as profilers and allocators do). */
#define _GNU_SOURCE
#include <dlfcn.h>

int which_library(void) { return 1; }

void* next_which_library(void) {
  /* not a tail call: dlsym must see this library as its caller */
  void* volatile found = dlsym(RTLD_NEXT, "which_library");
  return found;
}
