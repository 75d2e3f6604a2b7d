// Text that goes into SVG and HTML: escaping (C++ names are full of <, > and &), sizes in
// human units, and colours that stay the same for a name across views and runs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace memsnap::svg {

// Escapes &, <, >, " and ', and replaces control characters and invalid UTF-8 with U+FFFD
// (XML 1.0 refuses them; a snapshot may hold anything).
std::string escape(std::string_view text);
// For a JSON string inside a <script> (the `</` of `</script>` must not appear either).
std::string json_string(std::string_view text);
std::string human_bytes(uint64_t bytes);  // "1.50 MiB"
std::string human_bytes_signed(int64_t bytes);  // "+1.50 MiB" / "-12 B"
uint32_t stable_hash(std::string_view text);
// "rgb(r,g,b)" from HSL, h in degrees, s and l in [0, 1].
std::string hsl_to_rgb(double h, double s, double l);
// A call site's colour by its label, the same in every view and file (web/assets/js/format.js's
// siteColour makes the same one); `shade` adds points of lightness, to tell neighbours apart.
std::string site_colour(std::string_view label, int shade = 0);

}  // namespace memsnap::svg
