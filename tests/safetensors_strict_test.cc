// The safetensors reader refuses what the reference implementation refuses
// (duplicate names, holes, trailing bytes, non-string metadata, non-integer
// offsets, ...) and enforces its limits, each with a one-line message; it
// widens F16 and BF16 exactly and survives a file truncated under it; the
// writer creates files as a plain create would. Every file is built here,
// byte by byte.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "attn/attn.hpp"
#include "attn/safetensors.hpp"
#include "tests/hostile_files.h"
#include "tests/temp_dir.h"

// Counts every umask call this binary makes, then makes it: the library must
// make none, because setting the umask (even to read it) changes the mode of
// files other threads create meanwhile.
std::atomic<int> g_umask_calls{0};
extern "C" mode_t umask(mode_t mask) noexcept {
  ++g_umask_calls;
  return static_cast<mode_t>(syscall(SYS_umask, mask));
}

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

namespace attn {
namespace {

using test::Entry;
using test::SafetensorsBytes;

// Little-endian bytes of 16-bit values.
std::string Halves(const std::vector<uint16_t>& values) {
  std::string out;
  for (uint16_t v : values) {
    out += static_cast<char>(v & 0xFF);
    out += static_cast<char>(v >> 8);
  }
  return out;
}

uint32_t Bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// Bit patterns, so that -0, infinities and NaN payloads are compared too.
std::vector<uint32_t> Bits(const std::vector<float>& values) {
  std::vector<uint32_t> out;
  for (float f : values) out.push_back(Bits(f));
  return out;
}

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(SafetensorsWidenTest, F16AndBF16EdgeValuesWidenExactly) {
  // F16: smallest and largest subnormal, smallest normal, 1, 1/3 rounded,
  // max, -max, -0, +-inf, a quiet NaN, a negative NaN with a payload.
  const std::vector<uint16_t> f16 = {0x0001, 0x03FF, 0x0400, 0x3C00,
                                     0x3555, 0x7BFF, 0xFBFF, 0x8000,
                                     0x7C00, 0xFC00, 0x7E00, 0xFE01};
  const std::vector<float> f16_want = {
      0x1p-24f,  0x3FFp-24f, 0x1p-14f, 1.0f,  0x1.554p-2f, 65504.0f,
      -65504.0f, -0.0f,      kInf,     -kInf, 0.0f,        0.0f};
  // BF16: smallest and largest subnormal, smallest normal, 1, max, -max, -0,
  // +-inf, a NaN with a payload.
  const std::vector<uint16_t> bf16 = {0x0001, 0x007F, 0x0080, 0x3F80, 0x7F7F,
                                      0xFF7F, 0x8000, 0x7F80, 0xFF80, 0x7FC1};
  const std::vector<float> bf16_want = {
      0x1p-133f,    0x7Fp-133f, 0x1p-126f, 1.0f,  0x1.FEp127f,
      -0x1.FEp127f, -0.0f,      kInf,      -kInf, 0.0f};
  std::vector<uint32_t> f16_bits = Bits(f16_want);
  f16_bits[10] = 0x7FC00000u;  // NaNs keep sign and payload
  f16_bits[11] = 0xFFC02000u;
  std::vector<uint32_t> bf16_bits = Bits(bf16_want);
  bf16_bits[9] = 0x7FC10000u;

  test::TempDir dir;
  const std::string path =
      dir.Write("w.safetensors",
                SafetensorsBytes("{" + Entry("h", "F16", "[12]", 0, 24) + "," +
                                     Entry("b", "BF16", "[2,5]", 24, 44) + "}",
                                 Halves(f16) + Halves(bf16)));
  Result<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  Result<std::vector<float>> h = file->ReadF32("h");
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(Bits(*h), f16_bits);
  Result<std::vector<float>> b = file->ReadF32("b");
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(Bits(*b), bf16_bits);
  EXPECT_EQ(file->Find("b")->num_elements, 10u);
}

// The value of a 16-bit float with `mantissa_bits` of mantissa and exponent
// bias `bias`, computed in double from its definition.
double Reference16(uint16_t bits, int mantissa_bits, int bias) {
  const int exponent = (bits & 0x7FFF) >> mantissa_bits;
  const int mantissa = bits & ((1 << mantissa_bits) - 1);
  const int max_exponent = 0x7FFF >> mantissa_bits;
  double value;
  if (exponent == max_exponent) {
    value = mantissa ? std::numeric_limits<double>::quiet_NaN()
                     : std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    value = std::ldexp(mantissa, 1 - bias - mantissa_bits);
  } else {
    value = std::ldexp(mantissa + (1 << mantissa_bits),
                       exponent - bias - mantissa_bits);
  }
  return bits & 0x8000 ? -value : value;
}

// Every one of the 65,536 values of each format, in one tensor that spans
// several read chunks, against its definition.
TEST(SafetensorsWidenTest, EveryF16AndBF16ValueWidensToItsDefinition) {
  std::vector<uint16_t> all(1 << 16);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  test::TempDir dir;
  const std::string path =
      dir.Write("w.safetensors",
                SafetensorsBytes(
                    "{" + Entry("h", "F16", "[65536]", 0, 131072) + "," +
                        Entry("b", "BF16", "[256,256]", 131072, 262144) + "}",
                    Halves(all) + Halves(all)));
  Result<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  for (const auto& [name, mantissa_bits, bias] :
       {std::tuple{"h", 10, 15}, std::tuple{"b", 7, 127}}) {
    SCOPED_TRACE(name);
    Result<std::vector<float>> got = file->ReadF32(name);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_EQ(got->size(), all.size());
    for (size_t i = 0; i < all.size(); ++i) {
      const double want = Reference16(all[i], mantissa_bits, bias);
      const float g = (*got)[i];
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(g)) << "bits 0x" << std::hex << i;
      } else {
        ASSERT_EQ(static_cast<double>(g), want) << "bits 0x" << std::hex << i;
        ASSERT_EQ(std::signbit(g), std::signbit(want)) << std::hex << i;
      }
    }
  }
}

TEST(SafetensorsWidenTest, OtherDtypesAreRefusedByName) {
  test::TempDir dir;
  const std::string path =
      dir.Write("w.safetensors",
                SafetensorsBytes("{" + Entry("i", "I32", "[2]", 0, 8) + "}",
                                 std::string(8, '\0')));
  Result<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  Result<std::vector<float>> i = file->ReadF32("i");
  ASSERT_FALSE(i.ok());
  EXPECT_EQ(i.status().message(), "tensor 'i' in '" + path +
                                      "' has dtype I32, want F32, F16 or BF16");
}

// A tensor read into a caller's buffer checks the buffer first.
TEST(SafetensorsReadTest, TooSmallCapacityIsRefusedBeforeWriting) {
  test::TempDir dir;
  Result<SafetensorsFile> file =
      SafetensorsFile::Open(dir.Write("w.safetensors", test::TinyWeights()));
  ASSERT_TRUE(file.ok()) << file.status().message();
  std::vector<float> out(6, -7.0f);
  const Status st = file->ReadF32("W_query.weight", out.data(), 5);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tensor 'W_query.weight' [2, 3]"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("has 6 elements, but capacity is 5"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(out, std::vector<float>(6, -7.0f));
  ASSERT_TRUE(file->ReadF32("W_query.weight", out.data(), 6).ok());
  EXPECT_EQ(out, std::vector<float>(6, 0.25f));
}

// Weights that were mapped faulted with SIGBUS once the file shrank under
// them; read, they give an error naming the tensor and the file.
TEST(SafetensorsReadTest, FileTruncatedAfterOpenIsAnErrorNotASignal) {
  test::TempDir dir;
  const std::string path = dir.Write("w.safetensors", test::TinyWeights());
  Result<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  const TensorInfo* bias = file->Find("out_proj.bias");
  ASSERT_NE(bias, nullptr);
  ASSERT_EQ(truncate(path.c_str(), static_cast<off_t>(bias->offset + 4)), 0);
  // What is still there reads as before.
  Result<std::vector<float>> w = file->ReadF32("W_query.weight");
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(*w, std::vector<float>(6, 0.25f));
  Result<std::vector<float>> b = file->ReadF32("out_proj.bias");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kIoError);
  EXPECT_EQ(b.status().message(),
            "tensor 'out_proj.bias' in '" + path + "' ends at byte " +
                std::to_string(bias->offset + 8) + ", but the file is now " +
                std::to_string(bias->offset + 4) +
                " bytes (truncated since it was opened)");
  ASSERT_EQ(truncate(path.c_str(), 0), 0);
  EXPECT_EQ(file->ReadF32("W_query.weight").status().code(),
            StatusCode::kIoError);
}

// A written file gets 0666 less the umask, as a plain create gives, and the
// umask is never set (not even to read it).
TEST(SafetensorsWriteTest, NewFilesGetTheUmaskWhichIsNeverSet) {
  test::TempDir dir;
  const std::string path = dir.Path("out.safetensors");
  const float x[2] = {1, 2};
  for (mode_t mask : {mode_t{022}, mode_t{027}, mode_t{077}}) {
    SCOPED_TRACE(mask);
    const mode_t old = umask(mask);
    const int calls = g_umask_calls.load();
    const Status written = WriteSafetensors(path, {{"x", {2}, x}});
    EXPECT_EQ(g_umask_calls.load(), calls);
    umask(old);
    ASSERT_TRUE(written.ok()) << written.message();
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);
    EXPECT_EQ(dir.Files(), std::vector<std::string>{"out.safetensors"});
  }
}

// The temporary name is short whatever the output's: a 250-byte name (the
// most a directory entry takes is 255) is written, and nothing else is left.
TEST(SafetensorsWriteTest, LongNamesAreWritten) {
  test::TempDir dir;
  const std::string name = std::string(238, 'n') + ".safetensors";
  const float x[2] = {1, 2};
  const Status written = WriteSafetensors(dir.Path(name), {{"x", {2}, x}});
  ASSERT_TRUE(written.ok()) << written.message();
  EXPECT_EQ(dir.Files(), std::vector<std::string>{name});
  auto file = SafetensorsFile::Open(dir.Path(name));
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->ReadF32("x").value(), (std::vector<float>{1, 2}));
}

// Integer tensors (token ids): I64 as stored, I32 widened with its sign,
// anything else refused by name.
TEST(SafetensorsIntegerTest, I64AndI32AreReadAsInt64) {
  test::TempDir dir;
  const int64_t wide[3] = {-5, 50256, int64_t{1} << 40};
  const int32_t narrow[3] = {7, -1, 2147483647};
  std::string data(reinterpret_cast<const char*>(wide), sizeof wide);
  data.append(reinterpret_cast<const char*>(narrow), sizeof narrow);
  data.append(8, '\0');  // the F32 tensor "f"
  const std::string header = "{" + Entry("w", "I64", "[3]", 0, 24) + "," +
                             Entry("n", "I32", "[1,3]", 24, 36) + "," +
                             Entry("f", "F32", "[2]", 36, 44) + "}";
  const std::string path =
      dir.Write("i.safetensors", SafetensorsBytes(header, data));
  Result<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->ReadI64("w").value(),
            (std::vector<int64_t>{-5, 50256, int64_t{1} << 40}));
  EXPECT_EQ(file->ReadI64("n").value(),
            (std::vector<int64_t>{7, -1, 2147483647}));
  Result<std::vector<int64_t>> f = file->ReadI64("f");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(),
            "tensor 'f' in '" + path + "' has dtype F32, want I64 or I32");
  Result<std::vector<int64_t>> missing = file->ReadI64("ids");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "tensor 'ids' is missing from '" + path + "'");
}

TEST(SafetensorsIntegerTest, F32AndI64TensorsAreWrittenTogether) {
  test::TempDir dir;
  const std::string path = dir.Path("out.safetensors");
  const float logits[2] = {0.5f, -1.0f};
  const int64_t tokens[4] = {1, 2, 3, int64_t{1} << 50};
  const Status written =
      WriteSafetensors(path, {{"logits", {1, 2}, logits}},
                       {{"tokens", {2, 2}, tokens}}, {{"note", "ids"}});
  ASSERT_TRUE(written.ok()) << written.message();
  Result<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->Find("tokens")->dtype, "I64");
  EXPECT_EQ(file->Find("tokens")->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(file->ReadI64("tokens").value(),
            (std::vector<int64_t>{1, 2, 3, int64_t{1} << 50}));
  EXPECT_EQ(file->ReadF32("logits").value(), (std::vector<float>{0.5f, -1.0f}));
  EXPECT_EQ(file->metadata().at("note"), "ids");
  // One name space across both element types.
  EXPECT_EQ(
      WriteSafetensors(path, {{"t", {2}, logits}}, {{"t", {2}, tokens}}).code(),
      StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attn
