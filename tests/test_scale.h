// How much work the long randomized tests do. Under sanitizers (scripts/sanitize.sh) code
// runs 5-20x slower, so they do a tenth of it: still hundreds of thousands of checked
// operations, within CI's time. The compilers say when a sanitizer is on (gcc defines
// __SANITIZE_*__, clang answers __has_feature).
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MEMSNAP_TESTS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MEMSNAP_TESTS_SANITIZED 1
#endif
#endif

namespace memsnap::testing {

#if defined(MEMSNAP_TESTS_SANITIZED)
inline constexpr int kWorkDivisor = 10;
#else
inline constexpr int kWorkDivisor = 1;
#endif

}  // namespace memsnap::testing
