// Renders a parsed template, and the built-in filters, tests, methods and
// globals it calls (jinja_builtins.cc), with Jinja2's semantics as run in
// transformers' ImmutableSandboxedEnvironment.
#ifndef ATTN_ENGINE_TOKENIZER_JINJA_EVAL_H_
#define ATTN_ENGINE_TOKENIZER_JINJA_EVAL_H_

#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <string>

#include "attn/status.hpp"
#include "engine/tokenizer/jinja_parser.h"
#include "engine/tokenizer/jinja_value.h"

namespace attn::jinja {

// Bounds that keep a hostile template from exhausting time or memory.
struct RenderLimits {
  size_t max_output_bytes = size_t{16} << 20;  // also any one string or list
  int max_call_depth = 64;                     // macro calls
  int64_t max_steps = 10'000'000;              // nodes evaluated, plus work
  std::function<std::time_t()> now;            // strftime_now; null: time()
};

// The work done so far against RenderLimits; builtins charge it too.
class Budget {
 public:
  explicit Budget(const RenderLimits& limits) : limits_(limits) {}
  const RenderLimits& limits() const { return limits_; }
  // Counts `units` steps (about 64 bytes copied each, or one node).
  Status Charge(size_t units);
  // Fails when a string or list of `size` would exceed the output cap.
  Status CheckSize(size_t size) const;

 private:
  const RenderLimits& limits_;
  int64_t steps_ = 0;
};

// Argument `index`, or the keyword argument `name`; null when absent.
const Value* FindArg(const CallArgs& args, size_t index, std::string_view name);
// Fails when more than `max` arguments were passed to `what`.
Status CheckArgCount(const CallArgs& args, size_t max, const std::string& what);

// Renders `body` with `globals` (the caller's variables plus Globals()).
Result<std::string> Render(const Body& body, const Dict& globals,
                           const RenderLimits& limits);

// The functions every template sees: range, namespace, dict,
// raise_exception, strftime_now.
Dict Globals(const RenderLimits& limits);

// Filter `name` on `operand` with `args`; `name` passed IsKnownFilter.
Result<Value> ApplyFilter(Budget& budget, const std::string& name,
                          const Value& operand, const CallArgs& args);
// Test `name` on `operand`; also names operators ("==", "<"...).
Result<bool> ApplyTest(const std::string& name, const Value& operand,
                       const CallArgs& args);
// Python's `item in container`.
Result<bool> Contains(const Value& container, const Value& item);
// `object.name` as Jinja2 looks it up: a key of a dict or namespace, else a
// method of a str or dict as a bound callable, else undefined.
Value GetAttribute(Budget& budget, const Value& object,
                   const std::string& name);
// `object[key]`: dict keys, list and str indexes from either end; out of
// range or missing is undefined, as Jinja2's getitem.
Value GetItem(Budget& budget, const Value& object, const Value& key);
// Python's sequence[start:stop:step] on a list, tuple or str; null parts are
// left out.
Result<Value> GetSlice(const Value& object, const Value* start,
                       const Value* stop, const Value* step);
// The items `for` visits in `value`: a list's items, a dict's keys, a
// string's characters, nothing for undefined.
Result<List> Iterate(const Value& value);

}  // namespace attn::jinja

#endif  // ATTN_ENGINE_TOKENIZER_JINJA_EVAL_H_
