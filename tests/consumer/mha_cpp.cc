// Runs a chapter-3 MultiHeadAttention from a safetensors file (weights,
// `input`, `expected`) with attn's C++ API: one model, a session per thread.
#include <attn/model.hpp>
#include <attn/safetensors.hpp>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto model = attn::Model::Load({argv[1], ""});  // immutable: share it
  auto file = attn::SafetensorsFile::Open(argv[1]);
  auto x = file.ok() ? file->ReadF32("input") : file.status();
  auto want = file.ok() ? file->ReadF32("expected") : file.status();
  for (const attn::Status& s : {model.status(), x.status(), want.status()})
    if (!s.ok()) return std::fprintf(stderr, "%s\n", s.message().c_str()), 1;
  const auto& shape = file->Find("input")->shape;  // [b, T, d_in]
  std::vector<float> y[4];
  attn::Status status[4];
  std::thread threads[4];
  for (int t = 0; t < 4; ++t)
    threads[t] = std::thread([&, t] {
      attn::Session session(*model);  // one per thread
      y[t].resize(want->size());
      status[t] = session.Run(x->data(), shape[0], shape[1], y[t].data());
    });
  double err = 0;
  for (int t = 0; t < 4; ++t) {
    threads[t].join();
    if (!status[t].ok()) err = INFINITY;
    for (size_t i = 0; i < y[t].size(); ++i)
      err = std::fmax(err, std::fabs(y[t][i] - (*want)[i]));
  }
  std::printf("C++: 4 threads, max |y - expected| = %g\n", err);
  return !(err <= 1e-5);
}
