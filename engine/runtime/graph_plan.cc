// Buffer planning (see graph_plan.h). Greedy by size is the TFLite arena
// planner's strategy: near optimal on the chains and diamonds of a block.
#include "engine/runtime/graph_plan.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace attn::graph {

BufferPlan PlanBuffers(const std::vector<BufferRequest>& requests) {
  auto aligned = [](size_t bytes) { return (bytes + 63) / 64 * 64; };
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return requests[a].bytes > requests[b].bytes;
  });
  BufferPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<size_t> placed;
  for (size_t r : order) {
    const BufferRequest& req = requests[r];
    // Byte ranges taken by placed tensors live at the same time, by offset.
    std::vector<std::pair<size_t, size_t>> taken;
    for (size_t p : placed) {
      const BufferRequest& other = requests[p];
      if (other.first <= req.last && req.first <= other.last) {
        taken.emplace_back(plan.offsets[p],
                           plan.offsets[p] + aligned(other.bytes));
      }
    }
    std::sort(taken.begin(), taken.end());
    size_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (offset + aligned(req.bytes) <= begin) break;
      offset = std::max(offset, end);
    }
    plan.offsets[r] = offset;
    plan.peak_bytes = std::max(plan.peak_bytes, offset + aligned(req.bytes));
    placed.push_back(r);
  }
  return plan;
}

}  // namespace attn::graph
