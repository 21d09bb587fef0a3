// The launch swapper's plan (launch_plan.hpp): reading it, and fitting a launch to it.
#include "launch_plan.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace mneme::apply {

void fatal(const std::string& message, int code) {
  std::fprintf(stderr, "mneme run: %s\n", message.c_str());
  std::fflush(stderr);
  _exit(code);
}

namespace {

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(char(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

}  // namespace

std::map<std::string, Plan> read_plan(const std::string& path) {
  std::map<std::string, Plan> plans;
  std::ifstream in(path);
  std::string line, word;
  if (!in || !std::getline(in, line) || line != "mneme-apply-plan 1")
    fatal(path + " is not a plan written by this version of mneme run");
  Plan plan;
  auto dims = [](std::istringstream& s, Dims& d) { s >> d.v[0] >> d.v[1] >> d.v[2]; };
  while (std::getline(in, line)) {
    std::istringstream s(line);
    s >> word;
    if (word == "kernel") s >> plan.kernel;
    else if (word == "cubin") std::getline(s >> std::ws, plan.cubin);
    else if (word == "function") s >> plan.function;
    else if (word == "recorded") { dims(s, plan.recorded_grid); dims(s, plan.recorded_block); s >> plan.recorded_shared; }
    else if (word == "tuned") { dims(s, plan.tuned_grid); dims(s, plan.tuned_block); s >> plan.tuned_shared; }
    else if (word == "grid") s >> plan.grid_rule;
    else if (word == "shared_per_thread") s >> plan.shared_per_thread;
    else if (word == "bound") s >> plan.bound;
    else if (word == "dims") { std::string v; s >> v; plan.dims_exact = v == "exact"; }
    else if (word == "arg") { unsigned i; std::string hex; s >> i >> hex; plan.args.push_back({i, unhex(hex)}); }
    else if (word == "global") { std::string n; size_t size; s >> n >> size; plan.globals.push_back({n, size}); }
    else if (word == "end") {
      plans[plan.kernel] = plan;
      plan = Plan();
    }
    else if (!word.empty()) fatal(path + ": unknown plan line '" + line + "'");
    if (s.fail()) fatal(path + ": malformed plan line '" + line + "'");
  }
  return plans;
}

// Whether the tuned code is valid for this launch (why not), and the launch it then gets.
Fit applies(const Plan& p, Dims grid, Dims block, size_t shared, void** args, Dims& new_grid, Dims& new_block,
            size_t& new_shared) {
  if (p.dims_exact && !(grid == p.recorded_grid && block == p.recorded_block)) return Fit::kOtherDims;
  for (const auto& [index, bytes] : p.args)
    if (!args || std::memcmp(args[index], bytes.data(), bytes.size()) != 0) return Fit::kOtherArgs;
  if (!(block == p.recorded_block)) {  // another launch shape: tuned code, its own launch
    return p.bound == 0 || block.threads() <= p.bound ? Fit::kApplies : Fit::kOverBound;
  }
  new_block = p.tuned_block;
  if (p.grid_rule == "keep") new_grid = grid;
  else if (p.grid_rule == "fixed" && grid == p.recorded_grid) new_grid = p.tuned_grid;
  else
    for (int a = 0; a < 3; ++a)  // cover the same threads per axis
      new_grid.v[a] = unsigned(std::max(1ull, (1ull * grid.v[a] * block.v[a] + new_block.v[a] - 1) / new_block.v[a]));
  if (p.shared_per_thread && shared == p.shared_per_thread * block.threads())
    new_shared = p.shared_per_thread * new_block.threads();
  else if (shared == p.recorded_shared)
    new_shared = p.tuned_shared;
  return Fit::kApplies;
}

}  // namespace mneme::apply
