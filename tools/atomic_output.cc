// Signal handling around the CLI's output (see atomic_output.h). The handler
// only touches lock-free atomics and calls async-signal-safe functions
// (signal, pthread_sigmask, raise).
#include "tools/atomic_output.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>

namespace attn::cli {
namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};

std::atomic<int> g_writing{0};  // 1 while an output is being written
std::atomic<int> g_pending{0};  // a signal that arrived meanwhile
static_assert(std::atomic<int>::is_always_lock_free);

// Ends the process by `sig`'s default action (termination for kSignals):
// raise does not return. Neither this nor its callers are [[noreturn]], nor
// call anything that is: under AddressSanitizer such a call first runs
// __asan_handle_no_return, which reads /proc/self/maps through malloc, and
// the code the signal interrupted may hold the allocator's lock (an
// interrupted `attn run` hung in CI that way).
void DieOf(int sig) {
  std::signal(sig, SIG_DFL);
  // Inside the handler the signal is blocked: unblock it so that raise
  // delivers it now, with the default action.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  std::raise(sig);
}

void OnSignal(int sig) {
  if (g_writing.load() == 0) return DieOf(sig);
  int expected = 0;
  g_pending.compare_exchange_strong(expected, sig);
}

// Dies of a signal that arrived while writing, if any.
void DieIfPending() {
  if (const int sig = g_pending.load(); sig != 0) DieOf(sig);
}

// Writes a whole output file at the path it is given (a staged one, or a
// temporary one for an output written in place).
using FileWriter = std::function<Status(const std::string& path)>;

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The file a write to `path` lands in: through any chain of symlinks, the
// last target, which may not exist yet (as a shell's `>` would create it).
Result<std::string> FinalTarget(const std::string& path) {
  std::string current = path;
  for (int hops = 0; hops < 40; ++hops) {  // Linux's own limit
    struct stat st;
    if (lstat(current.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) {
      return current;
    }
    std::string target(PATH_MAX, '\0');
    const ssize_t n = readlink(current.c_str(), target.data(), target.size());
    if (n < 0 || static_cast<size_t>(n) == target.size()) {
      return IoError("cannot read the symbolic link '" + current +
                     "': " + std::strerror(n < 0 ? errno : ENAMETOOLONG));
    }
    target.resize(static_cast<size_t>(n));
    current = target[0] == '/' ? target : DirectoryOf(current) + "/" + target;
  }
  return IoError("cannot write '" + path + "': " + std::strerror(ELOOP));
}

// Writes a regular file (or a new one) at `target` with `write`: staged
// beside it, renamed over it once complete. The staged name is short
// whatever the target's (a name component has at most 255 bytes), and it
// is ours, so that a signal held during WriteSafetensors (which renames its
// own temporary file onto it) still finds exactly one file to remove.
Status ReplaceAtomically(const std::string& target, const FileWriter& write) {
  const std::string base = target.substr(target.rfind('/') + 1);
  std::string staged =
      DirectoryOf(target) + "/" + base.substr(0, 32) + ".partial.XXXXXX";
  const int fd = mkstemp(staged.data());
  if (fd < 0) {
    return IoError("cannot create a temporary file beside '" + target +
                   "': " + std::strerror(errno));
  }
  close(fd);
  Status status = write(staged);
  if (status.ok() && g_pending.load() == 0 &&
      std::rename(staged.c_str(), target.c_str()) != 0) {
    status = IoError("cannot rename '" + staged + "' to '" + target +
                     "': " + std::strerror(errno));
  }
  if (!status.ok() || g_pending.load() != 0) unlink(staged.c_str());
  return status;
}

// Writes all of `data` to `fd`, again after an interrupted write unless a
// held signal waits. Returns 0 or the errno.
int WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t written = write(fd, data, size);
    if (written < 0 && errno == EINTR && g_pending.load() == 0) continue;
    if (written < 0) return errno;
    data += written;
    size -= static_cast<size_t>(written);
  }
  return 0;
}

// Copies the open file `in` to `out`, `path` when `out` is -1. Opening a
// FIFO waits for a reader, as a shell's `>` does; a held signal ends the
// wait (no SA_RESTART).
Status CopyInto(int in, const std::string& path, int out) {
  const bool opened = out < 0;
  if (opened) out = open(path.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
  if (out < 0) {
    return IoError("cannot open '" + path + "': " + std::strerror(errno));
  }
  char buffer[1 << 16];
  int error = 0;
  while (error == 0) {
    const ssize_t n = read(in, buffer, sizeof(buffer));
    if (n <= 0) {
      if (n < 0) error = errno;
      break;
    }
    error = WriteAll(out, buffer, static_cast<size_t>(n));
  }
  if (opened && close(out) != 0 && error == 0) error = errno;
  if (error != 0) {
    return IoError("cannot write '" + path + "': " + std::strerror(error));
  }
  return {};
}

// A device, FIFO, terminal or our own stdout/stderr (`out`, else -1) is
// written, never replaced. WriteSafetensors writes only into a directory,
// so stage the file in TMPDIR, unlinked as soon as it is open so that
// nothing is left behind, then copy it over.
Status WriteInPlace(const std::string& path, const FileWriter& write, int out) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string dir =
      std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/attn-output.XXXXXX";
  if (!mkdtemp(dir.data())) {
    return IoError("cannot create a temporary directory for '" + path +
                   "' in '" + DirectoryOf(dir) + "': " + std::strerror(errno));
  }
  const std::string staged = dir + "/output";
  Status status = write(staged);
  const int in = status.ok() ? open(staged.c_str(), O_RDONLY | O_CLOEXEC) : -1;
  if (status.ok() && in < 0) {
    status = IoError("cannot read '" + staged + "': " + std::strerror(errno));
  }
  unlink(staged.c_str());
  rmdir(dir.c_str());
  if (in < 0) return status;
  status = CopyInto(in, path, out);
  close(in);
  return status;
}

// stdout or stderr when `st` is the file it is open on, else -1: with
// `--output /dev/stdout >> log`, log is appended to through our descriptor,
// not replaced.
int StandardStreamOn(const struct stat& st) {
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    struct stat open_st;
    if (fstat(fd, &open_st) == 0 && open_st.st_dev == st.st_dev &&
        open_st.st_ino == st.st_ino) {
      return fd;
    }
  }
  return -1;
}

Status WriteOutput(const std::string& path, const FileWriter& write) {
  ATTN_RETURN_IF_ERROR(CheckOutputPath(path));
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    const int stream = StandardStreamOn(st);
    if (stream >= 0 || !S_ISREG(st.st_mode)) {
      return WriteInPlace(path, write, stream);
    }
  }
  const Result<std::string> target = FinalTarget(path);
  if (!target.ok()) return target.status();
  return ReplaceAtomically(*target, write);
}

// Gives this thread an alternate signal stack unless it has one (under
// ASan, the sanitizer's own). The handler must not run where the interrupted
// code's stack pointer is: oneDNN's JIT code can run with it inside a small
// heap block, which the signal frame would overflow (ASan caught this).
void EnsureAlternateSignalStack() {
  alignas(64) static char stack[1 << 16];
  stack_t current;
  if (sigaltstack(nullptr, &current) != 0 ||
      (current.ss_flags & SS_DISABLE) == 0) {
    return;
  }
  stack_t ours;
  ours.ss_sp = stack;
  ours.ss_size = sizeof(stack);
  ours.ss_flags = 0;
  sigaltstack(&ours, nullptr);
}

// WriteOutput with the signals held.
Status WriteHoldingSignals(const std::string& path, const FileWriter& write) {
  return RunHoldingSignals([&] { return WriteOutput(path, write); });
}

// `text` as the file at `path`, a name of ours (staged), created anew so
// that it gets 0666 less the umask as a plain create does, not mkstemp's
// 0600; synced to disk.
Status WriteTextFile(const std::string& path, const std::string& text) {
  unlink(path.c_str());
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  int error = fd < 0 ? errno : WriteAll(fd, text.data(), text.size());
  if (fd >= 0 && error == 0 && fsync(fd) != 0) error = errno;
  if (fd >= 0 && close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    return IoError("cannot write '" + path + "': " + std::strerror(error));
  }
  return {};
}

}  // namespace

Status CheckOutputPath(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      return IoError("cannot write '" + path +
                     "': it is a directory, want a file name");
    }
    return {};
  }
  const Result<std::string> target = FinalTarget(path);
  if (!target.ok()) return target.status();
  const std::string dir = DirectoryOf(*target);
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return IoError("cannot write '" + path + "': there is no directory '" +
                   dir + "'");
  }
  return {};
}

void InstallInterruptHandlers() {
  EnsureAlternateSignalStack();
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnSignal;
  action.sa_flags = SA_ONSTACK;
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

Status RunHoldingSignals(const std::function<Status()>& work) {
  g_writing.store(1);
  DieIfPending();
  const Status status = work();
  g_writing.store(0);
  DieIfPending();
  return status;
}

bool InterruptPending() { return g_pending.load() != 0; }

Status WriteOutputAtomically(const std::string& path,
                             const std::vector<F32Tensor>& tensors,
                             const std::vector<I64Tensor>& i64_tensors) {
  return WriteHoldingSignals(path, [&](const std::string& file) {
    return WriteSafetensors(file, tensors, i64_tensors);
  });
}

Status WriteTextAtomically(const std::string& path, const std::string& text) {
  return WriteHoldingSignals(
      path, [&](const std::string& file) { return WriteTextFile(file, text); });
}

}  // namespace attn::cli
