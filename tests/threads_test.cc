// Thread control (engine/threads.h; engine/README.md, "Threads"): the
// precedence of the API option, ATTN_NUM_THREADS and the affinity mask, an
// explicit option needing no environment, and one thread inside a host's
// OpenMP parallel region. White-box: links attn_testing.
#include "engine/runtime/threads.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sched.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "attn/attn.h"
#include "attn/attn.hpp"
#include "attn/decode.hpp"
#include "attn/graph.hpp"
#include "tests/temp_dir.h"

namespace attn {
namespace {

std::string Book() {
  return std::string(ATTN_SOURCE_DIR) + "/tests/golden/mha_book.safetensors";
}

// Clears every source of a default team size above the affinity mask.
void ClearThreadEnvironment() {
  unsetenv("ATTN_NUM_THREADS");
  unsetenv("ATTN_CONFIG");  // the tuned file
}

// The resolved team size of a model loaded with `num_threads`; -1 on error.
int LoadedThreads(int num_threads) {
  attn_model_options options = ATTN_MODEL_OPTIONS_INIT;
  options.num_threads = num_threads;
  attn_model* model = nullptr;
  if (attn_model_load(Book().c_str(), NULL, &options, &model) != ATTN_OK) {
    return -1;
  }
  attn_model_info info = ATTN_MODEL_INFO_INIT;
  const int threads =
      attn_model_config(model, &info) == ATTN_OK ? info.num_threads : -1;
  attn_model_destroy(model);
  return threads;
}

TEST(Threads, OptionBeatsEnvironmentBeatsAffinity) {
  ClearThreadEnvironment();
  EXPECT_EQ(attn_default_num_threads(), AffinityCores());
  EXPECT_EQ(LoadedThreads(0), AffinityCores());
  setenv("ATTN_NUM_THREADS", "3", 1);
  EXPECT_EQ(attn_default_num_threads(), 3);
  EXPECT_EQ(LoadedThreads(0), 3);
  EXPECT_EQ(LoadedThreads(5), 5);  // the API option (and so --threads) wins
  Result<int> resolved = ResolveNumThreads(0);
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(*resolved, 3);
  ClearThreadEnvironment();
}

TEST(Threads, MalformedEnvironmentIsAnError) {
  ClearThreadEnvironment();
  for (const char* bad : {"two", "0", "-1", "3x", "99999", " 3", "+3"}) {
    setenv("ATTN_NUM_THREADS", bad, 1);
    EXPECT_EQ(attn_default_num_threads(), -1) << bad;
    EXPECT_EQ(LoadedThreads(0), -1) << bad;
    EXPECT_NE(std::strstr(attn_last_error_message(), "ATTN_NUM_THREADS"),
              nullptr)
        << attn_last_error_message();
    EXPECT_EQ(LoadedThreads(2), 2) << "the option needs no environment";
  }
  ClearThreadEnvironment();
  EXPECT_EQ(LoadedThreads(-2), -1);
  EXPECT_NE(std::strstr(attn_last_error_message(), "num_threads is -2"),
            nullptr);
}

// An explicit num_threads is used as given, whatever the environment holds:
// the MHA loader, the decoder over its model and the graph loader. Without
// it, each fails naming the variable.
TEST(Threads, ExplicitCountNeedsNoEnvironment) {
  const test::TempDir dir;
  const std::string bad_config =
      dir.Write("bad.json", R"({"num_threads": 2, "num_threads": 3})");
  const std::string graph_json =
      std::string(ATTN_SOURCE_DIR) + "/tools/graphs/transformer_block.json";
  const std::string graph_weights =
      std::string(ATTN_SOURCE_DIR) + "/tests/golden/graph/block.safetensors";
  for (const auto& [name, value] :
       {std::pair<const char*, std::string>{"ATTN_NUM_THREADS", "abc"},
        {"ATTN_CONFIG", bad_config}}) {
    ClearThreadEnvironment();
    setenv(name, value.c_str(), 1);
    MhaOptions mha_options;
    mha_options.num_threads = 2;
    auto model = MhaModel::Load(Book(), mha_options);
    ASSERT_TRUE(model.ok()) << name << ": " << model.status().message();
    EXPECT_EQ((*model)->num_threads(), 2);
    DecoderOptions decoder_options;
    decoder_options.max_length = 4;
    auto decoder = MhaDecoder::Create(*model, decoder_options);
    EXPECT_TRUE(decoder.ok()) << name << ": " << decoder.status().message();
    GraphOptions graph_options;
    graph_options.num_threads = 3;
    auto graph = GraphModel::Load(graph_json, graph_weights, graph_options);
    ASSERT_TRUE(graph.ok()) << name << ": " << graph.status().message();
    EXPECT_EQ((*graph)->num_threads(), 3);

    auto refused_model = MhaModel::Load(Book());
    ASSERT_FALSE(refused_model.ok());
    EXPECT_EQ(refused_model.status().message().rfind(name, 0), 0u)
        << refused_model.status().message();
    auto refused_graph = GraphModel::Load(graph_json, graph_weights);
    ASSERT_FALSE(refused_graph.ok());
    EXPECT_EQ(refused_graph.status().message().rfind(name, 0), 0u)
        << refused_graph.status().message();
  }
  ClearThreadEnvironment();
}

// The default follows the affinity mask of the thread that loads the model
// (taskset, cgroup cpusets), not the machine's core count.
TEST(Threads, DefaultFollowsTheAffinityMask) {
  ClearThreadEnvironment();
  cpu_set_t all;
  ASSERT_EQ(sched_getaffinity(0, sizeof(all), &all), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &all)) cpus.push_back(c);
  }
  ASSERT_FALSE(cpus.empty());
  // sched_setaffinity(0, ...) binds only the calling thread: do it on a
  // thread of our own so the rest of the process keeps its mask.
  for (size_t want : {size_t{1}, size_t{2}}) {
    if (want > cpus.size()) continue;
    int affinity = 0, api = 0, loaded = 0;
    std::thread thread([&] {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (size_t i = 0; i < want; ++i) CPU_SET(cpus[i], &set);
      if (sched_setaffinity(0, sizeof(set), &set) != 0) return;
      affinity = AffinityCores();
      api = attn_default_num_threads();
      loaded = LoadedThreads(0);
    });
    thread.join();
    EXPECT_EQ(affinity, static_cast<int>(want));
    EXPECT_EQ(api, static_cast<int>(want));
    EXPECT_EQ(loaded, static_cast<int>(want));
  }
}

TEST(Threads, ScopeSetsAndRestoresTheTeam) {
  omp_set_num_threads(5);
  {
    const ThreadScope scope(2);
    EXPECT_EQ(scope.num_threads(), 2);
    EXPECT_EQ(omp_get_max_threads(), 2);
  }
  EXPECT_EQ(omp_get_max_threads(), 5);
}

// Inside the host's parallel region a run uses one thread (no nested teams),
// and every host thread's run still gives bitwise the serial output.
TEST(Threads, InsideHostParallelRegionRunsSingleThreaded) {
  ClearThreadEnvironment();
  const std::string path =
      std::string(ATTN_SOURCE_DIR) + "/tests/golden/mha_moderate.safetensors";
  attn_model* model = nullptr;
  ASSERT_EQ(attn_model_load(path.c_str(), NULL, nullptr, &model), ATTN_OK)
      << attn_last_error_message();
  int64_t shape[ATTN_MAX_RANK];
  int rank = 0;
  ASSERT_EQ(
      attn_tensor_read_f32(path.c_str(), "input", nullptr, 0, shape, &rank),
      ATTN_OK);
  const size_t in = static_cast<size_t>(shape[0] * shape[1] * shape[2]);
  std::vector<float> x(in);
  ASSERT_EQ(attn_tensor_read_f32(path.c_str(), "input", x.data(), in, nullptr,
                                 nullptr),
            ATTN_OK);
  int64_t d_out = 0;
  ASSERT_EQ(attn_model_dims(model, nullptr, &d_out), ATTN_OK);
  const size_t out = static_cast<size_t>(shape[0] * shape[1] * d_out);
  std::vector<float> serial(out);
  attn_session* session = nullptr;
  ASSERT_EQ(attn_session_create(model, &session), ATTN_OK);
  ASSERT_EQ(
      attn_session_run(session, x.data(), shape[0], shape[1], serial.data()),
      ATTN_OK);
  attn_session_destroy(session);

  constexpr int kHostThreads = 3;
  std::vector<std::vector<float>> outputs(kHostThreads,
                                          std::vector<float>(out));
  int scope_teams[kHostThreads] = {};
  int ok[kHostThreads] = {};
#pragma omp parallel num_threads(kHostThreads)
  {
    const int t = omp_get_thread_num();
    scope_teams[t] = ThreadScope(4).num_threads();
    attn_session* s = nullptr;
    ok[t] = attn_session_create(model, &s) == ATTN_OK &&
            attn_session_run(s, x.data(), shape[0], shape[1],
                             outputs[t].data()) == ATTN_OK;
    attn_session_destroy(s);
  }
  attn_model_destroy(model);
  for (int t = 0; t < kHostThreads; ++t) {
    EXPECT_EQ(scope_teams[t], 1) << "host thread " << t;
    EXPECT_TRUE(ok[t]) << "host thread " << t;
    EXPECT_EQ(
        std::memcmp(outputs[t].data(), serial.data(), out * sizeof(float)), 0)
        << "host thread " << t;
  }
}

}  // namespace
}  // namespace attn
