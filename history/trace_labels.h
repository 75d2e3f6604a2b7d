// What the thread that made a trace event was working under, as PyTorch writes it on every
// trace entry: the user's metadata text (torch.cuda.memory._set_memory_metadata) and the
// innermost compile context (the torch.compile region running). Both belong to the calling
// thread, as in PyTorch: an allocation on autograd's thread carries that thread's, not the
// training loop's.
//
// Each distinct pair is interned once per process and an event holds its id (24 bits, so it
// fits the spare bytes of a trace entry); 0 means neither is set. The table is bounded (a
// program that labels every step differently runs for long): past kMaxLabels distinct pairs,
// events get kOverflowLabel, which reads as a note saying so.
#pragma once

#include <cstdint>
#include <string>

namespace memsnap {

using LabelId = uint32_t;
inline constexpr LabelId kNoLabel = 0;
inline constexpr LabelId kOverflowLabel = (1u << 24) - 1;
inline constexpr LabelId kMaxLabels = 1u << 20;

struct TraceLabel {
  std::string user_metadata;    // "" when none
  std::string compile_context;  // "" when none
};

namespace trace_labels {

// The calling thread's label, as events recorded now take it.
LabelId current();
// The calling thread's metadata text ("" clears it).
void set_user_metadata(std::string text);
std::string user_metadata();
// Compile contexts nest on the calling thread; popping with none pushed does nothing.
void push_compile_context(std::string name);
void pop_compile_context();
// The label an id names (kNoLabel: both empty). Thread-safe.
TraceLabel resolve(LabelId id);

}  // namespace trace_labels
}  // namespace memsnap
