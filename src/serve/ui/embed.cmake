# Writes the status page (IN, an HTML file) into a C++ source (OUT) as a raw
# string literal, so the binary serves it with no files beside it.
#   cmake -DIN=status.html -DOUT=status_page.cpp -P embed.cmake
file(READ "${IN}" page)
set(delim "edgelm_page")
string(FIND "${page}" ")${delim}\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} contains the raw string delimiter )${delim}\"")
endif()
file(WRITE "${OUT}"
"// Generated from ${IN} by src/serve/ui/embed.cmake; edit that file.
#include \"serve/status.h\"

namespace edgelm::serve {

std::string_view status_page_html() {
  static constexpr std::string_view page = R\"${delim}(${page})${delim}\";
  return page;
}

}  // namespace edgelm::serve
")
