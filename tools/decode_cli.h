// The CLI's KV-cache decoding pieces: `attn run --incremental` and
// `attn bench --decode`. Defined in run_incremental.cc and bench_decode.cc so
// that cmd_run.cc and cmd_bench.cc only call in.
#ifndef ATTN_TOOLS_DECODE_CLI_H_
#define ATTN_TOOLS_DECODE_CLI_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "attn/attn.hpp"
#include "tools/bench_common.h"
#include "tools/cli.h"

namespace attn::cli {

// input [batch, seq_len, d_in] -> output [batch, seq_len, d_out] through an
// MhaDecoder one token at a time: the first token of every sequence is its
// prompt (Prefill), each later one a Decode step. The same output as
// MhaSession::Run, within rounding.
Status RunIncremental(std::shared_ptr<const MhaModel> model, const float* input,
                      int64_t batch, int64_t seq_len, float* output);

// Adds --decode, --context and --dims to `bench`. The returned function is
// non-null when --decode was given (check after parsing: call it with the
// bench's flags (--threads, --batch (empty: 1,8), --min-time, --max-memory,
// --config, --json and the attention flags) and one of its --dtype values
// to run the decode benchmark).
using DecodeBench = std::function<int(const BenchFlags& flags, DType dtype)>;
std::function<DecodeBench()> AddDecodeBenchOptions(CLI::App& bench);

}  // namespace attn::cli

#endif  // ATTN_TOOLS_DECODE_CLI_H_
