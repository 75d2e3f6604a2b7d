#include "record/record_settings.h"

#include <gtest/gtest.h>

#include <csignal>
#include <map>
#include <string>

namespace memsnap {
namespace {

Result<RecordSettings> parse(const std::map<std::string, std::string>& variables) {
  return record_settings([&](const char* name) -> const char* {
    auto it = variables.find(name);
    return it == variables.end() ? nullptr : it->second.c_str();
  });
}

TEST(RecordSettings, DefaultsWriteAtExitAndAtOutOfMemoryWithStacks) {
  const Result<RecordSettings> settings = parse({});
  ASSERT_TRUE(settings) << settings.error();
  EXPECT_EQ(settings->output, "memsnap-record-{pid}.msgpack");
  EXPECT_EQ(settings->oom_output, "memsnap-record-{pid}-oom-{n}.msgpack");
  EXPECT_TRUE(settings->stacks);
  EXPECT_EQ(settings->max_entries, 1000000u);
  EXPECT_EQ(settings->oom_limit, 10u);
  EXPECT_EQ(settings->signal, 0);
}

TEST(RecordSettings, EveryVariableIsRead) {
  const Result<RecordSettings> settings =
      parse({{"MEMSNAP_RECORD_OUTPUT", "/tmp/run-{pid}.pickle"}, {"MEMSNAP_RECORD_OOM", "off"},
             {"MEMSNAP_RECORD_STACKS", "none"}, {"MEMSNAP_RECORD_MAX_ENTRIES", "5000"},
             {"MEMSNAP_RECORD_SIGNAL", "sigusr2"}, {"MEMSNAP_RECORD_CUPTI", "/opt/libcupti.so"},
             {"MEMSNAP_RECORD_REPORT", "/tmp/report"}, {"MEMSNAP_RECORD_OOM_LIMIT", "3"}});
  ASSERT_TRUE(settings) << settings.error();
  EXPECT_EQ(settings->output, "/tmp/run-{pid}.pickle");
  EXPECT_EQ(settings->oom_output, "");
  EXPECT_FALSE(settings->stacks);
  EXPECT_EQ(settings->max_entries, 5000u);
  EXPECT_EQ(settings->signal, SIGUSR2);
  EXPECT_EQ(settings->cupti_library, "/opt/libcupti.so");
  EXPECT_EQ(settings->report, "/tmp/report");
  EXPECT_EQ(settings->oom_limit, 3u);
}

TEST(RecordSettings, ABadValueIsOneLineNamingTheVariable) {
  const std::map<std::string, std::string> bad[] = {
      {{"MEMSNAP_RECORD_STACKS", "python"}},
      {{"MEMSNAP_RECORD_MAX_ENTRIES", "0"}},
      {{"MEMSNAP_RECORD_MAX_ENTRIES", "99999999999999999999"}},
      {{"MEMSNAP_RECORD_MAX_ENTRIES", "12abc"}},
      {{"MEMSNAP_RECORD_SIGNAL", "KILL"}},
      {{"MEMSNAP_RECORD_OOM_LIMIT", "0"}},
      {{"MEMSNAP_RECORD_SIGNAL", "9"}},
      {{"MEMSNAP_RECORD_OUTPUT", ""}},
      {{"MEMSNAP_RECORD_CUPTI", ""}},
      {{"MEMSNAP_RECORD_REPORT", std::string(5000, 'x')}},
      {{"MEMSNAP_RECORD_OUTPUT", "off"}, {"MEMSNAP_RECORD_SIGNAL", "USR1"}},
  };
  for (const auto& variables : bad) {
    const Result<RecordSettings> settings = parse(variables);
    ASSERT_FALSE(settings) << variables.begin()->first;
    EXPECT_NE(settings.error().find(variables.rbegin()->first), std::string::npos) << settings.error();
    EXPECT_EQ(settings.error().find('\n'), std::string::npos);
    EXPECT_LT(settings.error().size(), 200u);
  }
}

TEST(RecordSettings, SignalNamesReadWithOrWithoutSigInAnyCase) {
  EXPECT_EQ(record_signal_from_name("USR1"), SIGUSR1);
  EXPECT_EQ(record_signal_from_name("SIGTERM"), SIGTERM);
  EXPECT_EQ(record_signal_from_name("hup"), SIGHUP);
  EXPECT_EQ(record_signal_from_name("SIGKILL"), std::nullopt);
  EXPECT_EQ(record_signal_from_name(""), std::nullopt);
  EXPECT_EQ(record_signal_name(SIGQUIT), "QUIT");
  EXPECT_FALSE(record_signal_ends_program(SIGUSR1));
  EXPECT_TRUE(record_signal_ends_program(SIGINT));
}

}  // namespace
}  // namespace memsnap
