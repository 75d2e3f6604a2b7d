// CPython's location table (co_linetable, Python 3.11 and later): which source line an
// instruction came from, decoded from a copy of the table, so a line can be found long after
// the code object is gone and without the interpreter's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace memsnap::python {

// The line of the instruction at `instruction` (an index in 2-byte code units), or -1 when
// the table says it has no line or does not reach that far. `first_line` is co_firstlineno.
int line_for_instruction(std::string_view table, int first_line, uint32_t instruction);

}  // namespace memsnap::python
