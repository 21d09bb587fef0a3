/* Linked into every native module of a manylinux_2_28 wheel (cmake/manylinux/manylinux.cmake).
 *
 * The build machine's glibc (2.36) gives some functions a newer symbol version than
 * glibc 2.28 knows, or has functions 2.28 lacks. Our code, the LLVM archives and the static
 * libstdc++ are compiled against 2.36's headers and refer to those; the hidden definitions
 * here satisfy the references inside the module, so the module asks the C library only
 * for versions 2.28 has. Each name here was found by `objdump -T` on a module
 * (scripts/build_wheels.sh fails when a newer version comes back).
 *
 * x86_64 only (the only platform we build wheels for).
 */
#if !defined(__x86_64__) || !defined(__linux__)
#error "glibc_compat.c is written for x86_64 Linux"
#endif

#include <stddef.h>
#include <stdint.h>

#define HIDDEN __attribute__((visibility("hidden")))

/* --- functions whose older version is the same function ------------------------------
 * pthread_* and dl* moved from libpthread/libdl into libc in 2.32/2.34 and got a new
 * version there; libm's exp/log/pow family got a new version in 2.29 (no SVID error
 * handling). The old versions remain in every newer glibc. `name` jumps to name@version:
 * a tail jump, so the caller's return address (which dlopen/dlsym use to tell the calling
 * object) is the module's own. */
#define FORWARD(name, version)                                           \
  __asm__(".symver mneme_compat_old_" #name ", " #name "@" version "\n" \
          ".globl " #name "\n"                                           \
          ".hidden " #name "\n"                                          \
          ".type " #name ", @function\n"                                 \
          ".text\n"                                                      \
          #name ":\n"                                                    \
          "  jmp mneme_compat_old_" #name "@PLT\n"                       \
          ".size " #name ", . - " #name "\n")

FORWARD(pthread_create, "GLIBC_2.2.5");
FORWARD(pthread_join, "GLIBC_2.2.5");
FORWARD(pthread_detach, "GLIBC_2.2.5");
FORWARD(pthread_once, "GLIBC_2.2.5");
FORWARD(pthread_sigmask, "GLIBC_2.2.5");
FORWARD(pthread_key_create, "GLIBC_2.2.5");
FORWARD(pthread_key_delete, "GLIBC_2.2.5");
FORWARD(pthread_getspecific, "GLIBC_2.2.5");
FORWARD(pthread_setspecific, "GLIBC_2.2.5");
FORWARD(pthread_rwlock_rdlock, "GLIBC_2.2.5");
FORWARD(pthread_rwlock_wrlock, "GLIBC_2.2.5");
FORWARD(pthread_rwlock_unlock, "GLIBC_2.2.5");
FORWARD(pthread_mutex_trylock, "GLIBC_2.2.5");
FORWARD(pthread_mutexattr_init, "GLIBC_2.2.5");
FORWARD(pthread_mutexattr_settype, "GLIBC_2.2.5");
FORWARD(pthread_mutexattr_destroy, "GLIBC_2.2.5");
FORWARD(pthread_attr_setstacksize, "GLIBC_2.2.5");
FORWARD(dlopen, "GLIBC_2.2.5");
FORWARD(dlclose, "GLIBC_2.2.5");
FORWARD(dlerror, "GLIBC_2.2.5");
FORWARD(dladdr, "GLIBC_2.2.5");
FORWARD(dladdr1, "GLIBC_2.3.3");
FORWARD(dlvsym, "GLIBC_2.2.5");
#ifndef MNEME_COMPAT_OWN_DLSYM /* the recorder defines dlsym itself (and finds glibc's) */
FORWARD(dlsym, "GLIBC_2.2.5");
#endif
FORWARD(exp, "GLIBC_2.2.5");
FORWARD(exp2, "GLIBC_2.2.5");
FORWARD(log, "GLIBC_2.2.5");
FORWARD(log2, "GLIBC_2.2.5");
FORWARD(pow, "GLIBC_2.2.5");

/* --- functions 2.28 does not have ----------------------------------------------------- */

/* 2.32. 0 = "other threads may exist": libstdc++ then always uses atomic reference counts,
 * which is correct in every process. */
HIDDEN char __libc_single_threaded = 0;

/* 2.33 made stat/fstat/lstat/fstatat real functions; before, the headers turned them into
 * calls of __xstat & co. with the kernel's stat layout version (1 on x86_64). */
struct stat;
extern int __xstat64(int, const char*, struct stat*);
extern int __fxstat64(int, int, struct stat*);
extern int __lxstat64(int, const char*, struct stat*);
extern int __fxstatat64(int, int, const char*, struct stat*, int);
#define STAT_VERSION 1
HIDDEN int stat(const char* path, struct stat* buf) { return __xstat64(STAT_VERSION, path, buf); }
HIDDEN int fstat(int fd, struct stat* buf) { return __fxstat64(STAT_VERSION, fd, buf); }
HIDDEN int lstat(const char* path, struct stat* buf) { return __lxstat64(STAT_VERSION, path, buf); }
HIDDEN int fstatat(int dirfd, const char* path, struct stat* buf, int flags) {
  return __fxstatat64(STAT_VERSION, dirfd, path, buf, flags);
}
HIDDEN int stat64(const char* path, struct stat* buf) { return stat(path, buf); }
HIDDEN int fstat64(int fd, struct stat* buf) { return fstat(fd, buf); }
HIDDEN int lstat64(const char* path, struct stat* buf) { return lstat(path, buf); }

/* 2.33: mallinfo2 is mallinfo with size_t fields (LLVM reports heap use with it). */
struct mneme_mallinfo {
  int arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
};
struct mneme_mallinfo2 {
  size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
};
extern struct mneme_mallinfo mallinfo(void);
HIDDEN struct mneme_mallinfo2 mallinfo2(void) {
  struct mneme_mallinfo m = mallinfo();
  struct mneme_mallinfo2 out = {
      (unsigned)m.arena,   (unsigned)m.ordblks,  (unsigned)m.smblks,   (unsigned)m.hblks,
      (unsigned)m.hblkhd,  (unsigned)m.usmblks,  (unsigned)m.fsmblks,  (unsigned)m.uordblks,
      (unsigned)m.fordblks, (unsigned)m.keepcost};
  return out;
}

/* 2.36: arc4random (LLVM seeds with it). getrandom (2.25) blocks only until the kernel's
 * pool is first initialised, as arc4random does. */
extern long getrandom(void*, size_t, unsigned);
HIDDEN uint32_t arc4random(void) {
  uint32_t value = 0;
  unsigned char* p = (unsigned char*)&value;
  size_t got = 0;
  while (got < sizeof value) {
    long n = getrandom(p + got, sizeof value - got, 0);
    if (n > 0) got += (size_t)n;
  }
  return value;
}
