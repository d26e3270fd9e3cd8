// Result<T>: reading the value of a failed Result aborts with its status
// message (it used to hand back garbage: a failed Load printed threads=0).
#include <gtest/gtest.h>

#include <string>

#include "attn/attn.hpp"
#include "attn/safetensors.hpp"

namespace attn {
namespace {

class StatusDeathTest : public ::testing::Test {
 protected:
  // The library may have started threads (OpenMP); fork, then re-run.
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(StatusDeathTest, ValueOfAFailedResultAbortsWithItsMessage) {
  Result<int> failed = InvalidArgument("tensor 'x' has shape [2], want [3]");
  EXPECT_DEATH((void)failed.value(),
               "read the value of a failed Result: tensor 'x' has shape "
               "\\[2\\], want \\[3\\]");
  EXPECT_DEATH((void)*failed, "tensor 'x' has shape");
  Result<std::string> text = IoError("cannot open 'w.safetensors'");
  EXPECT_DEATH((void)text->size(), "cannot open 'w.safetensors'");
  EXPECT_DEATH((void)std::move(text).value(), "cannot open 'w.safetensors'");
  const Result<std::string>& view = text;
  EXPECT_DEATH((void)view->size(), "cannot open 'w.safetensors'");
}

TEST_F(StatusDeathTest, FailedLoadAbortsInsteadOfReportingGarbage) {
  auto model = MhaModel::Load("/nonexistent/w.safetensors");
  ASSERT_FALSE(model.ok());
  EXPECT_DEATH((void)(*model)->num_threads(),
               "cannot open '/nonexistent/w.safetensors'");
}

TEST(StatusTest, ResultOfAnOkStatusIsAnError) {
  Result<int> empty = Status();
  EXPECT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInternal);
}

TEST(StatusTest, SucceededResultsGiveTheirValue) {
  Result<std::string> text = std::string("abc");
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "abc");
  EXPECT_EQ(text->size(), 3u);
  EXPECT_EQ(std::move(text).value(), "abc");
}

Result<int> Parse(const std::string& text) {
  if (text.empty()) return InvalidArgument("empty");
  return static_cast<int>(text.size());
}

Result<int> Twice(const std::string& text) {
  ATTN_ASSIGN_OR_RETURN(const int n, Parse(text));
  int doubled = 0;
  ATTN_ASSIGN_OR_RETURN(doubled, Parse(text + text));  // an existing variable
  return n + doubled;
}

TEST(StatusTest, AssignOrReturnPassesValuesOnAndErrorsOut) {
  Result<int> good = Twice("ab");
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 2 + 4);
  Result<int> bad = Twice("");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "empty");
}

}  // namespace
}  // namespace attn
