#include "web/response_cache.h"

#include <future>
#include <list>
#include <map>
#include <mutex>
#include <utility>

namespace memsnap::web {

struct ResponseCache::State {
  using Key = std::pair<uintptr_t, std::string>;
  struct Entry;
  using Entries = std::map<Key, Entry>;
  struct Entry {
    uint64_t serial = 0;  // which render made it
    std::shared_future<Body> body;
    bool made = false;
    uint64_t bytes = 0;  // counted in `total` once made
    std::list<Entries::iterator>::iterator recent;
  };

  explicit State(uint64_t budget_bytes) : budget(budget_bytes) {}

  // Counts what `key`'s response holds now (made, or its gzip made since), then keeps the
  // total within the budget. Under `mutex`.
  void recount(const Key& key, uint64_t serial) {
    const auto it = entries.find(key);
    if (it == entries.end() || it->second.serial != serial) return;  // dropped meanwhile
    Entry& entry = it->second;
    const uint64_t now = kEntryOverheadBytes + key.second.size() + entry.body.get()->bytes();
    total = total - entry.bytes + now;
    entry.bytes = now;
    entry.made = true;
    evict();
  }

  // The least recently used first; responses being made count nothing yet and stay.
  void evict() {
    auto candidate = recent.end();
    while (total > budget && candidate != recent.begin()) {
      --candidate;
      if (!(*candidate)->second.made) continue;
      const Entries::iterator victim = *candidate;
      candidate = recent.erase(candidate);
      total -= victim->second.bytes;
      entries.erase(victim);
    }
  }

  void erase(Entries::iterator it) {
    total -= it->second.bytes;
    recent.erase(it->second.recent);
    entries.erase(it);
  }

  const uint64_t budget;
  mutable std::mutex mutex;
  Entries entries;
  std::list<Entries::iterator> recent;  // most recently used first
  uint64_t total = 0;
  uint64_t renders = 0;
};

ResponseCache::ResponseCache(uint64_t budget_bytes) : state_(std::make_shared<State>(budget_bytes)) {}

ResponseCache::~ResponseCache() = default;

Body ResponseCache::get(const void* owner, const std::string& key, const std::function<std::string()>& render) {
  State::Key full_key{reinterpret_cast<uintptr_t>(owner), key};
  std::promise<Body> promise;
  uint64_t serial = 0;
  {
    std::unique_lock lock(state_->mutex);
    if (auto it = state_->entries.find(full_key); it != state_->entries.end()) {
      state_->recent.splice(state_->recent.begin(), state_->recent, it->second.recent);
      const std::shared_future<Body> known = it->second.body;
      lock.unlock();  // a render in progress is waited for without holding the cache
      return known.get();
    }
    serial = ++state_->renders;
    State::Entry entry;
    entry.serial = serial;
    entry.body = promise.get_future().share();
    const auto it = state_->entries.emplace(full_key, std::move(entry)).first;
    state_->recent.push_front(it);
    it->second.recent = state_->recent.begin();
  }
  try {
    std::weak_ptr<State> weak = state_;
    Body made = std::make_shared<const RenderedBody>(render(), [weak, full_key, serial] {
      if (const std::shared_ptr<State> state = weak.lock()) {
        std::lock_guard lock(state->mutex);
        state->recount(full_key, serial);
      }
    });
    promise.set_value(made);
    std::lock_guard lock(state_->mutex);
    state_->recount(full_key, serial);
    return made;
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard lock(state_->mutex);
    // Forgotten, unless the entry was dropped meanwhile and the key is being rendered anew.
    if (auto it = state_->entries.find(full_key); it != state_->entries.end() && it->second.serial == serial)
      state_->erase(it);
    throw;
  }
}

void ResponseCache::forget(const void* owner) {
  const uintptr_t id = reinterpret_cast<uintptr_t>(owner);
  std::lock_guard lock(state_->mutex);
  auto it = state_->entries.lower_bound({id, std::string()});
  while (it != state_->entries.end() && it->first.first == id) state_->erase(it++);
}

uint64_t ResponseCache::budget_bytes() const { return state_->budget; }

uint64_t ResponseCache::bytes() const {
  std::lock_guard lock(state_->mutex);
  return state_->total;
}

size_t ResponseCache::entries() const {
  std::lock_guard lock(state_->mutex);
  return state_->entries.size();
}

}  // namespace memsnap::web
