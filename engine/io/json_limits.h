// Reading JSON a user hands us (graph files, tuned configs, safetensors
// headers) without trusting it: a regular file of bounded size, then one SAX
// pass that checks nesting depth and duplicate keys before nlohmann builds a
// DOM, whose parser and dump() recurse once per level.
#ifndef ATTN_ENGINE_IO_JSON_LIMITS_H_
#define ATTN_ENGINE_IO_JSON_LIMITS_H_

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "attn/status.hpp"
#include "nlohmann/json.hpp"

namespace attn {

// `text` in single quotes for a one-line message: control characters
// escaped (a name holding "\n" must not break the line), cut after
// `max_chars` with "...".
std::string Quoted(const std::string& text, size_t max_chars = SIZE_MAX);

// The whole of `path`, refused unless it is a regular file of at most
// `max_bytes`. Opening never blocks (a FIFO is refused, not waited on) and
// reading stops at the cap (/dev/zero cannot exhaust memory). `what` (e.g.
// "graph file 'g.json'") starts every message.
Result<std::string> ReadRegularFile(const std::string& path, uint64_t max_bytes,
                                    const std::string& what);

// A SAX handler that builds nothing and stops at the first problem: JSON
// syntax, containers nested deeper than `max_depth`, an object naming a key
// twice (nlohmann's DOM silently keeps the last). A format with rules of its
// own (the safetensors header) derives from it and calls back into it.
class JsonChecker : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit JsonChecker(size_t max_depth) : max_depth_(max_depth) {}
  // Empty when the text passed.
  const std::string& problem() const { return problem_; }

  bool null() override { return Value(); }
  bool boolean(bool) override { return Value(); }
  bool number_integer(number_integer_t) override { return Value(); }
  bool number_unsigned(number_unsigned_t) override { return Value(); }
  bool number_float(number_float_t, const string_t&) override {
    return Value();
  }
  bool string(string_t&) override { return Value(); }
  bool binary(binary_t&) override { return Value(); }
  bool start_object(std::size_t) override { return Enter(true); }
  bool key(string_t& name) override;
  bool end_object() override { return Leave(); }
  bool start_array(std::size_t) override { return Enter(false); }
  bool end_array() override { return Leave(); }
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& e) override;

 protected:
  // Counts a value (or a container about to open) in the innermost
  // container; a derived format adds its limits here.
  virtual bool Value();
  // Records the first problem; returns false to stop the parse.
  bool Fail(std::string what);
  // Open containers, 0 at the top level.
  size_t depth() const { return open_.size(); }
  bool in_array() const { return !open_.empty() && !open_.back().is_object; }
  // Values so far in the innermost container.
  size_t items() const { return open_.empty() ? 0 : open_.back().items; }

 private:
  struct Container {
    bool is_object;
    size_t items;
    std::set<std::string> keys;
  };
  bool Enter(bool is_object);
  bool Leave();

  size_t max_depth_;
  std::vector<Container> open_;
  std::string problem_;
};

// Checks `text` with a JsonChecker, then builds the DOM. `what` starts
// every message: "<what> nests JSON deeper than 32 levels, the limit".
Result<nlohmann::json> ParseCheckedJson(const std::string& text,
                                        size_t max_depth,
                                        const std::string& what);

}  // namespace attn

#endif  // ATTN_ENGINE_IO_JSON_LIMITS_H_
