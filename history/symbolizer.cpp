#include "history/symbolizer.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdwfl.h>
#include <unistd.h>

#include <cstdlib>

#include "allocator/device_stats.h"

namespace memsnap {
namespace {

std::string hex(uintptr_t value) { return format_hex(value); }

std::string base_name(const char* path) {
  if (path == nullptr) return "??";
  std::string name(path);
  const size_t slash = name.rfind('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

// A DIE's name, following DW_AT_abstract_origin / DW_AT_specification: the mangled linkage
// name (qualified once demangled) when present, else the plain name.
std::string die_function_name(Dwarf_Die* die) {
  Dwarf_Attribute attribute;
  for (int name_attribute : {DW_AT_linkage_name, DW_AT_MIPS_linkage_name, DW_AT_name}) {
    if (dwarf_attr_integrate(die, name_attribute, &attribute) == nullptr) continue;
    if (const char* name = dwarf_formstring(&attribute)) return demangle(name);
  }
  return "??";
}

// The call site of an inlined subroutine: where, in its caller, it was inlined.
void call_site(Dwarf_Die* inlined, Dwarf_Die* cu, std::string& file, int& line) {
  Dwarf_Attribute attribute;
  Dwarf_Word value = 0;
  if (dwarf_attr(inlined, DW_AT_call_line, &attribute) && dwarf_formudata(&attribute, &value) == 0)
    line = static_cast<int>(value);
  else
    line = 0;
  Dwarf_Files* files = nullptr;
  size_t file_count = 0;
  if (dwarf_attr(inlined, DW_AT_call_file, &attribute) && dwarf_formudata(&attribute, &value) == 0 &&
      dwarf_getsrcfiles(cu, &files, &file_count) == 0 && value < file_count) {
    const char* name = dwarf_filesrc(files, value, nullptr, nullptr);
    file = name ? name : "";
  } else {
    file.clear();
  }
}

}  // namespace

std::string demangle(const char* symbol) {
  if (symbol == nullptr) return "??";
  int status = 0;
  char* readable = abi::__cxa_demangle(symbol, nullptr, nullptr, &status);
  if (status != 0 || readable == nullptr) return symbol;
  std::string out(readable);
  std::free(readable);
  return out;
}

Symbolizer::Symbolizer() = default;

Symbolizer::~Symbolizer() {
  if (dwfl_ != nullptr) dwfl_end(dwfl_);
}

Dwfl* Symbolizer::session() {
  if (dwfl_ == nullptr) {
    static char* debuginfo_path = nullptr;
    static const Dwfl_Callbacks callbacks = {
        dwfl_linux_proc_find_elf, dwfl_standard_find_debuginfo, nullptr, &debuginfo_path};
    dwfl_ = dwfl_begin(&callbacks);
  }
  if (dwfl_ != nullptr && !reported_) {
    dwfl_report_begin(dwfl_);
    const int status = dwfl_linux_proc_report(dwfl_, getpid());
    dwfl_report_end(dwfl_, nullptr, nullptr);
    reported_ = status == 0;
  }
  return dwfl_;
}

std::vector<SourceFrame> Symbolizer::resolve(uintptr_t return_address) {
  Dwfl* dwfl = session();
  // A return address points after the call; the call itself is one byte earlier.
  const Dwarf_Addr pc = return_address > 0 ? return_address - 1 : 0;
  Dwfl_Module* module = dwfl ? dwfl_addrmodule(dwfl, pc) : nullptr;
  if (module == nullptr && dwfl != nullptr) {
    reported_ = false;  // a library loaded since the last report: look again, once
    dwfl = session();
    module = dwfl ? dwfl_addrmodule(dwfl, pc) : nullptr;
  }
  if (module == nullptr) return {{hex(return_address), "", 0}};

  Dwarf_Addr module_start = 0;
  const char* module_name =
      dwfl_module_info(module, nullptr, &module_start, nullptr, nullptr, nullptr, nullptr, nullptr);
  GElf_Off offset = 0;
  GElf_Sym symbol_info;
  const char* symbol =
      dwfl_module_addrinfo(module, pc, &offset, &symbol_info, nullptr, nullptr, nullptr);
  // Built with append: GCC 12 at -O3 warns falsely (-Wrestrict) on chained string '+'.
  std::string outer_function = symbol ? demangle(symbol) : base_name(module_name);
  if (symbol == nullptr) outer_function.append("+").append(hex(pc - module_start));

  std::string file;
  int line = 0;
  if (Dwfl_Line* source = dwfl_module_getsrc(module, pc)) {
    if (const char* name = dwfl_lineinfo(source, nullptr, &line, nullptr, nullptr, nullptr))
      file = name;
  }
  if (file.empty()) {
    // No line table: say where in the function (or module) the call was.
    if (symbol) outer_function.append("+").append(hex(offset));
    return {{outer_function, "", 0}};
  }

  std::vector<SourceFrame> frames;
  Dwarf_Addr bias = 0;
  if (Dwarf_Die* cu = dwfl_module_addrdie(module, pc, &bias)) {
    Dwarf_Die* scopes = nullptr;
    const int count = dwarf_getscopes(cu, pc - bias, &scopes);
    for (int i = 0; i < count; ++i) {
      const int tag = dwarf_tag(&scopes[i]);
      if (tag == DW_TAG_inlined_subroutine) {
        frames.push_back({die_function_name(&scopes[i]), file, line});
        call_site(&scopes[i], cu, file, line);
      } else if (tag == DW_TAG_subprogram) {
        break;
      }
    }
    std::free(scopes);
  }
  frames.push_back({outer_function, file, line});
  return frames;
}

std::vector<SourceFrame> Symbolizer::frames_at(uintptr_t return_address) {
  AllocatorLockGuard lock(mutex_);
  auto it = cache_.find(return_address);
  if (it == cache_.end()) it = cache_.emplace(return_address, resolve(return_address)).first;
  return it->second;
}

Symbolizer& process_symbolizer() {
  static Symbolizer* symbolizer = new Symbolizer();  // never destroyed: used at exit by OOM dumps
  return *symbolizer;
}

}  // namespace memsnap
