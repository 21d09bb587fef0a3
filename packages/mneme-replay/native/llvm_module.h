// The LLVM binding's C++ core: one Module object owns one LLVMContext, so
// modules can be compiled on different threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace llvm {
class LLVMContext;
class Module;
class Function;
class BasicBlock;
class Instruction;
}  // namespace llvm

namespace mneme::jit {

// Kinds of failure; the Python layer maps each to an exception class of
// mneme.replay.jit.errors with the same name.
enum class ErrorKind { InvalidIR, UnknownPass, Pipeline, Codegen, Specialization, Link, StaleHandle };

class Failure : public std::runtime_error {
 public:
  Failure(ErrorKind kind, const std::string &message) : std::runtime_error(message), kind(kind) {}
  ErrorKind kind;
};

struct ModuleState {
  ModuleState();
  ~ModuleState();
  std::unique_ptr<llvm::LLVMContext> context;
  std::unique_ptr<llvm::Module> module;
  // LLVM objects of one context are not thread-safe: one operation at a time.
  std::mutex mutex;
  // Bumped by every transformation; handles taken before it are stale.
  uint64_t generation = 0;
  // Errors LLVM reported through the context (link, codegen) since the last
  // take_errors(); without a handler LLVM would print them and exit.
  std::string errors;
  std::string take_errors() { return std::exchange(errors, {}); }
  // Set when an LLVM fatal error interrupted a transformation half-way.
  bool broken = false;
};

// While alive on a thread, LLVM fatal errors (report_fatal_error) on that thread
// become a Failure of `kind` instead of ending the process. The interrupted
// LLVM frames are not cleaned up, so the module they worked on is marked broken.
class FatalErrorScope {
 public:
  FatalErrorScope(ModuleState &state, ErrorKind kind);
  ~FatalErrorScope();

 private:
  ModuleState &state_;
  ErrorKind previous_kind_;
  bool previous_active_;
  // Exceptions in flight when the scope began: only one more at its end means a failure
  // inside it. (Not "any": a wheel's modules each link libstdc++ privately, and an
  // exception of the device module rethrown by this module's translator and caught there
  // leaves this runtime's count at 1 for good; every later module was marked broken.)
  int exceptions_at_entry_;
};
using StateRef = std::shared_ptr<ModuleState>;

// Locks a module and checks a handle's generation.
class Access {
 public:
  Access(const StateRef &state, uint64_t generation);
  explicit Access(const StateRef &state);

 private:
  std::unique_lock<std::mutex> lock_;
};

struct ArgumentInfo {
  unsigned index;
  std::string name;
  std::string type;
  uint64_t size;    // bytes in the launch argument buffer
  uint64_t align;
  uint64_t offset;  // CUDA layout: each parameter aligned to its alignment
  bool byval;
};

struct InstructionHandle {
  StateRef state;
  uint64_t generation;
  llvm::Instruction *inst;
  std::string opcode() const;
  std::string type() const;
  std::vector<std::string> operands() const;
  std::optional<std::string> called_function() const;
  std::map<std::string, std::string> metadata() const;
  std::string text() const;
};

struct BlockHandle {
  StateRef state;
  uint64_t generation;
  llvm::BasicBlock *block;
  std::string name() const;
  std::vector<InstructionHandle> instructions() const;
  std::vector<BlockHandle> successors() const;
  size_t size() const;
};

struct FunctionHandle {
  StateRef state;
  uint64_t generation;
  llvm::Function *function;
  std::string name() const;
  bool is_kernel() const;
  bool is_declaration() const;
  std::string linkage() const;
  unsigned calling_convention() const;
  std::map<std::string, std::string> attributes() const;
  std::vector<ArgumentInfo> arguments() const;
  std::vector<BlockHandle> blocks() const;
  size_t instruction_count() const;
  unsigned loop_count() const;
  unsigned max_loop_depth() const;
  std::string text() const;
};

struct LaunchBounds {
  std::optional<int64_t> max_threads;
  std::optional<int64_t> min_blocks;
  std::optional<int64_t> max_registers;
};

class Module {
 public:
  explicit Module(StateRef state) : state_(std::move(state)) {}

  // Bitcode or textual IR; LLVM's diagnostic on failure.
  static Module parse(const std::string &data, const std::string &name);
  Module clone() const;
  std::string print() const;
  std::string bitcode() const;
  void verify() const;
  std::string triple() const;
  std::string data_layout() const;
  std::string source_name() const;

  std::vector<FunctionHandle> functions() const;
  FunctionHandle function(const std::string &name) const;

  // Runs a textual new-pass-manager pipeline exactly as `opt -passes=` does.
  void run_passes(const std::string &pipeline, const std::string &cpu);
  // Links libdevice when the module calls undefined __nv_* functions.
  bool link_libdevice(const std::string &path);
  // Turns every kernel but `kernel` into a declaration (its callees stay).
  void keep_only_kernel(const std::string &kernel);
  void specialize_arguments(const std::string &kernel,
                            const std::map<unsigned, std::string> &values);
  void specialize_launch_dims(const std::string &kernel,
                              const std::optional<std::array<uint32_t, 3>> &block,
                              const std::optional<std::array<uint32_t, 3>> &grid);
  void set_launch_bounds(const std::string &kernel, const LaunchBounds &bounds);
  // The guarded probe variant (llvm_guard.cpp): the number of accesses guarded.
  unsigned guard_memory_accesses(unsigned max_ranges);

  // Codegen on a copy: the module itself is left as it was.
  std::string emit(const std::string &cpu, const std::string &features, int opt_level,
                   bool assembly) const;

  const StateRef &state() const { return state_; }

 private:
  llvm::Function &kernel_named(const std::string &name) const;
  StateRef state_;
};

void initialize_targets();
void install_fatal_error_handler();
// Parses a pipeline string without running it (UnknownPass on error).
void check_pipeline(const std::string &pipeline, const std::string &triple);
std::string llvm_version();
std::vector<std::string> registered_targets();

}  // namespace mneme::jit
