// The Ranks API: a job's table, one rank, and opening ranks on demand within the store's limit.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "server_test_support.h"
#include "snapshot/snapshot_loader.h"
#include "viewer/job_ranks.h"
#include "web/job_catalog.h"

namespace memsnap::web::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Three PyTorch pickles named as one rank each, in a folder of their own.
struct JobFolder {
  fs::path path = fs::temp_directory_path() / ("memsnap-ranks-api-" + std::to_string(::getpid()));
  std::vector<std::string> files;
  JobFolder() {
    fs::create_directories(path);
    const char* sources[] = {"pytorch-2.11/mlp_train.pickle", "pytorch-2.11/two_streams.pickle",
                             "pytorch-2.11/expandable_segments.pickle"};
    for (int rank = 0; rank < 3; ++rank) {
      const fs::path file = path / ("snapshot_rank" + std::to_string(rank) + ".pickle");
      fs::copy_file(data_file(sources[rank]), file, fs::copy_options::overwrite_existing);
      files.push_back(file.string());
    }
  }
  ~JobFolder() { fs::remove_all(path); }
};

JobRanks summarize(const std::vector<std::string>& files) {
  const SnapshotLoader load = [](const std::string& file) -> Result<std::shared_ptr<const Snapshot>> {
    Result<LoadedSnapshot> loaded = load_snapshot(file);
    if (!loaded) return Result<std::shared_ptr<const Snapshot>>::failure(loaded.error());
    return std::make_shared<const Snapshot>(std::move(loaded).value().snapshot);
  };
  Result<JobRanks> job = summarize_job(files, load);
  EXPECT_TRUE(job.ok()) << job.error();
  return std::move(job).value();
}

json body_of(const httplib::Result& response, int status) {
  EXPECT_TRUE(response);
  if (!response) return {};
  EXPECT_EQ(response->status, status) << response->body;
  return json::parse(response->body);
}

TEST(ServerRanks, TableRankAndOpeningOnDemandWithinTheStoreLimit) {
  JobFolder folder;
  RunningServer server({}, /*max_snapshots=*/2);
  JobCatalog catalog(server.store(), summarize(folder.files));
  server.start({}, &catalog);
  auto client = server.client();

  const json table = body_of(client.Get("/api/ranks"), 200);
  ASSERT_EQ(table["ranks"].size(), 3u);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(table["ranks"][rank]["rank"], rank);
    EXPECT_EQ(table["ranks"][rank]["rank_from"], "file name");
    EXPECT_FALSE(table["ranks"][rank]["active_timeline"].empty());
  }
  EXPECT_TRUE(table.contains("median_row") && table.contains("outliers") && table.contains("oom_rows"));

  json one = body_of(client.Get("/api/ranks/1"), 200);
  EXPECT_EQ(one["rank"], 1);
  EXPECT_TRUE(one["id"].is_null());
  EXPECT_FALSE(one["sites_at_peak"].empty());
  body_of(client.Get("/api/ranks/3"), 404);
  body_of(client.Get("/api/ranks/99999999999999999999"), 404);

  // A cross-site form's content type is refused; JSON opens the rank, once.
  EXPECT_EQ(body_of(client.Post("/api/ranks/1/open", "", "application/x-www-form-urlencoded"), 415)["error"],
            "opening a rank needs Content-Type: application/json");
  const json opened = body_of(client.Post("/api/ranks/1/open", "{}", "application/json"), 200);
  EXPECT_EQ(opened["name"], "rank 1 · snapshot_rank1.pickle");
  EXPECT_EQ(body_of(client.Post("/api/ranks/1/open", "{}", "application/json"), 200)["id"], opened["id"]);
  EXPECT_EQ(body_of(client.Get("/api/ranks/1"), 200)["id"], opened["id"]);
  EXPECT_EQ(server.store().list().size(), 1u);

  // Two more ranks in a store of two: the one opened longest ago is closed.
  const json second = body_of(client.Post("/api/ranks/0/open", "{}", "application/json"), 200);
  const json third = body_of(client.Post("/api/ranks/2/open", "{}", "application/json"), 200);
  EXPECT_EQ(server.store().list().size(), 2u);
  EXPECT_FALSE(server.store().find(opened["id"]));
  EXPECT_TRUE(server.store().find(second["id"]) && server.store().find(third["id"]));
  EXPECT_TRUE(body_of(client.Get("/api/ranks/1"), 200)["id"].is_null());
  body_of(client.Post("/api/ranks/7/open", "{}", "application/json"), 404);
}

TEST(ServerRanks, WithoutAJobThereAreNoRanks) {
  RunningServer server;
  server.start({data_file("pytorch-2.11/mlp_train.pickle")});
  auto client = server.client();
  EXPECT_NE(body_of(client.Get("/api/ranks"), 404)["error"].get<std::string>().find("no job here"), std::string::npos);
  body_of(client.Post("/api/ranks/0/open", "{}", "application/json"), 404);
}

}  // namespace
}  // namespace memsnap::web::testing
