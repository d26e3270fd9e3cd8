// ops::Linear and LinearPlan (engine/ops/linear.h): y = x W^T (+ b) (then
// GELU) against a double reference in each regime a plan picks (RowsLinear
// on the panels up to 8 rows, a matmul on the packed copy, on the plain
// weights or on a copy of the caller's), in f32 and bf16; which regime each
// row count gets; the head-plane form of attention's fused projection; and
// the same bits at 1, 2, 3 and 7 threads.
#include "engine/ops/linear.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/runtime/buffer.h"
#include "engine/runtime/threads.h"
#include "tests/test_util.h"

namespace attn {
namespace {

using kernels::DataType;
using ops::Linear;
using ops::LinearFallback;
using ops::LinearPlan;

constexpr int64_t kIn = 72, kOut = 100;

struct Case {
  std::vector<float> w, b;  // as held: bf16 weights already rounded
  Linear linear;
};

Case MakeCase(DataType type, bool bias, bool panels, int threads,
              bool drop_plain = false) {
  std::mt19937 rng(11);
  Case c;
  c.w = test::RandomVector(rng, kIn * kOut, -0.2f, 0.2f);
  if (bias) c.b = test::RandomVector(rng, kOut, -1.0f, 1.0f);
  StreamedVector<float> values(c.w.begin(), c.w.end());
  if (type == DataType::kBF16) {
    StreamedVector<float> rounded = values;
    (void)ops::RoundToBf16(rounded).value();
    c.w.assign(rounded.begin(), rounded.end());
  }
  ops::Weight b;
  if (bias) {
    b = ops::Weight::Hold(StreamedVector<float>(c.b.begin(), c.b.end()), kOut,
                          1, DataType::kF32)
            .value();
  }
  ops::LinearLayouts layouts;
  layouts.packed = {{type, 0}};
  if (panels) layouts.panels = type;
  layouts.drop_plain = drop_plain;
  c.linear = Linear::Create(
                 ops::Weight::Hold(std::move(values), kOut, kIn, type).value(),
                 std::move(b), layouts, threads)
                 .value();
  return c;
}

// x W^T + b (then GELU) in double.
std::vector<double> Reference(const Case& c, const std::vector<float>& x,
                              int64_t rows, bool gelu) {
  std::vector<double> y(size_t(rows * kOut));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < kOut; ++j) {
      double acc = c.b.empty() ? 0.0 : c.b[j];
      for (int64_t i = 0; i < kIn; ++i) {
        acc += double(x[r * kIn + i]) * c.w[j * kIn + i];
      }
      y[r * kOut + j] = gelu ? test::GeluReference(acc) : acc;
    }
  }
  return y;
}

// One Run of `plan` with buffers of its sizes (and, kOwnPacked, the copy).
std::vector<float> RunPlan(const LinearPlan& plan, const Linear& linear,
                           const std::vector<float>& x, int threads) {
  AlignedBuffer low =
      AlignedBuffer::Allocate(plan.lowered_input_bytes()).value();
  AlignedBuffer scratch = AlignedBuffer::Allocate(plan.scratch_bytes()).value();
  AlignedBuffer own = AlignedBuffer::Allocate(plan.own_packed_bytes()).value();
  if (own.size()) {
    EXPECT_TRUE(plan.PackOwn(linear, own.data()).ok());
  }
  std::vector<float> y(size_t(plan.rows() * kOut));
  const ThreadScope scope(threads);
  plan.Run(linear, x.data(), y.data(), {low.data(), scratch.data(), own.data()},
           scope.num_threads());
  return y;
}

struct Param {
  DataType type;
  bool bias, gelu, panels;
  LinearFallback fallback;
};

// Every regime against the reference: a bf16 matmul rounds x to bf16 as
// it runs, the panels read x as it is.
void ExpectMatchesReference(const Param& p) {
  const Case c = MakeCase(p.type, p.bias, p.panels, 2);
  std::mt19937 rng(5);
  for (const int64_t rows : {1, 5, 8, 9, 64, 300}) {
    const std::vector<float> x = test::RandomVector(rng, rows * kIn, -1, 1);
    ops::LinearEpilogue epilogue;
    epilogue.gelu = p.gelu;
    const LinearPlan plan =
        LinearPlan::Create(c.linear, rows, epilogue, p.fallback, 2).value();
    EXPECT_EQ(plan.uses_panels(), p.panels && rows <= 8) << rows << " rows";
    StreamedVector<float> seen(x.begin(), x.end());
    if (p.type == DataType::kBF16 && !plan.uses_panels()) {
      (void)ops::RoundToBf16(seen).value();
    }
    test::ExpectAllClose(Reference(c, {seen.begin(), seen.end()}, rows, p.gelu),
                         RunPlan(plan, c.linear, x, 2).data(), 2e-5,
                         std::to_string(rows) + " rows");
  }
}

class LinearTest : public ::testing::TestWithParam<Param> {};

TEST_P(LinearTest, MatchesTheReferenceAtEveryRowCount) {
  ExpectMatchesReference(GetParam());
}

TEST_P(LinearTest, SameBitsAtEveryTeamSize) {
  const Param p = GetParam();
  const Case c = MakeCase(p.type, p.bias, p.panels, 3);
  std::mt19937 rng(9);
  for (const int64_t rows : {3, 40, 300}) {
    const std::vector<float> x = test::RandomVector(rng, rows * kIn, -1, 1);
    ops::LinearEpilogue epilogue;
    epilogue.gelu = p.gelu;
    const LinearPlan plan =
        LinearPlan::Create(c.linear, rows, epilogue, p.fallback, 7).value();
    const std::vector<float> one = RunPlan(plan, c.linear, x, 1);
    for (const int threads : {2, 3, 7}) {
      EXPECT_EQ(RunPlan(plan, c.linear, x, threads), one)
          << rows << " rows, " << threads << " threads";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Regimes, LinearTest,
    ::testing::Values(
        Param{DataType::kF32, true, false, true, LinearFallback::kPlain},
        Param{DataType::kF32, false, true, true, LinearFallback::kPlain},
        Param{DataType::kF32, true, false, false, LinearFallback::kOwnPacked},
        Param{DataType::kF32, true, true, false, LinearFallback::kPlain}));

// bf16 runs only where oneDNN has native bf16 matmuls.
class LinearBf16Test : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (!kernels::HasNativeBF16()) GTEST_SKIP() << "no native bf16";
  }
};
TEST_P(LinearBf16Test, MatchesTheReferenceAtEveryRowCount) {
  ExpectMatchesReference(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Regimes, LinearBf16Test,
                         ::testing::Values(Param{DataType::kBF16, true, true,
                                                 true, LinearFallback::kPlain},
                                           Param{DataType::kBF16, true, false,
                                                 false,
                                                 LinearFallback::kOwnPacked}));

// From MatMulWideRows() rows on, a run reads the packed copy (its tiles
// span every column), so a kOwnPacked plan needs no copy of its own.
TEST(LinearPlanTest, LongRunsReadThePackedCopy) {
  const Case c = MakeCase(DataType::kF32, true, false, 2);
  const LinearPlan plan =
      LinearPlan::Create(c.linear, kernels::MatMulWideRows(), {},
                         LinearFallback::kOwnPacked, 2)
          .value();
  EXPECT_EQ(plan.own_packed_bytes(), 0u);
  EXPECT_GT(c.linear.bytes(), c.linear.weight().bytes());
}

// A linear that may drop its plain weights (a language model's) drops them
// where every run of rows reads its packed copy: oneDNN's blocks of columns
// on AVX-512, never AVX2's gemm (this test's twin). Either way every row
// count and fallback gives the bits of the linear that kept them, and a
// plan that would need them (head planes, of which it has no copy) refuses.
TEST(LinearPlanTest, DroppedPlainWeightsServeEveryRowCount) {
  for (const DataType type : {DataType::kF32, DataType::kBF16}) {
    if (type == DataType::kBF16 && !kernels::HasNativeBF16()) continue;
    SCOPED_TRACE(type == DataType::kF32 ? "f32" : "bf16");
    const Case kept = MakeCase(type, true, true, 2);
    const Case lean = MakeCase(type, true, true, 2, /*drop_plain=*/true);
    const bool dropped = Linear::PackedServesEveryRun(kOut, kIn, type);
    EXPECT_EQ(lean.linear.weight().empty(), dropped);
    EXPECT_EQ(lean.linear.bytes() +
                  (dropped ? kept.linear.weight().bytes() : uint64_t{0}),
              kept.linear.bytes());
    std::mt19937 rng(9);
    for (const int64_t rows : {1, 5, 8, 9, 31, 64, 127, 128, 129, 300, 1000}) {
      const std::vector<float> x = test::RandomVector(rng, rows * kIn, -1, 1);
      for (const LinearFallback fallback :
           {LinearFallback::kPlain, LinearFallback::kOwnPacked}) {
        const LinearPlan a =
            LinearPlan::Create(kept.linear, rows, {}, fallback, 2).value();
        const LinearPlan b =
            LinearPlan::Create(lean.linear, rows, {}, fallback, 2).value();
        EXPECT_EQ(RunPlan(b, lean.linear, x, 2), RunPlan(a, kept.linear, x, 2))
            << rows << " rows";
      }
    }
    if (!dropped) continue;
    ops::LinearEpilogue planes;
    planes.head_dim = 20;
    const Result<LinearPlan> refused = LinearPlan::Create(
        lean.linear, 16, planes, LinearFallback::kOwnPacked, 1);
    EXPECT_EQ(refused.status().code(), StatusCode::kInternal);
    EXPECT_NE(refused.status().message().find("without its plain weights"),
              std::string::npos)
        << refused.status().message();
  }
}

// A bf16 linear whose packed copy is laid out as RowsLinear reads it
// (kernels::MatMul::PacksAsRowsLinear) steps on that copy, holding no
// panels of its own, with the bits of panels packed apart.
TEST(LinearPlanTest, Bf16StepsReadThePackedCopyWhereItIsTheirLayout) {
  if (!kernels::HasNativeBF16()) GTEST_SKIP() << "no native bf16";
  const Case shared = MakeCase(DataType::kBF16, true, true, 2);
  const uint64_t step_bytes = StepWeights::BytesOf(kOut, kIn, /*bf16=*/true);
  const uint64_t packed_bytes =
      Linear::PackedBytes(kOut, kIn, true, {DataType::kBF16, 0}).value();
  const uint64_t held = shared.linear.weight().bytes() + kOut * sizeof(float);
  if (shared.linear.bytes() != held + packed_bytes) {
    EXPECT_EQ(shared.linear.bytes(), held + packed_bytes + step_bytes);
    GTEST_SKIP() << "oneDNN lays bf16 weights out otherwise on this CPU";
  }
  ops::LinearLayouts own;
  own.panels = DataType::kBF16;
  const Linear apart =
      Linear::Create(ops::Weight::Hold(StreamedVector<float>(shared.w.begin(),
                                                             shared.w.end()),
                                       kOut, kIn, DataType::kBF16)
                         .value(),
                     ops::Weight::Hold(StreamedVector<float>(shared.b.begin(),
                                                             shared.b.end()),
                                       kOut, 1, DataType::kF32)
                         .value(),
                     own, 2)
          .value();
  EXPECT_EQ(apart.bytes(), held + step_bytes);
  std::mt19937 rng(17);
  for (const size_t rows : {size_t{1}, size_t{4}, size_t{8}, size_t{13}}) {
    const std::vector<float> x = test::RandomVector(rng, rows * kIn, -1, 1);
    std::vector<float> a(rows * kOut), b(rows * kOut);
    shared.linear.RunFewRows(x.data(), rows, a.data(), nullptr, 2);
    apart.RunFewRows(x.data(), rows, b.data(), nullptr, 2);
    EXPECT_EQ(a, b) << rows << " rows";
  }
}

// A few rows with an epilogue RowsLinear does not apply (oneDNN's residual
// add, or a named matmul type) run a matmul, which adds the residual.
TEST(LinearPlanTest, PanelsOnlyForWhatRowsLinearApplies) {
  const Case c = MakeCase(DataType::kF32, true, true, 2);
  std::mt19937 rng(3);
  const int64_t rows = 4;
  const std::vector<float> x = test::RandomVector(rng, rows * kIn, -1, 1);
  const std::vector<float> r = test::RandomVector(rng, rows * kOut, -1, 1);
  ops::LinearEpilogue epilogue;
  epilogue.post.add_residual = true;
  const LinearPlan plan = LinearPlan::Create(c.linear, rows, epilogue,
                                             LinearFallback::kOwnPacked, 2)
                              .value();
  EXPECT_FALSE(plan.uses_panels());
  // Nor does a plan that names its matmul's type (the panels have theirs).
  ops::LinearEpilogue typed;
  typed.type = DataType::kF32;
  EXPECT_FALSE(
      LinearPlan::Create(c.linear, rows, typed, LinearFallback::kOwnPacked, 2)
          .value()
          .uses_panels());
  EXPECT_TRUE(
      LinearPlan::Create(c.linear, rows, {}, LinearFallback::kOwnPacked, 2)
          .value()
          .uses_panels());
  AlignedBuffer scratch = AlignedBuffer::Allocate(plan.scratch_bytes()).value();
  AlignedBuffer own = AlignedBuffer::Allocate(plan.own_packed_bytes()).value();
  if (own.size()) {
    ASSERT_TRUE(plan.PackOwn(c.linear, own.data()).ok());
  }
  std::vector<float> y(size_t(rows * kOut));
  plan.Run(c.linear, x.data(), y.data(), {nullptr, scratch.data(), own.data()},
           1, r.data());
  std::vector<double> want = Reference(c, x, rows, false);
  for (size_t i = 0; i < want.size(); ++i) want[i] += r[i];
  test::ExpectAllClose(want, y.data(), 2e-5, "residual");
}

// The plain fallback reads the weights as the matmul's type: a linear
// packed in another type refuses it.
TEST(LinearPlanTest, PlainFallbackNeedsWeightsInTheMatMulsType) {
  if (!kernels::HasNativeBF16()) GTEST_SKIP() << "no native bf16";
  ops::LinearLayouts layouts;
  layouts.packed = {{DataType::kBF16, 0}};
  const Linear linear =
      Linear::Create(ops::Weight::Hold(StreamedVector<float>(kIn * kOut, 0.5f),
                                       kOut, kIn, DataType::kF32)
                         .value(),
                     {}, layouts, 1)
          .value();
  const Result<LinearPlan> plain =
      LinearPlan::Create(linear, 64, {}, LinearFallback::kPlain, 1);
  EXPECT_EQ(plain.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      LinearPlan::Create(linear, 64, {}, LinearFallback::kOwnPacked, 1).ok());
}

// The GELU pass after a matmul reads and writes fp32: a bf16 y refuses it.
TEST(LinearPlanTest, GeluPassWantsAnFp32Output) {
  const Case c = MakeCase(DataType::kF32, true, false, 1);
  ops::LinearEpilogue epilogue;
  epilogue.gelu = true;
  epilogue.dst = DataType::kBF16;
  EXPECT_EQ(
      LinearPlan::Create(c.linear, 16, epilogue, LinearFallback::kOwnPacked, 1)
          .status()
          .code(),
      StatusCode::kInvalidArgument);
}

// The head-plane form: y [G, rows, D] with y[g, r, j] = x[r] . W[g D + j]
// + b[g D + j], by the matmul at every row count (never the panels), on the
// linear's packed planes where its tiles read them (a run of
// kMatMulPackedRows rows) and on a copy of the caller's otherwise, with the
// same bits both ways; another copy of the linear (rows) stays unread.
TEST(LinearPlanTest, HeadPlanesMatchTheReferenceOnEitherCopy) {
  constexpr int64_t D = 20, G = kOut / D;
  std::mt19937 rng(7);
  Case c;
  c.w = test::RandomVector(rng, kIn * kOut, -0.2f, 0.2f);
  c.b = test::RandomVector(rng, kOut, -1.0f, 1.0f);
  ops::LinearLayouts layouts;
  layouts.packed = {{DataType::kF32, 0}, {DataType::kF32, D}};
  layouts.panels = DataType::kF32;
  c.linear =
      Linear::Create(ops::Weight::Borrow(c.w.data(), kOut, kIn),
                     ops::Weight::Borrow(c.b.data(), kOut, 1), layouts, 2)
          .value();
  ops::LinearEpilogue planes;
  planes.head_dim = D;
  planes.panels = false;
  std::vector<float> long_run;
  for (const int64_t rows : {int64_t{3}, kernels::kMatMulPackedRows}) {
    const std::vector<float> x = test::RandomVector(rng, rows * kIn, -1, 1);
    const LinearPlan plan = LinearPlan::Create(c.linear, rows, planes,
                                               LinearFallback::kOwnPacked, 2)
                                .value();
    EXPECT_FALSE(plan.uses_panels());
    const std::vector<float> y = RunPlan(plan, c.linear, x, 2);
    // The reference's [rows, G D] rows, regrouped head by head.
    const std::vector<double> flat = Reference(c, x, rows, false);
    std::vector<double> want(flat.size());
    for (int64_t g = 0; g < G; ++g) {
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < D; ++j) {
          want[(g * rows + r) * D + j] = flat[r * kOut + g * D + j];
        }
      }
    }
    test::ExpectAllClose(want, y.data(), 2e-5, std::to_string(rows) + " rows");
    if (rows != kernels::kMatMulPackedRows) continue;
    EXPECT_EQ(plan.own_packed_bytes(), 0u);
    // The same run on a copy of its own gives the same bits.
    Case bare;
    bare.linear =
        Linear::Create(ops::Weight::Borrow(c.w.data(), kOut, kIn),
                       ops::Weight::Borrow(c.b.data(), kOut, 1), {}, 2)
            .value();
    const LinearPlan own = LinearPlan::Create(bare.linear, rows, planes,
                                              LinearFallback::kOwnPacked, 2)
                               .value();
    EXPECT_GT(own.own_packed_bytes(), 0u);
    EXPECT_EQ(RunPlan(own, bare.linear, x, 2), y);
  }
}

}  // namespace
}  // namespace attn
