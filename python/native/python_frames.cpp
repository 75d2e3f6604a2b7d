#include "python/native/python_frames.h"

#include <Python.h>
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
#define MEMSNAP_PYTHON_FRAMES 1
// The frame layout is internal to CPython: its own header describes this very interpreter.
#define Py_BUILD_CORE 1
#include "internal/pycore_frame.h"
#undef Py_BUILD_CORE
#else
#define MEMSNAP_PYTHON_FRAMES 0
#endif

#include "python/native/code_locations.h"

namespace memsnap::python {
namespace {

// Token payload: the code's id above, the instruction's index (2-byte units) below.
constexpr unsigned kInstructionBits = 24;
constexpr uint64_t kInstructionMask = (uint64_t{1} << kInstructionBits) - 1;
constexpr uint32_t kMaxCodes = 1u << 20;  // beyond this, frames resolve to "<more code>"
constexpr size_t kMaxFramesWalked = 4096;  // a corrupt chain ends the walk, not the program

std::atomic<uint64_t> next_serial{1};

#if MEMSNAP_PYTHON_FRAMES

// Code objects some PythonFrames interned, and how many of them have died: a thread's
// cached id for a code address holds while the count is what it was when the id was cached.
std::atomic<bool> watching_code{false};
std::atomic<uint64_t> code_deaths{0};
std::mutex interned_mutex;
std::unordered_set<const void*>* interned_codes = new std::unordered_set<const void*>;  // never destroyed
// Addresses of interned code objects that died since: what a table knows of such an address
// is stale, however alike the next code object there looks (two FX graphs of the same source
// share name, line table and often the very objects holding them).
std::unordered_set<const void*>* dead_codes = new std::unordered_set<const void*>;  // never destroyed

// What identifies a code object beyond its address: its immutable fields' identities.
struct Fingerprint {
  const void* filename = nullptr;
  const void* name = nullptr;
  const void* line_table = nullptr;
  int first_line = 0;
  bool operator==(const Fingerprint&) const = default;
};

Fingerprint fingerprint_of(const PyCodeObject* code) {
  return {code->co_filename, code->co_name, code->co_linetable, code->co_firstlineno};
}

// A str's text as UTF-8, read from its storage (no allocation by Python, no lock): strings
// are immutable and the code object holding them is alive while its frame runs.
std::string utf8_of(PyObject* text) {
  if (text == nullptr || !PyUnicode_Check(text) || !PyUnicode_IS_COMPACT(text)) return "?";
  const Py_ssize_t length = PyUnicode_GET_LENGTH(text);
  const void* data = PyUnicode_DATA(text);
  if (PyUnicode_IS_ASCII(text)) return std::string(static_cast<const char*>(data), static_cast<size_t>(length));
  const int kind = PyUnicode_KIND(text);
  std::string out;
  out.reserve(static_cast<size_t>(length) + 8);
  for (Py_ssize_t i = 0; i < length; ++i) {
    const Py_UCS4 c = PyUnicode_READ(kind, data, i);
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

#endif  // MEMSNAP_PYTHON_FRAMES

struct CodeInfo {
  std::string name;
  std::string file;
  int first_line = 0;
  std::string line_table;
};

}  // namespace

struct PythonFrames::Table {
#if MEMSNAP_PYTHON_FRAMES
  struct Known {
    Fingerprint fingerprint;
    uint32_t id;
  };
#endif
  mutable std::mutex mutex;
  std::vector<CodeInfo> codes;  // by id
#if MEMSNAP_PYTHON_FRAMES
  std::unordered_map<const void*, Known> by_address;
#endif
};

bool frames_supported() { return MEMSNAP_PYTHON_FRAMES != 0; }

std::string frames_unsupported_reason() {
  if (frames_supported()) return "";
  return std::string("memsnap reads Python frames on CPython 3.11 and 3.12; this build is for ") +
         PY_VERSION;
}

#if MEMSNAP_PYTHON_FRAMES && PY_VERSION_HEX >= 0x030C0000

namespace {

// Runs with the GIL held as a code object is created or destroyed; must not raise.
int on_code_event(PyCodeEvent event, PyCodeObject* code) {
  if (event != PY_CODE_EVENT_DESTROY) return 0;
  std::lock_guard<std::mutex> lock(interned_mutex);
  if (interned_codes->erase(code) > 0) {
    dead_codes->insert(code);
    code_deaths.fetch_add(1, std::memory_order_release);
  }
  return 0;
}

}  // namespace

bool watch_code_objects() {
  if (watching_code.load()) return true;
  if (PyCode_AddWatcher(on_code_event) < 0) {
    PyErr_Clear();
    return false;
  }
  // Ids cached before now were cached unwatched (their code objects' deaths go uncounted):
  // counting one death makes every thread look them up again.
  code_deaths.fetch_add(1, std::memory_order_release);
  watching_code.store(true, std::memory_order_release);
  return true;
}

#else

bool watch_code_objects() { return false; }

#endif

PythonFrames::PythonFrames() : table_(std::make_unique<Table>()), serial_(next_serial++) {}
PythonFrames::~PythonFrames() = default;

size_t PythonFrames::code_count() const {
  std::lock_guard<std::mutex> lock(table_->mutex);
  return table_->codes.size();
}

bool PythonFrames::is_evaluation_loop(std::string_view function) const {
  return function.rfind("_PyEval_EvalFrameDefault", 0) == 0;
}

// The loop's entry and size from the dynamic symbol table (CPython exports it, from the
// executable or from libpython). Code the compiler split off it (".cold" parts) lies
// elsewhere: a walk passing through there goes on to the loop's next frame. Looked up once:
// dlsym and dladdr1 scan symbols under the loader's lock (several µs a call).
StopCode PythonFrames::evaluation_loop_code() const {
  static const StopCode code = [] {
    void* loop = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
    Dl_info info{};
    void* entry = nullptr;
    if (loop == nullptr || dladdr1(loop, &info, &entry, RTLD_DL_SYMENT) == 0 || entry == nullptr)
      return StopCode{};
    const auto* symbol = static_cast<const ElfW(Sym)*>(entry);
    if (symbol->st_size == 0) return StopCode{};
    const auto begin = reinterpret_cast<uintptr_t>(loop);
    return StopCode{begin, begin + static_cast<uintptr_t>(symbol->st_size)};
  }();
  return code;
}

#if MEMSNAP_PYTHON_FRAMES

namespace {

// Each thread remembers the code objects it saw last, so a frame seen before costs a few
// compares, no lock.
struct CacheSlot {
  const void* code = nullptr;
  uint64_t owner = 0;
  uint64_t deaths = 0;      // code_deaths when cached (while watching)
  Fingerprint fingerprint;  // (without a watcher)
  int first_traceable = 0;  // the code's _co_firsttraceable
  uint32_t id = 0;
};

// _PyFrame_IsIncomplete (a frame before its first RESUME instruction), with the code
// object's _co_firsttraceable given, so that a known code object is not read for it.
bool is_incomplete(const _PyInterpreterFrame* frame, PyCodeObject* code, int first_traceable) {
  return frame->owner != FRAME_OWNED_BY_GENERATOR && frame->prev_instr < _PyCode_CODE(code) + first_traceable;
}
thread_local std::array<CacheSlot, 512> code_cache;

}  // namespace

size_t PythonFrames::capture(uintptr_t* tokens, size_t max) {
  if (max == 0 || !Py_IsInitialized()) return 0;
  // This thread's state, found without the GIL (threads that never ran Python have none).
  PyThreadState* thread = PyGILState_GetThisThreadState();
  if (thread == nullptr || thread->cframe == nullptr) return 0;
  _PyInterpreterFrame* frame = thread->cframe->current_frame;
  // (Read before any frame: a code object that died before this capture began, and whose
  // address a frame of this thread now holds, was counted before this thread ran the frame.)
  const bool watching = watching_code.load(std::memory_order_acquire);
  const uint64_t deaths = code_deaths.load(std::memory_order_acquire);
  size_t count = 0;
  for (size_t walked = 0; frame != nullptr && count < max && walked < kMaxFramesWalked; ++walked) {
#if PY_VERSION_HEX >= 0x030C0000
    // 3.12: each run of the evaluation loop starts with a frame owned by the C stack.
    if (frame->owner == FRAME_OWNED_BY_CSTACK) {
      tokens[count++] = kInterpreterRunEnd;
      frame = frame->previous;
      continue;
    }
#endif
    PyCodeObject* code = frame->f_code;
    CacheSlot* slot = nullptr;
    bool known = false;
    if (code != nullptr) {
      slot = &code_cache[(reinterpret_cast<uintptr_t>(code) >> 4) % code_cache.size()];
      known = slot->code == code && slot->owner == serial_ &&
              (watching ? slot->deaths == deaths : slot->fingerprint == fingerprint_of(code));
    }
    if (code != nullptr && !is_incomplete(frame, code, known ? slot->first_traceable : code->_co_firsttraceable)) {
      uint32_t id;
      if (known) {
        id = slot->id;
      } else {
        const Fingerprint fingerprint = fingerprint_of(code);
        bool died = false;  // a code object interned at this address died: this is another
        if (watching) {  // so that its death is counted
          std::lock_guard<std::mutex> lock(interned_mutex);
          died = dead_codes->erase(code) > 0;
          interned_codes->insert(code);
        }
        std::lock_guard<std::mutex> lock(table_->mutex);
        auto found = table_->by_address.find(code);
        // (The file's text too: a new code object can hold a new filename string at the address
        // of the dead one's, as two FX graphs compiled in turn do.)
        if (found != table_->by_address.end() && !died && found->second.fingerprint == fingerprint &&
            found->second.id < table_->codes.size() &&
            table_->codes[found->second.id].file == utf8_of(code->co_filename)) {
          id = found->second.id;
        } else if (table_->codes.size() >= kMaxCodes) {
          id = kMaxCodes;
        } else {
          id = static_cast<uint32_t>(table_->codes.size());
          table_->codes.push_back({utf8_of(code->co_name), utf8_of(code->co_filename),
                                   code->co_firstlineno,
                                   std::string(PyBytes_AS_STRING(code->co_linetable),
                                               static_cast<size_t>(PyBytes_GET_SIZE(code->co_linetable)))});
          table_->by_address[code] = {fingerprint, id};
        }
        *slot = {code, serial_, deaths, fingerprint, code->_co_firsttraceable, id};
      }
      const ptrdiff_t index = frame->prev_instr - _PyCode_CODE(code);
      const uint64_t instruction =
          index < 0 ? 0 : std::min<uint64_t>(static_cast<uint64_t>(index), kInstructionMask);
      tokens[count++] = kInterpreterTokenBit | kInterpreterFrameBit |
                        (static_cast<uint64_t>(id) << kInstructionBits) | instruction;
    }
#if PY_VERSION_HEX < 0x030C0000
    // 3.11: the first frame of each run of the evaluation loop is marked.
    if (frame->is_entry && count < max) tokens[count++] = kInterpreterRunEnd;
#endif
    frame = frame->previous;
  }
  return count;
}

#else

size_t PythonFrames::capture(uintptr_t*, size_t) { return 0; }

#endif  // MEMSNAP_PYTHON_FRAMES

SourceFrame PythonFrames::resolve(uintptr_t token) {
  const uint64_t payload = token & kInterpreterPayloadMask;
  const auto id = static_cast<uint32_t>(payload >> kInstructionBits);
  const auto instruction = static_cast<uint32_t>(payload & kInstructionMask);
  std::lock_guard<std::mutex> lock(table_->mutex);
  if (!is_interpreter_frame(token) || id >= table_->codes.size())
    return {id == kMaxCodes ? "<more code objects than memsnap keeps>" : "??", "", 0};
  const CodeInfo& code = table_->codes[id];
  const int line = line_for_instruction(code.line_table, code.first_line, instruction);
  return {code.name, code.file, line < 0 ? code.first_line : line};
}

PythonFrames& process_python_frames() {
  static PythonFrames* frames = new PythonFrames;
  return *frames;
}

}  // namespace memsnap::python
