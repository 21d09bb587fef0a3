// mneme.runtime._native: devices, their properties, modules and functions (launches),
// streams and events; each handle holds what it needs alive (a function its module, a
// module its device).
#include "bindings.hpp"
#include "mneme/runtime/cuda_driver.hpp"
#include "mneme/runtime/devices.hpp"

using namespace mneme::bindings;

namespace {

class ModuleObject {
 public:
  ModuleObject(std::shared_ptr<rt::Device> device, rt::ModuleHandle handle)
      : device(std::move(device)), handle(handle) {}
  ~ModuleObject() { device->unload_module(handle); }
  std::shared_ptr<rt::Device> device;
  rt::ModuleHandle handle;
};

// A kernel; holds its module so the code stays loaded while it is used.
struct FunctionObject {
  std::shared_ptr<ModuleObject> module;
  rt::FunctionHandle handle;
  std::string name;
};

class StreamObject {
 public:
  explicit StreamObject(std::shared_ptr<rt::Device> device)
      : device(std::move(device)), handle(this->device->create_stream()) {}
  ~StreamObject() { device->destroy_stream(handle); }
  std::shared_ptr<rt::Device> device;
  rt::StreamHandle handle;
};

class EventObject {
 public:
  explicit EventObject(std::shared_ptr<rt::Device> device)
      : device(std::move(device)), handle(this->device->create_event()) {}
  ~EventObject() { device->destroy_event(handle); }
  std::shared_ptr<rt::Device> device;
  rt::EventHandle handle;
};

rt::StreamHandle stream_handle(const StreamObject* stream) { return stream ? stream->handle : 0; }

rt::Dim3 to_dim3(const std::tuple<unsigned, unsigned, unsigned>& t) {
  return {std::get<0>(t), std::get<1>(t), std::get<2>(t)};
}

}  // namespace

void bind_device(nb::module_& m) {
  nb::class_<rt::DeviceProperties>(m, "DeviceProperties")
      .def_ro("backend", &rt::DeviceProperties::backend)
      .def_ro("ordinal", &rt::DeviceProperties::ordinal)
      .def_ro("name", &rt::DeviceProperties::name)
      .def_ro("compute_capability_major", &rt::DeviceProperties::compute_capability_major)
      .def_ro("compute_capability_minor", &rt::DeviceProperties::compute_capability_minor)
      .def_ro("multiprocessor_count", &rt::DeviceProperties::multiprocessor_count)
      .def_ro("max_threads_per_block", &rt::DeviceProperties::max_threads_per_block)
      .def_ro("warp_size", &rt::DeviceProperties::warp_size)
      .def_ro("max_threads_per_multiprocessor", &rt::DeviceProperties::max_threads_per_multiprocessor)
      .def_ro("max_blocks_per_multiprocessor", &rt::DeviceProperties::max_blocks_per_multiprocessor)
      .def_ro("max_shared_memory_per_block", &rt::DeviceProperties::max_shared_memory_per_block)
      .def_ro("max_shared_memory_per_block_optin",
              &rt::DeviceProperties::max_shared_memory_per_block_optin)
      .def_ro("l2_cache_size", &rt::DeviceProperties::l2_cache_size)
      .def_ro("clock_rate_khz", &rt::DeviceProperties::clock_rate_khz)
      .def_ro("memory_clock_rate_khz", &rt::DeviceProperties::memory_clock_rate_khz)
      .def_ro("memory_bus_width_bits", &rt::DeviceProperties::memory_bus_width_bits)
      .def_ro("total_memory", &rt::DeviceProperties::total_memory)
      .def_ro("granularity", &rt::DeviceProperties::granularity)
      .def_ro("recommended_granularity", &rt::DeviceProperties::recommended_granularity)
      .def_ro("driver_version", &rt::DeviceProperties::driver_version)
      .def_ro("virtual_memory_management", &rt::DeviceProperties::virtual_memory_management);

  nb::class_<rt::ParamInfo>(m, "ParamInfo")
      .def_ro("offset", &rt::ParamInfo::offset)
      .def_ro("size", &rt::ParamInfo::size)
      .def("__repr__", [](const rt::ParamInfo& p) {
        return "ParamInfo(offset=" + std::to_string(p.offset) + ", size=" + std::to_string(p.size) + ")";
      });

  nb::class_<rt::FunctionAttributes>(m, "FunctionAttributes")
      .def_ro("num_registers", &rt::FunctionAttributes::num_registers)
      .def_ro("local_size_bytes", &rt::FunctionAttributes::local_size_bytes)
      .def_ro("shared_size_bytes", &rt::FunctionAttributes::shared_size_bytes)
      .def_ro("const_size_bytes", &rt::FunctionAttributes::const_size_bytes)
      .def_ro("max_threads_per_block", &rt::FunctionAttributes::max_threads_per_block)
      .def_ro("max_dynamic_shared_size_bytes",
              &rt::FunctionAttributes::max_dynamic_shared_size_bytes)
      .def_ro("ptx_version", &rt::FunctionAttributes::ptx_version)
      .def_ro("binary_version", &rt::FunctionAttributes::binary_version);

  nb::class_<StreamObject>(m, "Stream")
      .def_prop_ro("handle", [](const StreamObject& s) { return s.handle; })
      .def("synchronize", [](StreamObject& s) { s.device->synchronize_stream(s.handle); },
           ReleaseGil());

  nb::class_<EventObject>(m, "Event")
      .def("record", [](EventObject& e, const StreamObject* stream) {
             e.device->record_event(e.handle, stream_handle(stream));
           }, "stream"_a = nb::none(), ReleaseGil())
      .def("synchronize", [](EventObject& e) { e.device->synchronize_event(e.handle); },
           ReleaseGil())
      .def("elapsed_ms", [](EventObject& start, EventObject& end) {
             return start.device->elapsed_ms(start.handle, end.handle);
           }, "end"_a, ReleaseGil(), "Milliseconds from this event to `end`.");

  nb::class_<ModuleObject>(m, "Module")
      .def("function", [](std::shared_ptr<ModuleObject> module, const std::string& name) {
             return FunctionObject{module, module->device->get_function(module->handle, name), name};
           }, "name"_a)
      .def("global_address", [](ModuleObject& module, const std::string& name) {
             return module.device->get_global(module.handle, name);
           }, "name"_a, "(address, size) of a module-scope variable.");

  nb::class_<FunctionObject>(m, "Function")
      .def_ro("name", &FunctionObject::name)
      .def("parameter_info", [](FunctionObject& f) {
             return f.module->device->parameter_info(f.handle);
           })
      .def("attributes", [](FunctionObject& f) {
             return f.module->device->function_attributes(f.handle);
           })
      .def("set_max_dynamic_shared_memory", [](FunctionObject& f, int bytes) {
             f.module->device->set_max_dynamic_shared_memory(f.handle, bytes);
           }, "bytes"_a)
      .def("max_active_blocks_per_multiprocessor", [](FunctionObject& f, int block_threads, size_t shared_bytes) {
             return f.module->device->max_active_blocks_per_multiprocessor(f.handle, block_threads, shared_bytes);
           }, "block_threads"_a, "shared_bytes"_a = 0,
           "Blocks of this size one multiprocessor holds at once (the driver's occupancy).")
      .def("launch", [](FunctionObject& f, std::tuple<unsigned, unsigned, unsigned> grid,
                        std::tuple<unsigned, unsigned, unsigned> block, ReadBuffer args,
                        unsigned shared_bytes, const StreamObject* stream,
                        std::tuple<unsigned, unsigned, unsigned> cluster, bool cooperative) {
             nb::gil_scoped_release release;
             f.module->device->launch(f.handle, to_dim3(grid), to_dim3(block), shared_bytes,
                                      stream_handle(stream), args.data(), args.nbytes(), to_dim3(cluster),
                                      cooperative);
           }, "grid"_a, "block"_a, "args"_a, "shared_bytes"_a = 0, "stream"_a = nb::none(),
           "cluster"_a = std::make_tuple(1u, 1u, 1u), "cooperative"_a = false);

  nb::class_<rt::Device>(m, "Device")
      .def_prop_ro("properties", &rt::Device::properties, nb::rv_policy::copy)
      .def("memory_info", &rt::Device::memory_info, ReleaseGil())
      .def("synchronize", &rt::Device::synchronize, ReleaseGil())
      .def("address_space", [](rt::Device& d, uint64_t base, uint64_t size) {
             nb::gil_scoped_release release;
             return new AddressSpaceObject(
                 std::make_unique<rt::AddressSpace>(d.mapping_backend(), base, size));
           }, "base"_a, "size"_a, nb::rv_policy::take_ownership)
      .def("copy_to_device", [](rt::Device& d, uint64_t dst, ReadBuffer src,
                                const StreamObject* stream) {
             nb::gil_scoped_release release;
             if (stream) d.copy_to_device_async(dst, src.data(), src.nbytes(), stream->handle);
             else d.copy_to_device(dst, src.data(), src.nbytes());
           }, "dst"_a, "src"_a, "stream"_a = nb::none())
      .def("copy_from_device", [](rt::Device& d, WriteBuffer dst, uint64_t src,
                                  const StreamObject* stream) {
             nb::gil_scoped_release release;
             if (stream) d.copy_from_device_async(dst.data(), src, dst.nbytes(), stream->handle);
             else d.copy_from_device(dst.data(), src, dst.nbytes());
           }, "dst"_a, "src"_a, "stream"_a = nb::none())
      .def("copy_device_to_device", [](rt::Device& d, uint64_t dst, uint64_t src,
                                       size_t bytes, const StreamObject* stream) {
             nb::gil_scoped_release release;
             if (stream) d.copy_device_to_device_async(dst, src, bytes, stream->handle);
             else d.copy_device_to_device(dst, src, bytes);
           }, "dst"_a, "src"_a, "bytes"_a, "stream"_a = nb::none())
      .def("fill", [](rt::Device& d, uint64_t dst, uint8_t value, size_t bytes,
                      const StreamObject* stream) {
             nb::gil_scoped_release release;
             if (stream) d.fill_async(dst, value, bytes, stream->handle);
             else d.fill(dst, value, bytes);
           }, "dst"_a, "value"_a, "bytes"_a, "stream"_a = nb::none())
      .def("pinned_buffer", [](std::shared_ptr<rt::Device> d, size_t bytes) {
             void* pointer = d->allocate_pinned(bytes);
             // The capsule owns the pinned memory (and keeps the device alive).
             auto* owner = new std::pair<std::shared_ptr<rt::Device>, void*>(d, pointer);
             nb::capsule capsule(owner, [](void* p) noexcept {
               auto* o = static_cast<std::pair<std::shared_ptr<rt::Device>, void*>*>(p);
               o->first->free_pinned(o->second);
               delete o;
             });
             size_t shape[1] = {bytes};
             return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(pointer, 1, shape, capsule);
           }, "bytes"_a, "A uint8 numpy array on page-locked host memory.")
      .def("load_module", [](std::shared_ptr<rt::Device> d, ReadBuffer image) {
             rt::ModuleHandle handle;
             {
               nb::gil_scoped_release release;
               handle = d->load_module(image.data(), image.nbytes());
             }
             return std::make_shared<ModuleObject>(d, handle);
           }, "image"_a, "Load PTX text or a cubin/fatbin image.")
      .def("create_stream", [](std::shared_ptr<rt::Device> d) {
             return std::make_shared<StreamObject>(d);
           })
      .def("create_event", [](std::shared_ptr<rt::Device> d) {
             return std::make_shared<EventObject>(d);
           });

  m.def("available_backends", &rt::available_backends);
  m.def("cuda_device_count", [] {
        const auto& d = rt::cuda::Driver::get();
        int count = 0;
        rt::cuda::check(d, d.cuDeviceGetCount(&count), "cuDeviceGetCount");
        return count;
      }, "CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies).");
  m.def("cuda_can_access_peer", [](int ordinal, int peer) {
        const auto& d = rt::cuda::Driver::get();
        CUdevice a, b;
        rt::cuda::check(d, d.cuDeviceGet(&a, ordinal), "cuDeviceGet");
        rt::cuda::check(d, d.cuDeviceGet(&b, peer), "cuDeviceGet");
        int can = 0;
        rt::cuda::check(d, d.cuDeviceCanAccessPeer(&can, a, b), "cuDeviceCanAccessPeer");
        return can != 0;
      }, "ordinal"_a, "peer"_a, "Whether device `ordinal` can read and write memory of device `peer`.");
  m.def("open_device", &rt::open_device, "backend"_a, "ordinal"_a, ReleaseGil(),
        "Open a device (CUDA: retain the primary context of device `ordinal`).");
}
