// Interrupt-safe output for the attn CLI: SIGINT, SIGTERM and SIGHUP end the
// process at once, except while an output file is being written; then they
// are held until the write ends, and the staged file is removed instead of
// renamed into place. No signal ever leaves a partial output.
#ifndef ATTN_TOOLS_ATOMIC_OUTPUT_H_
#define ATTN_TOOLS_ATOMIC_OUTPUT_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "attn/safetensors.hpp"

namespace attn::cli {

// Installs the handlers (idempotent) and ignores SIGXFSZ, so a write over
// the file-size limit fails with an error instead of killing the process.
void InstallInterruptHandlers();

// Writes `tensors` to `path` as safetensors, with the signals above held
// for the duration. A regular file, new or existing, is written as
// attn::WriteSafetensors does (temporary file beside it, fsync, rename);
// through symlinks, the last target is replaced and the links kept. An
// interrupted write leaves neither the file nor a temporary file, and the
// process then dies of the signal; a failed write leaves an existing file
// untouched. Anything else that exists (a character device, a FIFO, a
// terminal, /dev/stdout on a pipe), and the file stdout or stderr is open on
// (`--output /dev/stdout >> log`), is written in place, never replaced.
// `i64_tensors` (token ids) are written after `tensors`.
Status WriteOutputAtomically(const std::string& path,
                             const std::vector<F32Tensor>& tensors,
                             const std::vector<I64Tensor>& i64_tensors = {});

// Refuses an output path the writes above would refuse for where it lies
// (a directory; a file in no directory), so that a long run can check it
// first.
Status CheckOutputPath(const std::string& path);

// `text` (a JSON file, say) to `path`, as WriteOutputAtomically writes its
// tensors.
Status WriteTextAtomically(const std::string& path, const std::string& text);

// Runs `work`, which writes an output of its own and removes it when it
// fails, with the signals held as during the writes above; `work` should
// end early once InterruptPending(). A held signal then ends the process.
// Not nested: `work` writes through none of the functions above.
Status RunHoldingSignals(const std::function<Status()>& work);

// Whether a signal arrived while held.
bool InterruptPending();

}  // namespace attn::cli

#endif  // ATTN_TOOLS_ATOMIC_OUTPUT_H_
