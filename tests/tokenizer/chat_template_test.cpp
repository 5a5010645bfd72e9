// Chat templates. The expected strings are what the official Hugging Face
// Jinja templates (quoted below as test data) render with trim_blocks and
// lstrip_blocks, for the same messages and bos/eos texts.
#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "testutil.h"
#include "tiny_vocab.h"
#include "tokenizer/tokenizer.h"

namespace edgelm::tokenizer {
namespace {

// ---- official template texts (facts, used only as detection input) ----

const std::string kQwen2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful assistant<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + "
    "message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt "
    "%}{{ '<|im_start|>assistant\n' }}{% endif %}";
// The same with the newline escapes left in the Jinja source.
const std::string kSmolLM2Escaped =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' "
    "}}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% "
    "endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
const std::string kSmolLM1 =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
const std::string kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
const std::string kLlama2 =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
    "%}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif "
    "message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";
const std::string kMistral =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
    "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
    "are supported!') }}{% endif %}{% endfor %}";
const std::string kZephyr =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
    "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token "
    "}}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% "
    "endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";
const std::string kPhi3 =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + "
    "message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == 'assistant') "
    "%}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}";
const std::string kGemma =
    "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\n' + "
    "message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}";

const std::vector<ChatMessage> kFull = {
    {"system", "S"}, {"user", " U "}, {"assistant", " A "}, {"user", "U2"}};
const std::vector<ChatMessage> kNoSystem(kFull.begin() + 1, kFull.end());

std::string render(const Result<ChatTemplate>& t, const std::vector<ChatMessage>& m, bool gen = true) {
  EXPECT_TRUE(t.ok()) << t.message();
  auto r = t->apply(m, gen);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? *r : std::string();
}

TEST(ChatTemplate, Chatml) {
  auto t = ChatTemplate::detect(kQwen2, "<BOS>", "<EOS>");
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(t->name(), "chatml");
  EXPECT_EQ(t->default_system(), "You are a helpful assistant");
  EXPECT_EQ(render(t, kFull),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\n U <|im_end|>\n<|im_start|>assistant\n A "
            "<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n");
  // No system message: the template's own default is inserted.
  EXPECT_EQ(render(t, kNoSystem),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\n U <|im_end|>\n"
            "<|im_start|>assistant\n A <|im_end|>\n<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render(t, {{"user", "hi"}}, false),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
  EXPECT_EQ(t->stop_strings(), std::vector<std::string>{"<|im_end|>"});

  auto smol2 = ChatTemplate::detect(kSmolLM2Escaped);
  ASSERT_TRUE(smol2.ok());
  EXPECT_EQ(smol2->default_system(), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  // A template without a literal default, and the override by name: none.
  auto smol1 = ChatTemplate::detect(kSmolLM1);
  ASSERT_TRUE(smol1.ok());
  EXPECT_EQ(smol1->default_system(), "");
  EXPECT_EQ(render(smol1, {{"user", "hi"}, {"tool", "42"}}),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render(ChatTemplate::from_name("chatml"), {{"user", "hi"}}),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama3) {
  auto t = ChatTemplate::detect(kLlama3, "<BOS>", "<EOS>");
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(t->name(), "llama3");
  EXPECT_EQ(render(t, kFull),
            "<BOS><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>"
            "\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|><|start_header_id|>user<|"
            "end_header_id|>\n\nU2<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render(ChatTemplate::from_name("llama3"), {{"user", "hi"}}, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
  EXPECT_EQ(t->stop_strings(), std::vector<std::string>{"<|eot_id|>"});
}

TEST(ChatTemplate, Llama2) {
  auto t = ChatTemplate::detect(kLlama2, "<BOS>", "<EOS>");
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(t->name(), "llama2");
  EXPECT_EQ(render(t, kFull), "<BOS>[INST] <<SYS>>\nS\n<</SYS>>\n\n U [/INST] A <EOS><BOS>[INST] U2 [/INST]");
  EXPECT_EQ(render(t, kNoSystem), "<BOS>[INST] U [/INST] A <EOS><BOS>[INST] U2 [/INST]");
  EXPECT_EQ(render(ChatTemplate::from_name("llama2"), {{"user", "hi"}}), "<s>[INST] hi [/INST]");
}

TEST(ChatTemplate, Mistral) {
  auto t = ChatTemplate::detect(kMistral, "<BOS>", "<EOS>");
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(t->name(), "mistral");
  EXPECT_EQ(render(t, kNoSystem), "<BOS>[INST]  U  [/INST] A <EOS>[INST] U2 [/INST]");
  // The official v0.1 template rejects system messages; ours puts a leading
  // one before the first user message.
  EXPECT_EQ(render(t, kFull), "<BOS>[INST] S\n\n U  [/INST] A <EOS>[INST] U2 [/INST]");
}

TEST(ChatTemplate, Zephyr) {
  auto t = ChatTemplate::detect(kZephyr, "<BOS>", "<EOS>");
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(t->name(), "zephyr");
  EXPECT_EQ(render(t, kFull),
            "<|system|>\nS<EOS>\n<|user|>\n U <EOS>\n<|assistant|>\n A <EOS>\n<|user|>\nU2<EOS>\n<|assistant|>\n");
  EXPECT_EQ(render(ChatTemplate::from_name("zephyr"), {{"user", "hi"}}), "<|user|>\nhi</s>\n<|assistant|>\n");
  EXPECT_EQ(t->stop_strings(), std::vector<std::string>{"<EOS>"});
}

TEST(ChatTemplate, UnknownAndUnsupportedAreClearErrors) {
  auto bad_name = ChatTemplate::from_name("vicuna");
  ASSERT_FALSE(bad_name.ok());
  EXPECT_NE(bad_name.message().find("'vicuna'"), std::string::npos);
  EXPECT_NE(bad_name.message().find("chatml, llama3, llama2, mistral, zephyr"), std::string::npos);

  auto phi3 = ChatTemplate::detect(kPhi3);
  ASSERT_FALSE(phi3.ok());
  EXPECT_NE(phi3.message().find("Phi-3"), std::string::npos) << phi3.message();

  auto gemma = ChatTemplate::detect(kGemma);
  ASSERT_FALSE(gemma.ok());
  EXPECT_NE(gemma.message().find("unrecognised chat template"), std::string::npos) << gemma.message();

  auto mistral7 = ChatTemplate::detect("{{ bos_token }}[SYSTEM_PROMPT]{{ x }}[/SYSTEM_PROMPT][INST]");
  ASSERT_FALSE(mistral7.ok());
  EXPECT_NE(mistral7.message().find("Mistral v7"), std::string::npos);

  auto none = ChatTemplate::detect("");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.message().find("no chat template"), std::string::npos);
}

TEST(ChatTemplate, MessagesTheFormatCannotExpress) {
  auto llama2 = ChatTemplate::from_name("llama2");
  ASSERT_TRUE(llama2.ok());
  EXPECT_FALSE(llama2->apply({}, true).ok());
  auto two_users = llama2->apply(std::vector<ChatMessage>{{"user", "a"}, {"user", "b"}}, true);
  ASSERT_FALSE(two_users.ok());
  EXPECT_NE(two_users.message().find("alternate"), std::string::npos);
  EXPECT_FALSE(llama2->apply(std::vector<ChatMessage>{{"system", "s"}}, true).ok());
  auto mistral = ChatTemplate::from_name("mistral");
  EXPECT_FALSE(mistral->apply(std::vector<ChatMessage>{{"user", "a"}, {"system", "s"}}, true).ok());
  auto zephyr = ChatTemplate::from_name("zephyr");
  EXPECT_FALSE(zephyr->apply(std::vector<ChatMessage>{{"tool", "x"}}, true).ok());
}

TEST(ChatTemplate, EncodeChatPutsBosOnce) {
  const test::SpmVocab v = test::spm_tokens();
  auto tok = test::build(test::spm_writer(v));
  ASSERT_TRUE(tok.ok()) << tok.message();
  // Llama 2 renders "<s>" itself and the vocab adds BOS too: one BOS.
  auto llama2 = ChatTemplate::for_tokenizer(*tok, "llama2");
  ASSERT_TRUE(llama2.ok());
  auto ids = encode_chat(*tok, *llama2, std::vector<ChatMessage>{{"user", "hello"}}, true);
  ASSERT_TRUE(ids.ok()) << ids.message();
  EXPECT_EQ((*ids)[0], 1);
  EXPECT_NE((*ids)[1], 1);
  EXPECT_EQ(tok->decode(*ids), "[INST] hello [/INST]");
  // ChatML renders no BOS; the vocab's add_bos_token adds it; markers become tokens.
  auto chatml = ChatTemplate::for_tokenizer(*tok, "chatml");
  ASSERT_TRUE(chatml.ok());
  ids = encode_chat(*tok, *chatml, std::vector<ChatMessage>{{"user", "hello"}}, true);
  ASSERT_TRUE(ids.ok());
  const int32_t start = v.id("<|im_start|>"), end = v.id("<|im_end|>");
  EXPECT_EQ((*ids)[0], 1);
  EXPECT_EQ((*ids)[1], start);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), start), 2);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), end), 1);
  // The vocab has no template of its own.
  EXPECT_FALSE(ChatTemplate::for_tokenizer(*tok).ok());
}

TEST(ChatTemplate, Qwen2VocabFile) {
  EDGELM_REQUIRE_VOCAB(path, "ggml-vocab-qwen2.gguf");
  auto f = gguf::File::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  auto tok = Tokenizer::from_gguf(*f);
  ASSERT_TRUE(tok.ok()) << tok.message();
  auto t = ChatTemplate::for_tokenizer(*tok);
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(t->name(), "chatml");
  EXPECT_EQ(t->default_system(), "You are a helpful assistant");
  auto ids = encode_chat(*tok, *t, std::vector<ChatMessage>{{"user", "Hello"}}, true);
  ASSERT_TRUE(ids.ok());
  const int32_t start = *tok->find("<|im_start|>"), end = *tok->find("<|im_end|>");
  EXPECT_EQ((*ids)[0], start);  // Qwen adds no BOS
  EXPECT_EQ(std::count(ids->begin(), ids->end(), start), 3);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), end), 2);
  EXPECT_TRUE(tok->is_eog(end));
  EXPECT_EQ(tok->decode(*ids, false),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\n");
}

}  // namespace
}  // namespace edgelm::tokenizer
