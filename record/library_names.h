// Which shared object asked CUDA for memory: the library an allocation outside the caching
// allocator is put under. Of a recorded stack (innermost first; an interpreter's tokens are
// passed over), the first return address that lies outside CUDA's own libraries (the runtime,
// the driver, CUPTI) and outside memsnap's recorder names it, by file name ("libnccl.so.2").
// The program itself is named by its executable's file name; a Python extension module by its
// path within site-packages ("cupy_backends/cuda/api/runtime.cpython-312-x86_64-linux-gnu.so").
//
// Modules are found with dl_iterate_phdr at the first name asked for: one instance serves one
// snapshot (made then, not in a CUDA call), so libraries loaded since the last are known.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memsnap {

class LibraryNames {
 public:
  // The library of a stack; "" when no frame lies outside CUDA's libraries (or none is known).
  std::string library_of(const std::vector<uintptr_t>& words);
  // The name of the module loaded at `address` (as above); "" when none holds it.
  std::string module_of(uintptr_t address);

  // Whether a module's name is one of CUDA's own libraries or memsnap's recorder.
  static bool is_cuda_or_recorder(const std::string& name);
  // A loaded module's name from its path.
  static std::string name_of_path(const std::string& path);

 private:
  struct Module {
    uintptr_t begin = 0;
    uintptr_t end = 0;
    std::string name;
  };
  const Module* find(uintptr_t address) const;
  void refresh();

  std::vector<Module> modules_;  // by begin
  bool refreshed_ = false;
};

}  // namespace memsnap
