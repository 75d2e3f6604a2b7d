#include "python/native/record_function_annotations.h"

#include <ATen/record_function.h>

#include <memory>
#include <mutex>
#include <optional>

#include "history/history_recorder.h"
#include "python/native/torch_allocator.h"

namespace memsnap::pytorch {
namespace {

std::mutex mutex;
std::optional<at::CallbackHandle> callback;  // guarded by mutex

// Straight to the recorder, as recordAnnotation would after unpacking PyTorch's name/stage
// pairs (history is on only once the allocator is initialized).
void annotate(const at::RecordFunction& range, bool start) {
  TorchAllocator* allocator = installed_allocator();
  if (allocator != nullptr && allocator->initialized()) allocator->recorder().annotate(range.name(), start);
}

}  // namespace

void follow_record_functions(bool on) {
  std::lock_guard lock(mutex);
  if (on == callback.has_value()) return;
  if (!on) {
    at::removeCallback(*callback);
    callback.reset();
    return;
  }
  callback = at::addGlobalCallback(
      at::RecordFunctionCallback(
          [](const at::RecordFunction& range) -> std::unique_ptr<at::ObserverContext> {
            annotate(range, true);
            return nullptr;
          },
          [](const at::RecordFunction& range, at::ObserverContext*) { annotate(range, false); })
          .scopes({at::RecordScope::USER_SCOPE}));
}

}  // namespace memsnap::pytorch
