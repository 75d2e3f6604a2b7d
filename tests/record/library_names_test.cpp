// The library an allocation outside the allocator is put under: the first frame of its stack
// outside CUDA's own libraries, by the file name of the module that holds it.
#include "record/library_names.h"

#include <gnu/libc-version.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "history/interpreter_frames.h"

namespace memsnap {
namespace {

// An address inside this program's code (a return address points just past a call: +1 keeps
// the byte before it in the function too).
uintptr_t in_this_program() { return reinterpret_cast<uintptr_t>(&in_this_program) + 1; }
// (A function no sanitizer intercepts: strlen's address would be the sanitizer runtime's.)
uintptr_t in_libc() { return reinterpret_cast<uintptr_t>(&gnu_get_libc_version) + 1; }

TEST(LibraryNames, TheModuleOfAnAddressIsNamedByItsFile) {
  LibraryNames names;
  EXPECT_EQ(names.module_of(in_this_program()), "memsnap_record_tests");
  EXPECT_EQ(names.module_of(in_libc()).rfind("libc.so", 0), 0u) << names.module_of(in_libc());
  EXPECT_EQ(names.module_of(1), "");  // no module there
}

TEST(LibraryNames, InterpreterTokensAndUnknownAddressesArePassedOver) {
  LibraryNames names;
  const uintptr_t token = kInterpreterTokenBit | kInterpreterFrameBit | 7;
  EXPECT_EQ(names.library_of({token, 1, in_libc(), in_this_program()}).rfind("libc.so", 0), 0u);
  EXPECT_EQ(names.library_of({token, kInterpreterRunEnd}), "");
  EXPECT_EQ(names.library_of({}), "");
}

TEST(LibraryNames, LibrariesGoByFileNameAndPythonExtensionsByTheirPathInTheirPackage) {
  EXPECT_EQ(LibraryNames::name_of_path("/usr/lib/python3/dist-packages/nvidia/nccl/lib/libnccl.so.2"), "libnccl.so.2");
  EXPECT_EQ(LibraryNames::name_of_path(
                "/usr/local/lib/python3.12/site-packages/cupy_backends/cuda/api/runtime.cpython-312-x86_64-linux-gnu.so"),
            "cupy_backends/cuda/api/runtime.cpython-312-x86_64-linux-gnu.so");
  EXPECT_EQ(LibraryNames::name_of_path("/opt/app/my_extension.so"), "my_extension.so");
  EXPECT_EQ(LibraryNames::name_of_path("python3.12"), "python3.12");
}

TEST(LibraryNames, CudasOwnLibrariesAndTheRecorderAreNotLibrariesThatAskedForMemory) {
  for (const char* name : {"libcuda.so.1", "libcudart.so.13", "libcupti.so.13", "libmemsnap_record.so",
                           "libnvidia-ml.so.1"})
    EXPECT_TRUE(LibraryNames::is_cuda_or_recorder(name)) << name;
  for (const char* name : {"libnccl.so.2", "libcublasLt.so.13", "libcudnn_engines_precompiled.so.9",
                           "libtorch_cuda.so", "python3.12", "libcudadevrt.a"})
    EXPECT_FALSE(LibraryNames::is_cuda_or_recorder(name)) << name;
}

}  // namespace
}  // namespace memsnap
