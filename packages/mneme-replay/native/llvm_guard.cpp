// The guarded probe variant of a kernel: every memory access is checked before it is made,
// and one that would leave its object or every allocation the replay mapped (or is
// misaligned) is sent to a sink instead and reported in a device global. A launch shape
// that would fault then costs one launch, not a CUDA context (the tuner's probe).
//
//   __mneme_guard_report  i64[2]: [0] what failed first (GuardKind), [1] its address
//   __mneme_guard_table   i64[1 + 2N]: [0] how many ranges follow, then (begin, end) pairs
//                         of the memory the replay mapped; 0 ranges: global accesses unchecked
#include "llvm_module.h"

#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Module.h>

using namespace llvm;

namespace mneme::jit {
namespace {

// NVPTX address spaces the guard checks (constant, local and parameter space are left).
constexpr unsigned kGeneric = 0, kGlobal = 1, kShared = 3;
// The largest access a sink takes (NVPTX's widest vector access is 32 bytes).
constexpr uint64_t kSinkBytes = 32;
// What the report's first word says (docs/tune.md, engine/guarded_probe.py).
enum GuardKind : uint64_t { kObject = 1, kUnmapped = 2, kMisaligned = 3 };

bool guarded_space(unsigned space) {
  return space == kGeneric || space == kGlobal || space == kShared;
}

// An object's size in bytes; a zero-sized shared array is `extern __shared__`, sized at launch.
uint64_t object_bytes(const GlobalVariable &g) {
  return g.getParent()->getDataLayout().getTypeAllocSize(g.getValueType());
}

class Guard {
 public:
  Guard(llvm::Module &module, unsigned max_ranges)
      : m_(module), ctx_(module.getContext()), i1_(Type::getInt1Ty(ctx_)),
        i32_(Type::getInt32Ty(ctx_)), i64_(Type::getInt64Ty(ctx_)),
        generic_(PointerType::get(ctx_, kGeneric)), max_ranges_(max_ranges) {}

  unsigned run() {
    std::vector<Function *> functions;
    for (Function &f : m_)
      if (!f.isDeclaration()) functions.push_back(&f);
    for (GlobalVariable &g : m_.globals())
      if (g.getAddressSpace() == kShared) shared_objects_.push_back(&g);
    make_globals();
    check_ = make_check();
    unsigned guarded = 0;
    for (Function *f : functions) {
      std::vector<Instruction *> accesses;
      for (Instruction &inst : instructions(*f))
        if (isa<LoadInst, StoreInst, AtomicRMWInst, AtomicCmpXchgInst, MemIntrinsic>(inst))
          accesses.push_back(&inst);
      for (Instruction *inst : accesses) guarded += guard(*inst);
    }
    return guarded;
  }

 private:
  GlobalVariable *global(const char *name, Type *type, unsigned space, GlobalValue::LinkageTypes
                         linkage, Constant *init, uint64_t align) {
    auto *g = new GlobalVariable(m_, type, false, linkage, init, name, nullptr,
                                 GlobalValue::NotThreadLocal, space);
    g->setAlignment(Align(align));
    return g;
  }

  void make_globals() {
    auto *report_type = ArrayType::get(i64_, 2);
    report_ = global("__mneme_guard_report", report_type, kGlobal, GlobalValue::ExternalLinkage,
                     ConstantAggregateZero::get(report_type), 8);
    auto *table_type = ArrayType::get(i64_, 1 + 2 * uint64_t(max_ranges_));
    table_ = global("__mneme_guard_table", table_type, kGlobal, GlobalValue::ExternalLinkage,
                    ConstantAggregateZero::get(table_type), 8);
    auto *sink_type = ArrayType::get(Type::getInt8Ty(ctx_), kSinkBytes);
    global_sink_ = global("__mneme_guard_sink", sink_type, kGlobal, GlobalValue::InternalLinkage,
                          ConstantAggregateZero::get(sink_type), kSinkBytes);
    if (!shared_objects_.empty())  // (shared memory may not be initialized)
      shared_sink_ = global("__mneme_guard_shared_sink", sink_type, kShared,
                            GlobalValue::InternalLinkage, PoisonValue::get(sink_type), kSinkBytes);
  }

  // %dynamic_smem_size: the bytes of `extern __shared__` arrays of this launch.
  Value *dynamic_shared_bytes(IRBuilder<> &b) {
    auto *asm_fn = InlineAsm::get(FunctionType::get(i32_, false), "mov.u32 $0, %dynamic_smem_size;",
                                  "=r", /*hasSideEffects=*/false);
    return b.CreateZExt(b.CreateCall(FunctionType::get(i32_, false), asm_fn), i64_);
  }

  Value *generic_address(IRBuilder<> &b, Value *pointer) {
    if (pointer->getType()->getPointerAddressSpace() != kGeneric)
      pointer = b.CreateAddrSpaceCast(pointer, generic_);
    return b.CreatePtrToInt(pointer, i64_);
  }

  // [lo, hi) of `g` as generic addresses.
  std::pair<Value *, Value *> bounds_of(IRBuilder<> &b, GlobalVariable *g) {
    Value *lo = generic_address(b, g);
    uint64_t bytes = object_bytes(*g);
    Value *size = bytes == 0 && g->getAddressSpace() == kShared ? dynamic_shared_bytes(b)
                                                                  : ConstantInt::get(i64_, bytes);
    return {lo, b.CreateAdd(lo, size)};
  }

  void report(IRBuilder<> &b, uint64_t kind, Value *address) {
    Value *first = b.CreateConstInBoundsGEP2_64(report_->getValueType(), report_, 0, 0);
    Value *second = b.CreateConstInBoundsGEP2_64(report_->getValueType(), report_, 0, 1);
    b.CreateStore(ConstantInt::get(i64_, kind), first, /*isVolatile=*/true);
    b.CreateStore(address, second, /*isVolatile=*/true);
  }

  // i1 __mneme_guard_check(ptr p, i64 size, i64 align, i64 lo, i64 hi): true when the access
  // may be made. lo != hi: it must lie in [lo, hi) (its object's bounds); otherwise a shared
  // address must lie in the hull of the shared objects, a global one in a mapped range.
  Function *make_check() {
    auto *type = FunctionType::get(i1_, {generic_, i64_, i64_, i64_, i64_}, false);
    Function *f = Function::Create(type, GlobalValue::InternalLinkage, "__mneme_guard_check", m_);
    f->addFnAttr(Attribute::NoInline);
    Value *pointer = f->getArg(0), *size = f->getArg(1), *align = f->getArg(2);
    Value *lo = f->getArg(3), *hi = f->getArg(4);
    auto block = [&](const char *name) { return BasicBlock::Create(ctx_, name, f); };
    BasicBlock *entry = block("entry"), *object = block("object"), *space = block("space"),
               *shared = block("shared"), *global = block("global"), *table = block("table"),
               *loop = block("loop"), *next = block("next"), *good = block("good"),
               *misaligned = block("misaligned"), *outside = block("outside"),
               *unmapped = block("unmapped");
    IRBuilder<> b(entry);
    Value *address = b.CreatePtrToInt(pointer, i64_);
    Value *end = b.CreateAdd(address, size);
    Value *low_bits = b.CreateAnd(address, b.CreateSub(align, ConstantInt::get(i64_, 1)));
    Value *aligned = b.CreateICmpEQ(low_bits, ConstantInt::get(i64_, 0));
    BasicBlock *after_align = block("after_align");
    b.CreateCondBr(aligned, after_align, misaligned);
    b.SetInsertPoint(after_align);
    b.CreateCondBr(b.CreateICmpNE(lo, hi), object, space);

    auto inside = [&](IRBuilder<> &at, Value *begin, Value *stop) {
      return at.CreateAnd(at.CreateICmpUGE(address, begin), at.CreateICmpULE(end, stop));
    };
    b.SetInsertPoint(object);
    b.CreateCondBr(inside(b, lo, hi), good, outside);

    b.SetInsertPoint(space);
    Value *is_shared = b.CreateIntrinsic(Intrinsic::nvvm_isspacep_shared, {}, {pointer});
    b.CreateCondBr(is_shared, shared, global);

    b.SetInsertPoint(shared);
    if (shared_objects_.empty()) {
      b.CreateBr(good);  // (no shared object: nothing to bound it by)
    } else {
      Value *hull_lo = nullptr, *hull_hi = nullptr;
      for (GlobalVariable *g : shared_objects_) {
        auto [g_lo, g_hi] = bounds_of(b, g);
        hull_lo = hull_lo ? b.CreateBinaryIntrinsic(Intrinsic::umin, hull_lo, g_lo) : g_lo;
        hull_hi = hull_hi ? b.CreateBinaryIntrinsic(Intrinsic::umax, hull_hi, g_hi) : g_hi;
      }
      b.CreateCondBr(inside(b, hull_lo, hull_hi), good, outside);
    }

    b.SetInsertPoint(global);
    Value *is_global = b.CreateIntrinsic(Intrinsic::nvvm_isspacep_global, {}, {pointer});
    b.CreateCondBr(is_global, table, good);

    b.SetInsertPoint(table);
    Type *table_type = table_->getValueType();
    Value *count = b.CreateLoad(i64_, table_, /*isVolatile=*/false, "count");
    b.CreateCondBr(b.CreateICmpEQ(count, ConstantInt::get(i64_, 0)), good, loop);

    b.SetInsertPoint(loop);
    PHINode *index = b.CreatePHI(i64_, 2, "range");
    index->addIncoming(ConstantInt::get(i64_, 0), table);
    Value *slot = b.CreateAdd(b.CreateShl(index, 1), ConstantInt::get(i64_, 1));
    Value *begin = b.CreateLoad(
        i64_, b.CreateInBoundsGEP(table_type, table_, {ConstantInt::get(i64_, 0), slot}));
    Value *stop = b.CreateLoad(
        i64_, b.CreateInBoundsGEP(table_type, table_,
                                  {ConstantInt::get(i64_, 0),
                                   b.CreateAdd(slot, ConstantInt::get(i64_, 1))}));
    b.CreateCondBr(inside(b, begin, stop), good, next);

    b.SetInsertPoint(next);
    Value *following = b.CreateAdd(index, ConstantInt::get(i64_, 1));
    index->addIncoming(following, next);
    Value *more = b.CreateICmpULT(following, b.CreateBinaryIntrinsic(
                                                 Intrinsic::umin, count,
                                                 ConstantInt::get(i64_, max_ranges_)));
    b.CreateCondBr(more, loop, unmapped);

    for (auto [at, kind] : {std::pair{misaligned, kMisaligned}, std::pair{outside, kObject},
                            std::pair{unmapped, kUnmapped}}) {
      b.SetInsertPoint(at);
      report(b, kind, address);
      b.CreateRet(ConstantInt::getFalse(ctx_));
    }
    b.SetInsertPoint(good);
    b.CreateRet(ConstantInt::getTrue(ctx_));
    return f;
  }

  // The object `pointer` points into when it is one global variable of ours to bound.
  GlobalVariable *object_of(Value *pointer) {
    SmallVector<const Value *, 4> objects;
    getUnderlyingObjects(pointer, objects, nullptr, 0);
    GlobalVariable *found = nullptr;
    for (const Value *o : objects) {
      auto *g = dyn_cast<GlobalVariable>(o);
      if (!g || g == global_sink_ || g == shared_sink_ || (found && found != g)) return nullptr;
      found = const_cast<GlobalVariable *>(g);
    }
    return found;
  }

  bool is_local(Value *pointer) {
    return isa<AllocaInst>(getUnderlyingObject(pointer, 0));
  }

  // ok = check(pointer); the access goes ahead only when ok.
  Value *check(IRBuilder<> &b, Value *pointer, Value *size, uint64_t align) {
    Value *lo = ConstantInt::get(i64_, 0), *hi = lo;
    if (GlobalVariable *g = object_of(pointer)) std::tie(lo, hi) = bounds_of(b, g);
    Value *address = pointer->getType()->getPointerAddressSpace() == kGeneric
                         ? pointer : b.CreateAddrSpaceCast(pointer, generic_);
    return b.CreateCall(check_, {address, size, ConstantInt::get(i64_, align), lo, hi});
  }

  Value *sink_for(IRBuilder<> &b, unsigned space) {
    if (space == kShared) return shared_sink_;
    if (space == kGlobal) return global_sink_;
    return b.CreateAddrSpaceCast(global_sink_, generic_);
  }

  unsigned guard(Instruction &inst) {
    const DataLayout &layout = m_.getDataLayout();
    IRBuilder<> b(&inst);
    if (auto *mem = dyn_cast<MemIntrinsic>(&inst)) {  // memcpy/memset: length 0 when outside
      Value *length = b.CreateZExtOrTrunc(mem->getLength(), i64_);
      Value *ok = nullptr;
      auto check_operand = [&](Value *pointer, MaybeAlign align) {
        unsigned space = pointer->getType()->getPointerAddressSpace();
        if (!guarded_space(space) || is_local(pointer)) return;
        Value *one = check(b, pointer, length, align.valueOrOne().value());
        ok = ok ? b.CreateAnd(ok, one) : one;
      };
      check_operand(mem->getRawDest(), mem->getDestAlign());
      if (auto *transfer = dyn_cast<MemTransferInst>(mem))
        check_operand(transfer->getRawSource(), transfer->getSourceAlign());
      if (!ok) return 0;
      Value *zero = ConstantInt::get(mem->getLength()->getType(), 0);
      mem->setLength(b.CreateSelect(ok, mem->getLength(), zero));
      return 1;
    }
    Value *pointer = getLoadStorePointerOperand(&inst);
    Type *type = nullptr;
    Align align;
    if (auto *load = dyn_cast<LoadInst>(&inst)) {
      type = load->getType(), align = load->getAlign();
    } else if (auto *store = dyn_cast<StoreInst>(&inst)) {
      type = store->getValueOperand()->getType(), align = store->getAlign();
    } else if (auto *rmw = dyn_cast<AtomicRMWInst>(&inst)) {
      pointer = rmw->getPointerOperand(), type = rmw->getValOperand()->getType(),
      align = rmw->getAlign();
    } else if (auto *cas = dyn_cast<AtomicCmpXchgInst>(&inst)) {
      pointer = cas->getPointerOperand(), type = cas->getNewValOperand()->getType(),
      align = cas->getAlign();
    }
    if (!pointer || !type) return 0;
    unsigned space = pointer->getType()->getPointerAddressSpace();
    uint64_t bytes = layout.getTypeStoreSize(type).getKnownMinValue();
    if (!guarded_space(space) || is_local(pointer) || bytes == 0 || bytes > kSinkBytes ||
        (space == kShared && !shared_sink_))
      return 0;
    Value *ok = check(b, pointer, ConstantInt::get(i64_, bytes), align.value());
    Value *safe = b.CreateSelect(ok, pointer, sink_for(b, space));
    unsigned operand = isa<StoreInst>(inst) ? 1 : 0;
    inst.setOperand(operand, safe);
    return 1;
  }

  llvm::Module &m_;
  LLVMContext &ctx_;
  Type *i1_, *i32_, *i64_;
  PointerType *generic_;
  unsigned max_ranges_;
  std::vector<GlobalVariable *> shared_objects_;
  GlobalVariable *report_ = nullptr, *table_ = nullptr, *global_sink_ = nullptr,
                 *shared_sink_ = nullptr;
  Function *check_ = nullptr;
};

}  // namespace

unsigned Module::guard_memory_accesses(unsigned max_ranges) {
  Access access(state_);
  if (max_ranges == 0)
    throw Failure(ErrorKind::Specialization, "the guard's range table needs at least one entry");
  if (state_->module->getGlobalVariable("__mneme_guard_report"))
    throw Failure(ErrorKind::Specialization, "this module is guarded already");
  ++state_->generation;
  return Guard(*state_->module, max_ranges).run();
}

}  // namespace mneme::jit
