// Reading tokenizer.json, tokenizer_config.json and generation_config.json
// into HfTokenizer's tables (hf_impl.h). Every type and option that is not
// implemented is refused by name rather than ignored, since ignoring one
// would give other ids than `tokenizers` gives, silently.
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <utility>

#include "attn/attn.hpp"
#include "engine/io/json_limits.h"
#include "engine/tokenizer/hf_impl.h"
#include "engine/tokenizer/text_util.h"
#include "nlohmann/json.hpp"

namespace attn::tokenizer {
namespace {

using Json = nlohmann::json;

// What nlohmann's DOM and the checker's key sets hold per byte of JSON
// text, measured on Gemma 3's and Llama 3's files (about 5), with room.
constexpr uint64_t kDomBytesPerTextByte = 8;
// A token in the tables: its text twice (the index and the id table),
// a slot of each, and a merge's slot, with the tables' slack.
constexpr uint64_t kTableBytesPerToken = 64;
constexpr uint64_t kTableBytesPerMerge = 32;
constexpr size_t kMaxJsonDepth = 64;

// Messages name the file and the key path: "'d/tokenizer.json':
// model.type is "Unigram", want "BPE"".
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }

  Status Bad(const std::string& key, const std::string& what) const {
    return InvalidArgument(Quote(path_) + ": " + key + " " + what);
  }
  // obj[name] when obj is an object that has it, else nullptr.
  static const Json* Field(const Json& obj, const char* name) {
    if (!obj.is_object()) return nullptr;
    const auto it = obj.find(name);
    return it == obj.end() ? nullptr : &*it;
  }
  static std::string Join(const std::string& key, const char* name) {
    return key.empty() ? name : key + "." + name;
  }
  Result<std::string> String(const Json& obj, const std::string& key,
                             const char* name) const {
    const Json* v = Field(obj, name);
    if (!v || !v->is_string()) return Bad(Join(key, name), "is not a string");
    return v->get<std::string>();
  }
  Result<bool> Bool(const Json& obj, const std::string& key, const char* name,
                    bool fallback) const {
    const Json* v = Field(obj, name);
    if (!v || v->is_null()) return fallback;
    if (!v->is_boolean()) return Bad(Join(key, name), "is not true or false");
    return v->get<bool>();
  }
  Result<int64_t> Id(const Json& v, const std::string& key) const {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() >= kMaxId) {
      return Bad(key, "is " + Clipped(v) + ", want an id from 0 to 2^24 - 1");
    }
    return v.get<int64_t>();
  }
  // The type of object `v` at `key`, which must be one of `known`.
  Result<std::string> Type(const Json& v, const std::string& key,
                           std::initializer_list<const char*> known) const {
    std::string want;
    for (const char* name : known)
      want += std::string(want.empty() ? "" : ", ") + name;
    const Json* type = Field(v, "type");
    if (!type || !type->is_string()) {
      return Bad(key, "has no \"type\"; want one of " + want);
    }
    const std::string name = type->get<std::string>();
    for (const char* k : known) {
      if (name == k) return name;
    }
    return Bad(key + ".type", "is " + Clipped(*type) + ", want one of " + want);
  }
  static std::string Clipped(const Json& v) {
    return Quote(v.dump(-1, ' ', false, Json::error_handler_t::replace), 40);
  }

 private:
  std::string path_;
};

// The whole JSON file `path`, charged against `budget` for its text and
// its DOM. Missing: a null Json when `optional`.
Result<Json> ReadJsonFile(const std::string& path, bool optional,
                          LoadBudget* budget) {
  struct stat st;
  if (optional && lstat(path.c_str(), &st) != 0) return Json();
  ATTN_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, *budget));
  const uint64_t dom = text.size() * kDomBytesPerTextByte;
  ATTN_RETURN_IF_ERROR(budget->Check(path, "its JSON", dom + text.size()));
  budget->held += text.size() + dom;
  return ParseCheckedJson(text, kMaxJsonDepth, Quote(path));
}

// ---------------------------------------------------------------------------
// Normalizers, pre-tokenizers, decoders.

// A Replace's pattern: {"String": s} only.
Result<std::string> StringPattern(const Reader& r, const Json& v,
                                  const std::string& key) {
  const Json* pattern = Reader::Field(v, "pattern");
  const Json* literal = pattern ? Reader::Field(*pattern, "String") : nullptr;
  if (!literal || !literal->is_string()) {
    return r.Bad(key + ".pattern",
                 "is " + Reader::Clipped(pattern ? *pattern : Json()) +
                     ", want {\"String\": ...}");
  }
  return literal->get<std::string>();
}

Status ReadNormalizer(const Reader& r, const Json& v, const std::string& key,
                      int depth, HfTokenizer::Impl* impl) {
  if (v.is_null()) return {};
  if (depth > 4) return r.Bad(key, "nests Sequences deeper than 4");
  ATTN_ASSIGN_OR_RETURN(
      const std::string type,
      r.Type(v, key, {"NFC", "Prepend", "Replace", "Sequence"}));
  if (type == "Sequence") {
    const Json* list = Reader::Field(v, "normalizers");
    if (!list || !list->is_array()) {
      return r.Bad(key + ".normalizers", "is not an array");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      ATTN_RETURN_IF_ERROR(ReadNormalizer(
          r, (*list)[i], key + ".normalizers[" + std::to_string(i) + "]",
          depth + 1, impl));
    }
    return {};
  }
  NormalizerStep step;
  if (type == "Prepend") {
    step.kind = NormalizerStep::Kind::kPrepend;
    ATTN_ASSIGN_OR_RETURN(step.content, r.String(v, key, "prepend"));
  } else if (type == "Replace") {
    step.kind = NormalizerStep::Kind::kReplace;
    ATTN_ASSIGN_OR_RETURN(step.pattern, StringPattern(r, v, key));
    ATTN_ASSIGN_OR_RETURN(step.content, r.String(v, key, "content"));
    if (step.pattern.empty()) return r.Bad(key + ".pattern", "is empty");
  }
  impl->normalizers.push_back(std::move(step));
  return {};
}

Result<SplitBehavior> Behavior(const Reader& r, const Json& v,
                               const std::string& key) {
  ATTN_ASSIGN_OR_RETURN(const std::string name, r.String(v, key, "behavior"));
  const std::pair<const char*, SplitBehavior> known[] = {
      {"Removed", SplitBehavior::kRemoved},
      {"Isolated", SplitBehavior::kIsolated},
      {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
      {"MergedWithNext", SplitBehavior::kMergedWithNext},
      {"Contiguous", SplitBehavior::kContiguous}};
  for (const auto& [text, behavior] : known) {
    if (name == text) return behavior;
  }
  return r.Bad(key + ".behavior",
               "is " + Quote(name, 40) +
                   ", want one of Removed, Isolated, MergedWithPrevious, "
                   "MergedWithNext, Contiguous");
}

Result<PreTokenizerStep> ReadSplit(const Reader& r, const Json& v,
                                   const std::string& key) {
  PreTokenizerStep step;
  step.kind = PreTokenizerStep::Kind::kSplit;
  const Json* pattern = Reader::Field(v, "pattern");
  const Json* regex = pattern ? Reader::Field(*pattern, "Regex") : nullptr;
  const Json* literal = pattern ? Reader::Field(*pattern, "String") : nullptr;
  if (regex && regex->is_string()) {
    Result<std::unique_ptr<Regex>> compiled =
        Regex::Compile(regex->get<std::string>());
    if (!compiled.ok()) {
      return r.Bad(key + ".pattern.Regex", compiled.status().message());
    }
    step.regex = std::move(compiled).value();
  } else if (literal && literal->is_string()) {
    step.literal = literal->get<std::string>();
  } else {
    return r.Bad(key + ".pattern",
                 "is " + Reader::Clipped(pattern ? *pattern : Json()) +
                     ", want {\"Regex\": ...} or {\"String\": ...}");
  }
  ATTN_ASSIGN_OR_RETURN(step.behavior, Behavior(r, v, key));
  ATTN_ASSIGN_OR_RETURN(step.invert, r.Bool(v, key, "invert", false));
  return step;
}

// GPT-2's pattern, which ByteLevel's use_regex runs.
constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

Result<PreTokenizerStep::Prepend> PrependScheme(const Reader& r, const Json& v,
                                                const std::string& key) {
  const Json* scheme = Reader::Field(v, "prepend_scheme");
  if (!scheme || scheme->is_null()) {
    // Files before prepend_scheme said add_prefix_space.
    ATTN_ASSIGN_OR_RETURN(const bool add,
                          r.Bool(v, key, "add_prefix_space", true));
    return add ? PreTokenizerStep::Prepend::kAlways
               : PreTokenizerStep::Prepend::kNever;
  }
  const std::string name =
      scheme->is_string() ? scheme->get<std::string>() : "";
  if (name == "first") return PreTokenizerStep::Prepend::kFirst;
  if (name == "always") return PreTokenizerStep::Prepend::kAlways;
  if (name == "never") return PreTokenizerStep::Prepend::kNever;
  return r.Bad(key + ".prepend_scheme", "is " + Reader::Clipped(*scheme) +
                                            ", want first, always or never");
}

Result<PreTokenizerStep> ReadByteLevel(const Reader& r, const Json& v,
                                       const std::string& key) {
  PreTokenizerStep step;
  step.kind = PreTokenizerStep::Kind::kByteLevel;
  ATTN_ASSIGN_OR_RETURN(step.add_prefix_space,
                        r.Bool(v, key, "add_prefix_space", true));
  ATTN_ASSIGN_OR_RETURN(const bool use_regex,
                        r.Bool(v, key, "use_regex", true));
  if (use_regex) {
    ATTN_ASSIGN_OR_RETURN(std::unique_ptr<Regex> regex,
                          Regex::Compile(kGpt2Pattern));
    step.regex = std::move(regex);
  }
  return step;
}

Result<PreTokenizerStep> ReadMetaspace(const Reader& r, const Json& v,
                                       const std::string& key) {
  PreTokenizerStep step;
  step.kind = PreTokenizerStep::Kind::kMetaspace;
  ATTN_ASSIGN_OR_RETURN(step.literal, r.String(v, key, "replacement"));
  size_t length;
  if (step.literal.empty() ||
      DecodeUtf8(step.literal, 0, &length) == kInvalidCodePoint ||
      length != step.literal.size()) {
    return r.Bad(key + ".replacement",
                 "is " + Quote(step.literal, 40) + ", want one character");
  }
  ATTN_ASSIGN_OR_RETURN(step.prepend, PrependScheme(r, v, key));
  ATTN_ASSIGN_OR_RETURN(step.split, r.Bool(v, key, "split", true));
  return step;
}

Status ReadPreTokenizer(const Reader& r, const Json& v, const std::string& key,
                        int depth, HfTokenizer::Impl* impl) {
  if (v.is_null()) return {};
  if (depth > 4) return r.Bad(key, "nests Sequences deeper than 4");
  ATTN_ASSIGN_OR_RETURN(
      const std::string type,
      r.Type(v, key, {"Split", "ByteLevel", "Metaspace", "Sequence"}));
  if (type == "Sequence") {
    const Json* list = Reader::Field(v, "pretokenizers");
    if (!list || !list->is_array()) {
      return r.Bad(key + ".pretokenizers", "is not an array");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      ATTN_RETURN_IF_ERROR(ReadPreTokenizer(
          r, (*list)[i], key + ".pretokenizers[" + std::to_string(i) + "]",
          depth + 1, impl));
    }
    return {};
  }
  if (impl->byte_level) {
    return r.Bad(key, "follows a ByteLevel pre-tokenizer; want ByteLevel last");
  }
  Result<PreTokenizerStep> step = type == "Split" ? ReadSplit(r, v, key)
                                  : type == "ByteLevel"
                                      ? ReadByteLevel(r, v, key)
                                      : ReadMetaspace(r, v, key);
  if (!step.ok()) return step.status();
  impl->byte_level = step->kind == PreTokenizerStep::Kind::kByteLevel;
  impl->pre_tokenizers.push_back(std::move(step).value());
  return {};
}

Result<DecoderStep> ReadDecoderStep(const Reader& r, const Json& v,
                                    const std::string& key,
                                    const std::string& type) {
  DecoderStep step;
  if (type == "Replace") {
    step.kind = DecoderStep::Kind::kReplace;
    ATTN_ASSIGN_OR_RETURN(step.pattern, StringPattern(r, v, key));
    ATTN_ASSIGN_OR_RETURN(step.content, r.String(v, key, "content"));
    if (step.pattern.empty()) return r.Bad(key + ".pattern", "is empty");
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::Kind::kByteFallback;
  } else if (type == "Strip") {
    step.kind = DecoderStep::Kind::kStrip;
    ATTN_ASSIGN_OR_RETURN(step.content, r.String(v, key, "content"));
    for (const char* name : {"start", "stop"}) {
      const Json* n = Reader::Field(v, name);
      if (!n || !n->is_number_unsigned() || n->get<uint64_t>() > 1024) {
        return r.Bad(key + "." + name, "is not a count from 0 to 1024");
      }
      (name[2] == 'a' ? step.start : step.stop) = n->get<size_t>();
    }
  } else if (type == "ByteLevel") {
    step.kind = DecoderStep::Kind::kByteLevel;
  } else if (type == "Metaspace") {
    step.kind = DecoderStep::Kind::kMetaspace;
    ATTN_ASSIGN_OR_RETURN(const PreTokenizerStep meta,
                          ReadMetaspace(r, v, key));
    step.content = meta.literal;
    step.prepend_first = meta.prepend != PreTokenizerStep::Prepend::kNever;
  }
  return step;
}

Status ReadDecoder(const Reader& r, const Json& v, const std::string& key,
                   int depth, HfTokenizer::Impl* impl) {
  if (v.is_null()) return {};
  if (depth > 4) return r.Bad(key, "nests Sequences deeper than 4");
  impl->has_decoder = true;
  ATTN_ASSIGN_OR_RETURN(const std::string type,
                        r.Type(v, key,
                               {"Replace", "ByteFallback", "Fuse", "Strip",
                                "ByteLevel", "Metaspace", "Sequence"}));
  if (type != "Sequence") {
    ATTN_ASSIGN_OR_RETURN(DecoderStep step, ReadDecoderStep(r, v, key, type));
    impl->decoders.push_back(std::move(step));
    return {};
  }
  const Json* list = Reader::Field(v, "decoders");
  if (!list || !list->is_array()) {
    return r.Bad(key + ".decoders", "is not an array");
  }
  for (size_t i = 0; i < list->size(); ++i) {
    ATTN_RETURN_IF_ERROR(
        ReadDecoder(r, (*list)[i], key + ".decoders[" + std::to_string(i) + "]",
                    depth + 1, impl));
  }
  return {};
}

// ---------------------------------------------------------------------------
// The model.

// Token `text` in the pieces' alphabet: byte-level tokens spell bytes with
// GPT-2's characters; false for a character outside that table.
bool PieceSpelling(const HfTokenizer::Impl& impl, std::string_view text,
                   std::string* out) {
  out->clear();
  if (!impl.byte_level) {
    out->assign(text);
    return true;
  }
  size_t len;
  for (size_t i = 0; i < text.size(); i += len) {
    const int byte = CharByte(DecodeUtf8(text, i, &len));
    if (byte < 0) return false;
    out->push_back(static_cast<char>(byte));
  }
  return true;
}

// Token `id`'s text for decoding; an id given twice is refused.
Status SetToken(const Reader& r, const std::string& key, int64_t id,
                std::string_view text, HfTokenizer::Impl* impl) {
  if (static_cast<size_t>(id) >= impl->tokens.size()) {
    impl->tokens.resize(id + 1, {0, 0, false});
  }
  HfTokenizer::Impl::Span& span = impl->tokens[id];
  if (span.known) {
    if (impl->Token(static_cast<int32_t>(id)) == text) return {};
    return r.Bad(key, "gives id " + std::to_string(id) + " to both " +
                          QuoteText(impl->Token(static_cast<int32_t>(id))) +
                          " and " + QuoteText(text));
  }
  span = {static_cast<uint32_t>(impl->token_text.size()),
          static_cast<uint32_t>(text.size()), true};
  impl->token_text.append(text);
  impl->vocab_size = std::max(impl->vocab_size, id + 1);
  return {};
}

Status ReadVocab(const Reader& r, const Json& vocab, HfTokenizer::Impl* impl) {
  if (!vocab.is_object() || vocab.empty()) {
    return r.Bad("model.vocab", "is not a non-empty object of token -> id");
  }
  impl->vocab.Reserve(vocab.size());
  std::string spelled;
  for (const auto& [token, value] : vocab.items()) {
    ATTN_ASSIGN_OR_RETURN(const int64_t id,
                          r.Id(value, "model.vocab[" + QuoteText(token) + "]"));
    ATTN_RETURN_IF_ERROR(SetToken(r, "model.vocab", id, token, impl));
    if (PieceSpelling(*impl, token, &spelled)) {
      impl->vocab.Insert(spelled, static_cast<int32_t>(id));
    }
  }
  return {};
}

// One merge, "a b" or ["a", "b"], as the ids of a, b and their join.
Status ReadMerge(const Reader& r, const Json& merge, size_t rank,
                 HfTokenizer::Impl* impl) {
  const std::string key = "model.merges[" + std::to_string(rank) + "]";
  std::string parts[2];
  if (merge.is_string()) {
    const std::string& line = merge.get_ref<const std::string&>();
    const size_t space = line.find(' ');
    if (space == std::string::npos ||
        line.find(' ', space + 1) != std::string::npos) {
      return r.Bad(key, "is " + QuoteText(line) +
                            ", want two tokens separated by one space");
    }
    parts[0] = line.substr(0, space), parts[1] = line.substr(space + 1);
  } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
             merge[1].is_string()) {
    parts[0] = merge[0].get<std::string>(),
    parts[1] = merge[1].get<std::string>();
  } else {
    return r.Bad(key, "is " + Reader::Clipped(merge) +
                          ", want \"a b\" or [\"a\", \"b\"]");
  }
  int32_t ids[3];
  const std::string texts[3] = {parts[0], parts[1], parts[0] + parts[1]};
  std::string spelled;
  for (int k = 0; k < 3; ++k) {
    ids[k] = PieceSpelling(*impl, texts[k], &spelled)
                 ? impl->vocab.Find(spelled)
                 : -1;
    if (ids[k] < 0) {
      return r.Bad(key, std::string(k < 2 ? "names " : "makes ") +
                            QuoteText(texts[k]) +
                            ", a token model.vocab lacks");
    }
  }
  impl->merges.Set(ids[0], ids[1], static_cast<int32_t>(rank), ids[2]);
  return {};
}

// Which characters some token holds right before a "▁" (hf_impl.h).
void FindGluedBeforeSpace(const Json& vocab, HfTokenizer::Impl* impl) {
  if (impl->byte_level) return;
  const std::string_view space = "\xe2\x96\x81";
  for (const auto& [token, id] : vocab.items()) {
    for (size_t at = token.find(space, 1); at != std::string::npos;
         at = token.find(space, at + 1)) {
      size_t begin = at - 1;
      while (begin > 0 &&
             (static_cast<unsigned char>(token[begin]) & 0xC0) == 0x80)
        --begin;
      const std::string glued = token.substr(begin, at - begin);
      if (glued != space && std::find(impl->glued_before_space.begin(),
                                      impl->glued_before_space.end(), glued) ==
                                impl->glued_before_space.end()) {
        impl->glued_before_space.push_back(glued);
      }
    }
  }
  impl->split_words = impl->vocab.Find(space) >= 0;
}

// continuing_subword_prefix, end_of_word_suffix and dropout: none.
Status CheckUnsupportedBpeOptions(const Reader& r, const Json& model) {
  for (const char* name : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const Json* v = Reader::Field(model, name);
    if (v && !v->is_null() &&
        !(v->is_string() && v->get<std::string>().empty())) {
      return r.Bad(
          std::string("model.") + name,
          "is " + Reader::Clipped(*v) + ", want null (not implemented)");
    }
  }
  const Json* dropout = Reader::Field(model, "dropout");
  if (dropout && !dropout->is_null() &&
      !(dropout->is_number() && dropout->get<double>() == 0)) {
    return r.Bad("model.dropout", "is " + Reader::Clipped(*dropout) +
                                      ", want null (not implemented)");
  }
  return {};
}

Status ReadModel(const Reader& r, const Json& root, LoadBudget* budget,
                 HfTokenizer::Impl* impl) {
  const Json* model = Reader::Field(root, "model");
  if (!model || !model->is_object()) return r.Bad("model", "is not an object");
  ATTN_RETURN_IF_ERROR(r.Type(*model, "model", {"BPE"}).status());
  ATTN_RETURN_IF_ERROR(CheckUnsupportedBpeOptions(r, *model));
  const Json* vocab = Reader::Field(*model, "vocab");
  const Json* merges = Reader::Field(*model, "merges");
  if (!merges || !merges->is_array()) {
    return r.Bad("model.merges", "is not an array");
  }
  const uint64_t need = (vocab ? vocab->size() : 0) * kTableBytesPerToken +
                        merges->size() * kTableBytesPerMerge;
  ATTN_RETURN_IF_ERROR(budget->Check(r.path(), "its model's tables", need));
  budget->held += need;
  ATTN_RETURN_IF_ERROR(ReadVocab(r, vocab ? *vocab : Json(), impl));
  FindGluedBeforeSpace(*vocab, impl);
  impl->merges.Reserve(merges->size());
  for (size_t i = 0; i < merges->size(); ++i) {
    ATTN_RETURN_IF_ERROR(ReadMerge(r, (*merges)[i], i, impl));
  }
  ATTN_ASSIGN_OR_RETURN(impl->byte_fallback,
                        r.Bool(*model, "model", "byte_fallback", false));
  ATTN_ASSIGN_OR_RETURN(impl->fuse_unk,
                        r.Bool(*model, "model", "fuse_unk", false));
  ATTN_ASSIGN_OR_RETURN(impl->ignore_merges,
                        r.Bool(*model, "model", "ignore_merges", false));
  const Json* unk = Reader::Field(*model, "unk_token");
  if (unk && !unk->is_null()) {
    if (!unk->is_string()) return r.Bad("model.unk_token", "is not a string");
    impl->unk_id = impl->vocab.Find(unk->get<std::string>());
    if (impl->unk_id < 0) {
      return r.Bad("model.unk_token", "is " + Reader::Clipped(*unk) +
                                          ", a token model.vocab lacks");
    }
  }
  return {};
}

// Each byte's (byte-level) or each ASCII character's id, and <0xNN>.
void FillUnitIds(HfTokenizer::Impl* impl) {
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    impl->unit_ids[b] = impl->byte_level || b < 0x80
                            ? impl->vocab.Find(std::string_view(&c, 1))
                            : -1;
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    impl->byte_fallback_ids[b] =
        impl->byte_fallback ? impl->vocab.Find(name) : -1;
  }
}

// ---------------------------------------------------------------------------
// Added tokens and the post-processor.

Status ReadAddedTokens(const Reader& r, const Json& root,
                       HfTokenizer::Impl* impl) {
  const Json* list = Reader::Field(root, "added_tokens");
  if (!list || list->is_null()) return {};
  if (!list->is_array()) return r.Bad("added_tokens", "is not an array");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string key = "added_tokens[" + std::to_string(i) + "]";
    const Json& v = (*list)[i];
    AddedToken token{};
    ATTN_ASSIGN_OR_RETURN(token.content, r.String(v, key, "content"));
    if (token.content.empty()) return r.Bad(key + ".content", "is empty");
    const Json* id = Reader::Field(v, "id");
    ATTN_ASSIGN_OR_RETURN(const int64_t value,
                          r.Id(id ? *id : Json(), key + ".id"));
    token.id = static_cast<int32_t>(value);
    ATTN_ASSIGN_OR_RETURN(token.special, r.Bool(v, key, "special", false));
    ATTN_ASSIGN_OR_RETURN(token.lstrip, r.Bool(v, key, "lstrip", false));
    ATTN_ASSIGN_OR_RETURN(token.rstrip, r.Bool(v, key, "rstrip", false));
    ATTN_ASSIGN_OR_RETURN(token.single_word,
                          r.Bool(v, key, "single_word", false));
    ATTN_ASSIGN_OR_RETURN(token.normalized,
                          r.Bool(v, key, "normalized", !token.special));
    impl->added.push_back(std::move(token));
  }
  return {};
}

// Added tokens take their ids' place in the id table (decoding gives their
// content) and go to the matcher of their kind, normalized ones normalized
// as `tokenizers` does it.
Status IndexAddedTokens(const Reader& r, HfTokenizer::Impl* impl) {
  for (size_t i = 0; i < impl->added.size(); ++i) {
    const AddedToken& token = impl->added[i];
    if (static_cast<size_t>(token.id) < impl->tokens.size() &&
        impl->tokens[token.id].known) {
      impl->tokens[token.id].known = false;  // content replaces the model's
    }
    ATTN_RETURN_IF_ERROR(
        SetToken(r, "added_tokens", token.id, token.content, impl));
    if (!token.normalized) {
      impl->raw_matcher.Add(token.content, static_cast<int32_t>(i));
      continue;
    }
    std::string normalized;
    Normalize(*impl, token.content, &normalized);
    if (!normalized.empty()) {
      impl->normalized_matcher.Add(normalized, static_cast<int32_t>(i));
    }
  }
  return {};
}

Status ReadTemplate(const Reader& r, const Json& v, const std::string& key,
                    HfTokenizer::Impl* impl) {
  const Json* single = Reader::Field(v, "single");
  const Json* specials = Reader::Field(v, "special_tokens");
  if (!single || !single->is_array())
    return r.Bad(key + ".single", "is not an array");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < single->size(); ++i) {
    const std::string at = key + ".single[" + std::to_string(i) + "]";
    const Json& piece = (*single)[i];
    if (Reader::Field(piece, "Sequence")) {
      ids.push_back(-1);
      continue;
    }
    const Json* special = Reader::Field(piece, "SpecialToken");
    const Json* name = special ? Reader::Field(*special, "id") : nullptr;
    const Json* entry =
        name && name->is_string() && specials
            ? Reader::Field(*specials, name->get<std::string>().c_str())
            : nullptr;
    const Json* entry_ids = entry ? Reader::Field(*entry, "ids") : nullptr;
    if (!entry_ids || !entry_ids->is_array()) {
      return r.Bad(at, "is " + Reader::Clipped(piece) +
                           ", want a Sequence or a SpecialToken listed in "
                           "special_tokens with its ids");
    }
    for (const Json& id : *entry_ids) {
      ATTN_ASSIGN_OR_RETURN(const int64_t value, r.Id(id, at + ".ids"));
      ids.push_back(static_cast<int32_t>(value));
    }
  }
  if (std::count(ids.begin(), ids.end(), -1) != 1) {
    return r.Bad(key + ".single",
                 "holds " +
                     std::to_string(std::count(ids.begin(), ids.end(), -1)) +
                     " Sequences, want 1");
  }
  impl->template_ids = std::move(ids);
  impl->has_template = true;
  return {};
}

Status ReadPostProcessor(const Reader& r, const Json& v, const std::string& key,
                         int depth, HfTokenizer::Impl* impl) {
  if (v.is_null()) return {};
  if (depth > 4) return r.Bad(key, "nests Sequences deeper than 4");
  ATTN_ASSIGN_OR_RETURN(
      const std::string type,
      r.Type(v, key, {"TemplateProcessing", "ByteLevel", "Sequence"}));
  if (type == "ByteLevel") return {};  // it moves offsets only
  if (type == "TemplateProcessing") {
    if (impl->has_template) return r.Bad(key, "is a second TemplateProcessing");
    return ReadTemplate(r, v, key, impl);
  }
  const Json* list = Reader::Field(v, "processors");
  if (!list || !list->is_array())
    return r.Bad(key + ".processors", "is not an array");
  for (size_t i = 0; i < list->size(); ++i) {
    ATTN_RETURN_IF_ERROR(ReadPostProcessor(
        r, (*list)[i], key + ".processors[" + std::to_string(i) + "]",
        depth + 1, impl));
  }
  return {};
}

// truncation and padding would change what encode() gives: refused.
Status CheckNullSections(const Reader& r, const Json& root) {
  for (const char* name : {"truncation", "padding"}) {
    const Json* v = Reader::Field(root, name);
    if (v && !v->is_null()) {
      return r.Bad(
          name, "is " + Reader::Clipped(*v) + ", want null (not implemented)");
    }
  }
  return {};
}

// ---------------------------------------------------------------------------
// tokenizer_config.json and generation_config.json.

// A special token's text: a string or {"content": ...}; empty for null.
Result<std::string> SpecialText(const Reader& r, const Json& config,
                                const char* name) {
  const Json* v = Reader::Field(config, name);
  if (!v || v->is_null()) return std::string();
  if (v->is_string()) return v->get<std::string>();
  return r.String(*v, name, "content");
}

Result<std::string> ChatTemplate(const Reader& r, const Json& config) {
  const Json* v = Reader::Field(config, "chat_template");
  if (!v || v->is_null()) return std::string();
  if (v->is_string()) return v->get<std::string>();
  if (v->is_array()) {
    for (const Json& named : *v) {
      const Json* name = Reader::Field(named, "name");
      if (name && name->is_string() && name->get<std::string>() == "default") {
        return r.String(named, "chat_template[name=default]", "template");
      }
    }
  }
  return r.Bad("chat_template",
               "is " + Reader::Clipped(*v) +
                   ", want a string or a list holding "
                   "{\"name\": \"default\", \"template\": ...}");
}

Status ReadTokenizerConfig(const Reader& r, const Json& config,
                           HfTokenizer::Impl* impl) {
  SpecialTokens& special = impl->special;
  ATTN_ASSIGN_OR_RETURN(special.bos_token, SpecialText(r, config, "bos_token"));
  ATTN_ASSIGN_OR_RETURN(special.eos_token, SpecialText(r, config, "eos_token"));
  ATTN_ASSIGN_OR_RETURN(special.chat_template, ChatTemplate(r, config));
  const auto find = [&](const std::string& text) -> int64_t {
    for (const AddedToken& token : impl->added) {
      if (token.content == text) return token.id;
    }
    std::string spelled;
    return PieceSpelling(*impl, text, &spelled) ? impl->vocab.Find(spelled)
                                                : -1;
  };
  for (const auto& [text, name] :
       {std::pair{&special.bos_token, "bos_token"},
        std::pair{&special.eos_token, "eos_token"}}) {
    if (!text->empty() && find(*text) < 0) {
      return r.Bad(name,
                   "is " + QuoteText(*text) + ", a token the vocabulary lacks");
    }
  }
  if (!special.bos_token.empty()) special.bos_id = find(special.bos_token);
  if (!special.eos_token.empty())
    special.eos_ids.push_back(find(special.eos_token));
  const bool template_bos = impl->has_template && special.bos_id >= 0 &&
                            impl->template_ids.front() == special.bos_id;
  const bool template_eos =
      impl->has_template && !special.eos_ids.empty() &&
      impl->template_ids.back() == special.eos_ids.front();
  ATTN_ASSIGN_OR_RETURN(special.add_bos,
                        r.Bool(config, "", "add_bos_token", template_bos));
  ATTN_ASSIGN_OR_RETURN(special.add_eos,
                        r.Bool(config, "", "add_eos_token", template_eos));
  return {};
}

Status ReadGenerationConfig(const Reader& r, const Json& config,
                            HfTokenizer::Impl* impl) {
  const Json* eos = Reader::Field(config, "eos_token_id");
  if (!eos || eos->is_null()) return {};
  std::vector<int64_t>& ids = impl->special.eos_ids;
  const Json list = eos->is_array() ? *eos : Json::array({*eos});
  for (size_t i = 0; i < list.size(); ++i) {
    ATTN_ASSIGN_OR_RETURN(
        const int64_t id,
        r.Id(list[i], "eos_token_id[" + std::to_string(i) + "]"));
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return {};
}

std::atomic<uint64_t> next_instance{1};

}  // namespace

Status ReadHfTokenizer(const std::string& dir, uint64_t max_memory,
                       uint64_t held_bytes, HfTokenizer::Impl* impl) {
  LoadBudget budget{max_memory ? max_memory : DefaultMaxMemoryBytes(),
                    held_bytes};
  impl->instance = next_instance++;
  {
    const Reader r(dir + "/tokenizer.json");
    ATTN_ASSIGN_OR_RETURN(const Json root,
                          ReadJsonFile(r.path(), false, &budget));
    if (!root.is_object()) return r.Bad("the top level", "is not an object");
    ATTN_RETURN_IF_ERROR(CheckNullSections(r, root));
    const Json null;
    const auto field = [&](const char* name) -> const Json& {
      const Json* v = Reader::Field(root, name);
      return v ? *v : null;
    };
    ATTN_RETURN_IF_ERROR(
        ReadNormalizer(r, field("normalizer"), "normalizer", 0, impl));
    ATTN_RETURN_IF_ERROR(
        ReadPreTokenizer(r, field("pre_tokenizer"), "pre_tokenizer", 0, impl));
    ATTN_RETURN_IF_ERROR(ReadModel(r, root, &budget, impl));
    FillUnitIds(impl);
    ATTN_RETURN_IF_ERROR(ReadAddedTokens(r, root, impl));
    ATTN_RETURN_IF_ERROR(IndexAddedTokens(r, impl));
    ATTN_RETURN_IF_ERROR(ReadPostProcessor(r, field("post_processor"),
                                           "post_processor", 0, impl));
    ATTN_RETURN_IF_ERROR(ReadDecoder(r, field("decoder"), "decoder", 0, impl));
  }
  const Reader config(dir + "/tokenizer_config.json");
  ATTN_ASSIGN_OR_RETURN(const Json tokenizer_config,
                        ReadJsonFile(config.path(), true, &budget));
  ATTN_RETURN_IF_ERROR(ReadTokenizerConfig(config, tokenizer_config, impl));
  const Reader generation(dir + "/generation_config.json");
  ATTN_ASSIGN_OR_RETURN(const Json generation_config,
                        ReadJsonFile(generation.path(), true, &budget));
  return ReadGenerationConfig(generation, generation_config, impl);
}

}  // namespace attn::tokenizer
