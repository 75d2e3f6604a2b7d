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

struct Symbol {
  uint64_t start;
  uint64_t size;
  const char* name;
  uint8_t rank;  // 0 global, 1 weak, 2 local
};

// Whether a symbol can hold a return address: a function, or a label without a type.
bool is_code(unsigned char info) {
  const int type = GELF_ST_TYPE(info);
  return type == STT_FUNC || type == STT_GNU_IFUNC || type == STT_NOTYPE;
}

uint8_t rank_of(unsigned char info) {
  const int binding = GELF_ST_BIND(info);
  return binding == STB_GLOBAL ? 0 : binding == STB_WEAK ? 1 : 2;
}

// The section of `elf` of `type` (the first), or null.
Elf_Scn* section_of_type(Elf* elf, GElf_Word type, GElf_Shdr& header) {
  for (Elf_Scn* section = elf_nextscn(elf, nullptr); section != nullptr; section = elf_nextscn(elf, section))
    if (gelf_getshdr(section, &header) != nullptr && header.sh_type == type) return section;
  return nullptr;
}

// The module's own 64-bit symbol table, read where it lies, when it is the table libdwfl
// indexes (the module's .symtab, else its .dynsym, with `count` entries: no separate debug
// file's table, no MiniDebugInfo's added): each address as libdwfl gives it (the module's
// bias added for symbols of loaded sections). One dwfl_module_getsym_info per symbol looks
// up its section and adjusts its value; libtorch's tables hold millions of symbols. False
// (and `out` left empty) when the table is not one this reads.
bool read_own_table(Dwfl_Module* module, int count, std::vector<Symbol>& out) {
  GElf_Addr bias = 0;
  Elf* elf = dwfl_module_getelf(module, &bias);
  GElf_Ehdr file;
  size_t sections = 0;
  if (elf == nullptr || gelf_getclass(elf) != ELFCLASS64 || gelf_getehdr(elf, &file) == nullptr ||
      file.e_type == ET_REL || elf_getshdrnum(elf, &sections) != 0)
    return false;
  GElf_Shdr header;
  Elf_Scn* table = section_of_type(elf, SHT_SYMTAB, header);
  if (table == nullptr) table = section_of_type(elf, SHT_DYNSYM, header);
  if (table == nullptr || header.sh_entsize != sizeof(Elf64_Sym)) return false;
  Elf_Data* data = elf_getdata(table, nullptr);
  Elf_Data* names = elf_getdata(elf_getscn(elf, header.sh_link), nullptr);
  if (data == nullptr || names == nullptr || data->d_type != ELF_T_SYM ||
      data->d_size / sizeof(Elf64_Sym) != static_cast<size_t>(count))
    return false;
  std::vector<bool> loaded(sections, false);
  for (size_t i = 0; i < sections; ++i) {
    GElf_Shdr section;
    if (Elf_Scn* at = elf_getscn(elf, i); at != nullptr && gelf_getshdr(at, &section) != nullptr)
      loaded[i] = (section.sh_flags & SHF_ALLOC) != 0;
  }
  const auto* symbols = static_cast<const Elf64_Sym*>(data->d_buf);
  const char* text = static_cast<const char*>(names->d_buf);
  for (size_t i = 1; i < static_cast<size_t>(count); ++i) {  // index 0 is the null symbol
    const Elf64_Sym& symbol = symbols[i];
    if (symbol.st_shndx == SHN_XINDEX) {  // its section in another table: libdwfl's way
      out.clear();
      return false;
    }
    if (symbol.st_shndx == SHN_UNDEF || !is_code(symbol.st_info) || symbol.st_name >= names->d_size) continue;
    uint64_t address = symbol.st_value;
    // (A section index past the file's sections counts as loaded, as libdwfl counts it.)
    if (symbol.st_shndx < SHN_LORESERVE ? symbol.st_shndx >= sections || loaded[symbol.st_shndx]
                                        : symbol.st_shndx != SHN_ABS && symbol.st_shndx != SHN_COMMON)
      address += bias;
    out.push_back({address, symbol.st_size, text + symbol.st_name, rank_of(symbol.st_info)});
  }
  return true;
}

// The same through libdwfl, one symbol at a time.
void read_through_libdwfl(Dwfl_Module* module, int count, std::vector<Symbol>& out) {
  for (int i = 1; i < count; ++i) {  // index 0 is the null symbol
    GElf_Sym symbol;
    GElf_Addr address = 0;
    const char* name = dwfl_module_getsym_info(module, i, &symbol, &address, nullptr, nullptr, nullptr);
    if (name == nullptr || symbol.st_shndx == SHN_UNDEF || !is_code(symbol.st_info)) continue;
    out.push_back({address, symbol.st_size, name, rank_of(symbol.st_info)});
  }
}

}  // namespace

ModuleSymbols::ModuleSymbols(Dwfl_Module* module) {
  const int count = dwfl_module_getsymtab(module);
  if (count <= 0) return;
  // (The names are not read here: a large library's fill hundreds of MiB of its file, which
  // reading every one would page in. A nameless symbol is passed over when looked up.)
  std::vector<Symbol> symbols;
  symbols.reserve(static_cast<size_t>(count));
  if (!read_own_table(module, count, symbols)) read_through_libdwfl(module, count, symbols);
  uint64_t lowest = UINT64_MAX;
  for (const Symbol& symbol : symbols) {
    largest_ = std::max<uint64_t>(largest_, symbol.size);
    lowest = std::min<uint64_t>(lowest, symbol.start);
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
