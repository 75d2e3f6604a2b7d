// The rendered API responses of every snapshot a `memsnap serve` session holds, kept within one
// byte budget (memsnap serve --cache-mb): a response counts its text, its gzip once made, and a
// fixed overhead with its key; past the budget the least recently used are dropped, and made
// again when asked for. The budget bounds what is kept, not what is being sent: a response
// being written to a client lives until it is sent.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "web/rendered_body.h"

namespace memsnap::web {

class ResponseCache {
 public:
  static constexpr uint64_t kDefaultBudgetBytes = uint64_t{256} << 20;
  // Counted for each response besides its bytes (the entry, its key, the map and list nodes).
  static constexpr uint64_t kEntryOverheadBytes = 256;

  explicit ResponseCache(uint64_t budget_bytes = kDefaultBudgetBytes);
  ~ResponseCache();
  ResponseCache(const ResponseCache&) = delete;
  ResponseCache& operator=(const ResponseCache&) = delete;

  // `owner`'s response `key`, made by `render` the first time, outside any lock. A request that
  // comes while another thread (the warm-up, another request) is rendering the same key waits
  // for that answer rather than rendering it again; when `render` throws, every waiter gets the
  // error and nothing is kept. A response bigger than the whole budget is answered, not kept.
  Body get(const void* owner, const std::string& key, const std::function<std::string()>& render);
  // Drops what `owner` (a snapshot being freed) keeps.
  void forget(const void* owner);

  uint64_t budget_bytes() const;
  uint64_t bytes() const;  // what the kept responses count now
  size_t entries() const;  // kept, or being made

  struct State;

 private:
  std::shared_ptr<State> state_;  // bodies hold it weakly, to count their gzip when it is made
};

}  // namespace memsnap::web
