// Reads, for one code address, the unwind rule its function's DWARF call-frame information
// gives at that address: found through the loaded module's .eh_frame_hdr search table,
// then the CIE's initial instructions and the FDE's, run up to the address.
//
// x86-64 only (the register numbers are the System V ABI's); elsewhere every address
// answers kUnsupported. Slow (walks the loaded modules): callers cache the answer.
#pragma once

#include <cstdint>

namespace memsnap {

struct FrameRule {
  enum class Kind : uint8_t {
    kNoInfo,       // no module or FDE covers the address: the walk stops here
    kOutermost,    // the return address is undefined (the thread's first frame)
    kStep,         // the fields below say how to step to the caller
    kUnsupported,  // the rule needs a full unwinder
  };
  Kind kind = Kind::kNoInfo;
  bool cfa_from_rbp = false;  // CFA = (%rbp or %rsp) + cfa_offset,
  bool cfa_deref = false;     //   or the word stored there (GCC's realigned-stack frames)
  bool rbp_saved = false;     // the caller's %rbp is at CFA + rbp_offset (else unchanged),
  bool rbp_from_rbp = false;  //   or at %rbp + rbp_offset
  int32_t cfa_offset = 0;
  int32_t rbp_offset = 0;
  int32_t return_address_offset = 0;  // the return address is at CFA + this
};

// `pc` must lie inside the instruction of interest (a return address minus one for callers).
FrameRule find_frame_rule(uintptr_t pc);

// How many modules the process has unloaded so far (dl_iterate_phdr's counter): rules
// cached before an unload may describe code that is gone.
uint64_t unloaded_module_count();

}  // namespace memsnap
