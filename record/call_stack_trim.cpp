#include "record/call_stack_trim.h"

#include <link.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace memsnap {
namespace {

struct Search {
  std::string_view prefix;  // match by file name, or
  uintptr_t address = 0;    // by an address inside
  std::vector<std::pair<uintptr_t, uintptr_t>> found;
};

std::string_view file_name(const char* path) {
  std::string_view name = path != nullptr ? path : "";
  const size_t slash = name.rfind('/');
  return slash == std::string_view::npos ? name : name.substr(slash + 1);
}

int visit(dl_phdr_info* info, size_t, void* data) {
  auto& search = *static_cast<Search*>(data);
  std::vector<std::pair<uintptr_t, uintptr_t>> loads;
  bool holds = false;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& header = info->dlpi_phdr[i];
    if (header.p_type != PT_LOAD) continue;
    const uintptr_t begin = info->dlpi_addr + header.p_vaddr;
    const uintptr_t end = begin + header.p_memsz;
    loads.emplace_back(begin, end);
    holds = holds || (search.address >= begin && search.address < end);
  }
  const bool named = !search.prefix.empty() && file_name(info->dlpi_name).starts_with(search.prefix);
  if (named || (search.address != 0 && holds))
    search.found.insert(search.found.end(), loads.begin(), loads.end());
  return 0;
}

}  // namespace

void CallStackTrim::add_modules(std::string_view prefix, const void* address, Kind kind) {
  Search search{prefix, reinterpret_cast<uintptr_t>(address), {}};
  dl_iterate_phdr(visit, &search);
  for (const auto& [begin, end] : search.found) ranges_.push_back({begin, end, kind});
  std::sort(ranges_.begin(), ranges_.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
}

void CallStackTrim::add_tool_module_at(const void* address) { add_modules({}, address, Kind::kTool); }
void CallStackTrim::add_tool_modules_named(std::string_view prefix) {
  if (!prefix.empty()) add_modules(prefix, nullptr, Kind::kTool);
}
void CallStackTrim::add_runtime_modules_named(std::string_view prefix) {
  if (!prefix.empty()) add_modules(prefix, nullptr, Kind::kRuntime);
}

CallStackTrim::Kind CallStackTrim::kind_of(uintptr_t address) const {
  // Loaded segments never overlap: the one that may hold `address` is the last to begin at or
  // below it.
  auto after = std::upper_bound(ranges_.begin(), ranges_.end(), address,
                                [](uintptr_t a, const Range& range) { return a < range.begin; });
  if (after == ranges_.begin()) return Kind::kProgram;
  const Range& range = *std::prev(after);
  return address < range.end ? range.kind : Kind::kProgram;
}

size_t CallStackTrim::trim(uintptr_t* frames, size_t count) const {
  size_t first = 0;
  while (first < count && kind_of(frames[first]) == Kind::kTool) ++first;
  size_t runtime_end = first;
  while (runtime_end < count && kind_of(frames[runtime_end]) == Kind::kRuntime) ++runtime_end;
  if (runtime_end > first) first = runtime_end - 1;
  std::memmove(frames, frames + first, (count - first) * sizeof *frames);
  return count - first;
}

}  // namespace memsnap
