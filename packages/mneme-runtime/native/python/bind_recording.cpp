// mneme.runtime._native: the recording's writers, bound for conformance tests and tools:
// the recorder's database writer (RecordingWriter), its snapshot pipeline over host memory
// (SnapshotWriter), and the format's hashes and sizes.
#include <chrono>
#include <mutex>

#include "bindings.hpp"
#include "mneme/runtime/recording_writer.hpp"
#include "mneme/runtime/settings_reader.hpp"
#include "mneme/runtime/snapshot_pipeline.hpp"

using namespace mneme::bindings;

namespace {

// The recorder's snapshot pipeline over host memory (HostSource): the same background
// threads, staging cap and commit order as in `mneme record`, testable without a GPU.
class SnapshotWriterObject {
 public:
  SnapshotWriterObject(const std::string& root, rt::RecordingInfo info, const std::string& epilogue_format,
                       uint64_t chunk_size, int level, uint64_t host_memory, unsigned threads, bool digests)
      : writer_(std::make_unique<rt::RecordingWriter>(root, std::move(info), epilogue_format, chunk_size, level)),
        source_(std::make_unique<rt::HostSource>()),
        pipeline_(std::make_unique<rt::SnapshotPipeline>(*writer_, *source_,
                                                         rt::PipelineOptions{host_memory, threads, digests})) {}
  ~SnapshotWriterObject() { close(); }

  rt::RecordingWriter& writer() { return *writer_; }
  rt::SnapshotPipeline& pipeline() {
    if (!pipeline_) throw rt::Error("the snapshot writer is closed");
    return *pipeline_;
  }
  std::mutex& capture_mutex() { return capture_; }
  void close() { pipeline_.reset(); }  // flushes, then stops the threads

 private:
  std::unique_ptr<rt::RecordingWriter> writer_;
  std::unique_ptr<rt::HostSource> source_;
  std::unique_ptr<rt::SnapshotPipeline> pipeline_;
  std::mutex capture_;
};

struct CaptureObject {
  std::shared_ptr<rt::SnapshotPipeline::Instance> instance;
  std::string dynamic_hash;
  std::vector<uint64_t> sizes;  // of the regions, in begin_instance's order
};

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// What the bound writers record about the recording (the recorder fills the same fields).
rt::RecordingInfo recording_info(uint64_t vas_base, uint64_t vas_size, const std::string& gpu_name,
                                 const std::string& compute_capability,
                                 const std::vector<std::string>& command_line) {
  rt::RecordingInfo info;
  info.vas_base = vas_base;
  info.vas_size = vas_size;
  info.gpu_name = gpu_name;
  info.compute_capability = compute_capability;
  info.command_line = command_line;
  return info;
}

// A kernel as the bound writers' add_kernel receives it from Python (origin: docs/format.md).
using ParamTuples = std::vector<std::tuple<uint32_t, uint32_t, uint32_t, bool, bool>>;
using GlobalTuples = std::vector<std::tuple<std::string, uint64_t, uint32_t>>;
rt::KernelInfo kernel_info(const std::string& static_hash, const std::string& name,
                           const std::string& demangled, nb::bytes ir, const ParamTuples& params,
                           const GlobalTuples& globals, const std::string& origin) {
  rt::KernelInfo k{static_hash, name, demangled, {}, {}, std::string(ir.c_str(), ir.size())};
  k.origin = origin;
  for (auto& [size, align, offset, ptr, byval] : params) k.params.push_back({size, align, offset, ptr, byval});
  for (auto& [gname, size, space] : globals) k.globals.push_back({gname, size, space});
  return k;
}

}  // namespace

// Several GPUs (docs/format.md, "Devices"): the instance's GPU and range, and each
// region's GPU, as add_instance takes them.
struct DeviceOptions {
  DeviceOptions() = default;
  DeviceOptions(int d, uint64_t base, uint64_t size, std::vector<int> r)
      : device(d), vas_base(base), vas_size(size), regions(std::move(r)) {}
  int device = -1;
  uint64_t vas_base = 0, vas_size = 0;
  std::vector<int> regions;
  int of_region(size_t k) const { return k < regions.size() ? regions[k] : -1; }
  void apply(rt::InstanceInfo& inst) const {
    inst.device = device;
    inst.vas_base = vas_base;
    inst.vas_size = vas_size;
  }
};


void bind_recording(nb::module_& m) {
  nb::class_<DeviceOptions>(m, "InstanceDevices",
                            "Where an instance ran, for writers' add_instance: the GPU, its address "
                            "range, and the GPU of each region (-1: the instance's own).")
      .def(nb::init<int, uint64_t, uint64_t, std::vector<int>>(), "device"_a = -1, "vas_base"_a = 0,
           "vas_size"_a = 0, "regions"_a = std::vector<int>{});

  // The recorder's database writer, bound for conformance tests and tools.
  using RegionTuple = std::tuple<std::string, uint64_t, std::string, ReadBuffer, ReadBuffer>;
  auto make_info = [](std::tuple<uint32_t, uint32_t, uint32_t> grid, std::tuple<uint32_t, uint32_t, uint32_t> block,
                      uint32_t shared_mem, const nb::bytes& args, std::tuple<uint32_t, uint32_t, uint32_t> cluster) {
    rt::InstanceInfo inst;
    std::tie(inst.grid[0], inst.grid[1], inst.grid[2]) = grid;
    std::tie(inst.block[0], inst.block[1], inst.block[2]) = block;
    std::tie(inst.cluster[0], inst.cluster[1], inst.cluster[2]) = cluster;
    inst.shared_mem = shared_mem;
    inst.args.assign(args.c_str(), args.size());
    return inst;
  };
  nb::class_<rt::RecordingWriter>(m, "RecordingWriter")
      .def("__init__",
           [](rt::RecordingWriter* self, const std::string& root, uint64_t vas_base, uint64_t vas_size,
              const std::string& gpu_name, const std::string& compute_capability,
              const std::vector<std::string>& command_line, const std::string& epilogue_format,
              uint64_t chunk_size, int level) {
             new (self) rt::RecordingWriter(
                 root, recording_info(vas_base, vas_size, gpu_name, compute_capability, command_line),
                 epilogue_format, chunk_size, level);
           },
           "root"_a, "vas_base"_a, "vas_size"_a, "gpu_name"_a = "", "compute_capability"_a = "",
           "command_line"_a = std::vector<std::string>{}, "epilogue_format"_a = "diff",
           "chunk_size"_a = uint64_t(4) << 20, "level"_a = 1)
      .def("set_instance_attribute", &rt::RecordingWriter::set_instance_attribute, "static_hash"_a,
           "dynamic_hash"_a, "key"_a, "json_value"_a)
      .def("set_root_attribute", &rt::RecordingWriter::set_root_attribute, "key"_a, "json_value"_a)
      .def("add_kernel",
           [](rt::RecordingWriter& w, const std::string& static_hash, const std::string& name,
              const std::string& demangled, nb::bytes ir, const ParamTuples& params,
              const GlobalTuples& globals, const std::string& origin) {
             return w.add_kernel(kernel_info(static_hash, name, demangled, ir, params, globals, origin));
           },
           "static_hash"_a, "name"_a, "demangled"_a, "ir"_a, "params"_a, "globals"_a, "origin"_a = "")
      .def("add_instance",
           [make_info](rt::RecordingWriter& w, const std::string& static_hash, std::tuple<uint32_t, uint32_t, uint32_t> grid,
              std::tuple<uint32_t, uint32_t, uint32_t> block, uint32_t shared_mem, nb::bytes args,
              const std::vector<RegionTuple>& regions, const DeviceOptions& devices,
              std::tuple<uint32_t, uint32_t, uint32_t> cluster, bool cooperative) {
             rt::InstanceInfo inst = make_info(grid, block, shared_mem, args, cluster);
             inst.cooperative = cooperative;
             for (auto& [kind, address, symbol, before, after] : regions) {
               if (before.nbytes() != after.nbytes())
                 throw rt::Error("prologue and epilogue of a region differ in size");
               inst.regions.push_back({kind, address, before.nbytes(),
                                       static_cast<const uint8_t*>(before.data()),
                                       static_cast<const uint8_t*>(after.data()), symbol,
                                       devices.of_region(inst.regions.size())});
             }
             devices.apply(inst);
             nb::gil_scoped_release release;
             return w.add_instance(static_hash, inst);
           },
           "static_hash"_a, "grid"_a, "block"_a, "shared_mem"_a, "args"_a, "regions"_a,
           "devices"_a = DeviceOptions{}, "cluster"_a = std::make_tuple(1u, 1u, 1u), "cooperative"_a = false);
  // The snapshot pipeline with host memory as the "device" (see SnapshotWriterObject).
  using SpecTuple = std::tuple<std::string, uint64_t, uint64_t, std::string>;  // kind, address, size, symbol
  auto pointers = [](const std::vector<ReadBuffer>& buffers, const CaptureObject& capture) {
    if (buffers.size() != capture.sizes.size()) throw rt::Error("one buffer per region, in begin_instance's order");
    std::vector<uint64_t> out;
    for (size_t i = 0; i < buffers.size(); ++i) {
      if (buffers[i].nbytes() != capture.sizes[i]) throw rt::Error("a buffer's size differs from its region's");
      out.push_back(reinterpret_cast<uint64_t>(buffers[i].data()));
    }
    return out;
  };
  nb::class_<CaptureObject>(m, "SnapshotCapture")
      .def_ro("dynamic_hash", &CaptureObject::dynamic_hash);
  nb::class_<SnapshotWriterObject>(m, "SnapshotWriter")
      .def("__init__",
           [](SnapshotWriterObject* self, const std::string& root, uint64_t vas_base, uint64_t vas_size,
              const std::string& gpu_name, const std::string& compute_capability,
              const std::vector<std::string>& command_line, const std::string& epilogue_format,
              uint64_t chunk_size, int level, uint64_t host_memory, unsigned threads, bool digests) {
             new (self) SnapshotWriterObject(
                 root, recording_info(vas_base, vas_size, gpu_name, compute_capability, command_line),
                 epilogue_format, chunk_size, level, host_memory, threads, digests);
           },
           "root"_a, "vas_base"_a, "vas_size"_a, "gpu_name"_a = "", "compute_capability"_a = "",
           "command_line"_a = std::vector<std::string>{}, "epilogue_format"_a = "diff",
           "chunk_size"_a = uint64_t(4) << 20, "level"_a = 1, "host_memory"_a = uint64_t(0), "threads"_a = 0u,
           "digests"_a = true)  // false: as where the device cannot digest (every chunk copied)
      .def("add_kernel",
           [](SnapshotWriterObject& w, const std::string& static_hash, const std::string& name,
              const std::string& demangled, nb::bytes ir, const ParamTuples& params,
              const GlobalTuples& globals, const std::string& origin) {
             return w.writer().add_kernel(kernel_info(static_hash, name, demangled, ir, params, globals, origin));
           },
           "static_hash"_a, "name"_a, "demangled"_a, "ir"_a, "params"_a, "globals"_a, "origin"_a = "")
      // Like RecordingWriter.add_instance, but returns once the bytes are staged: the
      // instance is committed in the background ((dynamic hash, captured now)).
      .def("add_instance",
           [make_info](SnapshotWriterObject& w, const std::string& static_hash,
                       std::tuple<uint32_t, uint32_t, uint32_t> grid, std::tuple<uint32_t, uint32_t, uint32_t> block,
                       uint32_t shared_mem, nb::bytes args, const std::vector<RegionTuple>& regions,
                       const DeviceOptions& devices, std::tuple<uint32_t, uint32_t, uint32_t> cluster) {
             rt::InstanceInfo inst = make_info(grid, block, shared_mem, args, cluster);
             devices.apply(inst);
             std::vector<rt::RegionSpec> specs;
             std::vector<uint64_t> before, after;
             for (auto& [kind, address, symbol, b, a] : regions) {
               if (b.nbytes() != a.nbytes()) throw rt::Error("prologue and epilogue of a region differ in size");
               specs.push_back({kind, address, b.nbytes(), symbol, devices.of_region(specs.size())});
               before.push_back(reinterpret_cast<uint64_t>(b.data()));
               after.push_back(reinterpret_cast<uint64_t>(a.data()));
             }
             nb::gil_scoped_release release;
             std::lock_guard<std::mutex> lock(w.capture_mutex());
             auto& p = w.pipeline();
             std::string dyn = rt::dynamic_hash(static_hash, inst);
             if (p.count_repeat(static_hash, dyn)) return std::make_pair(dyn, false);
             if (!w.writer().has_kernel(static_hash)) throw rt::Error("kernel " + static_hash + " is not stored: add_kernel first");
             if (p.count_earlier(static_hash, dyn)) return std::make_pair(dyn, false);
             auto start = std::chrono::steady_clock::now();
             auto snap = p.begin(static_hash, inst, specs);
             try {
               p.capture_prologue(*snap, before);
               p.capture_epilogue(*snap, after);
             } catch (...) {
               p.abandon(*snap);
               throw;
             }
             p.note_launch(since(start), 0, 0);
             return std::make_pair(dyn, true);
           },
           "static_hash"_a, "grid"_a, "block"_a, "shared_mem"_a, "args"_a, "regions"_a,
           "devices"_a = DeviceOptions{}, "cluster"_a = std::make_tuple(1u, 1u, 1u))
      // The steps one by one (begin, prologue, epilogue or abandon), as the recorder runs them.
      .def("begin_instance",
           [make_info](SnapshotWriterObject& w, const std::string& static_hash,
                       std::tuple<uint32_t, uint32_t, uint32_t> grid, std::tuple<uint32_t, uint32_t, uint32_t> block,
                       uint32_t shared_mem, nb::bytes args, const std::vector<SpecTuple>& regions,
                       std::tuple<uint32_t, uint32_t, uint32_t> cluster) {
             std::vector<rt::RegionSpec> specs;
             std::vector<uint64_t> sizes;
             for (auto& [kind, address, size, symbol] : regions) {
               specs.push_back({kind, address, size, symbol});
               sizes.push_back(size);
             }
             rt::InstanceInfo inst = make_info(grid, block, shared_mem, args, cluster);
             auto snap = w.pipeline().begin(static_hash, inst, specs);
             return CaptureObject{snap, w.pipeline().dynamic_hash_of(*snap), sizes};
           },
           "static_hash"_a, "grid"_a, "block"_a, "shared_mem"_a, "args"_a, "regions"_a,
           "cluster"_a = std::make_tuple(1u, 1u, 1u))
      .def("capture_prologue",
           [pointers](SnapshotWriterObject& w, CaptureObject& c, const std::vector<ReadBuffer>& buffers) {
             auto sources = pointers(buffers, c);
             nb::gil_scoped_release release;
             w.pipeline().capture_prologue(*c.instance, sources);
           })
      .def("capture_epilogue",
           [pointers](SnapshotWriterObject& w, CaptureObject& c, const std::vector<ReadBuffer>& buffers) {
             auto sources = pointers(buffers, c);
             nb::gil_scoped_release release;
             w.pipeline().capture_epilogue(*c.instance, sources);
           })
      .def("abandon", [](SnapshotWriterObject& w, CaptureObject& c) { w.pipeline().abandon(*c.instance); })
      .def("reserve", [](SnapshotWriterObject& w, uint64_t bytes) { w.pipeline().reserve(bytes); }, "bytes"_a,
           "Grow the staging memory toward `bytes` (at most the cap and reserve_lead) in the background; "
           "returns at once.")
      .def_prop_ro("reserve_lead", [](SnapshotWriterObject& w) { return w.pipeline().reserve_lead(); },
                   "How far reserve grows ahead: cap / 8, or 4x the most a snapshot staged, whichever is more.")
      .def("flush", [](SnapshotWriterObject& w) { w.pipeline().flush(); }, ReleaseGil())
      .def("close", &SnapshotWriterObject::close, ReleaseGil(),
           "Flush and stop the background threads (also done when the object is destroyed).")
      .def_prop_ro("uncommitted", [](SnapshotWriterObject& w) { return w.pipeline().uncommitted(); })
      .def_prop_ro("host_memory", [](SnapshotWriterObject& w) { return w.pipeline().host_memory(); })
      .def_prop_ro("threads", [](SnapshotWriterObject& w) { return w.pipeline().threads(); })
      .def("error", [](SnapshotWriterObject& w) { return w.pipeline().error(); })
      .def("stats_line", [](SnapshotWriterObject& w) { return w.pipeline().stats_line(); })
      .def("stats", [](SnapshotWriterObject& w) {
        auto s = w.pipeline().stats();
        nb::dict d;
        d["instances"] = s.instances; d["committed"] = s.committed; d["repeats"] = s.repeats;
        d["snapshot_bytes"] = s.snapshot_bytes; d["unchanged_bytes"] = s.unchanged_bytes;
        d["known_bytes"] = s.known_bytes; d["zero_bytes"] = s.zero_bytes;
        d["stored_bytes"] = s.stored_bytes;
        d["peak_staged_bytes"] = s.peak_staged_bytes; d["host_memory_bytes"] = s.host_memory_bytes;
        d["staging_bytes"] = s.staging_bytes; d["pinned_bytes"] = s.pinned_bytes;
        d["blocked_s"] = s.blocked_s; d["wait_s"] = s.wait_s; d["alloc_s"] = s.alloc_s;
        d["crc_s"] = s.crc_s; d["delta_s"] = s.delta_s; d["hash_s"] = s.hash_s; d["encode_s"] = s.encode_s;
        d["decode_s"] = s.decode_s; d["write_s"] = s.write_s; d["commit_s"] = s.commit_s; d["deduplicated_chunks"] = s.deduplicated_chunks;
        d["threads"] = s.threads;
        return d;
      })
      .def("install_crash_handler",
           [](SnapshotWriterObject& w, double wait_seconds) {
             rt::SnapshotPipeline::install_crash_handler(&w.pipeline(), wait_seconds);
           }, "wait_seconds"_a = 60.0,
           "On a fatal signal, commit the captured instances (waiting at most wait_seconds), then re-raise.");
  m.def("chunk_digest", [](nb::bytes data) {
        return rt::chunk_digest(reinterpret_cast<const uint8_t*>(data.c_str()), data.size());
      }, "data"_a, "The content store's name for a chunk's raw bytes (docs/format.md), 32 hex digits.");
  m.def("parse_size", &rt::parse_size, "text"_a, "Bytes of '64M', '8G', '123' (binary units); 0 if not a size.");
  m.def("default_host_memory", &rt::default_host_memory);

  m.def("dynamic_hash", [](const std::string& s, std::tuple<uint32_t, uint32_t, uint32_t> g,
                           std::tuple<uint32_t, uint32_t, uint32_t> b, uint32_t shm, nb::bytes args,
                           std::tuple<uint32_t, uint32_t, uint32_t> c, bool cooperative) {
    uint32_t grid[3] = {std::get<0>(g), std::get<1>(g), std::get<2>(g)};
    uint32_t block[3] = {std::get<0>(b), std::get<1>(b), std::get<2>(b)};
    uint32_t cluster[3] = {std::get<0>(c), std::get<1>(c), std::get<2>(c)};
    return rt::dynamic_hash(s, grid, block, shm, std::string(args.c_str(), args.size()), cluster, cooperative);
  }, "static_hash"_a, "grid"_a, "block"_a, "shared_mem"_a, "args"_a, "cluster"_a = std::make_tuple(1u, 1u, 1u),
     "cooperative"_a = false);
}
