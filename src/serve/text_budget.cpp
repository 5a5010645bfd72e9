#include "serve/text_budget.h"

#include <algorithm>

namespace edgelm::serve {

uint64_t TextBudget::take(uint64_t n, int cls, std::chrono::milliseconds wait) {
  n = std::min(n, capacity_);
  std::unique_lock<std::mutex> lk(mu_);
  const std::pair<int, uint64_t> me{cls, tickets_++};
  waiting_.insert(me);
  const bool had = cv_.wait_for(
      lk, wait, [&] { return stopped_ || (*waiting_.begin() == me && used_ + n <= capacity_); });
  waiting_.erase(me);
  if (!had || stopped_) {
    cv_.notify_all();  // the next in line may be able to go now
    return 0;
  }
  used_ += n;
  cv_.notify_all();  // the next in line may fit too
  return n;
}

void TextBudget::give(uint64_t n) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    used_ -= std::min(n, used_);
  }
  cv_.notify_all();
}

void TextBudget::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

uint64_t TextBudget::in_use() const {
  std::lock_guard<std::mutex> lk(mu_);
  return used_;
}

size_t TextBudget::waiting() const {
  std::lock_guard<std::mutex> lk(mu_);
  return waiting_.size();
}

}  // namespace edgelm::serve
