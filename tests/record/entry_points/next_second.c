int which_library(void) { return 2; }
