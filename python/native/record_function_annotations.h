// `torch.profiler.record_function` ranges as annotations in memsnap's history while
// memsnap.torch.record_history records, as PyTorch's own `_record_memory_history` takes them:
// one global RecordFunction callback for user scopes, each range's start and end an annotation
// named after it. Steps named by PyTorch's profiler (ProfilerStep#N) and by training frameworks
// reach `memsnap growth` this way.
#pragma once

namespace memsnap::pytorch {

// Adds (true) or removes (false) the callback; a repeat is a no-op. Thread-safe.
void follow_record_functions(bool on);

}  // namespace memsnap::pytorch
