#include "history/stack_bounds.h"

#include <pthread.h>

namespace memsnap {

StackBounds thread_stack_bounds() {
  thread_local const StackBounds bounds = [] {
    StackBounds found;
    pthread_attr_t attributes;
    if (pthread_getattr_np(pthread_self(), &attributes) == 0) {
      void* address = nullptr;
      size_t size = 0;
      if (pthread_attr_getstack(&attributes, &address, &size) == 0) {
        found.low = reinterpret_cast<uintptr_t>(address);
        found.high = found.low + size;
      }
      pthread_attr_destroy(&attributes);
    }
    return found;
  }();
  return bounds;
}

}  // namespace memsnap
