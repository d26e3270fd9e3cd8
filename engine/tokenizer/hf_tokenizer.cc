// HfTokenizer (see hf_tokenizer.h): encode and decode as `tokenizers`
// does, on the tables hf_config.cc reads.
#include "engine/tokenizer/hf_tokenizer.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <functional>
#include <unordered_map>
#include <utility>

#include "engine/tokenizer/hf_impl.h"
#include "engine/tokenizer/text_util.h"

namespace attn::tokenizer {

// ---------------------------------------------------------------------------
// TokenIndex and AddedTokenMatcher.

void TokenIndex::Reserve(size_t count) {
  if (2 * count > slots_.size()) Grow(2 * count);
}

void TokenIndex::Grow(size_t want) {
  size_t slots = 16;
  while (slots < want) slots *= 2;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(slots, Slot{0, 0, -1, 0});
  mask_ = slots - 1;
  for (const Slot& slot : old) {
    if (slot.id < 0) continue;
    size_t i = slot.hash & mask_;
    while (slots_[i].id >= 0) i = (i + 1) & mask_;
    slots_[i] = slot;
  }
}

bool TokenIndex::Insert(std::string_view key, int32_t id) {
  if (2 * (size_ + 1) > slots_.size()) Grow(4 * (size_ + 1));
  const auto hash = static_cast<uint32_t>(std::hash<std::string_view>()(key));
  size_t i = hash & mask_;
  for (; slots_[i].id >= 0; i = (i + 1) & mask_) {
    const Slot& slot = slots_[i];
    if (slot.hash == hash &&
        std::string_view(keys_.data() + slot.offset, slot.length) == key) {
      return false;
    }
  }
  slots_[i] = {static_cast<uint32_t>(keys_.size()),
               static_cast<uint32_t>(key.size()), id, hash};
  keys_.append(key);
  ++size_;
  return true;
}

int32_t TokenIndex::Find(std::string_view key) const {
  if (slots_.empty()) return -1;
  const auto hash = static_cast<uint32_t>(std::hash<std::string_view>()(key));
  for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
    const Slot& slot = slots_[i];
    if (slot.id < 0) return -1;
    if (slot.hash == hash && slot.length == key.size() &&
        std::string_view(keys_.data() + slot.offset, slot.length) == key) {
      return slot.id;
    }
  }
}

void AddedTokenMatcher::Add(std::string_view content, int32_t token) {
  int32_t node = 0;
  for (const char c : content) {
    const uint64_t edge = (uint64_t{static_cast<uint32_t>(node)} << 8) |
                          static_cast<unsigned char>(c);
    const auto [it, fresh] =
        edges_.emplace(edge, static_cast<int32_t>(nodes_.size()));
    if (fresh) nodes_.push_back(Node{});
    node = it->second;
  }
  starts_[static_cast<unsigned char>(content[0])] = true;
  nodes_[node].token = token;  // a content given twice: the later token
}

int32_t AddedTokenMatcher::LongestAt(std::string_view text, size_t at,
                                     size_t* length) const {
  int32_t node = 0, found = -1;
  for (size_t i = at; i < text.size(); ++i) {
    const uint64_t edge = (uint64_t{static_cast<uint32_t>(node)} << 8) |
                          static_cast<unsigned char>(text[i]);
    const auto it = edges_.find(edge);
    if (it == edges_.end()) break;
    node = it->second;
    if (nodes_[node].token >= 0) {
      found = nodes_[node].token;
      *length = i + 1 - at;
    }
  }
  return found;
}

namespace {

// The end of the run of valid UTF-8 that starts at `begin`: a byte that
// starts no valid sequence stops it (the NFC and the regex take valid text;
// such a byte passes through as itself).
size_t ValidUtf8End(std::string_view text, size_t begin) {
  size_t end = begin, len = 0;
  while (end < text.size() &&
         DecodeUtf8(text, end, &len) != kInvalidCodePoint) {
    end += len;
  }
  return end;
}

// ---------------------------------------------------------------------------
// Normalizers.

// NFC of each valid UTF-8 run (`tokenizers` only ever sees valid UTF-8;
// other bytes pass through).
void AppendNfc(std::string_view text, std::string* out) {
  if (std::all_of(text.begin(), text.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x80;
      })) {
    out->append(text);
    return;
  }
  for (size_t i = 0; i < text.size();) {
    const size_t end = ValidUtf8End(text, i);
    if (end > i) {
      utf8proc_uint8_t* composed = nullptr;
      const utf8proc_ssize_t n = utf8proc_map(
          reinterpret_cast<const utf8proc_uint8_t*>(text.data() + i),
          static_cast<utf8proc_ssize_t>(end - i), &composed,
          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
      if (n >= 0) {
        out->append(reinterpret_cast<const char*>(composed),
                    static_cast<size_t>(n));
      } else {
        out->append(text.substr(i, end - i));
      }
      std::free(composed);
    }
    if (end < text.size()) out->push_back(text[end]);
    i = end < text.size() ? end + 1 : end;
  }
}

void ReplaceAll(std::string_view text, std::string_view pattern,
                std::string_view content, std::string* out) {
  for (size_t i = 0;;) {
    const size_t at = text.find(pattern, i);
    if (at == std::string_view::npos) {
      out->append(text.substr(i));
      return;
    }
    out->append(text.substr(i, at - i));
    out->append(content);
    i = at + pattern.size();
  }
}

}  // namespace

void Normalize(const HfTokenizer::Impl& impl, std::string_view text,
               std::string* out) {
  std::string current(text), next;
  for (const NormalizerStep& step : impl.normalizers) {
    next.clear();
    switch (step.kind) {
      case NormalizerStep::Kind::kNfc:
        AppendNfc(current, &next);
        break;
      case NormalizerStep::Kind::kPrepend:
        if (!current.empty()) next = step.content;
        next += current;
        break;
      case NormalizerStep::Kind::kReplace:
        ReplaceAll(current, step.pattern, step.content, &next);
        break;
    }
    current.swap(next);
  }
  out->append(current);
}

namespace {

// ---------------------------------------------------------------------------
// Added tokens.

struct Segment {
  size_t begin, end;
  int32_t added;  // index into Impl::added, -1 for text
};

bool IsWordChar(std::string_view text, size_t at) {
  size_t len;
  const char32_t cp = DecodeUtf8(text, at, &len);
  return cp == '_' || IsLetter(cp) || IsNumber(cp);
}

// The start of the code point that ends at text[end - 1].
size_t LastCharStart(std::string_view text, size_t end) {
  size_t at = end - 1;
  while (at > 0 && end - at < 4 &&
         (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) {
    --at;
  }
  size_t len;
  return DecodeUtf8(text, at, &len) != kInvalidCodePoint && at + len == end
             ? at
             : end - 1;
}

// Where the white space ending at `end` starts (not before `floor`).
size_t SpaceStartBefore(std::string_view text, size_t end, size_t floor) {
  while (end > floor) {
    const size_t at = LastCharStart(text, end);
    size_t len;
    if (!IsSpace(DecodeUtf8(text, at, &len))) break;
    end = at;
  }
  return end;
}

size_t SpaceEndAfter(std::string_view text, size_t begin) {
  size_t len;
  while (begin < text.size() && IsSpace(DecodeUtf8(text, begin, &len)))
    begin += len;
  return begin;
}

// `text` cut around the added tokens `matcher` finds, leftmost-longest,
// with lstrip, rstrip and single_word as `tokenizers` applies them.
void SplitAdded(const HfTokenizer::Impl& impl, const AddedTokenMatcher& matcher,
                std::string_view text, std::vector<Segment>* segments) {
  segments->clear();
  size_t done = 0;
  for (size_t i = 0; !matcher.empty() && i < text.size();) {
    size_t length = 0;
    const int32_t found = matcher.MayStart(static_cast<unsigned char>(text[i]))
                              ? matcher.LongestAt(text, i, &length)
                              : -1;
    if (found < 0) {
      ++i;
      continue;
    }
    const AddedToken& token = impl.added[found];
    size_t start = i, stop = i + length;
    i = stop;
    if (token.single_word &&
        ((start > 0 && IsWordChar(text, LastCharStart(text, start))) ||
         (stop < text.size() && IsWordChar(text, stop)))) {
      continue;
    }
    if (token.lstrip) start = SpaceStartBefore(text, start, done);
    if (token.rstrip) stop = i = SpaceEndAfter(text, stop);
    if (done < start) segments->push_back({done, start, -1});
    segments->push_back({start, stop, found});
    done = stop;
  }
  if (done < text.size()) segments->push_back({done, text.size(), -1});
}

// ---------------------------------------------------------------------------
// Pre-tokenizers.

struct Piece {
  std::string_view text;
  bool at_start;  // begins at the input's first byte (Metaspace's "first")
};

struct Match {
  size_t begin, end;
  bool matched;
};

// The pattern's matches and the gaps between them, covering `text`. Regexes
// run on valid UTF-8 only: other bytes are gaps.
Status FindMatches(const PreTokenizerStep& step, std::string_view text,
                   std::vector<std::pair<size_t, size_t>>* found,
                   std::vector<Match>* out) {
  found->clear();
  out->clear();
  if (step.regex) {
    for (size_t i = 0; i < text.size();) {
      const size_t end = ValidUtf8End(text, i);
      const size_t before = found->size();
      ATTN_RETURN_IF_ERROR(step.regex->FindAll(text.substr(i, end - i), found));
      for (size_t k = before; k < found->size(); ++k) {
        (*found)[k].first += i, (*found)[k].second += i;
      }
      i = end < text.size() ? end + 1 : end;
    }
  } else if (!step.literal.empty()) {
    for (size_t at = text.find(step.literal); at != std::string_view::npos;
         at = text.find(step.literal, at + step.literal.size())) {
      found->emplace_back(at, at + step.literal.size());
    }
  }
  size_t previous = 0;
  for (const auto& [begin, end] : *found) {
    if (previous != begin) out->push_back({previous, begin, false});
    out->push_back({begin, end, true});
    previous = end;
  }
  if (previous != text.size()) out->push_back({previous, text.size(), false});
  if (step.invert) {
    for (Match& m : *out) m.matched = !m.matched;
  }
  return {};
}

// `tokenizers`' NormalizedString::split: which spans of `matches` become
// pieces under `behavior` (a removed one has `matched` set).
void ApplyBehavior(SplitBehavior behavior, std::vector<Match>* matches) {
  std::vector<Match>& m = *matches;
  std::vector<Match> out;
  bool previous = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      return;
    case SplitBehavior::kIsolated:
      for (Match& x : m) x.matched = false;
      return;
    case SplitBehavior::kContiguous:
    case SplitBehavior::kMergedWithPrevious:
      for (const Match& x : m) {
        const bool join = behavior == SplitBehavior::kContiguous
                              ? x.matched == previous
                              : x.matched && !previous;
        if (join && !out.empty()) {
          out.back().end = x.end;
        } else {
          out.push_back({x.begin, x.end, false});
        }
        previous = x.matched;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = m.rbegin(); it != m.rend(); ++it) {
        if (it->matched && !previous && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back({it->begin, it->end, false});
        }
        previous = it->matched;
      }
      std::reverse(out.begin(), out.end());
      break;
  }
  m.swap(out);
}

struct Workspace {
  std::deque<std::string> storage;  // texts a step rewrote; stable addresses
  std::vector<Piece> pieces, next;
  std::vector<std::pair<size_t, size_t>> found;
  std::vector<Match> matches;
  std::vector<Segment> segments, sub_segments;
  std::vector<int32_t> symbols;
  BpeScratch bpe;
};

Status SplitPiece(const PreTokenizerStep& step, const Piece& piece,
                  Workspace* ws) {
  ATTN_RETURN_IF_ERROR(FindMatches(step, piece.text, &ws->found, &ws->matches));
  ApplyBehavior(step.behavior, &ws->matches);
  for (const Match& m : ws->matches) {
    if (m.matched || m.begin == m.end) continue;
    ws->next.push_back({piece.text.substr(m.begin, m.end - m.begin),
                        piece.at_start && m.begin == 0});
  }
  return {};
}

// Metaspace: spaces become the replacement, which is prepended per the
// scheme, then (split) each replacement starts a piece.
Status MetaspacePiece(const PreTokenizerStep& step, const Piece& piece,
                      Workspace* ws) {
  std::string& text = ws->storage.emplace_back();
  const bool prepend =
      !(piece.text.size() >= step.literal.size() &&
        piece.text.substr(0, step.literal.size()) == step.literal) &&
      (step.prepend == PreTokenizerStep::Prepend::kAlways ||
       (step.prepend == PreTokenizerStep::Prepend::kFirst && piece.at_start));
  if (prepend) text = step.literal;
  ReplaceAll(piece.text, " ", step.literal, &text);
  const Piece whole{text, piece.at_start};
  if (!step.split) {
    ws->next.push_back(whole);
    return {};
  }
  PreTokenizerStep by_replacement;
  by_replacement.kind = PreTokenizerStep::Kind::kSplit;
  by_replacement.literal = step.literal;
  by_replacement.behavior = SplitBehavior::kMergedWithNext;
  return SplitPiece(by_replacement, whole, ws);
}

Status PreTokenizeStep(const PreTokenizerStep& step, const Piece& piece,
                       Workspace* ws) {
  switch (step.kind) {
    case PreTokenizerStep::Kind::kSplit:
      return SplitPiece(step, piece, ws);
    case PreTokenizerStep::Kind::kMetaspace:
      return MetaspacePiece(step, piece, ws);
    case PreTokenizerStep::Kind::kByteLevel:
      break;
  }
  Piece spaced = piece;
  if (step.add_prefix_space && (piece.text.empty() || piece.text[0] != ' ')) {
    std::string& text = ws->storage.emplace_back(" ");
    text.append(piece.text);
    spaced.text = text;
  }
  if (!step.regex) {
    ws->next.push_back(spaced);
    return {};
  }
  return SplitPiece(step, spaced, ws);  // Isolated, not inverted
}

// ---------------------------------------------------------------------------
// The BPE model.

// The ids of pieces met before on this thread, per tokenizer: text is
// mostly words said again.
struct PieceCache {
  static constexpr size_t kMaxEntries = 1 << 16;
  static constexpr size_t kMaxPieceBytes = 64;
  uint64_t instance = 0;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>> spans;
  std::vector<int32_t> ids;
};

// `tokenizers`' BPE::merge_word: a symbol per unit (byte or character),
// byte fallback, then <unk>, fused when fuse_unk.
void PieceSymbols(const HfTokenizer::Impl& impl, std::string_view piece,
                  std::vector<int32_t>* symbols) {
  symbols->clear();
  int32_t unk = -1;
  size_t len = 1;
  for (size_t i = 0; i < piece.size(); i += len) {
    const auto byte = static_cast<unsigned char>(piece[i]);
    int32_t id;
    if (impl.byte_level || byte < 0x80) {
      len = 1;
      id = impl.unit_ids[byte];
    } else {
      DecodeUtf8(piece, i, &len);
      id = impl.vocab.Find(piece.substr(i, len));
    }
    if (id >= 0) {
      if (unk >= 0) symbols->push_back(unk), unk = -1;
      symbols->push_back(id);
      continue;
    }
    const bool spelled =
        impl.byte_fallback &&
        std::all_of(piece.begin() + i, piece.begin() + i + len, [&](char c) {
          return impl.byte_fallback_ids[static_cast<unsigned char>(c)] >= 0;
        });
    if (spelled) {
      for (size_t k = i; k < i + len; ++k) {
        symbols->push_back(
            impl.byte_fallback_ids[static_cast<unsigned char>(piece[k])]);
      }
      continue;
    }
    if (impl.unk_id < 0) continue;  // `tokenizers` drops it
    if (unk >= 0 && !impl.fuse_unk) symbols->push_back(unk);
    unk = impl.unk_id;
  }
  if (unk >= 0) symbols->push_back(unk);
}

void EncodePiece(const HfTokenizer::Impl& impl, std::string_view piece,
                 Workspace* ws, std::vector<int64_t>* out) {
  if (impl.ignore_merges) {
    const int32_t id = impl.vocab.Find(piece);
    if (id >= 0) {
      out->push_back(id);
      return;
    }
  }
  thread_local PieceCache cache;
  const bool cached = piece.size() <= PieceCache::kMaxPieceBytes;
  if (cached) {
    if (cache.instance != impl.instance ||
        cache.spans.size() >= PieceCache::kMaxEntries) {
      cache.spans.clear();
      cache.ids.clear();
      cache.instance = impl.instance;
    }
    const auto it = cache.spans.find(std::string(piece));
    if (it != cache.spans.end()) {
      const auto [offset, count] = it->second;
      out->insert(out->end(), cache.ids.begin() + offset,
                  cache.ids.begin() + offset + count);
      return;
    }
  }
  PieceSymbols(impl, piece, &ws->symbols);
  JoinPairs(impl.merges, &ws->symbols, &ws->bpe);
  out->insert(out->end(), ws->symbols.begin(), ws->symbols.end());
  if (cached) {
    cache.spans.emplace(std::string(piece),
                        std::pair{static_cast<uint32_t>(cache.ids.size()),
                                  static_cast<uint32_t>(ws->symbols.size())});
    cache.ids.insert(cache.ids.end(), ws->symbols.begin(), ws->symbols.end());
  }
}

// A SentencePiece piece word by word where no merge can cross (split_words
// in hf_impl.h): before each "▁" that follows a character not glued to it.
void EncodeWords(const HfTokenizer::Impl& impl, std::string_view piece,
                 Workspace* ws, std::vector<int64_t>* out) {
  constexpr std::string_view kSpace = "\xe2\x96\x81";
  size_t begin = 0;
  for (size_t at = piece.find(kSpace, 1); at != std::string_view::npos;
       at = piece.find(kSpace, at + kSpace.size())) {
    const std::string_view before = piece.substr(0, at);
    const size_t last = LastCharStart(before, at);
    const std::string_view glued = before.substr(last);
    if (glued == kSpace || std::find(impl.glued_before_space.begin(),
                                     impl.glued_before_space.end(),
                                     glued) != impl.glued_before_space.end()) {
      continue;
    }
    EncodePiece(impl, piece.substr(begin, at - begin), ws, out);
    begin = at;
  }
  EncodePiece(impl, piece.substr(begin), ws, out);
}

// One normalized stretch of text between added tokens: pre-tokenized, each
// piece through the model.
Status EncodeNormalized(const HfTokenizer::Impl& impl, std::string_view text,
                        bool at_start, Workspace* ws,
                        std::vector<int64_t>* out) {
  ws->pieces.assign(1, Piece{text, at_start});
  for (const PreTokenizerStep& step : impl.pre_tokenizers) {
    ws->next.clear();
    for (const Piece& piece : ws->pieces) {
      ATTN_RETURN_IF_ERROR(PreTokenizeStep(step, piece, ws));
    }
    ws->pieces.swap(ws->next);
  }
  for (const Piece& piece : ws->pieces) {
    if (piece.text.empty()) continue;
    if (impl.split_words && !impl.ignore_merges) {
      EncodeWords(impl, piece.text, ws, out);
    } else {
      EncodePiece(impl, piece.text, ws, out);
    }
  }
  return {};
}

// A stretch of input between raw added tokens: normalized, cut around the
// normalized added tokens, the rest encoded.
Status EncodeStretch(const HfTokenizer::Impl& impl, std::string_view text,
                     bool at_start, Workspace* ws, std::vector<int64_t>* out) {
  std::string& normalized = ws->storage.emplace_back();
  if (impl.normalizers.empty()) {
    normalized.assign(text);
  } else {
    Normalize(impl, text, &normalized);
  }
  std::vector<Segment> segments;
  SplitAdded(impl, impl.normalized_matcher, normalized, &segments);
  for (const Segment& s : segments) {
    if (s.added >= 0) {
      out->push_back(impl.added[s.added].id);
      continue;
    }
    ATTN_RETURN_IF_ERROR(EncodeNormalized(
        impl, std::string_view(normalized).substr(s.begin, s.end - s.begin),
        at_start && s.begin == 0, ws, out));
  }
  return {};
}

// ---------------------------------------------------------------------------
// Decoders, on tokens as strings as in `tokenizers`. `raw`: one token's
// bytes (TokenBytes), invalid UTF-8 kept and nothing joined or stripped.

std::string ByteLevelBytes(std::string_view token) {
  std::string bytes;
  size_t len;
  for (size_t i = 0; i < token.size(); i += len) {
    const int byte = CharByte(DecodeUtf8(token, i, &len));
    if (byte < 0) return std::string(token);  // as `tokenizers`: kept whole
    bytes.push_back(static_cast<char>(byte));
  }
  return bytes;
}

// "<0xNN>" as its byte, or -1.
int FallbackByte(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>')
    return -1;
  int value = 0;
  for (const char c : token.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                             : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

void ByteFallbackStep(bool raw, std::vector<std::string>* tokens) {
  std::vector<std::string> out;
  std::string bytes;
  const auto flush = [&] {
    if (bytes.empty()) return;
    if (raw || Utf8Lossy(bytes) == bytes) {
      out.push_back(bytes);
    } else {
      for (size_t k = 0; k < bytes.size(); ++k)
        out.emplace_back("\xEF\xBF\xBD");
    }
    bytes.clear();
  };
  for (std::string& token : *tokens) {
    const int byte = FallbackByte(token);
    if (byte >= 0) {
      bytes.push_back(static_cast<char>(byte));
      continue;
    }
    flush();
    out.push_back(std::move(token));
  }
  flush();
  tokens->swap(out);
}

// Strip: up to `start` leading and `stop` trailing `content` characters of
// each token.
void StripStep(const DecoderStep& step, std::vector<std::string>* tokens) {
  const std::string_view c = step.content;
  for (std::string& token : *tokens) {
    size_t begin = 0, end = token.size();
    for (size_t k = 0; k < step.start && !c.empty() &&
                       std::string_view(token).substr(begin, c.size()) == c;
         ++k) {
      begin += c.size();
    }
    for (size_t k = 0;
         k < step.stop && !c.empty() && end >= begin + c.size() &&
         std::string_view(token).substr(end - c.size(), c.size()) == c;
         ++k) {
      end -= c.size();
    }
    token = token.substr(begin, end - begin);
  }
}

void DecoderStepOn(const DecoderStep& step, bool raw,
                   std::vector<std::string>* tokens) {
  switch (step.kind) {
    case DecoderStep::Kind::kReplace:
      for (std::string& token : *tokens) {
        std::string replaced;
        ReplaceAll(token, step.pattern, step.content, &replaced);
        token.swap(replaced);
      }
      return;
    case DecoderStep::Kind::kByteFallback:
      return ByteFallbackStep(raw, tokens);
    case DecoderStep::Kind::kFuse: {
      if (raw) return;
      std::string joined;
      for (const std::string& token : *tokens) joined += token;
      tokens->assign(1, std::move(joined));
      return;
    }
    case DecoderStep::Kind::kStrip:
      if (!raw) StripStep(step, tokens);
      return;
    case DecoderStep::Kind::kByteLevel: {
      std::string bytes;
      for (const std::string& token : *tokens) bytes += ByteLevelBytes(token);
      tokens->assign(1, raw ? std::move(bytes) : Utf8Lossy(bytes));
      return;
    }
    case DecoderStep::Kind::kMetaspace:
      for (size_t i = 0; i < tokens->size(); ++i) {
        std::string replaced;
        const bool drop = !raw && i == 0 && step.prepend_first;
        ReplaceAll((*tokens)[i], step.content, drop ? "" : " ", &replaced);
        (*tokens)[i].swap(replaced);
      }
      return;
  }
}

Status CheckId(const HfTokenizer::Impl& impl, int64_t id) {
  if (id >= 0 && id < impl.vocab_size && impl.tokens[id].known) return {};
  return InvalidArgument("no token has id " + std::to_string(id) +
                         " (the vocabulary's ids are below " +
                         std::to_string(impl.vocab_size) + ")");
}

}  // namespace

// ---------------------------------------------------------------------------
// HfTokenizer.

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;
HfTokenizer::~HfTokenizer() = default;

Result<HfTokenizer> HfTokenizer::Load(const std::string& dir,
                                      uint64_t max_memory,
                                      uint64_t held_bytes) {
  auto impl = std::make_unique<Impl>();
  ATTN_RETURN_IF_ERROR(
      ReadHfTokenizer(dir, max_memory, held_bytes, impl.get()));
  return HfTokenizer(std::move(impl));
}

Result<std::vector<int64_t>> HfTokenizer::Encode(
    std::string_view text, bool add_special_tokens) const {
  const Impl& impl = *impl_;
  Workspace ws;
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<Segment> segments;
  SplitAdded(impl, impl.raw_matcher, text, &segments);
  for (const Segment& s : segments) {
    if (s.added >= 0) {
      ids.push_back(impl.added[s.added].id);
      continue;
    }
    ATTN_RETURN_IF_ERROR(EncodeStretch(
        impl, text.substr(s.begin, s.end - s.begin), s.begin == 0, &ws, &ids));
  }
  if (!add_special_tokens || !impl.has_template) return ids;
  std::vector<int64_t> framed;
  framed.reserve(ids.size() + impl.template_ids.size());
  for (const int32_t id : impl.template_ids) {
    if (id >= 0) {
      framed.push_back(id);
    } else {
      framed.insert(framed.end(), ids.begin(), ids.end());
    }
  }
  return framed;
}

Result<std::string> HfTokenizer::TokenBytes(int64_t id) const {
  ATTN_RETURN_IF_ERROR(CheckId(*impl_, id));
  std::vector<std::string> tokens{
      std::string(impl_->Token(static_cast<int32_t>(id)))};
  for (const DecoderStep& step : impl_->decoders)
    DecoderStepOn(step, true, &tokens);
  std::string bytes;
  for (const std::string& token : tokens) bytes += token;
  return bytes;
}

Result<std::string> HfTokenizer::DecodeText(const int64_t* ids,
                                            size_t count) const {
  const Impl& impl = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    ATTN_RETURN_IF_ERROR(CheckId(impl, ids[i]));
    tokens.emplace_back(impl.Token(static_cast<int32_t>(ids[i])));
  }
  if (!impl.has_decoder) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i)
      joined += (i ? " " : "") + tokens[i];
    return Utf8Lossy(joined);
  }
  for (const DecoderStep& step : impl.decoders)
    DecoderStepOn(step, false, &tokens);
  std::string text;
  for (const std::string& token : tokens) text += token;
  return text;
}

const char* HfTokenizer::kind() const {
  return impl_->byte_level ? "byte-level-bpe" : "sentencepiece-bpe";
}
int64_t HfTokenizer::vocab_size() const { return impl_->vocab_size; }
uint64_t HfTokenizer::memory_bytes() const {
  return impl_->token_text.capacity() +
         impl_->tokens.capacity() * sizeof(Impl::Span) +
         impl_->vocab.memory_bytes() + impl_->merges.memory_bytes();
}
const SpecialTokens& HfTokenizer::special_tokens() const {
  return impl_->special;
}

}  // namespace attn::tokenizer
