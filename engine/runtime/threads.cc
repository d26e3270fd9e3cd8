// Team-size resolution and scoping (see threads.h).
#include "engine/runtime/threads.h"

#include <omp.h>
#include <sched.h>

#include <cctype>
#include <cstdlib>
#include <string>

#include "engine/io/json_limits.h"
#include "nlohmann/json.hpp"

namespace attn {
namespace {

// What `attn tune --save` writes is a few hundred bytes, three levels deep;
// these bound a hostile file.
constexpr uint64_t kMaxTunedFileBytes = 1u << 20;
constexpr size_t kMaxTunedFileDepth = 32;

// Most characters of a bad value that a message quotes.
constexpr size_t kQuotedChars = 40;

}  // namespace

int AffinityCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  return omp_get_num_procs();
}

Result<TunedConfig> ReadTunedConfig(const std::string& path) {
  const std::string what = "tuned config " + Quoted(path);
  Result<std::string> text = ReadRegularFile(path, kMaxTunedFileBytes, what);
  if (!text.ok()) return text.status();
  Result<nlohmann::json> parsed =
      ParseCheckedJson(*text, kMaxTunedFileDepth, what);
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& json = *parsed;
  if (!json.is_object()) {
    return InvalidArgument(what + " is " + json.type_name() +
                           ", want a JSON object like {\"num_threads\": 2}");
  }
  const auto threads = json.find("num_threads");
  if (threads == json.end()) {
    return InvalidArgument(what + " has no \"num_threads\"");
  }
  if (!threads->is_number_integer() || threads->get<int64_t>() <= 0 ||
      threads->get<int64_t>() > kMaxThreads) {
    return InvalidArgument(
        what +
        " has \"num_threads\": " + Quoted(threads->dump(), kQuotedChars) +
        ", want a positive integer up to " + std::to_string(kMaxThreads));
  }
  TunedConfig config;
  config.num_threads = threads->get<int>();
  return config;
}

namespace {

// ATTN_NUM_THREADS: its count, or 0 when unset or empty.
Result<int> EnvNumThreads() {
  const char* env = std::getenv("ATTN_NUM_THREADS");
  if (!env || !*env) return 0;
  char* end = nullptr;
  const long value = std::strtol(env, &end, 10);
  // Digits only: strtol would also take " 4" and "+4".
  if (!std::isdigit(static_cast<unsigned char>(*env)) || *end != '\0' ||
      value <= 0 || value > kMaxThreads) {
    return InvalidArgument("ATTN_NUM_THREADS is " + Quoted(env, kQuotedChars) +
                           ", want a positive integer up to " +
                           std::to_string(kMaxThreads));
  }
  return static_cast<int>(value);
}

// The team size of tuned file `path`; `source` (the option or the
// environment variable that named it) prefixes a message.
Result<int> TunedNumThreads(const std::string& path,
                            const std::string& source) {
  Result<TunedConfig> tuned = ReadTunedConfig(path);
  if (!tuned.ok()) {
    return Status(tuned.status().code(),
                  source + ": " + tuned.status().message());
  }
  return tuned->num_threads;
}

}  // namespace

Result<int> ResolveNumThreads(int requested, const std::string& tuned_config) {
  if (requested < 0) {
    return InvalidArgument("num_threads is " + std::to_string(requested) +
                           ", want 0 (default) or a positive count");
  }
  if (requested > kMaxThreads) {
    return InvalidArgument("num_threads is " + std::to_string(requested) +
                           ", want at most " + std::to_string(kMaxThreads));
  }
  if (requested > 0) return requested;
  ATTN_ASSIGN_OR_RETURN(const int env, EnvNumThreads());
  if (env > 0) return env;
  if (!tuned_config.empty()) {
    return TunedNumThreads(tuned_config, "tuned_config");
  }
  if (const char* path = std::getenv("ATTN_CONFIG"); path && *path) {
    return TunedNumThreads(path, "ATTN_CONFIG");
  }
  return AffinityCores();
}

Result<int> ResolveNumThreads(const ModelOptions& options) {
  return ResolveNumThreads(options.num_threads, options.tuned_config);
}

Result<int> ReadTunedThreads(const std::string& path) {
  Result<TunedConfig> tuned = ReadTunedConfig(path);
  if (!tuned.ok()) return tuned.status();
  return tuned->num_threads;
}

}  // namespace attn
