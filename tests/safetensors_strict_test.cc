// The safetensors reader refuses what the reference implementation refuses
// (duplicate names, holes, trailing bytes, non-string metadata, non-integer
// offsets, ...) and enforces its limits, each with a one-line message. Every
// file is built here, byte by byte.
#include <gtest/gtest.h>

#include <string>

#include "attn/attn.hpp"
#include "attn/safetensors.hpp"
#include "tests/hostile_files.h"
#include "tests/temp_dir.h"

namespace attn {
namespace {

using test::Entry;
using test::Floats;
using test::SafetensorsBytes;

class SafetensorsStrictTest : public ::testing::Test {
 protected:
  Result<SafetensorsFile> Open(const std::string& bytes) {
    return SafetensorsFile::Open(dir_.Write("t.safetensors", bytes));
  }
  // Expects `bytes` refused with a one-line message holding `fragment`.
  void ExpectRefused(const std::string& bytes, const std::string& fragment) {
    Result<SafetensorsFile> file = Open(bytes);
    ASSERT_FALSE(file.ok()) << "accepted; wanted an error with: " << fragment;
    EXPECT_EQ(file.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(file.status().message().find(fragment), std::string::npos)
        << file.status().message();
    EXPECT_EQ(file.status().message().find('\n'), std::string::npos);
  }
  test::TempDir dir_;
};

const std::string kT = Entry("x", "F32", "[2,2]", 0, 16);
const std::string kData = Floats(4, 1.0f);

TEST_F(SafetensorsStrictTest, AcceptsWellFormedFiles) {
  Result<SafetensorsFile> file = Open(SafetensorsBytes("{" + kT + "}", kData));
  ASSERT_TRUE(file.ok()) << file.status().message();
  ASSERT_EQ(file->tensors().size(), 1u);
  EXPECT_EQ(file->tensors()[0].shape, (std::vector<int64_t>{2, 2}));
  // Trailing spaces pad the header to 8 bytes, as writers do.
  EXPECT_TRUE(Open(SafetensorsBytes("{" + kT + "}   ", kData)).ok());
  // Scalars ([] is one element), empty tensors and an empty file.
  EXPECT_TRUE(Open(SafetensorsBytes("{" + Entry("s", "F32", "[]", 0, 4) + "," +
                                        Entry("e", "F32", "[0,3]", 4, 4) + "}",
                                    Floats(1, 2.0f)))
                  .ok());
  EXPECT_TRUE(Open(SafetensorsBytes("{}", "")).ok());
  Result<SafetensorsFile> meta = Open(
      SafetensorsBytes("{\"__metadata__\":{\"a\":\"b\"}," + kT + "}", kData));
  ASSERT_TRUE(meta.ok()) << meta.status().message();
  EXPECT_EQ(meta->metadata().at("a"), "b");
  EXPECT_TRUE(Open(test::TinyWeights()).ok());
  EXPECT_TRUE(Open(test::TinyInput()).ok());
}

TEST_F(SafetensorsStrictTest, RefusesDuplicateNames) {
  ExpectRefused(SafetensorsBytes("{" + kT + "," + kT + "}", kData), "twice");
  ExpectRefused(SafetensorsBytes(
                    "{" + kT + "," + Entry("x", "F32", "[2,2]", 16, 32) + "}",
                    kData + kData),
                "'x' twice");
  ExpectRefused(
      SafetensorsBytes(
          "{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"}," + kT + "}", kData),
      "'k' twice");
}

TEST_F(SafetensorsStrictTest, RefusesHolesOverlapsAndTrailingBytes) {
  ExpectRefused(SafetensorsBytes("{" + Entry("x", "F32", "[2,2]", 4, 20) + "}",
                                 Floats(5, 0.0f)),
                "hole at bytes [0, 4)");
  ExpectRefused(
      SafetensorsBytes("{" + kT + "," + Entry("y", "F32", "[1]", 20, 24) + "}",
                       Floats(6, 0.0f)),
      "hole at bytes [16, 20)");
  ExpectRefused(SafetensorsBytes("{" + kT + "}", kData + "xyz"),
                "3 trailing bytes");
  ExpectRefused(
      SafetensorsBytes("{" + kT + "," + Entry("y", "F32", "[1]", 12, 16) + "}",
                       kData),
      "overlap");
  ExpectRefused(
      SafetensorsBytes("{" + Entry("x", "F32", "[2,2]", 8, 24) + "}", kData),
      "outside the data section");
}

TEST_F(SafetensorsStrictTest, RefusesOffsetsThatAreNotIntegers) {
  for (const char* offsets :
       {"[0.0,16.0]", "[0,16.0]", "[8e0,16]", "[-1,16]", "[\"0\",\"16\"]",
        "[0,16,16]", "[0]", "[]", "16", "null", "[0,18446744073709551616]",
        "[true,16]"}) {
    SCOPED_TRACE(offsets);
    ExpectRefused(
        SafetensorsBytes(std::string("{\"x\":{\"dtype\":\"F32\",\"shape\":[2,"
                                     "2],\"data_offsets\":") +
                             offsets + "}}",
                         kData),
        "data_offsets");
  }
}

TEST_F(SafetensorsStrictTest, RefusesNonStringMetadata) {
  for (const char* value : {"2", "2.5", "null", "true", "[\"a\"]"}) {
    SCOPED_TRACE(value);
    ExpectRefused(SafetensorsBytes(std::string("{\"__metadata__\":{\"k\":") +
                                       value + "}," + kT + "}",
                                   kData),
                  "__metadata__ key 'k'");
  }
  ExpectRefused(
      SafetensorsBytes("{\"__metadata__\":{\"k\":{\"a\":\"b\"}}," + kT + "}",
                       kData),
      "nests objects");
  ExpectRefused(SafetensorsBytes("{\"__metadata__\":[]," + kT + "}", kData),
                "not a JSON object");
}

TEST_F(SafetensorsStrictTest, RefusesBadDtypesAndShapes) {
  ExpectRefused(
      SafetensorsBytes("{" + Entry("x", "F31", "[2,2]", 0, 16) + "}", kData),
      "unknown dtype");
  ExpectRefused(
      SafetensorsBytes("{" + Entry("x", "F16", "[2,2]", 0, 16) + "}", kData),
      "needs 8");
  for (const char* shape : {"[2,-2]", "[2,2.0]", "[\"2\",2]", "4", "[null]"}) {
    SCOPED_TRACE(shape);
    ExpectRefused(
        SafetensorsBytes("{" + Entry("x", "F32", shape, 0, 16) + "}", kData),
        "shape");
  }
  ExpectRefused(
      SafetensorsBytes(
          "{" + Entry("x", "F32", "[4294967296,4294967296,4294967296]", 0, 16) +
              "}",
          kData),
      "overflows");
}

TEST_F(SafetensorsStrictTest, RefusesMalformedHeaders) {
  ExpectRefused("", "not a safetensors file");
  ExpectRefused(test::LyingLength(uint64_t{200} << 20, "{}", ""),
                "over the limit");
  ExpectRefused(test::LyingLength(4096, "{}", ""), "past the end");
  ExpectRefused(SafetensorsBytes(" {}", ""), "does not start with '{'");
  ExpectRefused(SafetensorsBytes("[]", ""), "does not start with '{'");
  ExpectRefused(SafetensorsBytes("{\"x\":", ""), "not valid JSON");
  ExpectRefused(SafetensorsBytes("{\"\xff\":1}", ""), "not valid JSON");
  ExpectRefused(
      SafetensorsBytes("{\"x\":{\"dtype\":\"F32\",\"shape\":[2,2]}}", kData),
      "exactly dtype, shape, data_offsets");
}

TEST_F(SafetensorsStrictTest, EnforcesLimitsWhileParsing) {
  ExpectRefused(
      SafetensorsBytes(
          "{" + Entry("x", "F32", "[1,1,1,1,1,1,1,1,4]", 0, 16) + "}", kData),
      "rank limit");
  ExpectRefused(SafetensorsBytes("{\"x\":" + std::string(50000, '[') +
                                     std::string(50000, ']') + "}",
                                 ""),
                "nests arrays");
  std::string many = "{";
  for (int i = 0; i <= (1 << 16); ++i) {
    many += (i ? ",\"t" : "\"t") + std::to_string(i) +
            "\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}";
  }
  ExpectRefused(SafetensorsBytes(many + "}", ""), "65536 tensors");
}

// The most tensors a file may hold. nlohmann's callback parser, which an
// earlier reader used, is quadratic in the tensor count: this took minutes.
TEST_F(SafetensorsStrictTest, ParsesTheMostTensorsInLinearTime) {
  std::string header = "{\"__metadata__\":{\"k\":\"v\"}";
  for (int i = 0; i < (1 << 16); ++i) {
    header += ",\"t" + std::to_string(i) +
              "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" +
              std::to_string(i) + "," + std::to_string(i + 1) + "]}";
  }
  Result<SafetensorsFile> file =
      Open(SafetensorsBytes(header + "}", std::string(1 << 16, 'x')));
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->tensors().size(), size_t{1} << 16);
}

// Every hostile file is refused by the reader, and so by the model loader.
TEST_F(SafetensorsStrictTest, EveryHostileFileIsRefused) {
  for (const test::HostileFile& f : test::HostileFiles()) {
    SCOPED_TRACE(f.name);
    const std::string path = dir_.Write(f.name, f.bytes);
    Result<SafetensorsFile> file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok()) << "opened";
    EXPECT_FALSE(file.status().message().empty());
    EXPECT_EQ(file.status().message().find('\n'), std::string::npos);
    EXPECT_FALSE(MhaModel::Load(path).ok());
  }
}

}  // namespace
}  // namespace attn
