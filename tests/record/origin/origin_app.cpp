// Prints the recorder's origin rules (kernel_registry.cpp) for addresses in the objects
// the test built: one line "what origin" each (origin "-" when empty).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace mneme::recorder {
std::string code_origin(const void* address);
std::string load_origin(const void* caller, const void* image);
std::string file_origin(const char* path);
}  // namespace mneme::recorder

using namespace mneme::recorder;

static void print(const char* what, const std::string& origin) {
  std::printf("%s %s\n", what, origin.empty() ? "-" : origin.c_str());
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  // Opened by paths with ".." in them, as an RPATH of "$ORIGIN/.." opens libraries.
  void* holder = dlopen(argv[1], RTLD_NOW);
  void* cudart = dlopen(argv[2], RTLD_NOW);
  if (!holder || !cudart) return 3;
  const void* image = dlsym(holder, "image_bytes");
  const void* holder_code = dlsym(holder, "holder_code");
  const void* cudart_code = dlsym(cudart, "cudart_code");
  void* heap = std::malloc(64);
  print("executable", code_origin(reinterpret_cast<const void*>(&main)));
  print("holder", code_origin(image));
  print("heap", code_origin(heap));
  print("load_by_holder", load_origin(holder_code, heap));
  print("load_by_cudart_of_registered", load_origin(cudart_code, image));
  print("load_by_cudart_of_heap", load_origin(cudart_code, heap));
  print("file", file_origin("sub/../kernels.cubin"));
  std::free(heap);
  return 0;
}
