// SnapshotPipeline::install_crash_handler: on a fatal signal the captured instances commit
// first (for a bounded time), then the signal is raised again with its previous disposition.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "mneme/runtime/snapshot_pipeline.hpp"

namespace mneme::runtime {

namespace {

std::atomic<SnapshotPipeline*> g_pipeline{nullptr};
double g_wait_seconds = 60;
struct sigaction g_previous[NSIG];
std::atomic<int> g_entered{0};
std::atomic<bool> g_drained{false};
pid_t g_owner = 0;  // a forked child has no background threads: nothing to wait for

void say(const char* text) {
  ssize_t ignored = ::write(2, text, std::strlen(text));
  (void)ignored;
}

void on_signal(int sig, siginfo_t*, void*) {
  int saved_errno = errno;
  if (g_entered.fetch_add(1) == 0) {
    SnapshotPipeline* p = getpid() == g_owner ? g_pipeline.load() : nullptr;
    int left = p ? p->uncommitted() : 0;
    if (left > 0) {
      char text[160];
      char digits[16];
      int n = 0;
      for (int v = left; v > 0 && n < 15; v /= 10) digits[n++] = char('0' + v % 10);
      std::strcpy(text, "mneme record: signal received; committing ");
      size_t at = std::strlen(text);
      while (n > 0) text[at++] = digits[--n];
      text[at] = 0;
      std::strcat(text, " captured instance(s) first\n");
      say(text);
      if (!p->drain_for(g_wait_seconds))
        say("mneme record: gave up waiting; uncommitted instances are left in .mneme/staging\n");
    }
    g_drained = true;
  } else {  // another thread crashed too: wait for the first one's drain
    timespec pause{0, 2000000};
    for (int i = 0; !g_drained.load() && i < int(g_wait_seconds * 500) + 1; ++i) nanosleep(&pause, nullptr);
  }
  sigaction(sig, &g_previous[sig], nullptr);
  errno = saved_errno;
  raise(sig);  // delivered when this handler returns, with the previous disposition
}

}  // namespace

void SnapshotPipeline::install_crash_handler(SnapshotPipeline* pipeline, double wait_seconds) {
  g_wait_seconds = wait_seconds;
  g_owner = getpid();
  if (g_pipeline.exchange(pipeline) != nullptr) return;  // installed already
  // Room for the handler when the application overflowed its stack.
  stack_t current{};
  if (sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE)) {
    stack_t alt{};
    alt.ss_size = 64 * 1024;
    alt.ss_sp = std::malloc(alt.ss_size);
    if (alt.ss_sp) sigaltstack(&alt, nullptr);
  }
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGINT, SIGTERM}) {
    struct sigaction previous{};
    if (sigaction(sig, nullptr, &previous) != 0) continue;
    bool fatal = sig != SIGINT && sig != SIGTERM;
    if (!fatal && (previous.sa_flags & SA_SIGINFO || previous.sa_handler != SIG_DFL)) continue;
    g_previous[sig] = previous;
    struct sigaction action{};
    action.sa_sigaction = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(sig, &action, nullptr);
  }
}

}  // namespace mneme::runtime
