#include "record/library_names.h"

#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <string_view>

#include "history/interpreter_frames.h"

namespace memsnap {
namespace {

std::string file_name(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// A library by its file name ("libnccl.so.2"); a Python extension module, whose file name says
// little ("runtime.cpython-312-x86_64-linux-gnu.so"), by its path within its package folder
// ("cupy_backends/cuda/api/runtime.cpython-312-x86_64-linux-gnu.so").
std::string library_name(std::string_view path) {
  std::string name = file_name(path);
  if (name.starts_with("lib")) return name;
  for (std::string_view folder : {"/site-packages/", "/dist-packages/"}) {
    const size_t at = path.rfind(folder);
    if (at != std::string_view::npos) return std::string(path.substr(at + folder.size()));
  }
  return name;
}

// The executable's name, for the module dl_iterate_phdr lists with an empty name.
std::string executable_name() {
  char path[4096];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof path - 1);
  if (length <= 0) return "the program";
  return file_name(std::string_view(path, static_cast<size_t>(length)));
}

}  // namespace

std::string LibraryNames::name_of_path(const std::string& path) { return library_name(path); }

bool LibraryNames::is_cuda_or_recorder(const std::string& name) {
  for (std::string_view prefix : {"libcuda.so", "libcudart", "libcupti", "libmemsnap_record", "libnvidia-ml"})
    if (name.starts_with(prefix)) return true;
  return false;
}

void LibraryNames::refresh() {
  modules_.clear();
  const std::string program = executable_name();
  struct Search {
    std::vector<Module>* modules;
    const std::string* program;
  } search{&modules_, &program};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto& s = *static_cast<Search*>(data);
        const std::string name = info->dlpi_name != nullptr && info->dlpi_name[0] != '\0'
                                     ? library_name(info->dlpi_name)
                                     : *s.program;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& header = info->dlpi_phdr[i];
          if (header.p_type != PT_LOAD || (header.p_flags & PF_X) == 0) continue;
          const uintptr_t begin = info->dlpi_addr + header.p_vaddr;
          s.modules->push_back({begin, begin + header.p_memsz, name});
        }
        return 0;
      },
      &search);
  std::sort(modules_.begin(), modules_.end(), [](const Module& a, const Module& b) { return a.begin < b.begin; });
  refreshed_ = true;
}

const LibraryNames::Module* LibraryNames::find(uintptr_t address) const {
  auto it = std::upper_bound(modules_.begin(), modules_.end(), address,
                             [](uintptr_t a, const Module& m) { return a < m.begin; });
  if (it == modules_.begin()) return nullptr;
  --it;
  return address < it->end ? &*it : nullptr;
}

std::string LibraryNames::module_of(uintptr_t address) {
  // A return address is just past its call: look up the byte before it.
  const uintptr_t pc = address > 0 ? address - 1 : address;
  if (!refreshed_) refresh();
  const Module* module = find(pc);
  return module != nullptr ? module->name : std::string();
}

std::string LibraryNames::library_of(const std::vector<uintptr_t>& words) {
  for (uintptr_t word : words) {
    if (is_interpreter_token(word)) continue;
    std::string name = module_of(word);
    if (!name.empty() && !is_cuda_or_recorder(name)) return name;
  }
  return "";
}

}  // namespace memsnap
