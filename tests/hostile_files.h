// Builders for safetensors bytes, well-formed and hostile, shared by the
// strict-format, limits and hostile-CLI tests. Every hostile case is built
// here in code, so the tests need no binary fixtures.
#ifndef ATTN_TESTS_HOSTILE_FILES_H_
#define ATTN_TESTS_HOSTILE_FILES_H_

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace attn::test {

// 8-byte little-endian header length, the header, then the data section.
inline std::string SafetensorsBytes(const std::string& header,
                                    const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

// As above with the header length field set to `claimed`.
inline std::string LyingLength(uint64_t claimed, const std::string& header,
                               const std::string& data) {
  std::string out = SafetensorsBytes(header, data);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(claimed >> (8 * i));
  return out;
}

// n zero bytes of data.
inline std::string Zeros(size_t n) { return std::string(n, '\0'); }

// The bytes of n floats, all `value`.
inline std::string Floats(size_t n, float value) {
  std::string out(n * sizeof(float), '\0');
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(&out[i * sizeof(float)], &value, sizeof(float));
  }
  return out;
}

// A tensor entry for a JSON header.
inline std::string Entry(const std::string& name, const std::string& dtype,
                         const std::string& shape, uint64_t begin,
                         uint64_t end) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":[" + std::to_string(begin) + "," +
         std::to_string(end) + "]}";
}

// A complete, valid MHA weights file: d_in 3, d_out 2, 2 heads, no qkv
// bias, every weight 0.25.
inline std::string TinyWeights() {
  std::string header = "{\"__metadata__\":{\"num_heads\":\"2\"},";
  header += Entry("W_query.weight", "F32", "[2,3]", 0, 24) + ",";
  header += Entry("W_key.weight", "F32", "[2,3]", 24, 48) + ",";
  header += Entry("W_value.weight", "F32", "[2,3]", 48, 72) + ",";
  header += Entry("out_proj.weight", "F32", "[2,2]", 72, 88) + ",";
  header += Entry("out_proj.bias", "F32", "[2]", 88, 96) + "}";
  return SafetensorsBytes(header, Floats(24, 0.25f));
}

// A valid input file for TinyWeights: "input" [1, 4, 3], all `value`.
inline std::string TinyInput(float value = 0.5f) {
  return SafetensorsBytes("{" + Entry("input", "F32", "[1,4,3]", 0, 48) + "}",
                          Floats(12, value));
}

struct HostileFile {
  std::string name;
  std::string bytes;
};

// Files that every reader must refuse: truncated, lying headers, overflowing
// shapes, bad dtypes and offsets, duplicate names, broken metadata, limits.
inline std::vector<HostileFile> HostileFiles() {
  std::vector<HostileFile> files;
  auto add = [&files](std::string name, std::string bytes) {
    files.push_back({std::move(name), std::move(bytes)});
  };
  const std::string good = TinyWeights();
  const std::string t = Entry("input", "F32", "[1,4,3]", 0, 48);
  const std::string data = Floats(12, 0.5f);
  auto one = [&](const std::string& entry, const std::string& d) {
    return SafetensorsBytes("{" + entry + "}", d);
  };

  add("empty", "");
  add("seven_bytes", std::string(7, '\x01'));
  add("only_length", LyingLength(2, "", ""));
  add("truncated_header", good.substr(0, 40));
  add("truncated_data", good.substr(0, good.size() - 5));
  add("length_past_end", LyingLength(1u << 20, "{}", ""));
  add("length_huge", LyingLength(~uint64_t{0}, "{}", ""));
  add("length_over_limit", LyingLength(uint64_t{200} << 20, "{}", ""));
  add("length_short", LyingLength(10, "{" + t + "}", data));
  add("length_zero", LyingLength(0, "{" + t + "}", data));
  add("not_json", SafetensorsBytes("{this is not json", ""));
  add("header_array", SafetensorsBytes("[1,2,3]", ""));
  add("header_string", SafetensorsBytes("\"abc\"", ""));
  add("header_leading_space", SafetensorsBytes(" {" + t + "}", data));
  add("header_nul", SafetensorsBytes(std::string("{\0}", 3), ""));
  add("header_bad_utf8", SafetensorsBytes("{\"\xff\xfe\":1}", ""));
  add("random_bytes", std::string("\x13\x37\xde\xad\xbe\xef\x00\x01garbage"));
  // Tensor entries.
  add("dtype_unknown", one(Entry("input", "F31", "[1,4,3]", 0, 48), data));
  add("dtype_number",
      one("\"input\":{\"dtype\":32,\"shape\":[1,4,3],\"data_offsets\":[0,48]}",
          data));
  add("dtype_f16_lying_size",
      one(Entry("input", "F16", "[1,4,3]", 0, 48), data));
  add("shape_negative", one(Entry("input", "F32", "[1,-4,3]", 0, 48), data));
  add("shape_float", one(Entry("input", "F32", "[1,4.0,3]", 0, 48), data));
  add("shape_string", one(Entry("input", "F32", "[1,\"4\",3]", 0, 48), data));
  add("shape_not_array", one(Entry("input", "F32", "12", 0, 48), data));
  add("shape_rank9",
      one(Entry("input", "F32", "[1,1,1,1,1,1,1,4,3]", 0, 48), data));
  add("shape_overflow",
      one(Entry("input", "F32", "[4294967296,4294967296,4294967296]", 0, 48),
          data));
  add("shape_overflow_u64",
      one(Entry("input", "F32", "[18446744073709551615,2]", 0, 48), data));
  add("shape_huge_lying",
      one(Entry("input", "F32", "[65536,65536,65536]", 0, 48), data));
  add("shape_nested", one(Entry("input", "F32", "[[1],4,3]", 0, 48), data));
  add("offsets_float", one("\"input\":{\"dtype\":\"F32\",\"shape\":[1,4,3],"
                           "\"data_offsets\":[0.0,48.0]}",
                           data));
  add("offsets_negative", one("\"input\":{\"dtype\":\"F32\",\"shape\":[1,4,3],"
                              "\"data_offsets\":[-8,40]}",
                              data));
  add("offsets_string", one("\"input\":{\"dtype\":\"F32\",\"shape\":[1,4,3],"
                            "\"data_offsets\":[\"0\",\"48\"]}",
                            data));
  add("offsets_three", one("\"input\":{\"dtype\":\"F32\",\"shape\":[1,4,3],"
                           "\"data_offsets\":[0,48,96]}",
                           data));
  add("offsets_reversed", one(Entry("input", "F32", "[1,4,3]", 48, 0), data));
  add("offsets_past_end", one(Entry("input", "F32", "[1,4,3]", 8, 56), data));
  add("offsets_huge", one(Entry("input", "F32", "[1,4,3]", uint64_t{1} << 62,
                                (uint64_t{1} << 62) + 48),
                          data));
  add("offsets_wrap", one("\"input\":{\"dtype\":\"F32\",\"shape\":[1,4,3],"
                          "\"data_offsets\":[18446744073709551608,40]}",
                          data));
  add("offsets_missing",
      one("\"input\":{\"dtype\":\"F32\",\"shape\":[1,4,3]}", data));
  add("entry_extra_field", one("\"input\":{\"dtype\":\"F32\",\"shape\":[1,4,3],"
                               "\"data_offsets\":[0,48],\"x\":1}",
                               data));
  add("entry_not_object", one("\"input\":[0,48]", data));
  add("entry_duplicate_key",
      one("\"input\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[1,4,3],"
          "\"data_offsets\":[0,48]}",
          data));
  // The data section.
  add("duplicate_name", SafetensorsBytes("{" + t + "," + t + "}", data));
  add("duplicate_name_tiled",
      SafetensorsBytes("{" + Entry("input", "F32", "[1,4,3]", 0, 48) + "," +
                           Entry("input", "F32", "[1,4,3]", 48, 96) + "}",
                       data + data));
  add("overlap",
      SafetensorsBytes(
          "{" + t + "," + Entry("other", "F32", "[2]", 40, 48) + "}", data));
  add("hole", one(Entry("input", "F32", "[1,4,3]", 8, 56), data + Zeros(8)));
  add("trailing_bytes", one(t, data + Zeros(8)));
  // Metadata.
  add("metadata_number",
      SafetensorsBytes("{\"__metadata__\":{\"num_heads\":2}," + t + "}", data));
  add("metadata_null",
      SafetensorsBytes("{\"__metadata__\":{\"k\":null}," + t + "}", data));
  add("metadata_nested",
      SafetensorsBytes("{\"__metadata__\":{\"k\":{\"a\":\"b\"}}," + t + "}",
                       data));
  add("metadata_array",
      SafetensorsBytes("{\"__metadata__\":{\"k\":[\"a\"]}," + t + "}", data));
  add("metadata_not_object",
      SafetensorsBytes("{\"__metadata__\":\"x\"," + t + "}", data));
  add("metadata_duplicate_key",
      SafetensorsBytes("{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}," + t + "}",
                       data));
  add("metadata_twice",
      SafetensorsBytes("{\"__metadata__\":{},\"__metadata__\":{}," + t + "}",
                       data));
  // Limits.
  {
    std::string header = "{";
    for (int i = 0; i <= (1 << 16); ++i) {
      header += (i ? ",\"t" : "\"t") + std::to_string(i) +
                "\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}";
    }
    add("too_many_tensors", SafetensorsBytes(header + "}", ""));
  }
  add("deep_nesting", SafetensorsBytes("{\"a\":" + std::string(100000, '[') +
                                           std::string(100000, ']') + "}",
                                       ""));
  add("long_array", SafetensorsBytes(
                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[" +
                            [] {
                              std::string s = "1";
                              for (int i = 0; i < 100000; ++i) s += ",1";
                              return s;
                            }() +
                            "],\"data_offsets\":[0,4]}}",
                        Zeros(4)));
  return files;
}

}  // namespace attn::test

#endif  // ATTN_TESTS_HOSTILE_FILES_H_
