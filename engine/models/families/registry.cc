// The families a whole-model file may be. A file is the first family whose
// token embedding it holds (under one of the family's prefixes) and whose
// own test, if any, it passes; a new family is one file beside this one and
// a line here.
#include "engine/models/lm_family.h"

namespace attn::lm {

NameMap ByRole(std::initializer_list<RoleName> names) {
  NameMap by_role{};
  for (const RoleName& n : names) {
    by_role[static_cast<size_t>(n.role)] = n.tensor;
  }
  return by_role;
}

const std::vector<const Family*>& Families() {
  // The book's Llama after its GPTModel: both name the embedding tok_emb.
  static const std::vector<const Family*> families = {&BookGpt(), &HfGpt2(),
                                                      &BookLlama()};
  return families;
}

}  // namespace attn::lm
