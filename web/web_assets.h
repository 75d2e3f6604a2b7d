// The browser UI, compiled into the binary (web/assets/, embedded at build time by
// embed_assets.cmake), so `memsnap serve` needs no files beside it and no network: nothing
// but these assets and the API is ever served, so no request can reach the file system.
#pragma once

#include <optional>
#include <string_view>

namespace memsnap::web {

struct EmbeddedAsset {
  std::string_view path;  // "/index.html", "/js/flamegraph.js", ...
  std::string_view content;
  std::string_view content_type;
};

// The asset at a request path ("/" is /index.html); nothing for any other path.
std::optional<EmbeddedAsset> find_asset(std::string_view path);

// Every embedded asset, for tests.
size_t embedded_asset_count();
EmbeddedAsset embedded_asset(size_t index);

}  // namespace memsnap::web
