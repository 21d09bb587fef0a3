// mneme-instrument: the LLVM 22 pass plugin that extracts every GPU kernel of a device
// module into a standalone module and writes it, with the metadata the recorder and the
// replayer need, as one self-delimiting record (see docs/instrument.md, "Section layout").
//
// Loaded into clang-22 with -fpass-plugin= (the clang binary provides every LLVM symbol:
// this library links no LLVM library), or into opt-22 with -load-pass-plugin= for the
// link-time (-fgpu-rdc) resolution step, where the pass is named "mneme-embed".
//
// The pass does nothing unless MNEME_INSTRUMENT_OUT names a directory (the compiler
// wrapper sets it), and nothing on host modules. It never changes the module it runs on.
//
// Environment:
//   MNEME_INSTRUMENT_OUT    directory the record file is written to (required to act)
//   MNEME_INSTRUMENT_RDC    "1": also store the whole device module (link-time resolution)
//   MNEME_INSTRUMENT_STAGE  "compile" (default) or "link"

#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Bitcode/BitcodeWriter.h"
#include "llvm/Demangle/Demangle.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DataLayout.h"
#include "llvm/IR/DebugInfo.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/GlobalAlias.h"
#include "llvm/IR/GlobalVariable.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/Metadata.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/PassManager.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Plugins/PassPlugin.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/TargetParser/Triple.h"
#include "llvm/Transforms/Utils/Cloning.h"
#include "llvm/Transforms/Utils/ValueMapper.h"

#include "mneme/kernel_section_format.h" // generated from section_format.py

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

using namespace llvm;

namespace {

constexpr char kMagic[MNEME_KERNEL_SECTION_MAGIC_SIZE] = MNEME_KERNEL_SECTION_MAGIC;
constexpr uint32_t kFormatVersion = MNEME_KERNEL_SECTION_FORMAT_VERSION;
constexpr uint32_t kHeaderSize = MNEME_KERNEL_SECTION_HEADER_SIZE;
constexpr const char *kProducer = "mneme-instrument 0.1.0";

uint64_t fnv1a64(StringRef data) {
  uint64_t h = MNEME_FNV1A64_OFFSET;
  for (unsigned char c : data) {
    h ^= c;
    h *= MNEME_FNV1A64_PRIME;
  }
  return h;
}

std::string hex16(uint64_t v) {
  char buf[17];
  snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

bool isKernel(const Function &F) {
  if (F.isDeclaration())
    return false;
  CallingConv::ID cc = F.getCallingConv();
  return cc == CallingConv::PTX_Kernel || cc == CallingConv::AMDGPU_KERNEL;
}

// Every global value a kernel needs: functions it calls (directly or through constants),
// global variables it touches (and what their initializers reference), aliases.
SetVector<const GlobalValue *> closureOf(const Function &kernel) {
  SetVector<const GlobalValue *> closure;
  SmallVector<const Value *, 64> work;
  SmallPtrSet<const Value *, 32> seen;
  auto push = [&](const Value *v) {
    if (seen.insert(v).second)
      work.push_back(v);
  };
  push(&kernel);
  while (!work.empty()) {
    const Value *v = work.pop_back_val();
    if (const auto *gv = dyn_cast<GlobalValue>(v)) {
      closure.insert(gv);
      if (const auto *f = dyn_cast<Function>(gv)) {
        for (const BasicBlock &bb : *f)
          for (const Instruction &inst : bb)
            for (const Use &op : inst.operands())
              if (isa<Constant>(op.get()) || isa<MetadataAsValue>(op.get()))
                push(op.get());
        if (f->hasPersonalityFn())
          push(f->getPersonalityFn());
      } else if (const auto *var = dyn_cast<GlobalVariable>(gv)) {
        if (var->hasInitializer())
          push(var->getInitializer());
      } else if (const auto *alias = dyn_cast<GlobalAlias>(gv)) {
        push(alias->getAliasee());
      }
      continue;
    }
    if (const auto *c = dyn_cast<Constant>(v)) {
      for (const Use &op : c->operands())
        push(op.get());
      continue;
    }
  }
  return closure;
}

// Functions that a standalone module may leave undefined: intrinsics, libdevice (linked
// by the replay JIT), the CUDA device runtime's vprintf/malloc/free and friends.
bool resolvedElsewhere(const Function &f) {
  if (f.isIntrinsic())
    return true;
  StringRef n = f.getName();
  return n.starts_with("__nv_") || n.starts_with("__ocml_") || n.starts_with("__ockl_") ||
         n == "vprintf" || n == "malloc" || n == "free" || n == "__assertfail" ||
         n.starts_with("__cuda") || n.starts_with("cuda") || n.starts_with("__hip") ||
         n.starts_with("__llvm_");
}

// llvm::demangle, plus names clang made unique for -fgpu-rdc (file-static kernels and
// variables become "<mangled>__intern__<cuid>"), shown like llvm-cxxfilt shows ".N" suffixes.
std::string demangleName(StringRef name) {
  std::string plain = demangle(name.str());
  if (plain != name)
    return plain;
  size_t cut = name.find("__intern__");
  if (cut != StringRef::npos && cut > 0) {
    std::string head = demangle(name.substr(0, cut).str());
    if (head != name.substr(0, cut))
      return head + " (." + name.substr(cut).str() + ")";
  }
  return plain;
}

json::Object launchBounds(const Function &f) {
  json::Object out;
  static const char *keys[] = {"nvvm.maxntid",        "nvvm.reqntid",
                               "nvvm.minctasm",       "nvvm.maxnreg",
                               "nvvm.maxclusterrank", "nvvm.cluster_dim",
                               "amdgpu-flat-work-group-size", "amdgpu-waves-per-eu"};
  json::Object raw;
  for (const char *k : keys) {
    Attribute a = f.getFnAttribute(k);
    if (a.isValid() && a.isStringAttribute())
      raw[k] = a.getValueAsString().str();
  }
  auto product = [](StringRef s) -> int64_t {
    SmallVector<StringRef, 3> parts;
    s.split(parts, ',');
    int64_t p = 1;
    for (StringRef part : parts) {
      int64_t v = 0;
      if (part.trim().getAsInteger(10, v))
        return 0;
      p *= v;
    }
    return p;
  };
  if (auto v = raw.getString("nvvm.maxntid"))
    out["max_threads"] = product(*v);
  else if (auto w = raw.getString("amdgpu-flat-work-group-size")) {
    auto pair = w->split(',');
    int64_t hi = 0;
    if (!pair.second.trim().getAsInteger(10, hi))
      out["max_threads"] = hi;
  }
  if (auto v = raw.getString("nvvm.minctasm")) {
    int64_t m = 0;
    if (!v->getAsInteger(10, m))
      out["min_blocks"] = m;
  }
  if (auto v = raw.getString("nvvm.maxclusterrank")) {
    int64_t m = 0;
    if (!v->getAsInteger(10, m))
      out["max_blocks_per_cluster"] = m;
  }
  if (!raw.empty())
    out["attributes"] = std::move(raw);
  return out;
}

std::string typeString(Type *t) {
  std::string s;
  raw_string_ostream os(s);
  t->print(os, false, /*NoDetails=*/true);
  return s;
}

json::Array parameters(const Function &f, const DataLayout &dl) {
  json::Array out;
  uint64_t offset = 0;
  for (const Argument &arg : f.args()) {
    Type *ty = arg.getType();
    bool byval = false;
    bool pointer = false;
    uint64_t align = 0;
    if (arg.hasByValAttr() || arg.hasByRefAttr()) {
      ty = arg.hasByValAttr() ? arg.getParamByValType() : arg.getParamByRefType();
      byval = true;
      if (MaybeAlign a = arg.getParamAlign())
        align = a->value();
    } else if (ty->isAggregateType()) {
      byval = true;
    } else {
      pointer = ty->isPointerTy();
    }
    uint64_t size = dl.getTypeAllocSize(ty).getFixedValue();
    if (!align)
      align = dl.getABITypeAlign(ty).value();
    offset = alignTo(offset, align);
    json::Object p;
    p["index"] = static_cast<int64_t>(arg.getArgNo());
    p["size"] = static_cast<int64_t>(size);
    p["align"] = static_cast<int64_t>(align);
    p["offset"] = static_cast<int64_t>(offset);
    p["pointer"] = pointer;
    p["byval"] = byval;
    p["type"] = typeString(ty);
    if (pointer)
      p["address_space"] = static_cast<int64_t>(ty->getPointerAddressSpace());
    out.push_back(std::move(p));
    offset += size;
  }
  return out;
}

std::string linkageName(GlobalValue::LinkageTypes l) {
  switch (l) {
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

// Keep the operands of a named metadata node (nvvm.annotations) that refer only to values
// still present in `m`.
void filterAnnotations(Module &m) {
  NamedMDNode *nmd = m.getNamedMetadata("nvvm.annotations");
  if (!nmd)
    return;
  std::vector<MDNode *> keep;
  for (MDNode *node : nmd->operands()) {
    bool ok = true;
    for (const MDOperand &op : node->operands())
      if (auto *vam = dyn_cast_or_null<ValueAsMetadata>(op.get()))
        if (!vam->getValue())
          ok = false;
    if (ok)
      keep.push_back(node);
  }
  nmd->clearOperands();
  for (MDNode *node : keep)
    nmd->addOperand(node);
  if (nmd->getNumOperands() == 0)
    nmd->eraseFromParent();
}

struct KernelModule {
  std::unique_ptr<Module> module;
  std::vector<std::string> unresolved;
};

// The kernel and its closure, alone in a new module that passes the verifier.
KernelModule extractKernel(const Module &src, const Function &kernel) {
  SetVector<const GlobalValue *> closure = closureOf(kernel);
  ValueToValueMapTy vmap;
  std::unique_ptr<Module> m =
      CloneModule(src, vmap, [&](const GlobalValue *gv) { return closure.count(gv) != 0; });

  // Module-level arrays that keep everything alive go; what the kernel needs is in it.
  for (const char *name : {"llvm.used", "llvm.compiler.used", "llvm.global_ctors",
                           "llvm.global_dtors", "llvm.global.annotations"})
    if (GlobalVariable *gv = m->getGlobalVariable(name, true))
      gv->eraseFromParent();

  std::vector<GlobalValue *> mapped;
  SmallPtrSet<GlobalValue *, 32> keep;
  for (const GlobalValue *gv : closure)
    if (auto *mv = dyn_cast_or_null<GlobalValue>(vmap.lookup(gv)))
      keep.insert(mv);

  // Drop everything outside the closure (repeat: removing one can free another).
  bool changed = true;
  while (changed) {
    changed = false;
    std::vector<GlobalValue *> dead;
    for (GlobalValue &gv : m->global_values())
      if (!keep.count(&gv)) {
        gv.removeDeadConstantUsers();
        if (gv.use_empty())
          dead.push_back(&gv);
      }
    for (GlobalValue *gv : dead) {
      gv->eraseFromParent();
      changed = true;
    }
  }
  // libdevice, which clang linked in before the pipeline, goes back to declarations: the
  // replay JIT links the libdevice of its own toolkit when it sees __nv_* calls.
  for (Function &f : *m)
    if (!f.isDeclaration() && f.getName().starts_with("__nv_")) {
      f.deleteBody();
      f.setLinkage(GlobalValue::ExternalLinkage);
      f.setComdat(nullptr);
    }
  for (bool again = true; again;) {
    again = false;
    std::vector<Function *> unused;
    for (Function &f : *m)
      if ((f.isDeclaration() || f.hasLocalLinkage()) && f.use_empty() &&
          f.getName() != kernel.getName())
        unused.push_back(&f);
    for (Function *f : unused) {
      f->eraseFromParent();
      again = true;
    }
    std::vector<GlobalVariable *> deadVars;
    for (GlobalVariable &gv : m->globals()) {
      gv.removeDeadConstantUsers();
      if (gv.use_empty() && gv.hasLocalLinkage())
        deadVars.push_back(&gv);
    }
    for (GlobalVariable *gv : deadVars) {
      gv->eraseFromParent();
      again = true;
    }
  }
  for (Function &f : *m) {
    if (f.isDeclaration())
      continue;
    // clang -O0 marks every function optnone+noinline; replay chooses its own pipeline.
    if (f.hasFnAttribute(Attribute::OptimizeNone)) {
      f.removeFnAttr(Attribute::OptimizeNone);
      f.removeFnAttr(Attribute::NoInline);
    }
  }
  // Device globals keep their names and become visible symbols, so the replayer can
  // find and restore them; compiler-private constants (string literals) stay private.
  for (GlobalVariable &gv : m->globals()) {
    if (gv.isDeclaration() || gv.getName().starts_with("llvm."))
      continue;
    if (gv.hasInternalLinkage()) {
      gv.setLinkage(GlobalValue::ExternalLinkage);
      gv.setDSOLocal(true);
    }
  }
  KernelModule out;
  for (Function &f : *m)
    if (f.isDeclaration() && !f.use_empty() && !resolvedElsewhere(f))
      out.unresolved.push_back(f.getName().str());
  for (GlobalVariable &gv : m->globals())
    // extern __shared__ arrays (address space 3) are dynamic shared memory, sized at launch
    if (gv.isDeclaration() && !gv.hasExternalWeakLinkage() && !gv.use_empty() &&
        gv.getAddressSpace() != 3)
      out.unresolved.push_back(gv.getName().str());
  filterAnnotations(*m);
  // -g: no debug info in the embedded module. NVPTX marks PTX with any line tables as
  // ".target sm_XX, debug", which ptxas refuses to optimise ("Optimized debugging not
  // supported"), and replay always optimises. (It also keeps the static hash independent
  // of -g and of build paths.)
  StripDebugInfo(*m);
  if (NamedMDNode *flags = m->getModuleFlagsMetadata()) {
    std::vector<MDNode *> keep;
    for (MDNode *flag : flags->operands()) {
      if (flag->getNumOperands() >= 2)
        if (auto *key = dyn_cast_or_null<MDString>(flag->getOperand(1).get())) {
          StringRef k = key->getString();
          if (k == "Dwarf Version" || k == "Debug Info Version" || k == "CodeView")
            continue;
        }
      keep.push_back(flag);
    }
    flags->clearOperands();
    for (MDNode *flag : keep)
      flags->addOperand(flag);
  }
  m->setModuleIdentifier(kernel.getName());
  m->setSourceFileName(kernel.getName());
  out.module = std::move(m);
  return out;
}

json::Array globalsOf(const Module &m) {
  json::Array out;
  const DataLayout &dl = m.getDataLayout();
  for (const GlobalVariable &gv : m.globals()) {
    if (gv.hasPrivateLinkage() || gv.getName().starts_with("llvm.") || gv.use_empty())
      continue;
    if (gv.hasExternalWeakLinkage())  // clang's threadIdx/blockIdx/... placeholders
      continue;
    json::Object g;
    g["name"] = gv.getName().str();
    g["demangled"] = demangleName(gv.getName());
    Type *ty = gv.getValueType();
    g["size"] = ty->isSized() ? static_cast<int64_t>(dl.getTypeAllocSize(ty).getFixedValue())
                              : static_cast<int64_t>(0);
    g["align"] = static_cast<int64_t>(gv.getAlign() ? gv.getAlign()->value()
                                                    : dl.getABITypeAlign(ty).value());
    g["address_space"] = static_cast<int64_t>(gv.getAddressSpace());
    g["constant"] = gv.isConstant();
    g["externally_initialized"] = gv.isExternallyInitialized();
    g["defined"] = !gv.isDeclaration();
    out.push_back(std::move(g));
  }
  return out;
}

std::string bitcodeOf(const Module &m) {
  std::string bc;
  raw_string_ostream os(bc);
  WriteBitcodeToFile(m, os);
  os.flush();
  return bc;
}

std::string targetCpu(const Module &m) {
  for (const Function &f : m)
    if (!f.isDeclaration()) {
      Attribute a = f.getFnAttribute("target-cpu");
      if (a.isValid())
        return a.getValueAsString().str();
    }
  return "";
}

void putLE(std::string &s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// header (40 bytes) | JSON | data | zero padding to a multiple of 8
std::string encodeRecord(const std::string &json, const std::string &data) {
  std::string rec(kMagic, sizeof kMagic);
  putLE(rec, kFormatVersion, 4);
  putLE(rec, kHeaderSize, 4);
  putLE(rec, json.size(), 8);
  putLE(rec, data.size(), 8);
  putLE(rec, fnv1a64(json + data), 8);
  rec += json;
  rec += data;
  while (rec.size() % MNEME_KERNEL_SECTION_RECORD_ALIGNMENT)
    rec.push_back('\0');
  return rec;
}

bool writeFileAtomically(const std::string &path, StringRef bytes) {
  std::string tmp = path + ".tmp";
  {
    std::error_code ec;
    raw_fd_ostream os(tmp, ec, sys::fs::OF_None);
    if (ec)
      return false;
    os << bytes;
    os.close();
    if (os.has_error())
      return false;
  }
  return !sys::fs::rename(tmp, path);
}

struct MnemeEmbedPass : PassInfoMixin<MnemeEmbedPass> {
  PreservedAnalyses run(Module &m, ModuleAnalysisManager &) {
    const char *outDir = std::getenv(MNEME_INSTRUMENT_ENV_OUT);
    if (!outDir || !*outDir)
      return PreservedAnalyses::all();
    Triple triple(m.getTargetTriple());
    if (!triple.isNVPTX() && !triple.isAMDGPU())
      return PreservedAnalyses::all();
    const char *rdcEnv = std::getenv(MNEME_INSTRUMENT_ENV_RDC);
    const bool rdc = rdcEnv && StringRef(rdcEnv) == "1";
    const char *stageEnv = std::getenv(MNEME_INSTRUMENT_ENV_STAGE);
    const std::string stage = stageEnv && *stageEnv ? stageEnv : "compile";

    std::vector<const Function *> kernels;
    for (const Function &f : m)
      if (isKernel(f))
        kernels.push_back(&f);
    if (kernels.empty() && !rdc)
      return PreservedAnalyses::all();

    std::string data;
    json::Array kernelsJson;
    for (const Function *k : kernels) {
      KernelModule km = extractKernel(m, *k);
      json::Object kj;
      kj["name"] = k->getName().str();
      kj["demangled"] = demangleName(k->getName());
      std::string verifyMsg;
      raw_string_ostream vos(verifyMsg);
      bool broken = verifyModule(*km.module, &vos);
      vos.flush();
      if (broken) {
        kj["error"] = "extracted module does not verify: " + verifyMsg;
      } else {
        std::string bc = bitcodeOf(*km.module);
        kj["static_hash"] = hex16(fnv1a64(bc));
        json::Object ir;
        ir["offset"] = static_cast<int64_t>(data.size());
        ir["size"] = static_cast<int64_t>(bc.size());
        kj["ir"] = std::move(ir);
        data += bc;
        while (data.size() % 8)
          data.push_back('\0');
      }
      kj["params"] = parameters(*k, m.getDataLayout());
      kj["globals"] = globalsOf(*km.module);
      json::Object lb = launchBounds(*k);
      if (!lb.empty())
        kj["launch_bounds"] = std::move(lb);
      kj["complete"] = km.unresolved.empty();
      json::Array unresolved;
      for (auto &n : km.unresolved)
        unresolved.push_back(n);
      kj["unresolved"] = std::move(unresolved);
      kernelsJson.push_back(std::move(kj));
    }

    json::Object rec;
    rec["format"] = static_cast<int64_t>(kFormatVersion);
    rec["producer"] = kProducer;
    rec["stage"] = stage;
    rec["target"] = m.getTargetTriple().str();
    rec["arch"] = targetCpu(m);
    rec["source"] = m.getSourceFileName();
    rec["rdc"] = rdc;
    if (rdc && stage == "compile") {
      // The whole TU as the frontend produced it, for link-time resolution of kernels
      // that call device functions of other TUs.
      std::string bc = bitcodeOf(m);
      json::Object mod;
      mod["offset"] = static_cast<int64_t>(data.size());
      mod["size"] = static_cast<int64_t>(bc.size());
      rec["module"] = std::move(mod);
      data += bc;
      while (data.size() % 8)
        data.push_back('\0');
    }
    rec["kernels"] = std::move(kernelsJson);
    std::string jsonText;
    raw_string_ostream js(jsonText);
    js << json::Value(std::move(rec));
    js.flush();
    while ((kHeaderSize + jsonText.size()) % 8)
      jsonText.push_back(' ');

    std::string file = (Twine(outDir) + "/" + hex16(fnv1a64(m.getSourceFileName())) + "-" +
                        (targetCpu(m).empty() ? std::string("any") : targetCpu(m)) + MNEME_INSTRUMENT_RECORD_SUFFIX)
                           .str();
    if (!writeFileAtomically(file, encodeRecord(jsonText, data)))
      report_fatal_error(Twine("mneme: cannot write ") + file +
                         "; check that MNEME_INSTRUMENT_OUT is a writable directory");
    return PreservedAnalyses::all();
  }
  static bool isRequired() { return true; }
};

} // namespace

extern "C" LLVM_ATTRIBUTE_WEAK __attribute__((visibility("default"))) PassPluginLibraryInfo
llvmGetPassPluginInfo() {
  return {LLVM_PLUGIN_API_VERSION, "mneme-instrument", "0.1.0", [](PassBuilder &pb) {
            pb.registerPipelineStartEPCallback(
                [](ModulePassManager &mpm, OptimizationLevel) {
                  mpm.addPass(MnemeEmbedPass());
                });
            pb.registerPipelineParsingCallback(
                [](StringRef name, ModulePassManager &mpm,
                   ArrayRef<PassBuilder::PipelineElement>) {
                  if (name != "mneme-embed")
                    return false;
                  mpm.addPass(MnemeEmbedPass());
                  return true;
                });
          }};
}
