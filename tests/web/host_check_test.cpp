// The Host headers memsnap serve answers: localhost always, and beyond loopback only the
// names it answers to, so a DNS-rebinding page cannot reach it through a browser.
#include "web/host_check.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <string>

namespace memsnap::web {
namespace {

TEST(HostCheck, OnLoopbackOnlyLocalhostAndLoopbackAddressesAreAnswered) {
  for (const std::string listen : {"127.0.0.1", "localhost", "::1", "127.0.0.2"}) {
    const HostCheck check(listen, {});
    for (const char* host : {"localhost", "localhost:8080", "LocalHost.", "127.0.0.1", "127.0.0.1:18080",
                             "127.1.2.3:80", "[::1]", "[::1]:8080"})
      EXPECT_TRUE(check.allows(host)) << listen << " " << host;
    for (const char* host : {"evil.example", "evil.example:8080", "127.0.0.1.evil.example", "10.0.0.1", "[::2]",
                             ""})
      EXPECT_FALSE(check.allows(host)) << listen << " " << host;
    EXPECT_EQ(check.refusal(), "this server answers only requests addressed to localhost");
  }
}

TEST(HostCheck, HeadersThatAreNotHostAndPortAreRefused) {
  const HostCheck loopback("127.0.0.1", {});
  const HostCheck everywhere("0.0.0.0", {"viewer.lab"});
  for (const char* host : {"127.0.0.1:18080@evil.com", "[::1]evil", "[::1]:80evil", "localhost:abc",
                           "localhost:", "localhost:123456", "localhost:99999", "local host", "localhost/x",
                           "[::1", "[evil]", "127.0.0.1:80:80", "@evil.com", ":8080", ".localhost", "-x"}) {
    EXPECT_FALSE(loopback.allows(host)) << host;
    EXPECT_FALSE(everywhere.allows(host)) << host;
  }
}

TEST(HostCheck, BeyondLoopbackTheServersOwnNamesAndAddressesAreAnsweredAndNoOtherName) {
  char machine[HOST_NAME_MAX + 1] = {};
  ASSERT_EQ(gethostname(machine, sizeof machine - 1), 0);
  for (const std::string listen : {"0.0.0.0", "::", "192.0.2.7"}) {
    const HostCheck check(listen, {"viewer.lab", "Other.Example."});
    for (const std::string& host : {std::string("localhost:8080"), std::string("192.0.2.7:8080"),
                                   std::string("10.1.2.3"), std::string("[2001:db8::1]:8080"),
                                   std::string("viewer.lab:8080"), std::string("VIEWER.LAB."),
                                   std::string("other.example"), std::string(machine) + ":8080"})
      EXPECT_TRUE(check.allows(host)) << listen << " " << host;
    // --host 0.0.0.0 used to turn the check off: a rebinding page's own name is still refused.
    for (const char* host : {"evil.example", "evil.example:8080", "viewer.lab.evil.example"})
      EXPECT_FALSE(check.allows(host)) << listen << " " << host;
    EXPECT_NE(check.refusal().find("viewer.lab"), std::string::npos) << check.refusal();
    EXPECT_NE(check.refusal().find("--allow-host"), std::string::npos) << check.refusal();
  }
  const HostCheck named("viewer.lab", {});
  EXPECT_TRUE(named.allows("viewer.lab:8080"));
  EXPECT_FALSE(named.allows("evil.example"));
}

TEST(HostCheck, HostNamesForAllowHost) {
  for (const char* name : {"viewer.lab", "gpu-node-7", "a", "x1.y2.z3"}) EXPECT_TRUE(is_host_name(name)) << name;
  for (const char* name : {"", "evil.com/x", "a b", "x:80", "@x", "-x", ".x", "[::1]"})
    EXPECT_FALSE(is_host_name(name)) << name;
}

}  // namespace
}  // namespace memsnap::web
