#include "history/module_symbols.h"

#include <elfutils/libdwfl.h>

#include <algorithm>
#include <array>
#include <utility>

namespace memsnap {
namespace {

// Symbols at the same start (aliases) or nested: how many a lookup steps back over at most.
constexpr size_t kMaxStepsBack = 256;

// A symbol's sort key: its start's offset from the module's lowest symbol, its rank and its
// place in the table, packed so that the keys sort as the symbols should.
constexpr unsigned kIndexBits = 24;
constexpr unsigned kRankBits = 2;
constexpr unsigned kOffsetBits = 64 - kIndexBits - kRankBits;  // 38: modules under 256 GiB

// Sorts `keys`, made in index order, by their bits above the index: ten bits at a time, least
// significant first, each pass stable (so keys that agree there stay in index order), the
// counts of every pass taken in one read, and a pass in which all keys agree left out.
void radix_sort(std::vector<uint64_t>& keys) {
  constexpr unsigned kDigitBits = 10;
  constexpr unsigned kPasses = (64 - kIndexBits + kDigitBits - 1) / kDigitBits;
  constexpr size_t kDigits = size_t{1} << kDigitBits;
  const auto digit = [](uint64_t key, unsigned pass) {
    return static_cast<size_t>((key >> (kIndexBits + pass * kDigitBits)) & (kDigits - 1));
  };
  std::vector<std::array<size_t, kDigits>> counts(kPasses);
  for (const uint64_t key : keys)
    for (unsigned pass = 0; pass < kPasses; ++pass) ++counts[pass][digit(key, pass)];
  std::vector<uint64_t> other(keys.size());
  for (unsigned pass = 0; pass < kPasses; ++pass) {
    std::array<size_t, kDigits>& at = counts[pass];
    if (std::find(at.begin(), at.end(), keys.size()) != at.end()) continue;
    size_t sum = 0;
    for (size_t& count : at) sum += std::exchange(count, sum);
    for (const uint64_t key : keys) other[at[digit(key, pass)]++] = key;
    keys.swap(other);
  }
}

}  // namespace

ModuleSymbols::ModuleSymbols(Dwfl_Module* module) {
  const int count = dwfl_module_getsymtab(module);
  if (count <= 0) return;
  struct Symbol {
    uint64_t start;
    uint64_t size;
    const char* name;
    uint8_t rank;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(static_cast<size_t>(count));
  uint64_t lowest = UINT64_MAX;
  for (int i = 1; i < count; ++i) {  // index 0 is the null symbol
    GElf_Sym symbol;
    GElf_Addr address = 0;
    const char* name = dwfl_module_getsym_info(module, i, &symbol, &address, nullptr, nullptr, nullptr);
    // (The name is not read here: the names of a large library's symbols fill hundreds of MiB
    // of its file, which reading every one would page in. A nameless one is passed over when
    // looked up.)
    if (name == nullptr || symbol.st_shndx == SHN_UNDEF) continue;
    const int type = GELF_ST_TYPE(symbol.st_info);
    if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE) continue;
    const int binding = GELF_ST_BIND(symbol.st_info);
    const uint8_t rank = binding == STB_GLOBAL ? 0 : binding == STB_WEAK ? 1 : 2;
    symbols.push_back({address, symbol.st_size, name, rank});
    largest_ = std::max<uint64_t>(largest_, symbol.st_size);
    lowest = std::min<uint64_t>(lowest, address);
  }

  // The order: packed keys radix-sorted, or (a module too large to pack) a comparison sort.
  std::vector<uint32_t> order(symbols.size());
  const bool packs = symbols.size() < (size_t{1} << kIndexBits) &&
                     std::all_of(symbols.begin(), symbols.end(), [&](const Symbol& s) {
                       return s.start - lowest < (uint64_t{1} << kOffsetBits);
                     });
  if (packs) {
    std::vector<uint64_t> keys(symbols.size());
    for (size_t i = 0; i < symbols.size(); ++i)
      keys[i] = (symbols[i].start - lowest) << (kRankBits + kIndexBits) | uint64_t{symbols[i].rank} << kIndexBits | i;
    radix_sort(keys);
    for (size_t i = 0; i < keys.size(); ++i) order[i] = static_cast<uint32_t>(keys[i] & ((uint64_t{1} << kIndexBits) - 1));
  } else {
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<uint32_t>(i);
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
      const Symbol& x = symbols[a];
      const Symbol& y = symbols[b];
      return x.start != y.start ? x.start < y.start : x.rank != y.rank ? x.rank < y.rank : a < b;
    });
  }
  starts_.resize(order.size());
  sizes_.resize(order.size());
  names_.resize(order.size());
  ranks_.resize(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const Symbol& symbol = symbols[order[i]];
    starts_[i] = symbol.start;
    sizes_[i] = symbol.size;
    names_[i] = symbol.name;
    ranks_[i] = symbol.rank;
  }
}

ModuleSymbols::Found ModuleSymbols::at(uint64_t address) const {
  const size_t after = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), address) - starts_.begin());
  size_t best = SIZE_MAX;
  size_t sizeless = SIZE_MAX;
  size_t steps = 0;
  for (size_t i = after; i > 0 && steps < kMaxStepsBack; ++steps) {
    --i;
    if (*names_[i] == '\0') continue;
    const uint64_t into = address - starts_[i];
    if (into > largest_ && sizeless != SIZE_MAX) break;
    if (sizes_[i] == 0) {
      if (sizeless == SIZE_MAX) sizeless = i;
      continue;
    }
    if (into >= sizes_[i]) {
      if (into > largest_) break;
      continue;
    }
    if (best == SIZE_MAX || ranks_[i] < ranks_[best]) best = i;
  }
  if (best == SIZE_MAX) best = sizeless;
  if (best == SIZE_MAX) return {};
  return {names_[best], address - starts_[best]};
}

}  // namespace memsnap
