// The out-of-memory message memsnap.torch raises: PyTorch's wording and figures, then one line
// saying which kind of out-of-memory it was.
#include <gtest/gtest.h>

#include <string>

#include "python/native/oom_message.h"

namespace oom_message_test {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

memsnap::OomInfo h100(uint64_t requested, uint64_t allocated, uint64_t reserved, uint64_t free) {
  memsnap::OomInfo info;
  info.device = 0;
  info.requested_bytes = requested;
  info.rounded_bytes = requested;
  info.allocation_bytes = requested;
  info.device_total_bytes = 80 * kGiB;
  info.device_free_bytes = free;
  info.allocated_bytes = allocated;
  info.reserved_bytes = reserved;
  return info;
}

TEST(OomMessage, SizesReadAsPyTorchPrintsThem) {
  EXPECT_EQ(memsnap::pytorch::torch_format_size(512), "512 bytes");
  EXPECT_EQ(memsnap::pytorch::torch_format_size(1024), "1024 bytes");
  EXPECT_EQ(memsnap::pytorch::torch_format_size(1536), "1.50 KiB");
  EXPECT_EQ(memsnap::pytorch::torch_format_size(kMiB), "1024.00 KiB");
  EXPECT_EQ(memsnap::pytorch::torch_format_size(20 * kMiB), "20.00 MiB");
  EXPECT_EQ(memsnap::pytorch::torch_format_size(2048 * kGiB), "2048.00 GiB");
}

// PyTorch 2.11 on the H100 (bench/make_pytorch_pool_snapshots.py, pool_oom): two graphs' pools
// hold 768 MiB free, a 1 GiB request under a 2 GiB cap fails. PyTorch printed "Of the allocated
// memory 1.25 GiB is allocated by PyTorch, with 768.00 MiB allocated in private pools (e.g., CUDA
// Graphs), and 2.00 MiB is reserved by PyTorch but unallocated."
TEST(OomMessage, CountsFreeMemoryOfPrivatePoolsAsPyTorchDoes) {
  memsnap::OomInfo info = h100(kGiB, 512 * kMiB, 1282 * kMiB, 77 * kGiB);
  info.private_pool_free_bytes = 768 * kMiB;
  info.allowed_bytes = 2 * kGiB;
  const std::string message = memsnap::pytorch::torch_oom_message(info);
  EXPECT_NE(message.find("2.00 GiB allowed; Of the allocated memory 1.25 GiB is allocated by "
                         "PyTorch, with 768.00 MiB allocated in private pools (e.g., CUDA Graphs), "
                         "and 2.00 MiB is reserved by PyTorch but unallocated."),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("\nmemsnap: private pools: 768.00 MiB is cached free inside private pools"),
            std::string::npos)
      << message;
}

TEST(OomMessage, KeepsPyTorchsWordingAndFigures) {
  const std::string message =
      memsnap::pytorch::torch_oom_message(h100(2 * kGiB, 70 * kGiB, 77 * kGiB, 1 * kGiB));
  EXPECT_EQ(message.rfind("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                          "capacity of 80.00 GiB of which 1024.00 MiB is free. Including non-PyTorch "
                          "memory, this process has 79.00 GiB memory in use. Of the allocated "
                          "memory 70.00 GiB is allocated by PyTorch, and 7.00 GiB is reserved by "
                          "PyTorch but unallocated.",
                          0),
            0u)
      << message;
  EXPECT_NE(message.find("\nmemsnap: fragmentation: 7.00 GiB is reserved but free"), std::string::npos)
      << message;
}

TEST(OomMessage, ARequestLargerThanTheDeviceSaysNoSettingHelps) {
  const std::string reason = memsnap::pytorch::oom_reason(h100(2048 * kGiB, kGiB, 2 * kGiB, 74 * kGiB));
  EXPECT_EQ(reason.rfind("memsnap: the request alone (2048.00 GiB) is larger than the device's total "
                         "memory (80.00 GiB)",
                         0),
            0u)
      << reason;
}

TEST(OomMessage, ACapThatRefusedIsNamedWithTheDevicesFreeMemory) {
  memsnap::OomInfo info = h100(600 * kMiB, 900 * kMiB, 1000 * kMiB, 70 * kGiB);
  info.allowed_bytes = kGiB;
  const std::string message = memsnap::pytorch::torch_oom_message(info);
  EXPECT_NE(message.find("is free. Including non-PyTorch memory, this process has 10.00 GiB memory in use. "
                         "1024.00 MiB allowed; Of the allocated memory"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("memsnap: the memory fraction cap refused it (1024.00 MiB allowed, 1000.00 MiB "
                         "reserved); the device itself had 70.00 GiB free."),
            std::string::npos)
      << message;
}

TEST(OomMessage, LiveTensorsHoldingTheDeviceIsExhaustion) {
  const std::string reason = memsnap::pytorch::oom_reason(h100(4 * kGiB, 78 * kGiB, 79 * kGiB, kGiB / 2));
  EXPECT_EQ(reason.rfind("memsnap: exhaustion: tensors in use hold 78.00 GiB of the device's 80.00 GiB", 0), 0u)
      << reason;
}

}  // namespace oom_message_test
