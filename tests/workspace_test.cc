// Workspace: a plan's buffers are checked against the cap as one request,
// and either all are allocated or none.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "engine/runtime/buffer.h"

namespace attn {
namespace {

TEST(WorkspaceTest, AllocatesEveryListedBuffer) {
  AlignedBuffer a, b, empty;
  Workspace workspace;
  workspace.Add(&a, 100);
  workspace.Add(&b, 4096);
  workspace.Add(&empty, 0);
  EXPECT_EQ(workspace.bytes(), 4196u);
  ASSERT_TRUE(workspace.Allocate("a plan", 0, 1 << 20).ok());
  EXPECT_EQ(a.size(), 100u);
  EXPECT_EQ(b.size(), 4096u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  EXPECT_EQ(empty.size(), 0u);
}

// A buffer moved from is empty, so what an op hands over no longer counts
// as held by it (AttentionOp's takeover of packed weights).
TEST(WorkspaceTest, AMovedBufferLeavesAnEmptyOne) {
  Result<AlignedBuffer> a = AlignedBuffer::Allocate(256);
  ASSERT_TRUE(a.ok());
  const void* data = a->data();
  AlignedBuffer b(std::move(*a));
  EXPECT_EQ(b.size(), 256u);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(a->size(), 0u);
  EXPECT_EQ(a->data(), nullptr);
  AlignedBuffer c;
  c = std::move(b);
  EXPECT_EQ(c.size(), 256u);
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(b.data(), nullptr);
}

// Small buffers start on a cache line; from one huge page on, on a huge page,
// so that every whole huge page of the buffer can be one.
TEST(WorkspaceTest, LargeBuffersStartOnAHugePage) {
  for (const size_t bytes : {size_t{100}, kHugePageBytes - 1, kHugePageBytes,
                             (size_t{3} << 20) + 12345}) {
    Result<AlignedBuffer> buffer = AlignedBuffer::Allocate(bytes);
    ASSERT_TRUE(buffer.ok());
    const size_t align = bytes >= kHugePageBytes ? kHugePageBytes : 64;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % align, 0u)
        << bytes << " bytes";
    EXPECT_EQ(buffer->size(), bytes);
  }
}

// Every byte zero afterwards, below and above the size at which huge pages
// are asked for, and an odd size whose end is not page aligned.
TEST(WorkspaceTest, ZeroAllPagesZeroesEveryByte) {
  for (const size_t bytes : {size_t{100}, (size_t{3} << 20) + 12345}) {
    Result<AlignedBuffer> buffer = AlignedBuffer::Allocate(bytes);
    ASSERT_TRUE(buffer.ok());
    auto* p = static_cast<unsigned char*>(buffer->data());
    std::fill(p, p + bytes, 0xA5);
    buffer->ZeroAllPages();
    EXPECT_EQ(std::count(p, p + bytes, 0), static_cast<std::ptrdiff_t>(bytes))
        << bytes << " bytes";
  }
}

TEST(WorkspaceTest, OverTheCapAllocatesNothingAndNamesTheRequest) {
  AlignedBuffer a, b;
  Workspace workspace;
  workspace.Add(&a, 600);
  workspace.Add(&b, 600);
  // 1200 bytes fit 2000 alone, not beside 1000 already held.
  const Status status = workspace.Allocate("a run of batch 2", 1000, 2000);
  ASSERT_EQ(status.code(), StatusCode::kOutOfMemory);
  EXPECT_NE(status.message().find("a run of batch 2"), std::string::npos)
      << status.message();
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.size(), 0u);
}

TEST(WorkspaceTest, AFailedAllocationLeavesEveryBufferEmpty) {
  AlignedBuffer a, huge;
  Workspace workspace;
  workspace.Add(&a, 64);
  workspace.Add(&huge, SIZE_MAX - 8);  // refused by AlignedBuffer
  const Status status = workspace.Allocate("a huge plan", 0, UINT64_MAX);
  EXPECT_EQ(status.code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(a.data(), nullptr);
}

}  // namespace
}  // namespace attn
