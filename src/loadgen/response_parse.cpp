#include "loadgen/response_parse.h"

#include <nlohmann/json.hpp>

namespace edgelm::loadgen {

namespace {

using json = nlohmann::json;

json parse_object(std::string_view s) {
  json j = json::parse(s.begin(), s.end(), nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json();
}

std::string error_code_in(const json& j) {
  if (!j.is_object()) return {};
  auto e = j.find("error");
  if (e == j.end()) return {};
  if (e->is_string()) return e->get<std::string>().empty() ? "error" : e->get<std::string>();
  if (!e->is_object()) return "error";
  for (const char* key : {"code", "type"}) {
    auto c = e->find(key);
    if (c == e->end()) continue;
    if (c->is_string() && !c->get<std::string>().empty()) return c->get<std::string>();
    if (c->is_number_integer()) return std::to_string(c->get<long long>());
  }
  return "error";
}

int usage_tokens(const json& j) {
  auto u = j.find("usage");
  if (u == j.end() || !u->is_object()) return -1;
  auto c = u->find("completion_tokens");
  if (c == u->end() || !c->is_number_integer()) return -1;
  return c->get<int>();
}

size_t string_bytes(const json& obj, const char* key) {
  if (!obj.is_object()) return 0;
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get_ref<const std::string&>().size() : 0;
}

// obj[key] when it is a string, else "".
std::string string_of(const json& obj, const char* key) {
  if (!obj.is_object()) return {};
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// choices[0], or null.
const json* first_choice(const json& j) {
  auto c = j.find("choices");
  if (c == j.end() || !c->is_array() || c->empty()) return nullptr;
  return &(*c)[0];
}

}  // namespace

ChunkInfo parse_chunk(std::string_view data) {
  ChunkInfo info;
  size_t b = data.find_first_not_of(" \t\r\n");
  if (b != std::string_view::npos && data.substr(b, 6) == "[DONE]") {
    info.kind = ChunkInfo::Kind::Done;
    return info;
  }
  const json j = parse_object(data);
  if (j.is_null()) return info;
  info.completion_tokens = usage_tokens(j);
  if (std::string code = error_code_in(j); !code.empty()) {
    info.kind = ChunkInfo::Kind::Error;
    info.error_code = std::move(code);
    return info;
  }
  info.kind = ChunkInfo::Kind::Data;
  if (const json* c = first_choice(j); c && c->is_object()) {
    auto d = c->find("delta");
    if (d != c->end()) {
      info.content = string_of(*d, "content");
      info.content_bytes = string_bytes(*d, "reasoning_content");
    }
    info.content += string_of(*c, "text");
    info.content_bytes += info.content.size();
  }
  return info;
}

BodyInfo parse_body(std::string_view body) {
  BodyInfo info;
  const json j = parse_object(body);
  if (j.is_null()) return info;
  info.json = true;
  info.error_code = error_code_in(j);
  info.completion_tokens = usage_tokens(j);
  if (const json* c = first_choice(j); c && c->is_object()) {
    auto m = c->find("message");
    if (m != c->end()) info.content = string_of(*m, "content");
    info.content += string_of(*c, "text");
    info.content_bytes = info.content.size();
  }
  return info;
}

std::string error_code_of(std::string_view body) {
  return error_code_in(parse_object(body));
}

}  // namespace edgelm::loadgen
