// response_format schemas: what compiles, what is refused (naming the
// keyword), and that every text the matcher completes parses and validates.
// The validation oracle is python3-jsonschema (tests/e2e/jsonschema_check.py);
// without it those checks skip and only parsing is checked.
#include "serve/json_schema.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "constrain/json_constraint.h"
#include "constrain/matcher.h"
#include "engine/engine_test_util.h"
#include "testutil.h"

namespace edgelm::serve {
namespace {

using ojson = nlohmann::ordered_json;

CompiledSchema compile(const std::string& text) {
  return compile_json_schema(ojson::parse(text));
}

// A random walk through the matcher within `budget` bytes: each step takes a
// random byte among those allowed (keeping the value closable in what is
// left), and stops at random once the value is complete.
std::string random_text(const constrain::Schema& s, std::mt19937& rng, int budget, bool* complete) {
  constrain::Matcher m(s), t(s);
  std::string out;
  for (int left = budget;; --left) {
    std::vector<uint8_t> ok;
    for (int b = 0; b < 256; ++b) {
      t.copy_from(m);
      if (t.feed(static_cast<uint8_t>(b)) && t.min_close() <= left - 1)
        ok.push_back(static_cast<uint8_t>(b));
    }
    if (m.done() || ok.empty() || (m.complete() && rng() % 6 == 0)) {
      *complete = m.complete();
      return out;
    }
    // Prefer ASCII: a uniform pick would make most strings UTF-8 noise.
    uint8_t b = ok[rng() % ok.size()];
    for (int tries = 0; tries < 3 && b >= 0x80; ++tries) b = ok[rng() % ok.size()];
    EXPECT_TRUE(m.feed(b));
    out += static_cast<char>(b);
  }
}

// Runs the python oracle over (schema, texts) cases; false when it is absent.
bool python_validates(const ojson& cases, std::string* report) {
  const std::string in = test::temp_path("jsonschema_cases.json");
  const std::string out = test::temp_path("jsonschema_report.txt");
  std::ofstream(in) << cases.dump();
  const std::string cmd = std::string("/usr/bin/python3 ") + EDGELM_SOURCE_DIR +
                          "/tests/e2e/jsonschema_check.py " + in + " > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream f(out);
  report->assign(std::istreambuf_iterator<char>(f), {});
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) return false;
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << *report;
  return true;
}

const char* kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":10},"age":{"type":"integer","minimum":0,"maximum":120},
        "email":{"type":"string","format":"email"},"tags":{"type":"array","items":{"type":"string","enum":["a","b","c"]},"minItems":1,"maxItems":3},
        "ok":{"type":"boolean"},"none":{"type":"null"}},"required":["name","age","tags"],"additionalProperties":false})",
    R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})",
    R"({"type":"number","minimum":-2.5,"maximum":3.75})",
    R"({"type":"integer","minimum":-1000,"maximum":-7})",
    R"({"type":"integer","exclusiveMinimum":5,"exclusiveMaximum":9})",
    R"({"type":"number","minimum":100})",
    R"({"type":"number","minimum":0.1,"maximum":0.1})",
    R"({"type":"string","minLength":3,"maxLength":5})",
    R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3,5}$"})",
    R"({"type":"string","pattern":"^a.*z$","maxLength":8})",
    R"({"type":"string","pattern":"[^a-y]+x?"})",
    R"({"type":"string","format":"date"})",
    R"({"type":"string","format":"time"})",
    R"({"type":"string","format":"date-time"})",
    R"({"type":"string","format":"uuid"})",
    R"({"type":"string","format":"ipv4"})",
    R"({"type":["string","null"],"maxLength":4})",
    R"({"type":["integer","boolean"],"maximum":50})",
    R"({"anyOf":[{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]},{"type":"array","items":{"type":"number"},"maxItems":3},{"type":"string","maxLength":3}]})",
    R"({"oneOf":[{"type":"string","maxLength":5},{"type":"integer"}]})",
    R"({"const":{"a":[1,2],"b":"\u00e9"}})",
    R"({"enum":[1,12,123,"x",null,true,1.5]})",
    R"({"$defs":{"pt":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},"required":["x","y"]}},"type":"array","items":{"$ref":"#/$defs/pt"},"maxItems":3})",
    R"({"definitions":{"s":{"type":"string","maxLength":2}},"type":"object","properties":{"a":{"$ref":"#/definitions/s"}},"required":["a"]})",
    R"({"type":"object"})",
    R"({"type":"object","additionalProperties":{"type":"integer"}})",
    R"({"type":"object","properties":{"a":{"type":"string","maxLength":2}},"required":["a","b"]})",
    R"({"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"object","properties":{"c":{"type":"array","items":{"type":"boolean"},"minItems":2,"maxItems":2}},"required":["c"]}},"required":["b"]}},"required":["a"]})",
    R"({})",
    R"(true)",
    R"({"type":"array","uniqueItems":false,"maxItems":2,"items":{"type":"integer"}})",
    R"({"type":"object","properties":{"zeta":{"type":"integer"},"alpha":{"type":"string","maxLength":1}},"required":["alpha"],"additionalProperties":false})",
    R"({"title":"t","description":"d","$schema":"https://json-schema.org/draft/2020-12/schema","type":"string","default":"a","examples":["b"],"maxLength":3})",
    R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"},"c":{"type":"string"}},"required":["a","b","c"]})",
};

TEST(JsonSchema, RandomTextsParseAndValidate) {
  std::mt19937 rng(7);
  ojson cases = ojson::array();
  for (const char* text : kSchemas) {
    SCOPED_TRACE(text);
    const CompiledSchema c = compile(text);
    ASSERT_TRUE(c.schema) << c.path << ": " << c.message;
    ojson texts = ojson::array();
    for (int i = 0; i < 60; ++i) {
      bool complete = false;
      const std::string out = random_text(*c.schema, rng, 120, &complete);
      EXPECT_TRUE(complete) << out;
      EXPECT_LE(out.size(), 120u);
      EXPECT_FALSE(ojson::parse(out, nullptr, false).is_discarded()) << out;
      texts.push_back(out);
    }
    cases.push_back({{"schema", ojson::parse(text)}, {"texts", texts}});
  }
  std::string report;
  if (!python_validates(cases, &report))
    GTEST_SKIP() << "python3-jsonschema is not installed: texts only parsed";
}

TEST(JsonSchema, PropertiesComeInDeclaredOrder) {
  const CompiledSchema c = compile(kSchemas[31]);
  ASSERT_TRUE(c.schema);
  constrain::Matcher m(*c.schema);
  EXPECT_TRUE(m.feed(std::string_view(R"({"zeta":1,"alpha":"x"})")));
  constrain::Matcher m2(*c.schema);
  EXPECT_FALSE(m2.feed(std::string_view(R"({"alpha":"x","zeta":1})")));
  constrain::Matcher m3(*c.schema);
  EXPECT_FALSE(m3.feed(std::string_view(R"({"zeta":1})"))) << "alpha is required";
}

TEST(JsonSchema, WhitespaceIsBounded) {
  const CompiledSchema c = compile(
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}})");
  ASSERT_TRUE(c.schema);
  constrain::Matcher m(*c.schema);
  EXPECT_TRUE(m.feed(std::string_view(R"({"a": [1, 2]})")));
  constrain::Matcher m2(*c.schema);
  EXPECT_FALSE(m2.feed(std::string_view(R"({"a":  [)"))) << "one space at most";
  constrain::Matcher m3(*c.schema);
  EXPECT_FALSE(m3.feed(std::string_view(R"({ )"))) << "no space after '{'";
  constrain::Matcher m4(*c.schema);
  EXPECT_FALSE(m4.feed(std::string_view("{\"a\":\n"))) << "no newlines";
}

TEST(JsonSchema, BudgetClosesOpenValues) {
  const CompiledSchema c =
      compile(R"({"type":"object","properties":{"s":{"type":"string"}},"required":["s"]})");
  ASSERT_TRUE(c.schema);
  constrain::Matcher m(*c.schema);
  EXPECT_EQ(m.min_close(), 8);  // {"s":""}
  EXPECT_TRUE(m.feed(std::string_view(R"({"s":"abc)")));
  EXPECT_EQ(m.min_close(), 2);  // "}
  EXPECT_FALSE(m.complete());
  EXPECT_TRUE(m.feed(std::string_view(R"("})")));
  EXPECT_TRUE(m.done());
}

TEST(JsonSchema, NumbersKeepTheirBounds) {
  const CompiledSchema c = compile(R"({"type":"integer","minimum":10,"maximum":20})");
  ASSERT_TRUE(c.schema);
  for (const char* ok : {"10", "15", "20"}) {
    constrain::Matcher m(*c.schema);
    EXPECT_TRUE(m.feed(std::string_view(ok)) && m.complete()) << ok;
  }
  for (const char* bad : {"9", "21", "-1", "3"}) {
    constrain::Matcher m(*c.schema);
    EXPECT_FALSE(m.feed(std::string_view(bad)) && m.complete()) << bad;
  }
  constrain::Matcher m(*c.schema);
  EXPECT_FALSE(m.feed(std::string_view("3"))) << "no completion of 3 is within [10, 20]";
}

struct Refusal {
  const char* schema;
  const char* path;
  const char* says;  // a piece of the message, naming the keyword
};

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  const Refusal cases[] = {
      {R"({"type":"string","foo":1})", "", "'foo' is not supported"},
      {R"({"not":{"type":"string"}})", "", "'not' is not supported"},
      {R"({"allOf":[{"type":"string"}]})", "", "'allOf' is not supported"},
      {R"({"type":"object","properties":{"a":{"type":"integer","multipleOf":2}}})", ".properties.a",
       "'multipleOf'"},
      {R"({"type":"object","patternProperties":{"^a":{}}})", "", "'patternProperties'"},
      {R"({"type":"object","minProperties":1})", "", "'minProperties'"},
      {R"({"type":"object","propertyNames":{"maxLength":3}})", "", "'propertyNames'"},
      {R"({"type":"array","prefixItems":[{"type":"string"}]})", "", "'prefixItems'"},
      {R"({"type":"array","contains":{"type":"string"}})", "", "'contains'"},
      {R"({"type":"array","uniqueItems":true})", ".uniqueItems", "'uniqueItems'"},
      {R"({"type":"array","items":[{"type":"string"}]})", ".items", "'items' as an array"},
      {R"j({"type":"string","pattern":"(a|b)"})j", ".pattern", "groups and alternation"},
      {R"({"type":"string","pattern":"a\"b"})", ".pattern", "'pattern' is not supported"},
      {R"({"type":"string","pattern":"[a-z]{100}"})", ".pattern", "too long"},
      {R"({"type":"string","format":"hostname"})", ".format",
       "'format' 'hostname' is not supported"},
      {R"({"type":"string","format":"date","pattern":"x"})", ".pattern",
       "'pattern' together with 'format'"},
      {R"({"type":"string","contentEncoding":"base64"})", "", "'contentEncoding'"},
      {R"({"anyOf":[{"type":"string"},{"type":"string","maxLength":2}]})", "",
       "'anyOf': alternatives"},
      {R"({"anyOf":[{"type":"integer"},{"type":"number"}]})", "", "'anyOf': alternatives"},
      {R"({"oneOf":[{"maxLength":2},{"type":"integer"}]})", ".oneOf[0]",
       "'oneOf' is supported only"},
      {R"({"type":"string","anyOf":[{"maxLength":2}]})", "",
       "'anyOf' together with other keywords"},
      {R"({"$ref":"#/$defs/a","$defs":{"a":{"$ref":"#/$defs/a"}}})", ".$ref.$ref",
       "recursive '$ref'"},
      {R"({"$ref":"https://example.com/s.json"})", ".$ref", "'$ref'"},
      {R"({"type":"string","minLength":5,"maxLength":2})", ".minLength", "'minLength'"},
      {R"({"type":"integer","minimum":5,"maximum":4})", "", "satisfies the bounds"},
      {R"({"type":"integer","exclusiveMinimum":4,"exclusiveMaximum":5})", "",
       "satisfies the bounds"},
      {R"({"type":"foo"})", ".type", "unknown type 'foo'"},
      {R"({"type":"object","properties":{"a":{}},"required":["b"],"additionalProperties":false})",
       ".required", "required property 'b'"},
      {R"({"enum":[1],"minimum":0})", "", "'minimum' together with 'enum'"},
      {R"({"enum":["a"],"type":"integer"})", "", "no value satisfies"},
      {R"({"if":{"type":"string"},"then":{}})", "", "'if' is not supported"},
      {R"({"type":"string","nullable":true})", "", "'nullable' is not supported"},
      {R"(false)", "", "allows no value"},
      {R"({"minLength":1,"minimum":2})", "", "several types"},
      {R"({"dependentRequired":{"a":["b"]}})", "", "'dependentRequired'"},
      {R"({"unevaluatedProperties":false})", "", "'unevaluatedProperties'"},
  };
  for (const Refusal& r : cases) {
    SCOPED_TRACE(r.schema);
    const CompiledSchema c = compile(r.schema);
    EXPECT_FALSE(c.schema);
    EXPECT_EQ(c.path, r.path);
    EXPECT_NE(c.message.find(r.says), std::string::npos) << c.message;
  }
}

// Noise weights under a schema: every answer ends (by the constraint, well
// within max_tokens where strings and arrays are bounded), parses and validates.
// The first `schema_count` of the seven schemas below (the bounded ones
// come first).
void generate_under_schemas(const std::string& model, int answers_per_schema, size_t schema_count = 7) {
  auto e = test::make_engine(model, 4, 512, 2);
  ASSERT_TRUE(e);
  auto vocab = std::make_shared<const constrain::TokenVocab>(e->tokenizer());
  ASSERT_TRUE(vocab->has_all_bytes());
  const std::vector<int32_t> prompt = e->tokenizer().encode("Answer in JSON:", true, false);
  struct Case {
    const char* schema;
    bool bounded;
  };
  const Case schemas[] = {{kSchemas[0], true},  {kSchemas[18], true},
                          {kSchemas[22], true}, {kSchemas[4], true},
                          {kSchemas[14], true}, {R"({"type":"object"})", false},
                          {kSchemas[33], false}};
  ojson cases = ojson::array();
  for (size_t k = 0; k < std::min(schema_count, std::size(schemas)); ++k) {
    const Case& sc = schemas[k];
    SCOPED_TRACE(sc.schema);
    const CompiledSchema c = compile(sc.schema);
    ASSERT_TRUE(c.schema) << c.message;
    ojson texts = ojson::array();
    for (int i = 0; i < answers_per_schema; ++i) {
      GenerateParams p;
      p.sampling.temperature = 1.0f;
      p.sampling.top_k = 0;
      p.sampling.top_p = 1.0f;
      p.sampling.min_p = 0.0f;
      p.sampling.seed = static_cast<uint64_t>(i + 1);
      p.max_tokens = 300;
      p.constraint = std::make_shared<constrain::JsonConstraint>(c.schema, vocab);
      Finish fin = Finish::None;
      const std::vector<int32_t> out = test::generate(*e, prompt, p, &fin);
      std::string text;
      for (int32_t t : out) text += vocab->piece(t);
      EXPECT_EQ(fin, Finish::Stop) << text;
      if (sc.bounded) {
        EXPECT_LT(out.size(), 300u) << text;
      }
      EXPECT_FALSE(ojson::parse(text, nullptr, false).is_discarded()) << text;
      texts.push_back(text);
    }
    cases.push_back({{"schema", ojson::parse(sc.schema)}, {"texts", texts}});
  }
  std::string report;
  if (!python_validates(cases, &report))
    GTEST_SKIP() << "python3-jsonschema is not installed: answers only parsed";
}

// Under a sanitizer, fewer answers: at 15 per schema this test took 157 s
// under ThreadSanitizer, the longest of that stage.
TEST(JsonSchema, NoiseModelAnswersValidate) {
#ifdef EDGELM_SANITIZED
  generate_under_schemas(test::synth_model("tiny-llama", "Q8_0"), 4);
#else
  generate_under_schemas(test::synth_model("tiny-llama", "Q8_0"), 15);
#endif
}

TEST(JsonSchema, NoiseModelAnswersValidateWithABigVocabulary) {
  EDGELM_REQUIRE_VOCAB(vocab, "ggml-vocab-qwen2.gguf");
  const std::string path = test::temp_path("tiny-qwen2-vocab-qwen2.gguf");
  if (!std::filesystem::exists(path)) {
    SynthOptions o;
    o.shape = "tiny-qwen2";
    o.ftype = "Q8_0";
    o.vocab = vocab;
    o.output = path;
    ASSERT_TRUE(write_synthetic_model(o).ok());
  }
#ifdef EDGELM_SANITIZED
  // A sanitizer makes each answer ten times slower (all seven schemas took
  // 144 s under ThreadSanitizer): one answer to each bounded schema.
  generate_under_schemas(path, 1, 5);
#else
  generate_under_schemas(path, 2);
#endif
}

// The mask's shortcuts (plain tokens inside strings decided by their length)
// agree with feeding every token's bytes.
TEST(JsonSchema, MaskAgreesWithFeedingEveryToken) {
  EDGELM_REQUIRE_VOCAB(vocab_path, "ggml-vocab-qwen2.gguf");
  auto file = gguf::File::open(vocab_path);
  ASSERT_TRUE(file.ok());
  auto tok = tokenizer::Tokenizer::from_gguf(*file);
  ASSERT_TRUE(tok.ok());
  auto vocab = std::make_shared<const constrain::TokenVocab>(*tok);
  const CompiledSchema c = compile(
      R"({"type":"object","properties":{"s":{"type":"string","minLength":3,"maxLength":6},"n":{"type":"integer","maximum":50}},"required":["s"]})");
  ASSERT_TRUE(c.schema);
  const int n = vocab->n_vocab();
  std::vector<float> logits(static_cast<size_t>(n), 0.0f), out(static_cast<size_t>(n));
  for (const char* prefix : {"", "{\"s\":\"", "{\"s\":\"ab", "{\"s\":\"abcde", "{\"s\":\"abcdef",
                             "{\"s\":\"abc\", \"n\":"}) {
    for (int left : {0, 2, 5, 100}) {
      SCOPED_TRACE(std::string(prefix) + " left " + std::to_string(left));
      constrain::JsonConstraint jc(c.schema, vocab);
      ASSERT_TRUE(jc.advance(prefix));
      std::fill(out.begin(), out.end(), -INFINITY);
      const int allowed = jc.mask(logits.data(), out.data(), n, left);
      int want = 0, wrong = 0;
      constrain::Matcher m(*c.schema);
      for (int32_t t = 0; t < n; ++t) {
        bool ok = false;
        if (vocab->eog(t)) {
          ok = jc.complete();
        } else if (!vocab->piece(t).empty()) {
          m.copy_from(jc.state());
          ok = m.feed(vocab->piece(t)) && m.min_close() <= left;
        }
        want += ok;
        wrong += ok != (out[static_cast<size_t>(t)] == 0.0f);
        if (jc.allows(t, left) != ok) ++wrong;
      }
      EXPECT_EQ(allowed, want);
      EXPECT_EQ(wrong, 0);
    }
  }
}

TEST(JsonSchema, DeepNestingIsRefused) {
  std::string s = R"({"type":"string"})";
  for (int i = 0; i < 40; ++i) s = R"({"type":"array","items":)" + s + "}";
  const CompiledSchema c = compile(s);
  EXPECT_FALSE(c.schema);
  EXPECT_NE(c.message.find("nests"), std::string::npos) << c.message;
}

}  // namespace
}  // namespace edgelm::serve
