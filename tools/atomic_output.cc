// Signal handling around the CLI's output (see atomic_output.h). The handler
// only touches lock-free atomics and calls async-signal-safe functions
// (signal, pthread_sigmask, raise).
#include "tools/atomic_output.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>

namespace attn::cli {
namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

std::atomic<int> g_writing{0};  // 1 while an output is being written
std::atomic<int> g_pending{0};  // a signal that arrived meanwhile
static_assert(std::atomic<int>::is_always_lock_free);

[[noreturn]] void DieOf(int sig) {
  std::signal(sig, SIG_DFL);
  // Inside the handler the signal is blocked: unblock it so that raise
  // delivers it now, with the default action.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  std::raise(sig);
  _exit(128 + sig);  // not reached: the default action ends the process
}

void OnSignal(int sig) {
  if (g_writing.load() == 0) DieOf(sig);
  int expected = 0;
  g_pending.compare_exchange_strong(expected, sig);
}

// Dies of a signal that arrived while writing, if any.
void DieIfPending() {
  if (const int sig = g_pending.load(); sig != 0) DieOf(sig);
}

}  // namespace

void InstallInterruptHandlers() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  for (int sig : kSignals) {
    struct sigaction old;
    // Leave a signal the parent chose to ignore (nohup) ignored.
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) {
      continue;
    }
    sigaction(sig, &action, nullptr);
  }
  std::signal(SIGXFSZ, SIG_IGN);
}

Status WriteOutputAtomically(const std::string& path,
                             const std::vector<F32Tensor>& tensors) {
  g_writing.store(1);
  DieIfPending();
  // Stage beside `path` under a name of our own, so that a signal held
  // during WriteSafetensors (which renames its own temporary file onto the
  // staged name) still finds exactly one file to remove.
  std::string staged = path + ".partial.XXXXXX";
  const int fd = mkstemp(staged.data());
  if (fd < 0) {
    const std::string reason = std::strerror(errno);
    g_writing.store(0);
    DieIfPending();
    return IoError("cannot create a temporary file beside '" + path +
                   "': " + reason);
  }
  close(fd);
  Status status = WriteSafetensors(staged, tensors);
  if (status.ok() && g_pending.load() == 0 &&
      std::rename(staged.c_str(), path.c_str()) != 0) {
    status = IoError("cannot rename '" + staged + "' to '" + path +
                     "': " + std::strerror(errno));
  }
  if (!status.ok() || g_pending.load() != 0) unlink(staged.c_str());
  g_writing.store(0);
  DieIfPending();
  return status;
}

}  // namespace attn::cli
