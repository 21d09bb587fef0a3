/* Takes driver functions the ways CUDA's libraries do (dlopen + dlsym, cuGetProcAddress)
 * and prints, per lookup, the library that answered and what calling it returned. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

typedef int (*GetProc)(const char*, void**, int, unsigned long long, int*);
typedef int (*Launch)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**);
typedef int (*Alloc)(void*, unsigned long);
typedef int (*LaunchCooperative)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                                 void**);
/* Every graph function takes at most six integer or pointer arguments: called with zeros. */
typedef int (*AnyGraphFunction)(void*, void*, void*, void*, void*, void*);
struct GraphLookup {
  const char* symbol;
  int version;
  int per_thread;
  int (*function)();
};
void* next_which_library(void);
void* cudart_dlsym(const char* name);
void* cudart_proc(const char* name, int version);
int which_library(void);

static const char* owner(void* p) {
  Dl_info info;
  if (!p || !dladdr(p, &info) || !info.dli_fname) return "none";
  const char* slash = strrchr(info.dli_fname, '/');
  return slash ? slash + 1 : info.dli_fname;
}

int main(void) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda) { printf("no libcuda: %s\n", dlerror()); return 1; }
  void* params[1] = {0};
  Launch launch = (Launch)dlsym(cuda, "cuLaunchKernel");
  printf("dlsym cuLaunchKernel %s %d\n", owner((void*)launch), launch(0, 1, 1, 1, 1, 1, 1, 0, 0, params, 0));
  printf("dlsym cuMemcpy %s\n", owner(dlsym(cuda, "cuMemcpy")));
  GetProc get = (GetProc)dlsym(cuda, "cuGetProcAddress_v2");
  printf("dlsym cuGetProcAddress_v2 %s\n", owner((void*)get));
  void* pfn = 0;
  int status = -1;
  get("cuLaunchKernel", &pfn, 13000, 0, &status);
  printf("proc cuLaunchKernel %s %d\n", owner(pfn), ((Launch)pfn)(0, 1, 1, 1, 1, 1, 1, 0, 0, params, 0));
  get("cuMemAlloc", &pfn, 13000, 0, &status);
  printf("proc cuMemAlloc@13000 %s\n", owner(pfn));
  /* cooperative launches (a static CUDA runtime's cudaLaunchCooperativeKernel), both streams */
  LaunchCooperative cooperative = (LaunchCooperative)dlsym(cuda, "cuLaunchCooperativeKernel");
  printf("dlsym cuLaunchCooperativeKernel %s %d\n", owner((void*)cooperative),
         cooperative(0, 1, 1, 1, 1, 1, 1, 0, 0, params));
  get("cuLaunchCooperativeKernel", &pfn, 13000, 0, &status);
  printf("proc cuLaunchCooperativeKernel %s %d\n", owner(pfn),
         ((LaunchCooperative)pfn)(0, 1, 1, 1, 1, 1, 1, 0, 0, params));
  get("cuLaunchCooperativeKernel", &pfn, 13000, 2, &status);
  printf("proc cuLaunchCooperativeKernel/ptsz %s %d\n", owner(pfn),
         ((LaunchCooperative)pfn)(0, 1, 1, 1, 1, 1, 1, 0, 0, params));
  get("cuMemAlloc", &pfn, 2000, 0, &status);
  printf("proc cuMemAlloc@2000 %s %d\n", owner(pfn), ((Alloc)pfn)(0, 0));
  get("cuMemcpy", &pfn, 13000, 0, &status);
  printf("proc cuMemcpy %s\n", owner(pfn));
  get("cuGetProcAddress", &pfn, 13000, 0, &status);
  printf("proc cuGetProcAddress %s\n", owner(pfn));
  printf("rtld_next %d %s\n", ((int (*)(void))next_which_library())(), owner(next_which_library()));
  printf("dlsym getpid %s\n", owner(dlsym(RTLD_DEFAULT, "getpid")));
  /* The shared runtime's own lookups: "cudart_dlsym <name> <owner>", "cudart_proc <symbol> <owner>". */
  printf("cudart_dlsym cuGraphLaunch %s\n", owner(cudart_dlsym("cuGraphLaunch")));
  printf("cudart_dlsym cuLaunchKernel %s\n", owner(cudart_dlsym("cuLaunchKernel")));
  printf("cudart_proc cuGraphInstantiate %s\n", owner(cudart_proc("cuGraphInstantiate", 13000)));
  printf("cudart_proc cuGraphExecUpdate %s\n", owner(cudart_proc("cuGraphExecUpdate", 13000)));
  /* The graph functions, every version: "graph_dlsym <name> <owner> <returned> <expected>"
   * and "graph_proc <symbol>@<version>[/ptsz] <name> <owner> <returned> <expected>". */
  int (*mark)(const char*) = (int (*)(const char*))dlsym(cuda, "stand_in_mark");
  const struct GraphLookup* lookups = (const struct GraphLookup*)dlsym(cuda, "stand_in_graph_lookups");
  for (const struct GraphLookup* l = lookups; l->symbol; ++l) {
    Dl_info info;
    dladdr((void*)l->function, &info);
    const char* name = info.dli_sname;
    AnyGraphFunction f = (AnyGraphFunction)dlsym(cuda, name);
    printf("graph_dlsym %s %s %d %d\n", name, owner((void*)f), f(0, 0, 0, 0, 0, 0), mark(name));
    get(l->symbol, &pfn, l->version, l->per_thread ? 2 : 0, &status);
    f = (AnyGraphFunction)pfn;
    printf("graph_proc %s@%d%s %s %s %d %d\n", l->symbol, l->version, l->per_thread ? "/ptsz" : "", name,
           owner(pfn), f ? f(0, 0, 0, 0, 0, 0) : -1, mark(name));
  }
  return which_library() == 1 ? 0 : 2;
}
