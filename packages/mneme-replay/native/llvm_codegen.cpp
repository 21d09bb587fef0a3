// Pass pipelines and code generation of the LLVM binding.
#include "llvm_module.h"

#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassManager.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Passes/StandardInstrumentations.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/Transforms/Utils/Cloning.h>

extern "C" {
// Only the GPU targets are linked in (the static build carries nothing else).
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
void LLVMInitializeAMDGPUTargetInfo();
void LLVMInitializeAMDGPUTarget();
void LLVMInitializeAMDGPUTargetMC();
void LLVMInitializeAMDGPUAsmPrinter();
}

using namespace llvm;

namespace mneme::jit {

void initialize_targets() {
  LLVMInitializeNVPTXTargetInfo();
  LLVMInitializeNVPTXTarget();
  LLVMInitializeNVPTXTargetMC();
  LLVMInitializeNVPTXAsmPrinter();
  LLVMInitializeAMDGPUTargetInfo();
  LLVMInitializeAMDGPUTarget();
  LLVMInitializeAMDGPUTargetMC();
  LLVMInitializeAMDGPUAsmPrinter();
}

std::string llvm_version() { return LLVM_VERSION_STRING; }

std::vector<std::string> registered_targets() {
  std::vector<std::string> out;
  for (const Target &target : TargetRegistry::targets()) out.push_back(target.getName());
  return out;
}

namespace {

CodeGenOptLevel codegen_level(int level) {
  switch (level) {
    case 0: return CodeGenOptLevel::None;
    case 1: return CodeGenOptLevel::Less;
    case 2: return CodeGenOptLevel::Default;
    case 3: return CodeGenOptLevel::Aggressive;
  }
  throw Failure(ErrorKind::Codegen,
                "codegen optimization level must be 0, 1, 2 or 3, not " + std::to_string(level));
}

// A target machine for the module's triple, or null when the module has none
// (then passes run target-independent, as in opt).
std::unique_ptr<TargetMachine> target_machine(const Triple &triple, const std::string &cpu,
                                              const std::string &features, int level,
                                              bool required) {
  if (triple.getArch() == Triple::UnknownArch) {
    if (required)
      throw Failure(ErrorKind::Codegen,
                    "the module has no target triple; codegen needs nvptx64-nvidia-cuda or "
                    "amdgcn-amd-amdhsa");
    return nullptr;
  }
  std::string error;
  const Target *target = TargetRegistry::lookupTarget(triple, error);
  if (!target)
    throw Failure(ErrorKind::Codegen,
                  "no LLVM target for '" + triple.str() + "' in this build: " + error);
  TargetOptions options;
  return std::unique_ptr<TargetMachine>(target->createTargetMachine(
      triple, cpu, features, options, Reloc::PIC_, std::nullopt, codegen_level(level)));
}

}  // namespace

void check_pipeline(const std::string &pipeline, const std::string &triple) {
  // Target-specific passes are known only with that target's machine.
  auto machine = target_machine(Triple(triple), "", "", 2, /*required=*/false);
  PassBuilder builder(machine.get());
  ModulePassManager passes;
  if (Error error = builder.parsePassPipeline(passes, pipeline))
    throw Failure(ErrorKind::UnknownPass, toString(std::move(error)));
}

void Module::run_passes(const std::string &pipeline, const std::string &cpu) {
  Access access(state_);
  llvm::Module &module = *state_->module;
  // opt builds its target machine from the module triple, an empty CPU unless
  // -mcpu is given, and the default codegen level; functions carry their own
  // target-cpu attributes.
  auto machine = target_machine(module.getTargetTriple(), cpu, "", 2, /*required=*/false);

  LoopAnalysisManager loop_analyses;
  FunctionAnalysisManager function_analyses;
  CGSCCAnalysisManager cgscc_analyses;
  ModuleAnalysisManager module_analyses;
  PassInstrumentationCallbacks instrumentation;
  // Gives optnone and opt-bisect the meaning they have in opt and clang.
  StandardInstrumentations standard(*state_->context, /*DebugLogging=*/false);
  standard.registerCallbacks(instrumentation, &module_analyses);
  PipelineTuningOptions tuning;
  PassBuilder builder(machine.get(), tuning, std::nullopt, &instrumentation);
  builder.registerModuleAnalyses(module_analyses);
  builder.registerCGSCCAnalyses(cgscc_analyses);
  builder.registerFunctionAnalyses(function_analyses);
  builder.registerLoopAnalyses(loop_analyses);
  builder.crossRegisterProxies(loop_analyses, function_analyses, cgscc_analyses,
                               module_analyses);

  ModulePassManager passes;
  if (Error error = builder.parsePassPipeline(passes, pipeline))
    throw Failure(ErrorKind::UnknownPass, toString(std::move(error)));
  ++state_->generation;
  state_->take_errors();
  {
    FatalErrorScope fatal(*state_, ErrorKind::Pipeline);
    passes.run(module, module_analyses);
  }
  std::string errors = state_->take_errors();
  if (!errors.empty()) throw Failure(ErrorKind::Pipeline, "pipeline '" + pipeline + "' failed: " + errors);
}

std::string Module::emit(const std::string &cpu, const std::string &features, int opt_level,
                         bool assembly) const {
  Access access(state_);
  // Codegen's IR passes change the module: work on a copy in the same context.
  std::unique_ptr<llvm::Module> copy = CloneModule(*state_->module);
  auto machine =
      target_machine(copy->getTargetTriple(), cpu, features, opt_level, /*required=*/true);
  if (copy->getDataLayout().isDefault()) copy->setDataLayout(machine->createDataLayout());

  SmallString<0> output;
  raw_svector_ostream stream(output);
  legacy::PassManager passes;
  if (machine->addPassesToEmitFile(passes, stream, nullptr,
                                   assembly ? CodeGenFileType::AssemblyFile
                                            : CodeGenFileType::ObjectFile))
    throw Failure(ErrorKind::Codegen, "the " + copy->getTargetTriple().str() +
                                          " target cannot emit this file type");
  state_->take_errors();
  {
    // A fatal error leaves only the copy half-done, yet the shared context
    // may hold its debris: the module is marked broken all the same.
    FatalErrorScope fatal(*state_, ErrorKind::Codegen);
    passes.run(*copy);
  }
  std::string errors = state_->take_errors();
  if (!errors.empty()) throw Failure(ErrorKind::Codegen, "codegen failed: " + errors);
  return std::string(output.data(), output.size());
}

}  // namespace mneme::jit
