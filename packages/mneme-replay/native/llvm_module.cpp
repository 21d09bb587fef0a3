// Parsing, inspection and IR transformations of the LLVM binding.
#include "llvm_module.h"

#include <llvm/ADT/SmallPtrSet.h>
#include <llvm/ADT/StringSet.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/AsmParser/Parser.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/IRReader/IRReader.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Support/ErrorHandling.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/IPO/Internalize.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <cstring>

using namespace llvm;

namespace mneme::jit {

ModuleState::ModuleState() : context(std::make_unique<LLVMContext>()) {
  context->setDiagnosticHandlerCallBack(
      [](const DiagnosticInfo *info, void *sink) {
        if (info->getSeverity() != DS_Error) return;
        std::string text;
        raw_string_ostream os(text);
        DiagnosticPrinterRawOStream printer(os);
        info->print(printer);
        auto &errors = static_cast<ModuleState *>(sink)->errors;
        errors += (errors.empty() ? "" : "; ") + text;
      },
      this);
}
// The module must go before the context that owns its types and constants.
ModuleState::~ModuleState() { module.reset(); }

Access::Access(const StateRef &state) : lock_(state->mutex) {
  if (state->broken)
    throw Failure(ErrorKind::Pipeline,
                  "this module was left inconsistent by an earlier LLVM error; parse it again");
}

Access::Access(const StateRef &state, uint64_t generation) : Access(state) {
  if (state->generation != generation)
    throw Failure(ErrorKind::StaleHandle,
                  "this function/block/instruction handle was taken before the module was "
                  "transformed; read module.functions again");
}

namespace {

template <typename T>
std::string to_text(const T &value) {
  std::string out;
  raw_string_ostream os(out);
  value.print(os);
  return out;
}

std::string diagnostic_text(const SMDiagnostic &diag, const std::string &name) {
  std::string out;
  raw_string_ostream os(out);
  diag.print("", os, /*ShowColors=*/false, /*ShowKindLabel=*/true, /*ShowLocation=*/true);
  // One line (file:line:col: error: message); LLVM appends the source line and a caret.
  return out.substr(0, out.find('\n'));
}

bool is_kernel_function(const Function &f) {
  auto cc = f.getCallingConv();
  return cc == CallingConv::PTX_Kernel || cc == CallingConv::AMDGPU_KERNEL;
}

// Every function reachable from `root` through direct calls (root included).
SmallPtrSet<Function *, 16> reachable_functions(Function &root) {
  SmallPtrSet<Function *, 16> seen;
  std::vector<Function *> work{&root};
  seen.insert(&root);
  while (!work.empty()) {
    Function *f = work.back();
    work.pop_back();
    for (Instruction &inst : instructions(*f))
      if (auto *call = dyn_cast<CallBase>(&inst))
        if (Function *callee = call->getCalledFunction())
          if (!callee->isDeclaration() && seen.insert(callee).second) work.push_back(callee);
  }
  return seen;
}

uint64_t read_little_endian(const std::string &bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i < bytes.size() && i < 8; ++i)
    value |= uint64_t(uint8_t(bytes[i])) << (8 * i);
  return value;
}

// The constant that a recorded scalar argument of type `type` stands for.
Constant *constant_from_bytes(Type *type, const std::string &bytes, const DataLayout &layout,
                              unsigned index) {
  uint64_t size = layout.getTypeAllocSize(type);
  if (bytes.size() != size)
    throw Failure(ErrorKind::Specialization,
                  "argument " + std::to_string(index) + " has type " + to_text(*type) + " (" +
                      std::to_string(size) + " bytes) but " + std::to_string(bytes.size()) +
                      " bytes were given");
  if (auto *int_type = dyn_cast<IntegerType>(type)) {
    if (int_type->getBitWidth() > 64)
      throw Failure(ErrorKind::Specialization, "argument " + std::to_string(index) +
                                                   ": integers wider than 64 bits are not supported");
    return ConstantInt::get(int_type, read_little_endian(bytes) &
                                          (int_type->getBitWidth() == 64
                                               ? ~uint64_t(0)
                                               : (uint64_t(1) << int_type->getBitWidth()) - 1));
  }
  if (type->isHalfTy() || type->isBFloatTy() || type->isFloatTy() || type->isDoubleTy()) {
    unsigned bits = type->getPrimitiveSizeInBits();
    APInt raw(bits, read_little_endian(bytes));
    return ConstantFP::get(type->getContext(), APFloat(type->getFltSemantics(), raw));
  }
  if (auto *ptr_type = dyn_cast<PointerType>(type)) {
    auto *int_type = layout.getIntPtrType(ptr_type);
    return ConstantExpr::getIntToPtr(ConstantInt::get(int_type, read_little_endian(bytes)),
                                     ptr_type);
  }
  throw Failure(ErrorKind::Specialization, "argument " + std::to_string(index) + " of type " +
                                               to_text(*type) + " cannot be specialized");
}

}  // namespace

// ---------------------------------------------------------------- fatal errors

namespace {
thread_local bool fatal_scope_active = false;
thread_local ErrorKind fatal_scope_kind = ErrorKind::Pipeline;

void on_fatal_error(void *, const char *reason, bool) {
  if (fatal_scope_active) throw Failure(fatal_scope_kind, std::string("LLVM error: ") + reason);
  // Outside the binding's own calls keep LLVM's behaviour: message, then exit.
  errs() << "LLVM ERROR: " << reason << "\n";
}
}  // namespace

void install_fatal_error_handler() { llvm::install_fatal_error_handler(on_fatal_error, nullptr); }

FatalErrorScope::FatalErrorScope(ModuleState &state, ErrorKind kind)
    : state_(state), previous_kind_(fatal_scope_kind), previous_active_(fatal_scope_active),
      exceptions_at_entry_(std::uncaught_exceptions()) {
  fatal_scope_active = true;
  fatal_scope_kind = kind;
}

FatalErrorScope::~FatalErrorScope() {
  fatal_scope_active = previous_active_;
  fatal_scope_kind = previous_kind_;
  if (std::uncaught_exceptions() > exceptions_at_entry_) state_.broken = true;
}

// ---------------------------------------------------------------- handles

std::string InstructionHandle::opcode() const {
  Access access(state, generation);
  return inst->getOpcodeName();
}
std::string InstructionHandle::type() const {
  Access access(state, generation);
  return to_text(*inst->getType());
}
std::vector<std::string> InstructionHandle::operands() const {
  Access access(state, generation);
  std::vector<std::string> out;
  for (const Use &use : inst->operands()) {
    std::string text;
    raw_string_ostream os(text);
    use.get()->printAsOperand(os, /*PrintType=*/true, inst->getModule());
    out.push_back(std::move(text));
  }
  return out;
}
std::optional<std::string> InstructionHandle::called_function() const {
  Access access(state, generation);
  if (auto *call = dyn_cast<CallBase>(inst))
    if (Function *callee = call->getCalledFunction()) return callee->getName().str();
  return std::nullopt;
}
std::map<std::string, std::string> InstructionHandle::metadata() const {
  Access access(state, generation);
  SmallVector<StringRef> kinds;
  inst->getContext().getMDKindNames(kinds);
  SmallVector<std::pair<unsigned, MDNode *>> all;
  inst->getAllMetadata(all);
  std::map<std::string, std::string> out;
  for (auto &[kind, node] : all) {
    std::string text;
    raw_string_ostream os(text);
    node->print(os, inst->getModule());
    out[kind < kinds.size() ? kinds[kind].str() : std::to_string(kind)] = text;
  }
  return out;
}
std::string InstructionHandle::text() const {
  Access access(state, generation);
  return to_text(*inst);
}

std::string BlockHandle::name() const {
  Access access(state, generation);
  if (block->hasName()) return block->getName().str();
  std::string text;
  raw_string_ostream os(text);
  block->printAsOperand(os, false);
  return text;
}
std::vector<InstructionHandle> BlockHandle::instructions() const {
  Access access(state, generation);
  std::vector<InstructionHandle> out;
  for (Instruction &inst : *block) out.push_back({state, generation, &inst});
  return out;
}
std::vector<BlockHandle> BlockHandle::successors() const {
  Access access(state, generation);
  std::vector<BlockHandle> out;
  for (BasicBlock *next : llvm::successors(block)) out.push_back({state, generation, next});
  return out;
}
size_t BlockHandle::size() const {
  Access access(state, generation);
  return block->size();
}

std::string FunctionHandle::name() const {
  Access access(state, generation);
  return function->getName().str();
}
bool FunctionHandle::is_kernel() const {
  Access access(state, generation);
  return is_kernel_function(*function);
}
bool FunctionHandle::is_declaration() const {
  Access access(state, generation);
  return function->isDeclaration();
}
std::string FunctionHandle::linkage() const {
  Access access(state, generation);
  switch (function->getLinkage()) {
    case GlobalValue::ExternalLinkage: return "external";
    case GlobalValue::AvailableExternallyLinkage: return "available_externally";
    case GlobalValue::LinkOnceAnyLinkage: return "linkonce";
    case GlobalValue::LinkOnceODRLinkage: return "linkonce_odr";
    case GlobalValue::WeakAnyLinkage: return "weak";
    case GlobalValue::WeakODRLinkage: return "weak_odr";
    case GlobalValue::AppendingLinkage: return "appending";
    case GlobalValue::InternalLinkage: return "internal";
    case GlobalValue::PrivateLinkage: return "private";
    case GlobalValue::ExternalWeakLinkage: return "extern_weak";
    case GlobalValue::CommonLinkage: return "common";
  }
  return "unknown";
}
unsigned FunctionHandle::calling_convention() const {
  Access access(state, generation);
  return function->getCallingConv();
}
std::map<std::string, std::string> FunctionHandle::attributes() const {
  Access access(state, generation);
  std::map<std::string, std::string> out;
  for (const Attribute &attr : function->getAttributes().getFnAttrs()) {
    if (attr.isStringAttribute())
      out[attr.getKindAsString().str()] = attr.getValueAsString().str();
    else
      out[Attribute::getNameFromAttrKind(attr.getKindAsEnum()).str()] = attr.getAsString();
  }
  return out;
}
std::vector<ArgumentInfo> FunctionHandle::arguments() const {
  Access access(state, generation);
  const DataLayout &layout = function->getDataLayout();
  std::vector<ArgumentInfo> out;
  uint64_t offset = 0;
  for (Argument &arg : function->args()) {
    Type *value_type = arg.getType();
    bool byval = arg.hasByValAttr();
    if (byval) value_type = arg.getParamByValType();
    uint64_t size = layout.getTypeAllocSize(value_type);
    uint64_t align = layout.getABITypeAlign(value_type).value();
    if (byval)
      if (MaybeAlign given = arg.getParamAlign()) align = std::max<uint64_t>(align, given->value());
    offset = (offset + align - 1) / align * align;
    out.push_back({arg.getArgNo(), arg.getName().str(), to_text(*value_type), size, align, offset,
                   byval});
    offset += size;
  }
  return out;
}
std::vector<BlockHandle> FunctionHandle::blocks() const {
  Access access(state, generation);
  std::vector<BlockHandle> out;
  for (BasicBlock &block : *function) out.push_back({state, generation, &block});
  return out;
}
size_t FunctionHandle::instruction_count() const {
  Access access(state, generation);
  return function->getInstructionCount();
}
unsigned FunctionHandle::loop_count() const {
  Access access(state, generation);
  if (function->isDeclaration()) return 0;
  DominatorTree dominators(*function);
  LoopInfo loops(dominators);
  return unsigned(loops.getLoopsInPreorder().size());
}
unsigned FunctionHandle::max_loop_depth() const {
  Access access(state, generation);
  if (function->isDeclaration()) return 0;
  DominatorTree dominators(*function);
  LoopInfo loops(dominators);
  unsigned depth = 0;
  for (Loop *loop : loops.getLoopsInPreorder()) depth = std::max(depth, loop->getLoopDepth());
  return depth;
}
std::string FunctionHandle::text() const {
  Access access(state, generation);
  return to_text(*function);
}

// ---------------------------------------------------------------- module

Module Module::parse(const std::string &data, const std::string &name) {
  auto state = std::make_shared<ModuleState>();
  SMDiagnostic diag;
  auto buffer = MemoryBuffer::getMemBuffer(StringRef(data.data(), data.size()), name,
                                           /*RequiresNullTerminator=*/false);
  state->module = parseIR(buffer->getMemBufferRef(), diag, *state->context);
  if (!state->module) throw Failure(ErrorKind::InvalidIR, diagnostic_text(diag, name));
  return Module(std::move(state));
}

Module Module::clone() const {
  // A fresh context per module keeps modules independent across threads;
  // bitcode is the way to move a module between contexts.
  std::string bits = bitcode();
  return parse(bits, source_name());
}

std::string Module::print() const {
  Access access(state_);
  std::string out;
  raw_string_ostream os(out);
  state_->module->print(os, nullptr);
  return out;
}

std::string Module::bitcode() const {
  Access access(state_);
  std::string out;
  raw_string_ostream os(out);
  WriteBitcodeToFile(*state_->module, os);
  return out;
}

void Module::verify() const {
  Access access(state_);
  std::string message;
  raw_string_ostream os(message);
  if (verifyModule(*state_->module, &os)) {
    while (!message.empty() && message.back() == '\n') message.pop_back();
    throw Failure(ErrorKind::InvalidIR, "invalid IR: " + message);
  }
}

std::string Module::triple() const {
  Access access(state_);
  return state_->module->getTargetTriple().str();
}
std::string Module::data_layout() const {
  Access access(state_);
  return state_->module->getDataLayoutStr();
}
std::string Module::source_name() const {
  Access access(state_);
  return state_->module->getSourceFileName();
}

std::vector<FunctionHandle> Module::functions() const {
  Access access(state_);
  std::vector<FunctionHandle> out;
  for (Function &f : *state_->module) out.push_back({state_, state_->generation, &f});
  return out;
}

FunctionHandle Module::function(const std::string &name) const {
  Access access(state_);
  Function *f = state_->module->getFunction(name);
  if (!f) throw std::out_of_range("no function named '" + name + "' in the module");
  return {state_, state_->generation, f};
}

Function &Module::kernel_named(const std::string &name) const {
  Function *f = state_->module->getFunction(name);
  if (!f || f->isDeclaration())
    throw Failure(ErrorKind::Specialization,
                  "no kernel named '" + name + "' is defined in the module");
  if (!is_kernel_function(*f))
    throw Failure(ErrorKind::Specialization, "'" + name + "' is a device function, not a kernel");
  return *f;
}

bool Module::link_libdevice(const std::string &path) {
  Access access(state_);
  llvm::Module &module = *state_->module;
  bool needed = false;
  for (Function &f : module)
    if (f.isDeclaration() && f.getName().starts_with("__nv_")) needed = true;
  if (!needed) return false;

  SMDiagnostic diag;
  std::unique_ptr<llvm::Module> library = parseIRFile(path, diag, *state_->context);
  if (!library) throw Failure(ErrorKind::Link, diagnostic_text(diag, path));
  library->setTargetTriple(module.getTargetTriple());
  library->setDataLayout(module.getDataLayout());
  ++state_->generation;
  // Like clang's -mlink-builtin-bitcode: take only what is called, internalize
  // it, and let the pipeline drop what inlining leaves unused.
  bool failed = Linker::linkModules(
      module, std::move(library), Linker::Flags::LinkOnlyNeeded,
      [](llvm::Module &merged, const StringSet<> &linked) {
        internalizeModule(merged, [&linked](const GlobalValue &value) {
          return !value.hasName() || !linked.count(value.getName());
        });
      });
  std::string errors = state_->take_errors();
  if (failed)
    throw Failure(ErrorKind::Link, "linking libdevice (" + path + ") failed: " + errors);
  // libdevice's __nvvm_reflect("__CUDA_FTZ") reads this flag; clang sets it to 0
  // unless -fgpu-flush-denormals-to-zero.
  if (!module.getModuleFlag("nvvm-reflect-ftz"))
    module.addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", uint32_t(0));
  return true;
}

void Module::keep_only_kernel(const std::string &kernel) {
  Access access(state_);
  Function &keep = kernel_named(kernel);
  ++state_->generation;
  std::vector<Function *> others;
  for (Function &f : *state_->module)
    if (&f != &keep && is_kernel_function(f) && !f.isDeclaration()) others.push_back(&f);
  for (Function *f : others) {
    f->deleteBody();
    if (f->use_empty()) f->eraseFromParent();
  }
}

void Module::specialize_arguments(const std::string &kernel,
                                  const std::map<unsigned, std::string> &values) {
  Access access(state_);
  Function &f = kernel_named(kernel);
  const DataLayout &layout = f.getDataLayout();
  // Check everything before changing anything.
  for (auto &[index, bytes] : values)
    if (index >= f.arg_size())
      throw Failure(ErrorKind::Specialization,
                    "kernel '" + kernel + "' has " + std::to_string(f.arg_size()) +
                        " arguments; there is no argument " + std::to_string(index));
  std::vector<std::pair<Argument *, Constant *>> replacements;
  for (auto &[index, bytes] : values) {
    Argument *arg = f.getArg(index);
    if (arg->hasByValAttr()) {
      // A by-value aggregate becomes a constant global holding the recorded
      // bytes, so loads from it fold.
      Type *value_type = arg->getParamByValType();
      uint64_t size = layout.getTypeAllocSize(value_type);
      if (bytes.size() != size)
        throw Failure(ErrorKind::Specialization,
                      "argument " + std::to_string(index) + " is a by-value " +
                          to_text(*value_type) + " of " + std::to_string(size) + " bytes but " +
                          std::to_string(bytes.size()) + " bytes were given");
      auto *init = ConstantDataArray::getRaw(bytes, bytes.size(),
                                             Type::getInt8Ty(*state_->context));
      replacements.push_back({arg, init});
    } else {
      replacements.push_back({arg, constant_from_bytes(arg->getType(), bytes, layout, index)});
    }
  }
  ++state_->generation;
  for (auto &[arg, value] : replacements) {
    if (arg->hasByValAttr()) {
      // Constant address space of NVPTX and AMDGPU is 4.
      auto *global = new GlobalVariable(
          *state_->module, value->getType(), /*isConstant=*/true, GlobalValue::InternalLinkage,
          value, kernel + ".arg" + std::to_string(arg->getArgNo()), nullptr,
          GlobalValue::NotThreadLocal, /*AddressSpace=*/4);
      global->setAlignment(arg->getParamAlign().valueOrOne());
      global->setUnnamedAddr(GlobalValue::UnnamedAddr::Global);
      arg->replaceAllUsesWith(ConstantExpr::getAddrSpaceCast(global, arg->getType()));
    } else {
      arg->replaceAllUsesWith(value);
    }
  }
}

void Module::specialize_launch_dims(const std::string &kernel,
                                    const std::optional<std::array<uint32_t, 3>> &block,
                                    const std::optional<std::array<uint32_t, 3>> &grid) {
  Access access(state_);
  Function &f = kernel_named(kernel);
  for (const auto *dims : {&block, &grid})
    if (*dims)
      for (uint32_t d : **dims)
        if (d == 0)
          throw Failure(ErrorKind::Specialization, "launch dimensions must be at least 1");
  if (f.getCallingConv() != CallingConv::PTX_Kernel)
    throw Failure(ErrorKind::Specialization,
                  "launch-dimension specialization is implemented for NVPTX kernels only");
  ++state_->generation;
  using namespace Intrinsic;
  const std::array<ID, 3> ntid{nvvm_read_ptx_sreg_ntid_x, nvvm_read_ptx_sreg_ntid_y,
                               nvvm_read_ptx_sreg_ntid_z};
  const std::array<ID, 3> nctaid{nvvm_read_ptx_sreg_nctaid_x, nvvm_read_ptx_sreg_nctaid_y,
                                 nvvm_read_ptx_sreg_nctaid_z};
  const std::array<ID, 3> tid{nvvm_read_ptx_sreg_tid_x, nvvm_read_ptx_sreg_tid_y,
                              nvvm_read_ptx_sreg_tid_z};
  const std::array<ID, 3> ctaid{nvvm_read_ptx_sreg_ctaid_x, nvvm_read_ptx_sreg_ctaid_y,
                                nvvm_read_ptx_sreg_ctaid_z};
  Type *i32 = Type::getInt32Ty(*state_->context);
  for (Function *fn : reachable_functions(f)) {
    std::vector<std::pair<CallBase *, Constant *>> replace;
    for (Instruction &inst : instructions(*fn)) {
      auto *call = dyn_cast<CallBase>(&inst);
      if (!call || !call->getCalledFunction()) continue;
      ID id = call->getCalledFunction()->getIntrinsicID();
      for (int axis = 0; axis < 3; ++axis) {
        if (block && id == ntid[axis]) replace.push_back({call, ConstantInt::get(i32, (*block)[axis])});
        if (grid && id == nctaid[axis]) replace.push_back({call, ConstantInt::get(i32, (*grid)[axis])});
        // A known extent bounds the index: tid.x < ntid.x, ctaid.x < nctaid.x.
        const auto &extent = id == tid[axis] ? block : grid;
        if ((id == tid[axis] || id == ctaid[axis]) && extent)
          call->addRetAttr(Attribute::get(
              *state_->context, Attribute::Range,
              ConstantRange(APInt(32, 0), APInt(32, (*extent)[axis]))));
      }
    }
    for (auto &[call, value] : replace) {
      call->replaceAllUsesWith(value);
      call->eraseFromParent();
    }
  }
}

void Module::set_launch_bounds(const std::string &kernel, const LaunchBounds &bounds) {
  Access access(state_);
  Function &f = kernel_named(kernel);
  auto check = [](const std::optional<int64_t> &value, const char *what) {
    if (value && *value <= 0)
      throw Failure(ErrorKind::Specialization,
                    std::string(what) + " must be a positive integer, not " +
                        std::to_string(*value));
  };
  check(bounds.max_threads, "max_threads");
  check(bounds.min_blocks, "min_blocks");
  check(bounds.max_registers, "max_registers");
  ++state_->generation;
  // The same function attributes clang-22 emits for __launch_bounds__ / __maxnreg__.
  if (bounds.max_threads) f.addFnAttr("nvvm.maxntid", std::to_string(*bounds.max_threads));
  if (bounds.min_blocks) f.addFnAttr("nvvm.minctasm", std::to_string(*bounds.min_blocks));
  if (bounds.max_registers) f.addFnAttr("nvvm.maxnreg", std::to_string(*bounds.max_registers));
  if (f.getCallingConv() == CallingConv::AMDGPU_KERNEL && bounds.max_threads)
    f.addFnAttr("amdgpu-flat-work-group-size", "1," + std::to_string(*bounds.max_threads));
}

}  // namespace mneme::jit
