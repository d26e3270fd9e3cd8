// Liveness-based buffer planning for the graph runner: every intermediate
// tensor gets an offset in one arena, and two tensors share bytes only when
// their live ranges do not overlap.
#ifndef ATTN_ENGINE_RUNTIME_GRAPH_PLAN_H_
#define ATTN_ENGINE_RUNTIME_GRAPH_PLAN_H_

#include <cstddef>
#include <vector>

namespace attn::graph {

// A tensor live from the step that writes it to the last step that reads it,
// both inclusive: a step's output never shares bytes with its inputs.
struct BufferRequest {
  size_t bytes = 0;
  size_t first = 0, last = 0;
};

struct BufferPlan {
  std::vector<size_t> offsets;  // per request, 64-byte aligned
  size_t peak_bytes = 0;        // the arena size
};

// Greedy by size: the largest tensors are placed first, each at the lowest
// offset clear of every placed tensor live at the same time.
BufferPlan PlanBuffers(const std::vector<BufferRequest>& requests);

}  // namespace attn::graph

#endif  // ATTN_ENGINE_RUNTIME_GRAPH_PLAN_H_
