// The frame every memsnap SVG shares: the document header with its style and background,
// the centred title and subtitle, the hover-details panel the scripts write into, and the
// closing script with the view's data. Views differ only in what they draw in between.
#pragma once

#include <string>
#include <string_view>

namespace memsnap::svg {

std::string open_document(int width, int height, std::string_view style);
// Title at `title_y`, subtitle 20 px below it.
std::string heading(int width, int title_y, std::string_view title, std::string_view subtitle);
// A <text id="details"> of `lines` + 1 lines, 15 px apart; the first shows `hint` (greyed)
// until the script writes over it.
std::string details_panel(int x, int y, int lines, std::string_view hint);
// `data_js` defines the view's data (`var D=...`), `script` uses it; both land in one CDATA
// section, so neither may contain "]]>" (data goes through json_string, which escapes '>').
std::string close_document(std::string_view data_js, std::string_view script);

// fmt(bytes) -> "1.50 MiB", shared by the views' scripts.
inline constexpr const char* kFormatBytesScript = R"JS(
function fmt(b) {
  var u = ['B','KiB','MiB','GiB','TiB','PiB'], i = 0, v = Math.abs(b);
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (b < 0 ? '-' : '') + (i ? v.toFixed(2) : String(v)) + ' ' + u[i];
}
)JS";

}  // namespace memsnap::svg
