// A stack captured inside a CUPTI callback starts with frames that are not the program's:
// the recorder's, CUPTI's and the CUDA driver's (between the program's call and the callback),
// and, under a runtime call, the CUDA runtime's internals. Trimmed, it starts at the API
// function the program called (`cudaMalloc`, the outermost runtime frame) or, for a driver
// call, at the program's own frame. Modules are told apart by the address ranges they are
// loaded at, found once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace memsnap {

class CallStackTrim {
 public:
  // The loaded module that holds `address`, whole (the recorder's own library).
  void add_tool_module_at(const void* address);
  // Every loaded module whose file name starts with `prefix` ("libcupti", "libcuda.so").
  void add_tool_modules_named(std::string_view prefix);
  // A runtime library ("libcudart"): of its innermost run of frames, only the outermost stays.
  void add_runtime_modules_named(std::string_view prefix);

  // Trims `frames` (innermost first) in place; returns how many remain.
  size_t trim(uintptr_t* frames, size_t count) const;

 private:
  enum class Kind : uint8_t { kProgram, kTool, kRuntime };
  struct Range {
    uintptr_t begin;
    uintptr_t end;
    Kind kind;
  };
  Kind kind_of(uintptr_t address) const;
  void add_modules(std::string_view prefix, const void* address, Kind kind);

  std::vector<Range> ranges_;  // by begin
};

}  // namespace memsnap
