// Stack walkers read raw words of their callers' frames (saved return addresses and frame
// pointers, or whatever a remembered walk found there). Under AddressSanitizer such a word may
// lie in a frame's redzone, which is an error for ordinary code but exactly what an unwinder
// must be able to look at (libunwind and ASan's own unwinder are exempt the same way). The
// functions that do those reads carry this attribute and read through volatile loads, not
// memcpy, which ASan would check through its interceptor.
#pragma once

#define MEMSNAP_READS_RAW_STACK __attribute__((no_sanitize("address")))
