#include "python/native/record_function_annotations.h"

#include <ATen/record_function.h>

#include <memory>
#include <mutex>
#include <optional>

#include "python/native/torch_allocator.h"

namespace memsnap::pytorch {
namespace {

std::mutex mutex;
std::optional<at::CallbackHandle> callback;  // guarded by mutex

// As PyTorch's own callback tells its allocator.
void annotate(const at::RecordFunction& range, bool start) {
  if (TorchAllocator* allocator = installed_allocator())
    allocator->recordAnnotation({{"name", range.name()}, {"stage", start ? "START" : "END"}});
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
