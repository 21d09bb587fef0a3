// The recorder's settings: every variable it reads (native_settings.hpp, generated from
// mneme/runtime/native_settings.py), parsed and validated once, on first touch; and which
// MPI ranks of an application record.
#include "recorder.hpp"

#include <cstdlib>

namespace mneme::recorder {

const rt::settings::Record& settings() {
  static const rt::settings::Record parsed = [] {
    std::string error;
    auto s = rt::settings::read<rt::settings::Record>(error);
    if (!error.empty()) fatal(error, 2);  // "MNEME_RECORD_MAX=abc is not ...; unset it or give one"
    return s;
  }();
  return parsed;
}

bool rank_selected() {
  const auto& s = settings();
  if (s.ranks == "all") return true;
  int64_t rank = 0;
  for (int64_t set : {s.ompi_comm_world_rank, s.pmi_rank, s.pmix_rank, s.mv2_comm_world_rank, s.slurm_procid})
    if (set >= 0) {
      rank = set;
      break;
    }
  for (const auto& r : split(s.ranks, ','))
    if (!r.empty() && std::strtoll(r.c_str(), nullptr, 0) == rank) return true;
  return false;
}

}  // namespace mneme::recorder
