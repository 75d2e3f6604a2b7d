// The configuration grammar: every key, the list form, and hostile input.
#include <cstdlib>
#include <random>

#include "allocator_harness.h"

namespace memsnap::testing {
namespace {

std::string error_of(const std::string& text) {
  Result<AllocatorConfig> parsed = parse_allocator_config(text);
  EXPECT_FALSE(parsed.ok()) << "accepted: " << text;
  return parsed.ok() ? "" : parsed.error();
}

TEST(AllocatorConfig, EmptyStringGivesPyTorchDefaults) {
  const AllocatorConfig config = config_from("");
  EXPECT_EQ(config.max_split_size, std::numeric_limits<size_t>::max());
  EXPECT_EQ(config.max_non_split_rounding_size, 20 * kMiB);
  EXPECT_EQ(config.large_segment_size, 20 * kMiB);
  EXPECT_EQ(config.garbage_collection_threshold, 0.0);
  EXPECT_FALSE(config.expandable_segments);
  for (size_t d : config.roundup_power2_divisions) EXPECT_EQ(d, 0u);
}

TEST(AllocatorConfig, ParsesEveryDeviceKey) {
  const AllocatorConfig config = config_from(
      "max_split_size_mb:128, max_non_split_rounding_mb:64,garbage_collection_threshold:0.6,"
      "roundup_power2_divisions:4,expandable_segments:True,release_lock_on_cudamalloc:True,"
      "large_segment_size_mb:32,backend:native");
  EXPECT_EQ(config.max_split_size, 128 * kMiB);
  EXPECT_EQ(config.max_non_split_rounding_size, 64 * kMiB);
  EXPECT_DOUBLE_EQ(config.garbage_collection_threshold, 0.6);
  EXPECT_EQ(config.roundup_power2_divisions[3], 4u);
  EXPECT_TRUE(config.expandable_segments);
  EXPECT_TRUE(config.release_lock_on_cudamalloc);
  EXPECT_EQ(config.large_segment_size, 32 * kMiB);
  EXPECT_TRUE(config.notices.empty());
}

TEST(AllocatorConfig, HostAllocatorKeysAreAcceptedWithANotice) {
  const AllocatorConfig config =
      config_from("pinned_use_cuda_host_register:True,pinned_num_register_threads:8");
  ASSERT_EQ(config.notices.size(), 2u);
  EXPECT_NE(config.notices[0].find("no effect"), std::string::npos);
}

TEST(AllocatorConfig, ErrorsNameTheKeyAndWhatWasExpected) {
  EXPECT_NE(error_of("max_split_size_mb:19").find("max_split_size_mb: must be at least 20"),
            std::string::npos);
  EXPECT_NE(error_of("max_split_size_mb:lots").find("max_split_size_mb"), std::string::npos);
  EXPECT_NE(error_of("max_split_sise_mb:200").find("unknown key 'max_split_sise_mb'"),
            std::string::npos);
  EXPECT_NE(error_of("garbage_collection_threshold:1.0").find("between 0 and 1"),
            std::string::npos);
  EXPECT_NE(error_of("garbage_collection_threshold:nan").find("garbage_collection_threshold"),
            std::string::npos);
  EXPECT_NE(error_of("expandable_segments:yes").find("True or False"), std::string::npos);
  EXPECT_NE(error_of("roundup_power2_divisions:3").find("power of two"), std::string::npos);
  EXPECT_NE(error_of("roundup_power2_divisions:[256:3]").find("power of two"), std::string::npos);
  EXPECT_NE(error_of("roundup_power2_divisions:[300:2]").find("intervals"), std::string::npos);
  EXPECT_NE(error_of("roundup_power2_divisions:[256:2").find("missing closing"), std::string::npos);
  EXPECT_NE(error_of("backend:cudaMallocAsync").find("native"), std::string::npos);
  EXPECT_NE(error_of("max_split_size_mb").find("expected ':'"), std::string::npos);
  EXPECT_NE(error_of("max_split_size_mb:").find("got nothing"), std::string::npos);
  EXPECT_NE(error_of("max_split_size_mb:99999999999999999999").find("integer"), std::string::npos);
  EXPECT_NE(error_of("max_split_size_mb:100:200").find("after the value"), std::string::npos);
}

TEST(AllocatorConfig, SpacesVanishAsInPyTorch) {
  EXPECT_EQ(config_from(" max_split_size_mb : 1 00 ").max_split_size, 100 * kMiB);
}

TEST(AllocatorConfig, ErrorsAreOneLineEvenForBinaryInput) {
  const std::string error = error_of(std::string("\x01\n\xff:7", 5));
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST(AllocatorConfig, OverlongStringIsRefused) {
  EXPECT_NE(error_of(std::string(100000, 'a')).find("longer than"), std::string::npos);
}

TEST(AllocatorConfig, HugeMaxSplitSizeSaturatesInsteadOfOverflowing) {
  const AllocatorConfig config = config_from("max_split_size_mb:9999999999999999999");
  EXPECT_EQ(config.max_split_size, std::numeric_limits<size_t>::max());
}

TEST(AllocatorConfig, RandomStringsNeverCrash) {
  std::mt19937 rng(7);
  const std::string alphabet = "abcdefgmnprstuxl_0123456789:,[]>. TrueFals";
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text;
    const int length = static_cast<int>(rng() % 40);
    for (int j = 0; j < length; ++j) text += alphabet[rng() % alphabet.size()];
    Result<AllocatorConfig> parsed = parse_allocator_config(text);
    if (parsed.ok()) ++accepted;
    else EXPECT_EQ(parsed.error().find('\n'), std::string::npos);
  }
  EXPECT_GT(accepted, 0);  // empty and comma-only strings are valid
}

TEST(AllocatorConfig, RoundTripsThroughItsConfigString) {
  for (const char* text :
       {"", "max_split_size_mb:200", "roundup_power2_divisions:[1:2,64:4,>:8]",
        "garbage_collection_threshold:0.25,release_lock_on_cudamalloc:True",
        "max_non_split_rounding_mb:30,large_segment_size_mb:40"}) {
    const AllocatorConfig config = config_from(text);
    EXPECT_EQ(config_from(to_config_string(config)), config) << text;
  }
}

TEST(AllocatorConfig, EnvironmentPrefersMemsnapThenPyTorchVariables) {
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:100", 1);
  ::setenv("PYTORCH_ALLOC_CONF", "max_split_size_mb:200", 1);
  ::setenv("MEMSNAP_ALLOC_CONF", "max_split_size_mb:300", 1);
  EXPECT_EQ(allocator_config_from_environment().value().max_split_size, 300 * kMiB);
  ::unsetenv("MEMSNAP_ALLOC_CONF");
  EXPECT_EQ(allocator_config_from_environment().value().max_split_size, 200 * kMiB);
  ::unsetenv("PYTORCH_ALLOC_CONF");
  EXPECT_EQ(allocator_config_from_environment().value().max_split_size, 100 * kMiB);
  ::setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:1", 1);
  const auto bad = allocator_config_from_environment();
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().rfind("PYTORCH_CUDA_ALLOC_CONF: ", 0), 0u) << bad.error();
  ::unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  EXPECT_TRUE(allocator_config_from_environment().ok());
}

// PyTorch's _set_allocator_settings on top of the settings in effect: max_split_size,
// roundup_power2_divisions and garbage_collection_threshold return to their defaults unless
// given, max_non_split_rounding to the large segment size; the rest keep their values.
TEST(AllocatorConfig, AnUpdateResetsWhatPyTorchResetsAndKeepsTheRest) {
  const AllocatorConfig base = config_from(
      "max_split_size_mb:128,roundup_power2_divisions:4,garbage_collection_threshold:0.6,"
      "expandable_segments:True,release_lock_on_cudamalloc:True,large_segment_size_mb:40,"
      "max_non_split_rounding_mb:64,graph_capture_record_stream_reuse:True");
  Result<AllocatorConfig> updated = update_allocator_config(base, "max_split_size_mb:256");
  ASSERT_TRUE(updated.ok()) << updated.error();
  const AllocatorConfig& u = updated.value();
  EXPECT_EQ(u.max_split_size, size_t{256} << 20);
  EXPECT_EQ(u.roundup_power2_divisions, AllocatorConfig{}.roundup_power2_divisions);
  EXPECT_EQ(u.garbage_collection_threshold, 0.0);
  EXPECT_TRUE(u.expandable_segments);
  EXPECT_TRUE(u.release_lock_on_cudamalloc);
  EXPECT_TRUE(u.graph_capture_record_stream_reuse);
  EXPECT_EQ(u.large_segment_size, size_t{40} << 20);
  EXPECT_EQ(u.max_non_split_rounding_size, size_t{40} << 20);
  EXPECT_EQ(u.source, to_config_string(u));
  EXPECT_FALSE(update_allocator_config(base, "max_split_size_mb:2").ok());
}

TEST(AllocatorConfig, PyTorch211KeysAreSettingsOfTheirOwn) {
  const AllocatorConfig config =
      config_from("per_process_memory_fraction:0.25,graph_capture_record_stream_reuse:True");
  EXPECT_EQ(config.per_process_memory_fraction, 0.25);
  EXPECT_TRUE(config.graph_capture_record_stream_reuse);
  EXPECT_TRUE(config.notices.empty());
  EXPECT_EQ(to_config_string(config), "graph_capture_record_stream_reuse:True,per_process_memory_fraction:0.25");
  EXPECT_NE(error_of("per_process_memory_fraction:1.1").find("per_process_memory_fraction is invalid"),
            std::string::npos);
  EXPECT_TRUE(parse_allocator_config("max_split_size_mb:20").ok()) << "PyTorch accepts 20 MiB";
}

TEST(AllocatorConfig, NumbersReadBackAsTheyWereWritten) {
  EXPECT_EQ(to_config_string(config_from("garbage_collection_threshold:0.6")), "garbage_collection_threshold:0.6");
}

}  // namespace
}  // namespace memsnap::testing
