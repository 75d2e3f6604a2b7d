#include "history/cfi_rules.h"

#include <link.h>

#include <cstddef>
#include <cstring>

namespace memsnap {
namespace {

#if defined(__x86_64__)

// DWARF register numbers of the x86-64 System V ABI.
constexpr uint64_t kRbp = 6;
constexpr uint64_t kRsp = 7;
constexpr uint64_t kReturnAddress = 16;

// DWARF expression operations of the one expression shape memsnap follows.
constexpr uint8_t kOpBreg6 = 0x76;  // push %rbp + offset
constexpr uint8_t kOpBreg7 = 0x77;  // push %rsp + offset
constexpr uint8_t kOpDeref = 0x06;

// Pointer encodings (DW_EH_PE_*) of .eh_frame and .eh_frame_hdr.
constexpr uint8_t kOmit = 0xff;
constexpr uint8_t kIndirect = 0x80;
constexpr uint8_t kPcRelative = 0x10;
constexpr uint8_t kDataRelative = 0x30;
constexpr uint8_t kDataRelativeSigned4 = 0x3b;

// Reads the bytes of a mapped, well-formed section; `end` bounds every read so a damaged
// record stops the parse instead of running on.
class Reader {
 public:
  Reader(const uint8_t* at, const uint8_t* end) : at_(at), end_(end) {}
  bool ok() const { return ok_; }
  const uint8_t* at() const { return at_; }
  const uint8_t* end() const { return end_; }
  bool done() const { return !ok_ || at_ >= end_; }

  template <typename T>
  T fixed() {
    T value{};
    if (!take(sizeof(T))) return value;
    std::memcpy(&value, at_ - sizeof(T), sizeof(T));
    return value;
  }
  uint64_t uleb() {
    uint64_t value = 0;
    for (unsigned shift = 0; ok_; shift += 7) {
      if (!take(1)) break;
      const uint8_t byte = at_[-1];
      if (shift < 64) value |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) break;
    }
    return value;
  }
  int64_t sleb() {
    int64_t value = 0;
    unsigned shift = 0;
    uint8_t byte = 0;
    do {
      if (!take(1)) return 0;
      byte = at_[-1];
      if (shift < 64) value |= static_cast<int64_t>(uint64_t{byte & 0x7fu} << shift);
      shift += 7;
    } while (byte & 0x80);
    if (shift < 64 && (byte & 0x40)) value |= -(int64_t{1} << shift);
    return value;
  }
  // A pointer in `encoding`; `data_base` is the start of .eh_frame_hdr for datarel.
  uintptr_t pointer(uint8_t encoding, uintptr_t data_base = 0) {
    if (encoding == kOmit) return 0;
    const auto here = reinterpret_cast<uintptr_t>(at_);
    uintptr_t value = 0;
    switch (encoding & 0x0f) {
      case 0x00: value = fixed<uint64_t>(); break;
      case 0x01: value = uleb(); break;
      case 0x02: value = fixed<uint16_t>(); break;
      case 0x03: value = fixed<uint32_t>(); break;
      case 0x04: value = fixed<uint64_t>(); break;
      case 0x09: value = static_cast<uintptr_t>(sleb()); break;
      case 0x0a: value = static_cast<uintptr_t>(static_cast<int64_t>(fixed<int16_t>())); break;
      case 0x0b: value = static_cast<uintptr_t>(static_cast<int64_t>(fixed<int32_t>())); break;
      case 0x0c: value = static_cast<uintptr_t>(fixed<int64_t>()); break;
      default: ok_ = false; return 0;
    }
    switch (encoding & 0x70) {
      case 0x00: break;
      case kPcRelative: value += here; break;
      case kDataRelative: value += data_base; break;
      default: ok_ = false; return 0;  // text- and function-relative: not used on x86-64
    }
    if ((encoding & kIndirect) && ok_ && value != 0) value = *reinterpret_cast<const uintptr_t*>(value);
    return value;
  }
  void skip(uint64_t bytes) { take(bytes); }

 private:
  bool take(uint64_t bytes) {
    if (!ok_ || bytes > static_cast<uint64_t>(end_ - at_)) {
      ok_ = false;
      return false;
    }
    at_ += bytes;
    return true;
  }
  const uint8_t* at_;
  const uint8_t* end_;
  bool ok_ = true;
};

// A CIE or FDE record: its contents after the length field, and where the next one starts.
bool read_record(const uint8_t* start, Reader& body) {
  Reader length(start, start + 12);
  uint64_t size = length.fixed<uint32_t>();
  if (size == 0xffffffffu) size = length.fixed<uint64_t>();
  if (!length.ok() || size == 0 || size > (uint64_t{1} << 30)) return false;
  body = Reader(length.at(), length.at() + size);
  return true;
}

struct Cie {
  uint64_t code_alignment = 1;
  int64_t data_alignment = -8;
  uint64_t return_address_register = kReturnAddress;
  uint8_t fde_encoding = 0;
  bool has_augmentation_data = false;
  bool signal_frame = false;
  const uint8_t* instructions = nullptr;
  const uint8_t* end = nullptr;
};

bool read_cie(const uint8_t* start, Cie& cie) {
  Reader r(nullptr, nullptr);
  if (!read_record(start, r)) return false;
  if (r.fixed<uint32_t>() != 0) return false;  // a CIE's id is 0 in .eh_frame
  const uint8_t version = r.fixed<uint8_t>();
  if (version != 1 && version != 3) return false;
  const char* augmentation = reinterpret_cast<const char*>(r.at());
  const size_t length = strnlen(augmentation, static_cast<size_t>(r.end() - r.at()));
  r.skip(length + 1);
  cie.code_alignment = r.uleb();
  cie.data_alignment = r.sleb();
  cie.return_address_register = version == 1 ? r.fixed<uint8_t>() : r.uleb();
  if (length > 0 && augmentation[0] == 'z') {
    cie.has_augmentation_data = true;
    const uint64_t data_length = r.uleb();
    const uint8_t* data_end = r.at() + data_length;
    for (size_t i = 1; i < length && r.ok(); ++i) {
      switch (augmentation[i]) {
        case 'R': cie.fde_encoding = r.fixed<uint8_t>(); break;
        case 'P': r.pointer(r.fixed<uint8_t>() & ~kIndirect); break;  // the personality: skipped
        case 'L': r.fixed<uint8_t>(); break;
        case 'S': cie.signal_frame = true; break;
        default: i = length; break;  // unknown: the data length lets us skip the rest
      }
    }
    if (!r.ok() || data_end > r.end()) return false;
    r = Reader(data_end, r.end());
  } else if (length > 0) {
    return false;  // "eh" and other pre-'z' augmentations
  }
  cie.instructions = r.at();
  cie.end = r.end();
  return r.ok();
}

// Where a register's value for the caller is: unchanged, or saved at CFA + offset.
struct RegisterRule {
  enum class Kind : uint8_t { kSame, kSaved, kSavedAtRbp, kUndefined, kUnsupported } kind = Kind::kSame;
  int64_t offset = 0;
};

// A register-relative expression "breg N" (then "deref" when `deref`): the realigned-stack
// frames GCC emits describe their CFA and saved %rbp this way. Else false.
bool simple_expression(Reader r, bool deref, uint64_t& reg, int64_t& offset) {
  const uint8_t op = r.fixed<uint8_t>();
  if (op != kOpBreg6 && op != kOpBreg7) return false;
  reg = op == kOpBreg6 ? kRbp : kRsp;
  offset = r.sleb();
  if (deref && r.fixed<uint8_t>() != kOpDeref) return false;
  return r.ok() && r.at() == r.end();
}

struct CfaState {
  uint64_t cfa_register = kRsp;
  int64_t cfa_offset = 8;
  bool cfa_unsupported = false;
  bool cfa_deref = false;
  RegisterRule rbp;
  RegisterRule return_address;
};

class CfaProgram {
 public:
  CfaProgram(const Cie& cie, uintptr_t pc) : cie_(cie), pc_(pc) {}

  // Runs instructions until the location passes pc; false on an unreadable program.
  bool run(Reader r, uintptr_t& location, bool is_cie) {
    while (!r.done()) {
      const uint8_t op = r.fixed<uint8_t>();
      const uint8_t low = op & 0x3f;
      switch (op >> 6) {
        case 1:
          if (advance(location, low)) return true;
          continue;
        case 2: set(low, {RegisterRule::Kind::kSaved, static_cast<int64_t>(r.uleb()) * cie_.data_alignment}); continue;
        case 3: restore(low); continue;
        default: break;
      }
      switch (low) {
        case 0x00: break;  // nop
        case 0x01: location = r.pointer(cie_.fde_encoding); if (location > pc_) return true; break;
        case 0x02: if (advance(location, r.fixed<uint8_t>())) return true; break;
        case 0x03: if (advance(location, r.fixed<uint16_t>())) return true; break;
        case 0x04: if (advance(location, r.fixed<uint32_t>())) return true; break;
        case 0x05: { const uint64_t reg = r.uleb(); set(reg, {RegisterRule::Kind::kSaved, static_cast<int64_t>(r.uleb()) * cie_.data_alignment}); break; }
        case 0x06: restore(r.uleb()); break;
        case 0x07: set(r.uleb(), {RegisterRule::Kind::kUndefined, 0}); break;
        case 0x08: set(r.uleb(), {RegisterRule::Kind::kSame, 0}); break;
        case 0x09: { const uint64_t reg = r.uleb(); r.uleb(); set(reg, {RegisterRule::Kind::kUnsupported, 0}); break; }
        case 0x0a: if (depth_ == kMaxRemembered) return false; remembered_[depth_++] = state_; break;
        case 0x0b: if (depth_ == 0) return false; state_ = remembered_[--depth_]; break;
        case 0x0c: state_.cfa_register = r.uleb(); state_.cfa_offset = static_cast<int64_t>(r.uleb()); plain_cfa(); break;
        case 0x0d: state_.cfa_register = r.uleb(); plain_cfa(); break;
        case 0x0e: state_.cfa_offset = static_cast<int64_t>(r.uleb()); break;
        case 0x0f: cfa_expression(block(r)); break;
        case 0x10: { const uint64_t reg = r.uleb(); register_expression(reg, block(r)); break; }
        case 0x16: { const uint64_t reg = r.uleb(); block(r); set(reg, {RegisterRule::Kind::kUnsupported, 0}); break; }
        case 0x11: { const uint64_t reg = r.uleb(); set(reg, {RegisterRule::Kind::kSaved, r.sleb() * cie_.data_alignment}); break; }
        case 0x12: state_.cfa_register = r.uleb(); state_.cfa_offset = r.sleb() * cie_.data_alignment; plain_cfa(); break;
        case 0x13: state_.cfa_offset = r.sleb() * cie_.data_alignment; break;
        case 0x14: { const uint64_t reg = r.uleb(); r.uleb(); set(reg, {RegisterRule::Kind::kUnsupported, 0}); break; }
        case 0x15: { const uint64_t reg = r.uleb(); r.sleb(); set(reg, {RegisterRule::Kind::kUnsupported, 0}); break; }
        case 0x2e: r.uleb(); break;  // GNU_args_size: nothing to do for a walk
        case 0x2f: { const uint64_t reg = r.uleb(); set(reg, {RegisterRule::Kind::kSaved, -static_cast<int64_t>(r.uleb()) * cie_.data_alignment}); break; }
        default: return false;
      }
    }
    if (is_cie) initial_ = state_;
    return r.ok();
  }
  const CfaState& state() const { return state_; }

 private:
  static constexpr size_t kMaxRemembered = 8;
  static Reader block(Reader& r) {
    const uint64_t length = r.uleb();
    const uint8_t* start = r.at();
    r.skip(length);
    return r.ok() ? Reader(start, start + length) : Reader(start, start);
  }
  void plain_cfa() {
    state_.cfa_unsupported = false;
    state_.cfa_deref = false;
  }
  void cfa_expression(Reader expression) {
    uint64_t reg = 0;
    int64_t offset = 0;
    state_.cfa_unsupported = !simple_expression(expression, /*deref=*/true, reg, offset);
    state_.cfa_deref = true;
    state_.cfa_register = reg;
    state_.cfa_offset = offset;
  }
  void register_expression(uint64_t target, Reader expression) {
    uint64_t reg = 0;
    int64_t offset = 0;
    if (simple_expression(expression, /*deref=*/false, reg, offset) && reg == kRbp)
      set(target, {RegisterRule::Kind::kSavedAtRbp, offset});
    else
      set(target, {RegisterRule::Kind::kUnsupported, 0});
  }
  bool advance(uintptr_t& location, uint64_t delta) {
    location += delta * cie_.code_alignment;
    return location > pc_;
  }
  void set(uint64_t reg, RegisterRule rule) {
    if (reg == kRbp) state_.rbp = rule;
    if (reg == cie_.return_address_register) state_.return_address = rule;
  }
  void restore(uint64_t reg) {
    if (reg == kRbp) state_.rbp = initial_.rbp;
    if (reg == cie_.return_address_register) state_.return_address = initial_.return_address;
  }

  const Cie& cie_;
  const uintptr_t pc_;
  CfaState state_;
  CfaState initial_;
  CfaState remembered_[kMaxRemembered];
  size_t depth_ = 0;
};

FrameRule rule_from(const CfaState& state, bool signal_frame) {
  FrameRule rule;
  if (state.return_address.kind == RegisterRule::Kind::kUndefined) {
    rule.kind = FrameRule::Kind::kOutermost;
    return rule;
  }
  rule.kind = FrameRule::Kind::kUnsupported;
  constexpr int64_t kLimit = int64_t{1} << 30;
  if (signal_frame || state.cfa_unsupported) return rule;
  if (state.cfa_register != kRsp && state.cfa_register != kRbp) return rule;
  if (state.return_address.kind != RegisterRule::Kind::kSaved) return rule;
  if (state.rbp.kind != RegisterRule::Kind::kSame && state.rbp.kind != RegisterRule::Kind::kSaved &&
      state.rbp.kind != RegisterRule::Kind::kSavedAtRbp)
    return rule;
  if (state.rbp.offset <= -kLimit || state.rbp.offset >= kLimit ||
      state.return_address.offset <= -kLimit || state.return_address.offset >= kLimit)
    return rule;
  if (state.cfa_offset <= -kLimit || state.cfa_offset >= kLimit) return rule;
  rule.kind = FrameRule::Kind::kStep;
  rule.cfa_from_rbp = state.cfa_register == kRbp;
  rule.cfa_offset = static_cast<int32_t>(state.cfa_offset);
  rule.cfa_deref = state.cfa_deref;
  rule.rbp_saved = state.rbp.kind != RegisterRule::Kind::kSame;
  rule.rbp_from_rbp = state.rbp.kind == RegisterRule::Kind::kSavedAtRbp;
  rule.rbp_offset = static_cast<int32_t>(state.rbp.offset);
  rule.return_address_offset = static_cast<int32_t>(state.return_address.offset);
  return rule;
}

// The rule at `pc` from the module whose .eh_frame_hdr is at `header`.
FrameRule rule_in_module(const uint8_t* header, uintptr_t pc) {
  FrameRule unsupported;
  unsupported.kind = FrameRule::Kind::kUnsupported;
  Reader r(header, header + 16);
  const uint8_t version = r.fixed<uint8_t>();
  const uint8_t eh_frame_encoding = r.fixed<uint8_t>();
  const uint8_t count_encoding = r.fixed<uint8_t>();
  const uint8_t table_encoding = r.fixed<uint8_t>();
  if (version != 1 || table_encoding != kDataRelativeSigned4) return unsupported;
  const auto base = reinterpret_cast<uintptr_t>(header);
  r = Reader(r.at(), r.at() + 16);
  r.pointer(eh_frame_encoding, base);
  const uint64_t count = r.pointer(count_encoding, base);
  if (!r.ok() || count == 0 || count > (uint64_t{1} << 28)) return FrameRule{};
  // The search table: (initial location, FDE address) pairs, both relative to the header.
  const auto* table = reinterpret_cast<const int32_t*>(r.at());
  uint64_t low = 0, high = count;  // find the last entry starting at or before pc
  while (high - low > 1) {
    const uint64_t mid = low + (high - low) / 2;
    if (base + static_cast<intptr_t>(table[2 * mid]) <= pc) low = mid; else high = mid;
  }
  if (base + static_cast<intptr_t>(table[2 * low]) > pc) return FrameRule{};
  const auto* fde = reinterpret_cast<const uint8_t*>(base + static_cast<intptr_t>(table[2 * low + 1]));

  Reader body(nullptr, nullptr);
  if (!read_record(fde, body)) return unsupported;
  const uint8_t* id_field = body.at();
  const uint32_t cie_offset = body.fixed<uint32_t>();
  if (cie_offset == 0) return unsupported;
  Cie cie;
  if (!read_cie(id_field - cie_offset, cie)) return unsupported;
  const uintptr_t pc_begin = body.pointer(cie.fde_encoding);
  const uintptr_t pc_range = body.pointer(cie.fde_encoding & 0x0f);
  if (!body.ok()) return unsupported;
  if (pc < pc_begin || pc >= pc_begin + pc_range) return FrameRule{};
  if (cie.has_augmentation_data) body.skip(body.uleb());
  if (!body.ok()) return unsupported;

  CfaProgram program(cie, pc);
  uintptr_t location = pc_begin;
  if (!program.run(Reader(cie.instructions, cie.end), location, /*is_cie=*/true)) return unsupported;
  location = pc_begin;
  if (!program.run(body, location, /*is_cie=*/false)) return unsupported;
  return rule_from(program.state(), cie.signal_frame);
}

struct ModuleSearch {
  uintptr_t pc = 0;
  const uint8_t* header = nullptr;
  bool found = false;
};

int find_module(dl_phdr_info* info, size_t, void* data) {
  auto& search = *static_cast<ModuleSearch*>(data);
  const ElfW(Phdr)* eh_frame_header = nullptr;
  bool contains = false;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& segment = info->dlpi_phdr[i];
    const uintptr_t start = info->dlpi_addr + segment.p_vaddr;
    if (segment.p_type == PT_LOAD && search.pc >= start && search.pc < start + segment.p_memsz)
      contains = true;
    if (segment.p_type == PT_GNU_EH_FRAME) eh_frame_header = &segment;
  }
  if (!contains) return 0;
  search.found = true;
  if (eh_frame_header != nullptr)
    search.header = reinterpret_cast<const uint8_t*>(info->dlpi_addr + eh_frame_header->p_vaddr);
  return 1;
}

int count_unloaded(dl_phdr_info* info, size_t size, void* data) {
  if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
    *static_cast<uint64_t*>(data) = info->dlpi_subs;
  return 1;
}

#endif  // __x86_64__

}  // namespace

FrameRule find_frame_rule(uintptr_t pc) {
#if defined(__x86_64__)
  ModuleSearch search;
  search.pc = pc;
  dl_iterate_phdr(find_module, &search);
  if (!search.found || search.header == nullptr) return FrameRule{};
  return rule_in_module(search.header, pc);
#else
  (void)pc;
  FrameRule rule;
  rule.kind = FrameRule::Kind::kUnsupported;
  return rule;
#endif
}

uint64_t unloaded_module_count() {
  uint64_t count = 0;
#if defined(__x86_64__)
  dl_iterate_phdr(count_unloaded, &count);
#endif
  return count;
}

}  // namespace memsnap
