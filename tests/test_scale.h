// How much work the long randomized tests do. Under sanitizers (scripts/sanitize.sh) code
// runs 5-20x slower, so they do a tenth of it: still hundreds of thousands of checked
// operations, within CI's time.
#pragma once

namespace memsnap::testing {

#if defined(MEMSNAP_SANITIZED)
inline constexpr int kWorkDivisor = 10;
#else
inline constexpr int kWorkDivisor = 1;
#endif

}  // namespace memsnap::testing
