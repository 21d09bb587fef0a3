// mneme.runtime._native: the device layer for Python. The Pythonic surface
// (argument conversion, convenience) lives in mneme.runtime; the bindings tie handle
// lifetimes to Python objects, one file per topic (bindings.hpp). This file makes the
// module: the exceptions it raises, its constants, then each topic's classes and functions.
#include "bindings.hpp"
#include "mneme/runtime/cuda_driver.hpp"

namespace {

// Raise the matching class of mneme.runtime.errors (pure Python, so the
// classes carry `mneme_user_error` and can be caught without this module).
template <typename... Keywords>
void raise_python(const char* class_name, const char* message, Keywords&&... keywords) {
  try {
    nb::object cls = nb::module_::import_("mneme.runtime.errors").attr(class_name);
    nb::object exc = cls(message, std::forward<Keywords>(keywords)...);
    PyErr_SetObject(cls.ptr(), exc.ptr());
  } catch (nb::python_error& e) {
    e.restore();
  }
}

void translate_exception(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const rt::OutOfSpaceError& e) {
    raise_python("OutOfSpaceError", e.what(), "requested"_a = e.requested,
                 "range_size"_a = e.range_size, "needed_size"_a = e.needed_size);
  } catch (const rt::RangeUnavailableError& e) {
    raise_python("RangeUnavailableError", e.what());
  } catch (const rt::OutOfRangeError& e) {
    raise_python("OutOfRangeError", e.what());
  } catch (const rt::NoDriverError& e) {
    raise_python("NoDriverError", e.what());
  } catch (const rt::NoDeviceError& e) {
    raise_python("NoDeviceError", e.what());
  } catch (const rt::UserError& e) {
    raise_python("UserError", e.what());
  } catch (const rt::DriverError& e) {
    raise_python("DriverError", e.what(), "code"_a = e.code, "name"_a = e.name);
  } catch (const rt::AllocationError& e) {
    raise_python("AllocationError", e.what());
  } catch (const rt::Error& e) {
    raise_python("DeviceLayerError", e.what());
  }
}

}  // namespace

NB_MODULE(_native, m) {
  m.doc() = "mneme device layer (native part); use mneme.runtime";
  nb::register_exception_translator(translate_exception);
  bind_timing(m);

  m.attr("DEFAULT_BASE") = rt::kDefaultBase;
  m.attr("DEFAULT_SIZE") = rt::kDefaultSize;
  m.attr("MIN_ALIGNMENT") = rt::kMinAlignment;
  // (cuInit takes a quarter second on a GPU host: mneme tune opens its study on a thread meanwhile)
  m.def("cuda_driver_available", &rt::cuda::Driver::available, mneme::bindings::ReleaseGil(),
        "True when libcuda.so.1 loads and cuInit succeeds.");
  m.def("format_bytes", &rt::format_bytes);
  bind_address_space(m);
  bind_device(m);
  bind_recording(m);
}
