#include "viewer/svg/svg_document.h"

#include <cstdio>

#include "viewer/svg/svg_text.h"

namespace memsnap::svg {

std::string open_document(int width, int height, std::string_view style) {
  char buffer[512];
  std::snprintf(buffer, sizeof buffer,
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
                "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans Mono, Menlo, Consolas, monospace\" "
                "font-size=\"12\">\n",
                width, height, width, height);
  std::string out = buffer;
  out += "<style>";
  out += style;
  out += "</style>\n";
  std::snprintf(buffer, sizeof buffer, "<rect width=\"%d\" height=\"%d\" fill=\"#fcfcfc\"/>\n", width, height);
  return out + buffer;
}

std::string heading(int width, int title_y, std::string_view title, std::string_view subtitle) {
  char buffer[160];
  std::snprintf(buffer, sizeof buffer, "<text x=\"%d\" y=\"%d\" font-size=\"17\" text-anchor=\"middle\">",
                width / 2, title_y);
  std::string out = buffer + escape(title) + "</text>\n";
  std::snprintf(buffer, sizeof buffer, "<text x=\"%d\" y=\"%d\" fill=\"#555\" text-anchor=\"middle\">",
                width / 2, title_y + 20);
  return out + buffer + escape(subtitle) + "</text>\n";
}

std::string details_panel(int x, int y, int lines, std::string_view hint) {
  char buffer[160];
  std::snprintf(buffer, sizeof buffer, "<text id=\"details\" x=\"%d\" y=\"%d\">", x, y);
  std::string out = buffer;
  std::snprintf(buffer, sizeof buffer,
                hint.empty() ? "<tspan x=\"%d\" dy=\"0\" xml:space=\"preserve\">"
                             : "<tspan x=\"%d\" dy=\"0\" fill=\"#555\">",
                x);
  out += buffer + escape(hint) + "</tspan>";
  for (int line = 1; line <= lines; ++line) {
    std::snprintf(buffer, sizeof buffer, "<tspan x=\"%d\" dy=\"15\" xml:space=\"preserve\"></tspan>", x);
    out += buffer;
  }
  return out + "</text>\n";
}

std::string close_document(std::string_view data_js, std::string_view script) {
  std::string out = "<script type=\"text/ecmascript\"><![CDATA[\n";
  out += data_js;
  out += kFormatBytesScript;
  out += script;
  return out + "]]></script>\n</svg>\n";
}

}  // namespace memsnap::svg
