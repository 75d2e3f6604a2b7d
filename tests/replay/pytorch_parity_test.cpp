// Transformer training runs recorded from PyTorch 2.11 on an H100 under four allocator
// settings (tests/data/pytorch-2.11-h100/README.md). Replaying each with the same settings
// must make PyTorch's segment allocations (count, sizes, order) and place every single
// allocation at the address PyTorch gave it: the strongest check that memsnap decides as
// PyTorch does, rule for rule, including best fit's ties by address.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "allocator/allocator_config.h"
#include "replay/trace_replay.h"

namespace memsnap {
namespace {

const std::string kDataDir = MEMSNAP_TEST_DATA_DIR "/pytorch-2.11-h100";

nlohmann::json expected_segments() {
  std::ifstream in(kDataDir + "/expected_segments.json");
  EXPECT_TRUE(in.good());
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json::object();
}

class PyTorchParity : public testing::TestWithParam<std::string> {};

TEST_P(PyTorchParity, ReplayMakesPyTorchsDecisionsExactly) {
  const std::string name = GetParam();
  const nlohmann::json recorded = expected_segments().at(name);
  auto trace = read_allocation_trace(kDataDir + "/" + name + ".trace");
  ASSERT_TRUE(trace.ok()) << trace.error();
  auto config = parse_allocator_config(recorded.at("config").get<std::string>());
  ASSERT_TRUE(config.ok()) << config.error();

  ReplayOptions options;
  options.config = config.value();
  const ReplayResult result = replay_trace(trace.value(), options);

  EXPECT_EQ(result.segment_alloc_sizes,
            recorded.at("segment_alloc_sizes").get<std::vector<size_t>>());
  EXPECT_TRUE(result.address_hints_used);
  EXPECT_EQ(result.address_mismatches, 0u)
      << "first placed differently at event " << result.first_address_mismatch;
  EXPECT_EQ(result.failed_allocs, 0u);
  EXPECT_EQ(result.ignored_frees, 0u);
  EXPECT_TRUE(result.invariant_problems.empty());
}

INSTANTIATE_TEST_SUITE_P(RecordedOnH100, PyTorchParity,
                         testing::Values("transformer_s0", "split64_s2", "pow2div_s3",
                                         "split_pow2_s4"));

}  // namespace
}  // namespace memsnap
