// The recorder's settings (MNEME_RECORD_*: native_settings.hpp, generated from
// mneme/runtime/native_settings.py), read from the environment once, on first touch.
#pragma once

#include "mneme/runtime/native_settings.hpp"

namespace mneme::recorder {

// Every setting of the recorder. A malformed value (written by hand: `mneme record` passes
// checked ones) ends the process with one line naming the variable and what it should be,
// exit 2: "mneme record: MNEME_RECORD_MAX=abc is not a whole number in [0, 2147483647];
// unset it or give one".
const mneme::runtime::settings::Record& settings();

// Whether MNEME_RECORD_RANKS selects this process: its rank is the first of the MPI
// launchers' variables that is set (OMPI_COMM_WORLD_RANK, ...), 0 without one.
bool rank_selected();

}  // namespace mneme::recorder
