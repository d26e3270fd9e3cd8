// The engine's one random generator, for sampling and for seeded random
// models: our own splitmix64 and uniform mapping give a seed the same draws
// with every standard library (std:: distributions differ between them).
#ifndef ATTN_ENGINE_RUNTIME_RANDOM_H_
#define ATTN_ENGINE_RUNTIME_RANDOM_H_

#include <cstdint>

namespace attn {

// splitmix64 (Steele, Lea, Flood 2014): one 64-bit state, every seed good.
inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A uniform double in [0, 1): the top 53 bits of one draw.
inline double UniformDouble(uint64_t& state) {
  return static_cast<double>(SplitMix64(state) >> 11) * 0x1.0p-53;
}

}  // namespace attn

#endif  // ATTN_ENGINE_RUNTIME_RANDOM_H_
