// The official OpenAI Node client, unchanged, asks edgelm for tool calls with
// tool_choice "required" (and a function by name), non-streamed and
// streamed; the model has noise weights, so the constraint is what makes
// every call valid. The streamed answer is read by the client's own
// accumulator (chat.completions stream helper), as agents read it.
// Usage: node openai_tools.mjs BASE_URL   (exits non-zero on any mismatch)
import OpenAI from "openai";

const baseURL = process.argv[2];
const client = new OpenAI({ baseURL, apiKey: "not-needed", maxRetries: 0, timeout: 120000 });
const fail = (msg) => { console.error("FAIL:", msg); process.exit(1); };

const tools = [
  { type: "function", function: { name: "get_weather", description: "Current weather in a city.",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 20 },
      unit: { enum: ["celsius", "fahrenheit"] } }, required: ["city", "unit"] } } },
  { type: "function", function: { name: "get_time", description: "Local time in a time zone.",
    parameters: { type: "object", properties: { zone: { type: "string", maxLength: 10 } }, required: ["zone"] } } },
];
const messages = [{ role: "user", content: "What is the weather in Paris?" }];
const model = (await client.models.list()).data[0].id;

function checkCalls(calls, where, only) {
  if (!Array.isArray(calls) || calls.length < 1) fail(`${where}: no tool_calls`);
  for (const c of calls) {
    if (!c.id?.startsWith("call_")) fail(`${where}: id ${c.id}`);
    if (c.type !== "function") fail(`${where}: type ${c.type}`);
    const name = c.function?.name;
    if (!["get_weather", "get_time"].includes(name)) fail(`${where}: name ${name}`);
    if (only && name !== only) fail(`${where}: called ${name}, not ${only}`);
    if (typeof c.function.arguments !== "string") fail(`${where}: arguments is not a string`);
    let args;
    try { args = JSON.parse(c.function.arguments); } catch { fail(`${where}: arguments do not parse: ${c.function.arguments}`); }
    const required = name === "get_weather" ? ["city", "unit"] : ["zone"];
    for (const k of required) if (!(k in args)) fail(`${where}: ${name} lacks ${k}: ${c.function.arguments}`);
    if (name === "get_weather" && !["celsius", "fahrenheit"].includes(args.unit)) fail(`${where}: unit ${args.unit}`);
  }
}

// Not streamed.
const r = await client.chat.completions.create({ model, messages, tools, tool_choice: "required", max_tokens: 200, seed: 7 });
if (r.choices[0].finish_reason !== "tool_calls") fail("finish_reason " + r.choices[0].finish_reason);
checkCalls(r.choices[0].message.tool_calls, "non-streamed");

// A function by name.
const named = await client.chat.completions.create({
  model, messages, tools, max_tokens: 200, seed: 8,
  tool_choice: { type: "function", function: { name: "get_time" } },
});
checkCalls(named.choices[0].message.tool_calls, "named", "get_time");

// Streamed, read by the client's accumulator.
const stream = client.beta.chat.completions.stream({ model, messages, tools, tool_choice: "required", max_tokens: 200, seed: 9 });
let deltas = 0;
stream.on("chunk", (c) => { if (c.choices[0]?.delta?.tool_calls) deltas++; });
const final = await stream.finalChatCompletion();
if (final.choices[0].finish_reason !== "tool_calls") fail("streamed finish_reason " + final.choices[0].finish_reason);
checkCalls(final.choices[0].message.tool_calls, "streamed");
if (deltas < 2) fail(`streamed: only ${deltas} chunks with delta.tool_calls`);

// Streamed with a plain for-await, as most code reads a stream.
const raw = await client.chat.completions.create({ model, messages, tools, tool_choice: "required", max_tokens: 200, seed: 10, stream: true });
const acc = [];
let finish = null;
for await (const chunk of raw) {
  const ch = chunk.choices[0];
  if (!ch) continue;
  if (ch.finish_reason) finish = ch.finish_reason;
  for (const tc of ch.delta?.tool_calls ?? []) {
    acc[tc.index] ??= { id: tc.id, type: tc.type, function: { name: tc.function?.name, arguments: "" } };
    acc[tc.index].function.arguments += tc.function?.arguments ?? "";
  }
}
if (finish !== "tool_calls") fail("for-await finish_reason " + finish);
checkCalls(acc, "for-await");

// A tool result goes back through the template.
const followUp = await client.chat.completions.create({
  model, max_tokens: 4, tools,
  messages: [...messages, r.choices[0].message,
    ...r.choices[0].message.tool_calls.map((c) => ({ role: "tool", tool_call_id: c.id, content: "sunny, 21" }))],
});
if (typeof followUp.choices[0].message.content !== "string" && !followUp.choices[0].message.tool_calls) fail("follow-up");

console.log(`ok: ${r.choices[0].message.tool_calls.map((c) => `${c.function.name}(${c.function.arguments})`).join(", ")}; ` +
            `streamed ${final.choices[0].message.tool_calls.length} call(s) in ${deltas} tool_calls chunks`);
