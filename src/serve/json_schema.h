// response_format's JSON Schema, compiled for constrained generation
// (constrain/schema.h). Every keyword is either enforced, a pure annotation
// (title, description, $schema, $id, $comment, default, examples,
// deprecated, readOnly, writeOnly, $defs/definitions as containers), or
// refused with an error that names it: never silently ignored.
//
// Enforced: type (and type arrays), enum, const, properties, required,
// additionalProperties, items, minItems, maxItems, uniqueItems (false only),
// minLength, maxLength, pattern (a chain of characters, classes and
// quantifiers: no groups or alternation), format (date, time, date-time,
// uuid, email, ipv4), minimum, maximum, exclusiveMinimum,
// exclusiveMaximum, anyOf and oneOf (alternatives told apart by their first
// character; oneOf also needs each alternative's type stated), $ref to
// #/$defs/... or #/definitions/... (not recursive).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "constrain/schema.h"

namespace edgelm::serve {

struct CompiledSchema {
  std::shared_ptr<const constrain::Schema> schema;  // null on error
  std::string path;     // where in the schema: "" for the root, else like ".properties.age"
  std::string message;  // what is refused, naming the keyword
};

// `schema` as the request sent it (ordered_json keeps the properties'
// order, which is the order they are written in).
CompiledSchema compile_json_schema(const nlohmann::ordered_json& schema);

// response_format {"type": "json_object"}: any JSON object.
std::shared_ptr<const constrain::Schema> json_object_schema();

}  // namespace edgelm::serve
