// Asks the kernel to back a large, freshly reserved buffer with transparent huge pages.
// A streamed 300,000-event snapshot touches tens of megabytes once; with 4 KiB pages most
// of its load time went to page faults (a quarter of it on virtual machines), with 2 MiB
// pages that cost all but disappears. Harmless where THP is off or unsupported.
#pragma once

#include <cstddef>

namespace memsnap {

void advise_huge_pages(const void* data, size_t bytes);

}  // namespace memsnap
