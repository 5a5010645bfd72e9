// The official OpenAI Node client, unchanged, against edgelm: a non-streamed
// and a streamed chat completion (with usage), and a plain completion.
// Usage: node openai_client.mjs BASE_URL   (exits non-zero on any mismatch)
import OpenAI from "openai";

const baseURL = process.argv[2];
const client = new OpenAI({ baseURL, apiKey: "not-needed", maxRetries: 0, timeout: 60000 });
const fail = (msg) => { console.error("FAIL:", msg); process.exit(1); };

const models = await client.models.list();
if (!models.data.length) fail("no models listed");
const model = models.data[0].id;

const chat = await client.chat.completions.create({
  model, messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Say hello." }],
  max_tokens: 8, temperature: 0.7, seed: 1,
});
if (chat.object !== "chat.completion") fail("object " + chat.object);
if (typeof chat.choices[0].message.content !== "string") fail("no content");
if (chat.choices[0].message.role !== "assistant") fail("role");
if (!["stop", "length"].includes(chat.choices[0].finish_reason)) fail("finish_reason " + chat.choices[0].finish_reason);
if (chat.usage.completion_tokens < 1 || chat.usage.total_tokens !== chat.usage.prompt_tokens + chat.usage.completion_tokens) fail("usage");

const stream = await client.chat.completions.create({
  // Greedy, so the answer is the same every run: a sampled end-of-text as
  // the first token would leave one chunk (role and finish) plus usage.
  model, messages: [{ role: "user", content: "Count to five." }], max_tokens: 6, stream: true,
  temperature: 0, stream_options: { include_usage: true },
});
let text = "", chunks = 0, finish = null, usage = null;
for await (const chunk of stream) {
  chunks++;
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    if (c.delta?.content) text += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
}
if (chunks < 3) fail("only " + chunks + " chunks");
if (!finish) fail("no finish_reason in the stream");
if (!usage || usage.completion_tokens < 1) fail("no usage chunk");

const comp = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 5 });
if (comp.object !== "text_completion" || typeof comp.choices[0].text !== "string") fail("completion");

// A refusal surfaces as the client's typed error with the status.
console.log(`ok: chat ${JSON.stringify(chat.choices[0].message.content)}, stream ${chunks} chunks (${finish}), completion ok`);
