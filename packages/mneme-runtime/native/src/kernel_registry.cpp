// The module/kernel registry: which kernel a launch is of, and the code it came from.
//
// Kernels are known from the manifest of an instrumented executable, from the fatbinaries
// nvcc-built code registers (__cudaRegisterFatBinary/__cudaRegisterFunction), and from
// modules the application loads itself (cuModuleLoad*, cuLibraryLoad*, cudaLibraryLoad*).
// A kernel without IR gets its parameter layout from cuFuncGetParamInfo and is stored
// with the code it came from (docs/record.md, "Applications built with nvcc"), and with
// that code's origin: the object or file it came from (docs/record.md, "Origins").
#include <cxxabi.h>
#include <elf.h>
#include <link.h>
#include <limits.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "recorder.hpp"

namespace mneme::recorder {

Recorder::CodeImage::CodeImage(std::string k, std::string b) : kind(std::move(k)), bytes(std::move(b)) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (std::string_view part : {std::string_view(kind.c_str(), kind.size() + 1), std::string_view(bytes)})
    for (unsigned char c : part) { h ^= c; h *= 0x100000001b3ull; }
  digest = h;
}

const std::string& executable_path() {
  static const std::string path = [] {
    char resolved[PATH_MAX];
    return std::string(realpath("/proc/self/exe", resolved) ? resolved : "");
  }();
  return path;
}

// dl_iterate_phdr rather than dladdr: dladdr also looks for the nearest symbol, a scan of
// the whole symbol table per call (libtorch_cuda registers thousands of fatbinaries).
std::string code_origin(const void* address) {
  if (!address) return {};
  struct Search {
    uintptr_t address;
    bool found = false;
    std::string name;
  } search;
  search.address = reinterpret_cast<uintptr_t>(address);
  dl_iterate_phdr(
      [](dl_phdr_info* object, size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        for (int i = 0; i < object->dlpi_phnum; ++i) {
          const auto& segment = object->dlpi_phdr[i];
          uintptr_t start = object->dlpi_addr + segment.p_vaddr;
          if (segment.p_type != PT_LOAD || s->address < start || s->address >= start + segment.p_memsz) continue;
          s->found = true;
          s->name = object->dlpi_name ? object->dlpi_name : "";
          return 1;
        }
        return 0;
      },
      &search);
  if (!search.found) return {};
  if (search.name.empty()) return executable_path();  // the main program has no name here
  // As the loader opened it (an RPATH's "$ORIGIN/../.." left in), without resolving the
  // file's own link: libcublasLt.so.13, not the versioned file it points to.
  return std::filesystem::path(search.name).lexically_normal().string();
}

std::string load_origin(const void* caller, const void* image) {
  std::string origin = code_origin(caller);
  std::string file = std::filesystem::path(origin).filename().string();
  if (file.rfind("libcudart.so", 0) == 0) {
    std::string holder = code_origin(image);
    if (!holder.empty()) return holder;  // a registered fatbinary keeps its own origin
  }
  return origin;
}

std::string file_origin(const char* path) {
  if (!path) return {};
  std::error_code error;
  auto absolute = std::filesystem::absolute(path, error);
  return error ? std::string(path) : absolute.lexically_normal().string();
}

void Recorder::module_image(void* module, std::shared_ptr<const CodeImage> code, ModuleApi api,
                            std::string origin) {
  if (!code) {
    modules_.erase(module);  // a handle the driver reuses must not keep an earlier module's code
    return;
  }
  LoadedModule m{code, api, declared_globals(*code), std::move(origin)};
  modules_[module] = std::move(m);
}

// What an image passed to cuModuleLoadData & co. is, and how long: fatbinary (or its
// wrapper), cubin (ELF: up to the end of its section headers) or NUL-terminated PTX.
std::shared_ptr<const Recorder::CodeImage> Recorder::image_of(const void* image) {
  if (!image) return nullptr;
  auto* p = static_cast<const unsigned char*>(image);
  uint32_t magic = 0;
  std::memcpy(&magic, p, 4);
  if (magic == 0x466243b1u) {  // the wrapper __cudaRegisterFatBinary takes
    const unsigned char* data = nullptr;
    std::memcpy(&data, p + 8, sizeof data);
    if (!data) return nullptr;
    p = data;
    std::memcpy(&magic, p, 4);
  }
  if (magic == 0xBA55ED50u) {
    uint16_t header = 0;
    uint64_t size = 0;
    std::memcpy(&header, p + 6, 2);
    std::memcpy(&size, p + 8, 8);
    if (header < 16 || size > (1ull << 34)) return nullptr;
    return std::make_shared<CodeImage>(CodeImage{"cuda-fatbin", std::string(reinterpret_cast<const char*>(p), header + size)});
  }
  if (std::memcmp(p, "\x7f" "ELF", 4) == 0 && p[4] == 2) {
    Elf64_Ehdr h;
    std::memcpy(&h, p, sizeof h);
    uint64_t end = std::max<uint64_t>(h.e_shoff + uint64_t(h.e_shnum) * h.e_shentsize,
                                      h.e_phoff + uint64_t(h.e_phnum) * h.e_phentsize);
    if (end > (1ull << 34)) return nullptr;
    return std::make_shared<CodeImage>(CodeImage{"cubin", std::string(reinterpret_cast<const char*>(p), end)});
  }
  size_t length = strnlen(reinterpret_cast<const char*>(p), 1ull << 30);
  return std::make_shared<CodeImage>(CodeImage{"ptx", std::string(reinterpret_cast<const char*>(p), length)});
}

// A file passed to cuModuleLoad, cuLibraryLoadFromFile or cudaLibraryLoadFromFile: the
// same kinds, read whole (a file holds no fatbinary wrapper, whose pointer would be
// meaningless here).
std::shared_ptr<const Recorder::CodeImage> Recorder::image_of_file(const char* path) {
  if (!path) return nullptr;
  std::ifstream in(path, std::ios::binary);
  if (!in) return nullptr;
  std::stringstream bytes;
  bytes << in.rdbuf();
  return image_of_bytes(bytes.str());
}

std::shared_ptr<const Recorder::CodeImage> Recorder::image_of_bytes(std::string bytes) {
  if (bytes.size() < 16) return nullptr;
  uint32_t magic = 0;
  std::memcpy(&magic, bytes.data(), 4);
  if (magic == 0xBA55ED50u) {
    uint16_t header = 0;
    uint64_t size = 0;
    std::memcpy(&header, bytes.data() + 6, 2);
    std::memcpy(&size, bytes.data() + 8, 8);
    if (header >= 16 && header + size <= bytes.size()) bytes.resize(header + size);
    return std::make_shared<CodeImage>(CodeImage{"cuda-fatbin", std::move(bytes)});
  }
  if (bytes.compare(0, 4, "\x7f" "ELF") == 0) return std::make_shared<CodeImage>(CodeImage{"cubin", std::move(bytes)});
  bytes.resize(strnlen(bytes.c_str(), bytes.size()));
  return std::make_shared<CodeImage>(CodeImage{"ptx", std::move(bytes)});
}

// The device globals an image declares, so that a kernel's globals are snapshotted even
// when the application never asks for them (a counter only kernels touch): PTX
// `.global`/`.const` variables at module scope, or a cubin's object symbols in its global
// and constant sections. Fatbinaries are not looked into: only the globals the
// application looks up count for them.
std::set<std::string> Recorder::declared_globals(const CodeImage& image) {
  std::set<std::string> names;
  const std::string& b = image.bytes;
  if (image.kind == "ptx") {
    std::istringstream in(b);
    std::string line;
    int depth = 0;  // inside a function body or a multi-line initializer
    while (std::getline(in, line)) {
      int at_start = depth;
      for (char c : line) depth += c == '{' ? 1 : c == '}' ? -1 : 0;
      if (at_start != 0) continue;
      std::string head = line.substr(0, line.find_first_of("=;"));
      std::istringstream words(head);
      std::vector<std::string> w;
      for (std::string word; words >> word;) w.push_back(word);
      size_t space = w.size() > 1 && (w[0] == ".visible" || w[0] == ".weak" || w[0] == ".common") ? 1 : 0;
      if (w.size() < space + 3 || (w[space] != ".global" && w[space] != ".const")) continue;
      std::string name = w.back().substr(0, w.back().find('['));
      if (name.empty() || name[0] == '.') continue;
      if (line.find(".texref") != std::string::npos || line.find(".samplerref") != std::string::npos ||
          line.find(".surfref") != std::string::npos)
        continue;
      names.insert(name);
    }
  } else if (image.kind == "cubin" && b.size() >= sizeof(Elf64_Ehdr)) {
    Elf64_Ehdr h;
    std::memcpy(&h, b.data(), sizeof h);
    auto section = [&](size_t i, Elf64_Shdr& out) {
      uint64_t at = h.e_shoff + i * uint64_t(h.e_shentsize);
      if (h.e_shentsize < sizeof(Elf64_Shdr) || i >= h.e_shnum || at + sizeof out > b.size()) return false;
      std::memcpy(&out, b.data() + at, sizeof out);
      return true;
    };
    auto string_at = [&](const Elf64_Shdr& table, uint64_t offset) -> std::string {
      if (table.sh_offset + offset >= b.size() || offset >= table.sh_size) return {};
      return std::string(b.c_str() + table.sh_offset + offset, strnlen(b.c_str() + table.sh_offset + offset,
                                                                        table.sh_size - offset));
    };
    Elf64_Shdr names_table{}, symtab{}, strtab{};
    if (!section(h.e_shstrndx, names_table)) return names;
    for (size_t i = 0; i < h.e_shnum; ++i)
      if (section(i, symtab) && symtab.sh_type == SHT_SYMTAB) break;
    if (symtab.sh_type != SHT_SYMTAB || !section(symtab.sh_link, strtab) || symtab.sh_offset + symtab.sh_size > b.size())
      return names;
    for (uint64_t at = symtab.sh_offset; at + sizeof(Elf64_Sym) <= symtab.sh_offset + symtab.sh_size;
         at += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      std::memcpy(&sym, b.data() + at, sizeof sym);
      Elf64_Shdr where{};
      if (ELF64_ST_TYPE(sym.st_info) != STT_OBJECT || sym.st_size == 0 || !section(sym.st_shndx, where)) continue;
      std::string in_section = string_at(names_table, where.sh_name);
      if (in_section.rfind(".nv.global", 0) != 0 && in_section.rfind(".nv.constant", 0) != 0) continue;
      std::string name = string_at(strtab, sym.st_name);
      if (!name.empty()) names.insert(name);
    }
  }
  return names;
}

// Where a module's global is in the current context, through the driver (or runtime)
// functions of the API that loaded the module, called directly: not through the
// interposed ones, which would note the lookup.
bool Recorder::global_address(void* module, ModuleApi api, const std::string& name, uint64_t& address,
                              uint64_t& size) {
  using ModuleGlobal = CUresult (*)(CUdeviceptr*, size_t*, CUmodule, const char*);
  using LibraryGlobal = CUresult (*)(CUdeviceptr*, size_t*, CUlibrary, const char*);
  static auto module_global = mneme::recorder::driver_function<ModuleGlobal>("cuModuleGetGlobal_v2");
  static auto library_global = mneme::recorder::driver_function<LibraryGlobal>("cuLibraryGetGlobal");
  CUdeviceptr pointer = 0;
  size_t bytes = 0;
  bool found = false;
  if (api == ModuleApi::module && module_global)
    found = module_global(&pointer, &bytes, static_cast<CUmodule>(module), name.c_str()) == CUDA_SUCCESS;
  else if (api == ModuleApi::library && library_global)
    found = library_global(&pointer, &bytes, static_cast<CUlibrary>(module), name.c_str()) == CUDA_SUCCESS;
  else if (api == ModuleApi::runtime_library) {
    using RuntimeGlobal = cudaError_t (*)(void**, size_t*, cudaLibrary_t, const char*);
    static auto runtime_global = real<RuntimeGlobal>("cudaLibraryGetGlobal");
    REAL(cudaPeekAtLastError);
    REAL(cudaGetLastError);
    cudaError_t before = real_cudaPeekAtLastError();
    void* p = nullptr;
    found = runtime_global(&p, &bytes, static_cast<cudaLibrary_t>(module), name.c_str()) == cudaSuccess;
    pointer = reinterpret_cast<CUdeviceptr>(p);
    if (!found && before == cudaSuccess) real_cudaGetLastError();  // the application's error state as it was
  }
  address = pointer;
  size = bytes;
  return found && bytes > 0;
}

CUfunction Recorder::function_of(const void* handle, const KernelHandle& h) {
  if (!h.is_kernel) return reinterpret_cast<CUfunction>(const_cast<void*>(handle));
  using KernelFunction = CUresult (*)(CUfunction*, CUkernel);
  static auto kernel_function = mneme::recorder::driver_function<KernelFunction>("cuKernelGetFunction");
  CUfunction f = nullptr;
  if (!kernel_function ||
      kernel_function(&f, reinterpret_cast<CUkernel>(const_cast<void*>(handle))) != CUDA_SUCCESS)
    return nullptr;
  return f;
}

KernelEntry* Recorder::entry(const std::string& name, CUfunction function, const void* host_function,
                             void*& module) {
  if (!module && function) {
    auto h = handles_.find(function);
    if (h != handles_.end()) module = h->second.module;
  }
  auto by_name = kernels_.find(name);
  bool known_by_name = by_name != kernels_.end() && !by_name->second.info.static_hash.empty();
  if (!module && function && !host_function && !known_by_name) {
    // A function of an application-loaded module that was not taken from it through the
    // calls the recorder follows (cuModuleEnumerateFunctions, a handle from another library).
    using FuncModule = CUresult (*)(CUmodule*, CUfunction);
    static auto module_of = mneme::recorder::driver_function<FuncModule>("cuFuncGetModule");
    CUmodule m = nullptr;
    if (module_of && module_of(&m, function) == CUDA_SUCCESS && modules_.count(m)) {
      handles_[function] = {m, name, false};
      module = m;
    }
  }
  if (module) {
    auto loaded = modules_.find(module);
    if (loaded != modules_.end()) return loaded_kernel(name, loaded->second, function);
    module = nullptr;
  }
  auto it = kernels_.find(name);
  return it != kernels_.end() ? &it->second : discover(name, function, host_function);
}

KernelEntry* Recorder::discover(const std::string& name, CUfunction function, const void* host_function) {
  KernelEntry& k = kernels_[name];  // an entry without a static hash is never recorded
  if (!discover_) return nullptr;
  auto fatbin = fatbin_of_.find(name);
  if (fatbin == fatbin_of_.end()) return nullptr;
  if (!function && host_function) {
    REAL(cudaGetFuncBySymbol);
    cudaFunction_t f = nullptr;
    if (real_cudaGetFuncBySymbol(&f, host_function) == cudaSuccess) function = reinterpret_cast<CUfunction>(f);
  }
  k.fatbin = fatbin->second.handle;
  auto registered = fatbins_.find(k.fatbin);
  if (registered != fatbins_.end()) k.info.origin = registered->second.origin;
  return describe(k, name, function, "cuda-fatbin", fatbin->second.bytes) ? &k : nullptr;
}

KernelEntry* Recorder::loaded_kernel(const std::string& name, const LoadedModule& module, CUfunction function) {
  auto key = std::make_pair(module.code->digest, name);
  auto it = loaded_kernels_.find(key);
  if (it != loaded_kernels_.end()) return &it->second;
  KernelEntry& k = loaded_kernels_[key];  // an entry without a static hash is never recorded
  if (!discover_) return nullptr;
  k.info.origin = module.origin;  // of the first load of this image: one kernel, one entry
  return describe(k, name, function, module.code->kind, module.code->bytes) ? &k : nullptr;
}

bool Recorder::describe(KernelEntry& k, const std::string& name, CUfunction function, const std::string& kind,
                        std::string_view code) {
  using ParamInfo = CUresult (*)(CUfunction, size_t, size_t*, size_t*);
  static auto param_info = mneme::recorder::driver_function<ParamInfo>("cuFuncGetParamInfo");
  if (!function || !param_info) return false;
  for (size_t index = 0;; ++index) {
    size_t offset = 0, size = 0;
    if (param_info(function, index, &offset, &size) != CUDA_SUCCESS) break;
    // Whether a parameter is a pointer is not in the binary: specialisation needs IR anyway.
    rt::KernelParam p{uint32_t(size), uint32_t(size >= 8 ? 8 : size ? size : 1), uint32_t(offset), false, false};
    k.args_size = std::max<uint64_t>(k.args_size, offset + size);
    k.info.params.push_back(p);
  }
  k.info.name = name;
  int status = 0;
  char* demangled = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  k.info.demangled_name = status == 0 && demangled ? demangled : name;
  std::free(demangled);
  k.info.code = kind;
  k.info.ir.assign(code.data(), code.size());
  // FNV-1a 64 of the code kind, the name and the code: one kernel of one binary.
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](std::string_view bytes) {
    for (unsigned char c : bytes) { h ^= c; h *= 0x100000001b3ull; }
  };
  mix(kind);
  mix(std::string_view(name.c_str(), name.size() + 1));
  mix(code);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  k.info.static_hash = hex;
  return true;
}

// The origin is found before the recorder's lock is taken: finding it takes the dynamic
// loader's lock, which a thread in dlopen holds while constructors may call the recorder.
void note_module(void* module, const void* image, ModuleApi api, const void* caller) {
  auto& r = Recorder::get();
  if (!r.active() || !module) return;
  std::string origin = load_origin(caller, image);
  RecorderLock lock(r);
  r.module_loaded(module, image, api, std::move(origin));
}

void note_module_file(void* module, const char* path, ModuleApi api) {
  auto& r = Recorder::get();
  if (!r.active() || !module) return;
  std::string origin = file_origin(path);
  RecorderLock lock(r);
  r.module_file_loaded(module, path, api, std::move(origin));
}

void note_kernel(const void* handle, void* module, const char* name, bool is_kernel) {
  auto& r = Recorder::get();
  if (!r.active() || !handle) return;
  RecorderLock lock(r);
  r.kernel_of_module(handle, module, name, is_kernel);
}

void note_unload(void* module) {
  auto& r = Recorder::get();
  if (!r.active()) return;
  RecorderLock lock(r);
  r.module_unloaded(module);
}

void note_global(void* module, const char* name) {
  auto& r = Recorder::get();
  if (!r.active()) return;
  RecorderLock lock(r);
  r.global_of_module(module, name);
}

}  // namespace mneme::recorder
