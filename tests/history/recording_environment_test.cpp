#include "history/recording_environment.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace {

using Variables = std::map<std::string, std::string>;

memsnap::Result<memsnap::RecordingEnvironment> read(const Variables& variables) {
  return memsnap::recording_environment([&](const char* name) -> const char* {
    const auto found = variables.find(name);
    return found == variables.end() ? nullptr : found->second.c_str();
  });
}

TEST(RecordingEnvironment, NothingSetRecordsNothing) {
  const auto environment = read({});
  ASSERT_TRUE(environment) << environment.error();
  EXPECT_EQ(environment->level, memsnap::HistoryLevel::kOff);
  EXPECT_FALSE(environment->stacks);
  EXPECT_EQ(environment->max_entries, 100000u);
  EXPECT_TRUE(environment->oom_snapshot.empty());
  EXPECT_TRUE(environment->snapshot_at_exit.empty());
}

TEST(RecordingEnvironment, ReadsEveryVariable) {
  const auto environment = read({{"MEMSNAP_HISTORY", "alloc"},
                                 {"MEMSNAP_STACKS", "python"},
                                 {"MEMSNAP_MAX_ENTRIES", "2500"},
                                 {"MEMSNAP_OOM_SNAPSHOT", "oom-{pid}-{n}.msgpack"},
                                 {"MEMSNAP_SNAPSHOT_AT_EXIT", "run.pickle"}});
  ASSERT_TRUE(environment) << environment.error();
  EXPECT_EQ(environment->level, memsnap::HistoryLevel::kAlloc);
  ASSERT_TRUE(environment->stacks);
  EXPECT_EQ(*environment->stacks, memsnap::StackChoice::kPython);
  EXPECT_EQ(environment->max_entries, 2500u);
  EXPECT_EQ(environment->oom_snapshot, "oom-{pid}-{n}.msgpack");
  EXPECT_EQ(environment->snapshot_at_exit, "run.pickle");
}

// Each bad value is one line that names its variable and says what it takes.
TEST(RecordingEnvironment, ABadValueIsOneLineNamingItsVariable) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"MEMSNAP_HISTORY", "everything"}, {"MEMSNAP_HISTORY", ""},       {"MEMSNAP_HISTORY", "ALL"},
      {"MEMSNAP_STACKS", "c++"},         {"MEMSNAP_STACKS", "all "},     {"MEMSNAP_MAX_ENTRIES", "0"},
      {"MEMSNAP_MAX_ENTRIES", "-5"},     {"MEMSNAP_MAX_ENTRIES", "1e6"}, {"MEMSNAP_MAX_ENTRIES", "50000001"},
      {"MEMSNAP_MAX_ENTRIES", "99999999999999999999999"}, {"MEMSNAP_MAX_ENTRIES", ""},
      {"MEMSNAP_STACKS", std::string("a\nb\x01") + std::string(200, 'x')},
  };
  for (const auto& [name, value] : cases) {
    SCOPED_TRACE(name + "=" + value);
    Variables variables = {{"MEMSNAP_HISTORY", "all"}};
    variables[name] = value;
    const auto environment = read(variables);
    ASSERT_FALSE(environment);
    EXPECT_EQ(environment.error().rfind(name + "=", 0), 0u) << environment.error();
    EXPECT_EQ(environment.error().find('\n'), std::string::npos) << environment.error();
    EXPECT_LT(environment.error().size(), 160u) << environment.error();
    EXPECT_NE(environment.error().find("expected"), std::string::npos) << environment.error();
  }
}

// How to record, with nothing asked to record, would silently do nothing: said instead. An
// explicit MEMSNAP_HISTORY=off (recording turned off on purpose) keeps the others quiet.
TEST(RecordingEnvironment, StacksOrEntriesWithoutHistoryAreOneLineSayingSo) {
  for (const Variables& variables : {Variables{{"MEMSNAP_STACKS", "cpp"}}, Variables{{"MEMSNAP_MAX_ENTRIES", "10"}}}) {
    const auto environment = read(variables);
    ASSERT_FALSE(environment);
    EXPECT_NE(environment.error().find("need MEMSNAP_HISTORY"), std::string::npos) << environment.error();
  }
  const auto off = read({{"MEMSNAP_HISTORY", "off"}, {"MEMSNAP_STACKS", "cpp"}});
  ASSERT_TRUE(off) << off.error();
  EXPECT_EQ(off->level, memsnap::HistoryLevel::kOff);
}

TEST(RecordingEnvironment, TheLargestTraceIsAccepted) {
  const auto environment = read({{"MEMSNAP_HISTORY", "all"}, {"MEMSNAP_MAX_ENTRIES", "50000000"}});
  ASSERT_TRUE(environment) << environment.error();
  EXPECT_EQ(environment->max_entries, memsnap::kMaxEnvironmentEntries);
}

}  // namespace
