// nanobind module mneme.replay.jit._llvm: the Python face of the LLVM binding.
// Long LLVM work runs with the GIL released; each Module has its own context.
#include <nanobind/nanobind.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "llvm_module.h"

namespace nb = nanobind;
using namespace nb::literals;
using namespace mneme::jit;

namespace {

const char *exception_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::InvalidIR: return "InvalidIRError";
    case ErrorKind::UnknownPass: return "UnknownPassError";
    case ErrorKind::Pipeline: return "PipelineError";
    case ErrorKind::Codegen: return "CodegenError";
    case ErrorKind::Specialization: return "SpecializationError";
    case ErrorKind::Link: return "LinkError";
    case ErrorKind::StaleHandle: return "StaleHandleError";
  }
  return "JitError";
}

// Raises the exception class of mneme.replay.jit.errors named after the kind,
// so Python code sees the package's own error hierarchy.
void translate_failure(const std::exception_ptr &pointer, void *) {
  try {
    std::rethrow_exception(pointer);
  } catch (const Failure &failure) {
    nb::object errors = nb::module_::import_("mneme.replay.jit.errors");
    nb::object type = errors.attr(exception_name(failure.kind));
    PyErr_SetString(type.ptr(), failure.what());
  }
}

std::string as_string(nb::bytes data) { return std::string(data.c_str(), data.size()); }

}  // namespace

NB_MODULE(_llvm, m) {
  m.doc() = "LLVM 22 binding: parse, inspect, transform and compile GPU kernel IR";
  initialize_targets();
  install_fatal_error_handler();
  nb::register_exception_translator(translate_failure);
  m.attr("LLVM_VERSION") = llvm_version();
  m.def("check_pipeline", &check_pipeline, "pipeline"_a, "triple"_a = "nvptx64-nvidia-cuda",
        "Raise UnknownPassError if the pipeline string does not parse");
  m.def("registered_targets", &registered_targets, "LLVM targets compiled into this module");

  nb::class_<ArgumentInfo>(m, "Argument")
      .def_ro("index", &ArgumentInfo::index)
      .def_ro("name", &ArgumentInfo::name)
      .def_ro("type", &ArgumentInfo::type, "IR type (the pointee aggregate for byval)")
      .def_ro("size", &ArgumentInfo::size, "bytes in the launch argument buffer")
      .def_ro("align", &ArgumentInfo::align)
      .def_ro("offset", &ArgumentInfo::offset, "offset in the launch argument buffer")
      .def_ro("byval", &ArgumentInfo::byval)
      .def("__repr__", [](const ArgumentInfo &a) {
        return "<Argument " + std::to_string(a.index) + " " + a.type + " offset=" +
               std::to_string(a.offset) + " size=" + std::to_string(a.size) + ">";
      });

  nb::class_<InstructionHandle>(m, "Instruction")
      .def_prop_ro("opcode", &InstructionHandle::opcode, "e.g. 'fadd', 'load', 'call'")
      .def_prop_ro("type", &InstructionHandle::type, "result type as IR text")
      .def_prop_ro("operands", &InstructionHandle::operands, "operands as typed IR text")
      .def_prop_ro("called_function", &InstructionHandle::called_function,
                   "callee name of a direct call, else None")
      .def_prop_ro("metadata", &InstructionHandle::metadata, "kind name -> metadata text")
      .def("__str__", &InstructionHandle::text)
      .def("__repr__", [](const InstructionHandle &i) { return "<Instruction " + i.text() + ">"; });

  nb::class_<BlockHandle>(m, "BasicBlock")
      .def_prop_ro("name", &BlockHandle::name)
      .def_prop_ro("instructions", &BlockHandle::instructions)
      .def_prop_ro("successors", &BlockHandle::successors)
      .def("__len__", &BlockHandle::size)
      .def("__repr__", [](const BlockHandle &b) { return "<BasicBlock " + b.name() + ">"; });

  nb::class_<FunctionHandle>(m, "Function")
      .def_prop_ro("name", &FunctionHandle::name)
      .def_prop_ro("is_kernel", &FunctionHandle::is_kernel,
                   "ptx_kernel or amdgpu_kernel calling convention")
      .def_prop_ro("is_declaration", &FunctionHandle::is_declaration)
      .def_prop_ro("linkage", &FunctionHandle::linkage)
      .def_prop_ro("calling_convention", &FunctionHandle::calling_convention)
      .def_prop_ro("attributes", &FunctionHandle::attributes, "function attributes")
      .def_prop_ro("arguments", &FunctionHandle::arguments)
      .def_prop_ro("blocks", &FunctionHandle::blocks)
      .def_prop_ro("instruction_count", &FunctionHandle::instruction_count)
      .def_prop_ro("loop_count", &FunctionHandle::loop_count, "natural loops, nested included")
      .def_prop_ro("max_loop_depth", &FunctionHandle::max_loop_depth)
      .def("__str__", &FunctionHandle::text)
      .def("__repr__", [](const FunctionHandle &f) { return "<Function " + f.name() + ">"; });

  nb::class_<Module>(m, "Module")
      .def_static(
          "parse",
          [](nb::bytes data, const std::string &name) {
            std::string copy = as_string(data);
            nb::gil_scoped_release release;
            return Module::parse(copy, name);
          },
          "data"_a, "name"_a = "<module>", "Parse LLVM bitcode or textual IR")
      .def("clone", [](const Module &self) {
        nb::gil_scoped_release release;
        return self.clone();
      })
      .def("__str__", &Module::print)
      .def("bitcode", [](const Module &self) {
        std::string bits;
        {
          nb::gil_scoped_release release;
          bits = self.bitcode();
        }
        return nb::bytes(bits.data(), bits.size());
      })
      .def("verify", &Module::verify, "Raise InvalidIRError with LLVM's message")
      .def_prop_ro("triple", &Module::triple)
      .def_prop_ro("data_layout", &Module::data_layout)
      .def_prop_ro("source_name", &Module::source_name)
      .def_prop_ro("functions", &Module::functions)
      .def("function", &Module::function, "name"_a)
      .def(
          "run_passes",
          [](Module &self, const std::string &pipeline, const std::string &cpu) {
            nb::gil_scoped_release release;
            self.run_passes(pipeline, cpu);
          },
          "pipeline"_a, "cpu"_a = "", "Run a textual new-pass-manager pipeline (opt -passes=)")
      .def(
          "link_libdevice",
          [](Module &self, const std::string &path) {
            nb::gil_scoped_release release;
            return self.link_libdevice(path);
          },
          "path"_a, "Link libdevice if the module calls __nv_* functions; True if linked")
      .def("keep_only_kernel", &Module::keep_only_kernel, "kernel"_a)
      .def(
          "specialize_arguments",
          [](Module &self, const std::string &kernel, const std::map<unsigned, nb::bytes> &values) {
            std::map<unsigned, std::string> raw;
            for (auto &[index, data] : values) raw[index] = as_string(data);
            self.specialize_arguments(kernel, raw);
          },
          "kernel"_a, "values"_a, "Replace arguments by constants: {index: recorded bytes}")
      .def("specialize_launch_dims", &Module::specialize_launch_dims, "kernel"_a,
           "block"_a = nb::none(), "grid"_a = nb::none())
      .def(
          "set_launch_bounds",
          [](Module &self, const std::string &kernel, std::optional<int64_t> max_threads,
             std::optional<int64_t> min_blocks, std::optional<int64_t> max_registers) {
            self.set_launch_bounds(kernel, {max_threads, min_blocks, max_registers});
          },
          "kernel"_a, "max_threads"_a = nb::none(), "min_blocks"_a = nb::none(),
          "max_registers"_a = nb::none())
      .def("guard_memory_accesses", &Module::guard_memory_accesses, "max_ranges"_a = 64,
           "Check every memory access before it is made (the guarded probe variant); "
           "the number of accesses guarded")
      .def(
          "emit_assembly",
          [](const Module &self, const std::string &cpu, const std::string &features,
             int opt_level) {
            nb::gil_scoped_release release;
            return self.emit(cpu, features, opt_level, /*assembly=*/true);
          },
          "cpu"_a, "features"_a = "", "opt_level"_a = 2, "PTX (NVPTX) or assembly text")
      .def(
          "emit_object",
          [](const Module &self, const std::string &cpu, const std::string &features,
             int opt_level) {
            std::string object;
            {
              nb::gil_scoped_release release;
              object = self.emit(cpu, features, opt_level, /*assembly=*/false);
            }
            return nb::bytes(object.data(), object.size());
          },
          "cpu"_a, "features"_a = "", "opt_level"_a = 2, "Object file (AMDGPU code object ELF)");
}
