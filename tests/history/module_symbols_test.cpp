// The sorted symbol index against libdwfl's own lookup (dwfl_module_addrinfo, which it
// replaces because it scans every symbol for each address): the same function start for
// addresses all through the process's libraries.
#include "history/module_symbols.h"

#include <elfutils/libdwfl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

namespace module_symbols_test {

struct Session {
  Dwfl* dwfl = nullptr;
  Session() {
    static char* debuginfo_path = nullptr;
    static const Dwfl_Callbacks callbacks = {dwfl_linux_proc_find_elf, dwfl_standard_find_debuginfo,
                                             nullptr, &debuginfo_path};
    dwfl = dwfl_begin(&callbacks);
    dwfl_report_begin(dwfl);
    dwfl_linux_proc_report(dwfl, getpid());
    dwfl_report_end(dwfl, nullptr, nullptr);
  }
  ~Session() { dwfl_end(dwfl); }
};

int collect(Dwfl_Module* module, void**, const char*, Dwarf_Addr, void* modules) {
  static_cast<std::vector<Dwfl_Module*>*>(modules)->push_back(module);
  return DWARF_CB_OK;
}

TEST(ModuleSymbols, FindsTheFunctionLibdwflFinds) {
  Session session;
  ASSERT_NE(session.dwfl, nullptr);
  std::vector<Dwfl_Module*> modules;
  dwfl_getmodules(session.dwfl, collect, &modules, 0);
  size_t compared = 0, found = 0;
  for (Dwfl_Module* module : modules) {
    Dwarf_Addr start = 0, end = 0;
    const char* name = dwfl_module_info(module, nullptr, &start, &end, nullptr, nullptr, nullptr, nullptr);
    const memsnap::ModuleSymbols symbols(module);
    // 2,000 addresses spread over each module (no closer than 61 bytes): function bodies,
    // their ends, padding between them.
    const Dwarf_Addr stride = std::max<Dwarf_Addr>(61, (end - start) / 2000);
    for (Dwarf_Addr pc = start; pc < end; pc += stride) {
      GElf_Off offset = 0;
      GElf_Sym info;
      const char* want = dwfl_module_addrinfo(module, pc, &offset, &info, nullptr, nullptr, nullptr);
      const memsnap::ModuleSymbols::Found got = symbols.at(pc);
      ++compared;
      // Code only: libdwfl also answers with data symbols, which return addresses never hit.
      if (want == nullptr || GELF_ST_TYPE(info.st_info) == STT_OBJECT || GELF_ST_TYPE(info.st_info) == STT_TLS ||
          GELF_ST_TYPE(info.st_info) == STT_SECTION || GELF_ST_TYPE(info.st_info) == STT_FILE)
        continue;
      ++found;
      ASSERT_NE(got.name, nullptr) << name << " +" << std::hex << pc - start << " " << want;
      // Aliases share a start: the start is what must agree.
      EXPECT_EQ(pc - got.offset, pc - offset) << name << " +" << std::hex << pc - start << ": " << want << " vs " << got.name;
    }
  }
  EXPECT_GT(found, 2000u) << "compared " << compared;
}

}  // namespace module_symbols_test
