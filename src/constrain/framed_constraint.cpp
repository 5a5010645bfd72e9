#include "constrain/framed_constraint.h"

#include <algorithm>

namespace edgelm::constrain {

void FramedConstraint::State::copy_from(const State& o) {
  m.copy_from(o.m);
  phase = o.phase;
  pos = o.pos;
  alt = o.alt;
  frames = o.frames;
  alive = o.alive;
}

Result<std::unique_ptr<FramedConstraint>> FramedConstraint::make(
    std::vector<FrameAlternative> alts, std::string suffix, std::string joiner, int max_frames,
    std::shared_ptr<const TokenVocab> vocab) {
  if (alts.empty() || alts.size() > static_cast<size_t>(kMaxAlternatives))
    return make_error("a framed constraint takes 1 to {} alternatives, got {}", kMaxAlternatives,
                      alts.size());
  if (max_frames < 1) return make_error("a framed constraint needs at least one frame");
  for (size_t i = 0; i < alts.size(); ++i) {
    if (!alts[i].schema || alts[i].schema->root < 0)
      return make_error("alternative {} has no schema", i);
    if (alts[i].prefix.empty()) return make_error("alternative {} has an empty prefix", i);
    for (size_t j = 0; j < alts.size(); ++j)
      if (i != j && alts[j].prefix.starts_with(alts[i].prefix))
        return make_error("the prefix of alternative {} starts the prefix of alternative {}", i, j);
  }
  return std::unique_ptr<FramedConstraint>(new FramedConstraint(
      std::move(alts), std::move(suffix), std::move(joiner), max_frames, std::move(vocab)));
}

FramedConstraint::FramedConstraint(std::vector<FrameAlternative> alts, std::string suffix,
                                   std::string joiner, int max_frames,
                                   std::shared_ptr<const TokenVocab> vocab)
    : alts_(std::move(alts)),
      suffix_(std::move(suffix)),
      joiner_(std::move(joiner)),
      max_frames_(max_frames),
      vocab_(std::move(vocab)),
      state_(*alts_[0].schema),
      first_(*alts_[0].schema),
      trial_(*alts_[0].schema),
      scratch_(*alts_[0].schema) {
  for (const FrameAlternative& a : alts_)
    min_value_.push_back(a.schema->nodes[static_cast<size_t>(a.schema->root)].min_bytes);
  for (size_t k = 0; k < alts_.size(); ++k) state_.alive.set(k);
}

int FramedConstraint::prefix_len(const State& s, int k) const {
  return static_cast<int>(alts_[static_cast<size_t>(k)].prefix.size() +
                          (s.frames > 0 ? joiner_.size() : 0));
}

char FramedConstraint::prefix_byte(const State& s, int k, int pos) const {
  const size_t p = static_cast<size_t>(pos);
  if (s.frames > 0) {
    if (p < joiner_.size()) return joiner_[p];
    return alts_[static_cast<size_t>(k)].prefix[p - joiner_.size()];
  }
  return alts_[static_cast<size_t>(k)].prefix[p];
}

bool FramedConstraint::feed(State& s, uint8_t b) {
  switch (s.phase) {
    case kPrefix: {
      if (s.frames >= max_frames_) return false;
      int chosen = -1;
      bool any = false;
      for (size_t k = 0; k < alts_.size(); ++k) {
        if (!s.alive.test(k)) continue;
        const int kk = static_cast<int>(k);
        if (s.pos < prefix_len(s, kk) && static_cast<uint8_t>(prefix_byte(s, kk, s.pos)) == b) {
          any = true;
          if (s.pos + 1 == prefix_len(s, kk)) chosen = kk;
        } else {
          s.alive.reset(k);
        }
      }
      if (!any) return false;
      ++s.pos;
      if (chosen >= 0) {  // no other prefix continues this one (checked in make)
        s.phase = kValue;
        s.alt = chosen;
        s.pos = 0;
        s.m = Matcher(*alts_[static_cast<size_t>(chosen)].schema);
      }
      return true;
    }
    case kValue: {
      if (!s.m.done()) {
        if (!s.m.complete()) return s.m.feed(b);
        // Complete but open to more (a number): the byte continues it if it can.
        scratch_.m.copy_from(s.m);
        if (scratch_.m.feed(b)) {
          s.m.copy_from(scratch_.m);
          return true;
        }
      }
      s.phase = kSuffix;
      s.pos = 0;
      [[fallthrough]];
    }
    case kSuffix: {
      if (s.pos >= static_cast<int>(suffix_.size()) ||
          static_cast<uint8_t>(suffix_[static_cast<size_t>(s.pos)]) != b)
        return false;
      if (++s.pos == static_cast<int>(suffix_.size())) {
        ++s.frames;
        s.phase = kPrefix;
        s.pos = 0;
        s.alt = -1;
        for (size_t k = 0; k < alts_.size(); ++k) s.alive.set(k);
      }
      return true;
    }
  }
  return false;
}

bool FramedConstraint::feed(State& s, std::string_view bytes) {
  for (char c : bytes)
    if (!feed(s, static_cast<uint8_t>(c))) return false;
  return true;
}

int FramedConstraint::min_close(const State& s) const {
  const int sfx = static_cast<int>(suffix_.size());
  switch (s.phase) {
    case kPrefix: {
      if (complete(s)) return 0;
      int best = kUnbounded;
      for (size_t k = 0; k < alts_.size(); ++k)
        if (s.alive.test(k))
          best = std::min(best, prefix_len(s, static_cast<int>(k)) - s.pos + min_value_[k] + sfx);
      return best;
    }
    case kValue:
      return s.m.min_close() + sfx;
    case kSuffix:
      return sfx - s.pos;
  }
  return kUnbounded;
}

bool FramedConstraint::allows(int32_t token, int left) {
  if (token < 0 || token >= vocab_->n_vocab()) return false;
  if (vocab_->eog(token)) return complete(state_);
  const std::string_view p = vocab_->piece(token);
  if (p.empty()) return false;
  trial_.copy_from(state_);
  return feed(trial_, p) && min_close(trial_) <= left;
}

int FramedConstraint::mask(const float* logits, float* out, int n_vocab, int left) {
  int allowed = 0;
  const bool end_ok = complete(state_);
  auto keep = [&](int32_t t) {
    out[t] = logits[t];
    ++allowed;
  };
  for (int b = 0; b < 256; ++b) {
    const std::span<const int32_t> bucket = vocab_->starting_with(b);
    if (bucket.empty()) continue;
    first_.copy_from(state_);
    // A refused first byte refuses its whole group (end-of-generation tokens aside).
    const bool ok = feed(first_, static_cast<uint8_t>(b));
    if (!ok && !end_ok) continue;
    for (int32_t t : bucket) {
      if (t >= n_vocab) continue;
      if (vocab_->eog(t)) {
        if (end_ok) keep(t);
        continue;
      }
      if (!ok) continue;
      const std::string_view p = vocab_->piece(t);
      if (p.size() == 1) {
        if (min_close(first_) <= left) keep(t);
      } else {
        trial_.copy_from(first_);
        if (feed(trial_, p.substr(1)) && min_close(trial_) <= left) keep(t);
      }
    }
  }
  if (end_ok)
    for (int32_t t : vocab_->starting_with(256))
      if (t < n_vocab && vocab_->eog(t)) keep(t);
  return allowed;
}

void FramedConstraint::accept(int32_t token) {
  if (token < 0 || token >= vocab_->n_vocab() || vocab_->eog(token)) return;
  feed(state_, vocab_->piece(token));
}

}  // namespace edgelm::constrain
