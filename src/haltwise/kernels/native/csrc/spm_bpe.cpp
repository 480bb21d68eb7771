// A SentencePiece-BPE encoder over a vocabulary alone, for GGUF vocabularies whose merges are implied by
// their pieces (Gemma: tokenizer/spm_native.py says when one qualifies). It computes the ids `tokenizers`
// computes for the same tokenizer with the merges gguf_sentencepiece.rebuild_merges writes, without the
// ~515k-entry merge table that takes `tokenizers` ~0.5 s to build at every start.
//
// Invariants (each mirrors `tokenizers` 0.2x: added_vocabulary.rs, models/bpe/{model,word}.rs):
// - added tokens split the raw text first, leftmost-longest; with specials_as_text a special token's match is
//   left as text (the span it matched is not searched again), as encode_special_tokens does;
// - every other span has " " replaced by "▁" and is one BPE word (the Split(" ") pre-tokenizer then finds
//   no space); a character no piece spells becomes the <0xNN> pieces of its UTF-8 bytes;
// - two adjacent symbols merge iff their concatenation is a piece; rank = (that piece's id, then the longer
//   left part first), the order rebuild_merges gives Gemma's merges; a min-heap on (rank, position) runs them,
//   and a popped entry is stale only when the pair at its position no longer merges into the same piece.
#include <torch/extension.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <queue>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace haltwise_native {
namespace {

namespace py = pybind11;

constexpr std::string_view kSpace = "\xE2\x96\x81";   // U+2581, SentencePiece's visible space

struct Added {
  int32_t id;
  bool special;
};

struct Symbol {
  int32_t id, prev, next;
  bool alive;
};

struct Candidate {
  uint64_t rank;
  int32_t pos, merged;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

int32_t code_points(std::string_view s) {
  int32_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

class SpmBpe {
 public:
  // pieces: the vocabulary's pieces, UTF-8, NUL-joined; ids: their ids as native int32 (a repeated piece
  // keeps the last id, as the Python dict does); added: (content, id, special) of every added token.
  SpmBpe(const std::string& pieces, const std::string& ids, const std::vector<std::tuple<std::string, int32_t, bool>>& added)
      : store_(pieces) {
    const size_t n = ids.size() / sizeof(int32_t);
    std::vector<int32_t> id_of(n);
    std::memcpy(id_of.data(), ids.data(), n * sizeof(int32_t));
    vocab_.reserve(n * 2);
    size_t start = 0, k = 0;
    for (size_t i = 0; i <= store_.size(); ++i) {
      if (i < store_.size() && store_[i] != '\0') continue;
      if (k >= n) throw std::invalid_argument("SpmBpe: more pieces than ids");
      vocab_[std::string_view(store_).substr(start, i - start)] = id_of[k++];
      start = i + 1;
    }
    if (k != n) throw std::invalid_argument("SpmBpe: fewer pieces than ids");
    int32_t top = -1;
    for (const auto& [piece, id] : vocab_) top = std::max(top, id);
    piece_of_.assign(top + 1, std::string_view());
    left_len_.assign(top + 1, 0);
    for (const auto& [piece, id] : vocab_) {
      piece_of_[id] = piece;
      left_len_[id] = code_points(piece);
    }
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      auto it = vocab_.find(name);
      if (it == vocab_.end()) throw std::invalid_argument(std::string("SpmBpe: no byte piece ") + name);
      byte_id_[b] = it->second;
    }
    added_store_.reserve(added.size());
    for (const auto& [content, id, special] : added) added_store_.push_back(content);
    for (size_t i = 0; i < added.size(); ++i) {
      const std::string& content = added_store_[i];
      if (content.empty()) continue;
      added_[content] = Added{std::get<1>(added[i]), std::get<2>(added[i])};
      first_byte_[static_cast<unsigned char>(content[0])] = true;
      lengths_.push_back(content.size());
    }
    std::sort(lengths_.begin(), lengths_.end(), std::greater<size_t>());
    lengths_.erase(std::unique(lengths_.begin(), lengths_.end()), lengths_.end());
  }

  std::vector<int32_t> encode(const std::string& text, bool specials_as_text) const {
    std::vector<int32_t> out;
    py::gil_scoped_release unlocked;   // reads only this object and `text`, both alive for the call
    const std::string_view all(text);
    size_t span = 0, pos = 0;
    while (pos < all.size()) {
      const Added* hit = nullptr;
      size_t len = 0;
      if (first_byte_[static_cast<unsigned char>(all[pos])]) {
        for (size_t l : lengths_) {
          if (pos + l > all.size()) continue;
          auto it = added_.find(all.substr(pos, l));
          if (it != added_.end()) {
            hit = &it->second;
            len = l;
            break;
          }
        }
      }
      if (hit == nullptr) {
        ++pos;
        continue;
      }
      if (!(specials_as_text && hit->special)) {
        encode_span(all.substr(span, pos - span), out);
        out.push_back(hit->id);
        span = pos + len;
      }
      pos += len;
    }
    encode_span(all.substr(span), out);
    return out;
  }

 private:
  // The merge of adjacent symbols a, b: false when a+b is no piece.
  bool merge_of(int32_t a, int32_t b, std::string& scratch, Candidate& c) const {
    scratch.assign(piece_of_[a]);
    scratch.append(piece_of_[b]);
    auto it = vocab_.find(scratch);
    if (it == vocab_.end()) return false;
    c.merged = it->second;
    c.rank = (static_cast<uint64_t>(static_cast<uint32_t>(it->second)) << 32) |
             static_cast<uint32_t>(0xFFFFFFFFu - static_cast<uint32_t>(left_len_[a]));
    return true;
  }

  void encode_span(std::string_view raw, std::vector<int32_t>& out) const {
    if (raw.empty()) return;
    std::string word;
    word.reserve(raw.size() + 8);
    for (char c : raw) {
      if (c == ' ') word.append(kSpace);
      else word.push_back(c);
    }
    std::vector<Symbol> sym;
    sym.reserve(word.size());
    for (size_t i = 0; i < word.size();) {
      size_t end = i + 1;
      while (end < word.size() && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) ++end;
      auto it = vocab_.find(std::string_view(word).substr(i, end - i));
      if (it != vocab_.end()) {
        sym.push_back(Symbol{it->second, 0, 0, true});
      } else {
        for (size_t j = i; j < end; ++j) sym.push_back(Symbol{byte_id_[static_cast<unsigned char>(word[j])], 0, 0, true});
      }
      i = end;
    }
    const int32_t n = static_cast<int32_t>(sym.size());
    for (int32_t i = 0; i < n; ++i) {
      sym[i].prev = i - 1;
      sym[i].next = i + 1 < n ? i + 1 : -1;
    }
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
    std::string scratch;
    Candidate c{};
    for (int32_t i = 0; i + 1 < n; ++i) {
      if (merge_of(sym[i].id, sym[i + 1].id, scratch, c)) heap.push(Candidate{c.rank, i, c.merged});
    }
    while (!heap.empty()) {
      const Candidate top = heap.top();
      heap.pop();
      Symbol& left = sym[top.pos];
      if (!left.alive || left.next < 0) continue;
      const int32_t right = left.next;
      if (!merge_of(left.id, sym[right].id, scratch, c) || c.merged != top.merged) continue;   // stale
      left.id = top.merged;
      sym[right].alive = false;
      left.next = sym[right].next;
      if (left.next >= 0) sym[left.next].prev = top.pos;
      if (left.prev >= 0 && merge_of(sym[left.prev].id, left.id, scratch, c))
        heap.push(Candidate{c.rank, left.prev, c.merged});
      if (left.next >= 0 && merge_of(left.id, sym[left.next].id, scratch, c))
        heap.push(Candidate{c.rank, top.pos, c.merged});
    }
    for (const Symbol& s : sym) {
      if (s.alive) out.push_back(s.id);
    }
  }

  std::string store_;
  std::unordered_map<std::string_view, int32_t> vocab_;
  std::vector<std::string_view> piece_of_;
  std::vector<int32_t> left_len_;
  int32_t byte_id_[256];
  std::vector<std::string> added_store_;
  std::unordered_map<std::string_view, Added> added_;
  std::vector<size_t> lengths_;   // distinct added-token lengths in bytes, longest first
  bool first_byte_[256] = {};
};

}  // namespace

void register_spm_bpe(py::module_& m) {
  py::class_<SpmBpe>(m, "SpmBpe", "SentencePiece-BPE encoder over a vocabulary with implied merges (spm_bpe.cpp)")
      .def(py::init<const std::string&, const std::string&, const std::vector<std::tuple<std::string, int32_t, bool>>&>(),
           py::arg("pieces"), py::arg("ids"), py::arg("added"))
      .def("encode", &SpmBpe::encode, "token ids of text (no BOS/EOS)", py::arg("text"),
           py::arg("specials_as_text") = false);
}

}  // namespace haltwise_native
