#include "history/trace_labels.h"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace memsnap::trace_labels {
namespace {

// Every label made in the process, by id (index 0: no label). Labels are never forgotten: an
// id may sit in a trace entry for as long as the process records.
struct LabelTable {
  std::mutex mutex;
  std::vector<TraceLabel> by_id{TraceLabel{}};
  std::map<std::pair<std::string, std::string>, LabelId> ids;
};

LabelTable& table() {
  static LabelTable* labels = new LabelTable;  // used until the last event of the process
  return *labels;
}

LabelId intern(const std::string& user_metadata, const std::string& compile_context) {
  if (user_metadata.empty() && compile_context.empty()) return kNoLabel;
  LabelTable& labels = table();
  std::lock_guard<std::mutex> lock(labels.mutex);
  auto key = std::make_pair(user_metadata, compile_context);
  if (auto found = labels.ids.find(key); found != labels.ids.end()) return found->second;
  if (labels.by_id.size() > kMaxLabels) return kOverflowLabel;
  const auto id = static_cast<LabelId>(labels.by_id.size());
  labels.by_id.push_back({user_metadata, compile_context});
  labels.ids.emplace(std::move(key), id);
  return id;
}

struct ThreadState {
  std::string user_metadata;
  std::vector<std::string> compile_contexts;  // innermost last
  LabelId label = kNoLabel;
  void relabel() {
    label = intern(user_metadata, compile_contexts.empty() ? std::string() : compile_contexts.back());
  }
};

thread_local ThreadState state;

}  // namespace

LabelId current() { return state.label; }

void set_user_metadata(std::string text) {
  state.user_metadata = std::move(text);
  state.relabel();
}

std::string user_metadata() { return state.user_metadata; }

void push_compile_context(std::string name) {
  state.compile_contexts.push_back(std::move(name));
  state.relabel();
}

void pop_compile_context() {
  if (state.compile_contexts.empty()) return;
  state.compile_contexts.pop_back();
  state.relabel();
}

TraceLabel resolve(LabelId id) {
  if (id == kNoLabel) return {};
  if (id == kOverflowLabel)
    return {"(memsnap kept the first million distinct metadata texts of this process, not this one)", ""};
  LabelTable& labels = table();
  std::lock_guard<std::mutex> lock(labels.mutex);
  return id < labels.by_id.size() ? labels.by_id[id] : TraceLabel{};
}

}  // namespace memsnap::trace_labels
