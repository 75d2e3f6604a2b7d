#include "history/module_symbols.h"

#include <elfutils/libdwfl.h>

#include <algorithm>

namespace memsnap {
namespace {

// Symbols at the same start (aliases) or nested: how many a lookup steps back over at most.
constexpr size_t kMaxStepsBack = 256;

}  // namespace

ModuleSymbols::ModuleSymbols(Dwfl_Module* module) {
  const int count = dwfl_module_getsymtab(module);
  if (count <= 0) return;
  symbols_.reserve(static_cast<size_t>(count));
  for (int i = 1; i < count; ++i) {  // index 0 is the null symbol
    GElf_Sym symbol;
    GElf_Addr address = 0;
    const char* name = dwfl_module_getsym_info(module, i, &symbol, &address, nullptr, nullptr, nullptr);
    if (name == nullptr || *name == '\0' || symbol.st_shndx == SHN_UNDEF) continue;
    const int type = GELF_ST_TYPE(symbol.st_info);
    if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE) continue;
    const int binding = GELF_ST_BIND(symbol.st_info);
    const int rank = binding == STB_GLOBAL ? 0 : binding == STB_WEAK ? 1 : 2;
    symbols_.push_back({address, symbol.st_size, name, rank});
    largest_ = std::max<uint64_t>(largest_, symbol.st_size);
  }
  std::sort(symbols_.begin(), symbols_.end(), [](const Symbol& a, const Symbol& b) {
    return a.start != b.start ? a.start < b.start : a.rank < b.rank;
  });
}

ModuleSymbols::Found ModuleSymbols::at(uint64_t address) const {
  auto after = std::upper_bound(symbols_.begin(), symbols_.end(), address,
                                [](uint64_t a, const Symbol& s) { return a < s.start; });
  const Symbol* best = nullptr;
  const Symbol* sizeless = nullptr;
  size_t steps = 0;
  for (auto it = after; it != symbols_.begin() && steps < kMaxStepsBack; ++steps) {
    --it;
    if (address - it->start > largest_ && sizeless != nullptr) break;
    if (it->size == 0) {
      if (sizeless == nullptr) sizeless = &*it;
      continue;
    }
    if (address - it->start >= it->size) {
      if (address - it->start > largest_) break;
      continue;
    }
    if (best == nullptr || it->rank < best->rank) best = &*it;
  }
  if (best == nullptr) best = sizeless;
  if (best == nullptr) return {};
  return {best->name, address - best->start};
}

}  // namespace memsnap
