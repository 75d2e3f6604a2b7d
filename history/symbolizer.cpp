#include "history/symbolizer.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdwfl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "allocator/device_stats.h"
#include "history/compile_unit_ranges.h"
#include "history/module_symbols.h"

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

// Descends from `parent` through the DIEs whose ranges hold `pc`, appending each (outermost
// first). Namespaces and classes have no ranges of their own but hold function definitions.
bool descend_to(Dwarf_Die* parent, Dwarf_Addr pc, std::vector<Dwarf_Die>& chain, int depth) {
  Dwarf_Die child;
  if (depth > 64 || dwarf_child(parent, &child) != 0) return false;
  do {
    switch (dwarf_tag(&child)) {
      case DW_TAG_namespace:
      case DW_TAG_class_type:
      case DW_TAG_structure_type:
      case DW_TAG_union_type:
        if (descend_to(&child, pc, chain, depth + 1)) return true;
        break;
      case DW_TAG_subprogram:
      case DW_TAG_inlined_subroutine:
      case DW_TAG_lexical_block:
        if (dwarf_haspc(&child, pc) == 1) {
          chain.push_back(child);
          descend_to(&child, pc, chain, depth + 1);
          return true;
        }
        break;
      default:
        break;
    }
  } while (dwarf_siblingof(&child, &child) == 0);
  return false;
}

// The scopes at module address `pc` in `unit`, innermost first. libdw's dwarf_getscopes
// (elfutils 0.188) finds none for some clang-built units; then the tree is walked here.
std::vector<Dwarf_Die> scopes_at(Dwarf_Die* unit, Dwarf_Addr pc) {
  std::vector<Dwarf_Die> scopes;
  Dwarf_Die* found = nullptr;
  const int count = dwarf_getscopes(unit, pc, &found);
  bool has_function = false;
  for (int i = 0; i < count; ++i) {
    scopes.push_back(found[i]);
    has_function |= dwarf_tag(&found[i]) == DW_TAG_subprogram;
  }
  std::free(found);
  if (has_function) return scopes;
  scopes.clear();
  descend_to(unit, pc, scopes, 0);
  std::reverse(scopes.begin(), scopes.end());
  return scopes;
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
    unit_ranges_.clear();  // modules may go away (and their addresses be reused) in a report
    module_symbols_.clear();
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
  auto [symbols, fresh] = module_symbols_.try_emplace(module);
  if (fresh) symbols->second = std::make_unique<ModuleSymbols>(module);
  const ModuleSymbols::Found found = symbols->second->at(pc);
  const char* symbol = found.name;
  const uint64_t offset = found.offset;
  // Built with append: GCC 12 at -O3 warns falsely (-Wrestrict) on chained string '+'.
  std::string outer_function = symbol ? demangle(symbol) : base_name(module_name);
  if (symbol == nullptr) outer_function.append("+").append(hex(pc - module_start));

  std::string file;
  int line = 0;
  Dwarf_Die unit;
  Dwarf_Addr bias = 0;
  const bool has_unit = find_unit(module, pc, &unit, &bias);
  if (has_unit) {
    if (Dwarf_Line* source = dwarf_getsrc_die(&unit, pc - bias)) {
      const char* name = dwarf_linesrc(source, nullptr, nullptr);
      if (name != nullptr && dwarf_lineno(source, &line) == 0) file = name;
    }
  }
  if (file.empty()) {
    // No line table: say where in the function (or module) the call was.
    if (symbol) outer_function.append("+").append(hex(offset));
    return {{outer_function, "", 0}};
  }

  // A line was found, so the unit was: the scopes at `pc` name the inlined frames.
  std::vector<SourceFrame> frames;
  for (Dwarf_Die& scope : scopes_at(&unit, pc - bias)) {
    const int tag = dwarf_tag(&scope);
    if (tag == DW_TAG_inlined_subroutine) {
      frames.push_back({die_function_name(&scope), file, line});
      call_site(&scope, &unit, file, line);
    } else if (tag == DW_TAG_subprogram) {
      break;
    }
  }
  frames.push_back({outer_function, file, line});
  return frames;
}

bool Symbolizer::find_unit(Dwfl_Module* module, uint64_t pc, void* unit_die, uint64_t* bias) {
  auto* unit = static_cast<Dwarf_Die*>(unit_die);
  Dwarf_Addr found_bias = 0;
  // libdw answers from .debug_aranges; for a unit missing there (clang's) it returns a
  // neighbouring unit rather than none, so its answer is checked against the unit's ranges.
  Dwarf_Die* found = dwfl_module_addrdie(module, pc, &found_bias);
  if (found != nullptr && dwarf_haspc(found, pc - found_bias) == 1) {
    *unit = *found;
    *bias = found_bias;
    return true;
  }
  auto [it, inserted] = unit_ranges_.try_emplace(module);
  if (inserted) {
    Dwarf_Addr module_bias = 0;
    Dwarf* dwarf = dwfl_module_getdwarf(module, &module_bias);
    it->second = std::make_unique<CompileUnitRanges>(dwarf, module_bias);
  }
  *bias = it->second->bias();
  return it->second->find(pc, unit);
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
