// transformers.js 3 (npm `@huggingface/transformers`, exactly 3.8.1) as a specgate `cmd:` engine
// speaking PROTOCOL.md (`specgate-jsonl/1`): stages encode, decode and render, through the
// library's AutoTokenizer loaded from the files `specgate models export ID $SPECGATE_EXPORT_DIR/ID`
// writes (tokenizer.json, tokenizer_config.json; local files only, never the Hub). transformers.js 3
// carries its own tokenizer implementation (src/tokenizers.js; version 4 moved to
// @huggingface/tokenizers, gated in its own row) and renders chat templates with @huggingface/jinja.
// Standalone: node builtins, @huggingface/transformers and the shared loop ../jsonl.mjs only.
//
//     SPECGATE_EXPORT_DIR=DIR node impl/ecosystem/transformers_js/adapter.mjs
//
// - encode: tokenizer.encode(text, {add_special_tokens: false}) (no BOS, PROTOCOL.md 4.2);
//   parse_special=false is refused: the library has no switch that leaves control tokens as text.
// - decode: tokenizer.decode(ids, {skip_special_tokens: false, clean_up_tokenization_spaces: false})
//   returns a JavaScript string, never bytes; the answer is that string as UTF-8 (the library's
//   honest answer: a piece ending inside a UTF-8 character comes back as U+FFFD).
// - render: tokenizer.apply_chat_template(messages, {tokenize: false, add_generation_prompt, tools,
//   documents, ...kwargs}) with the chat template of tokenizer_config.json, as an app calls it.
//   `render_template` is not offered (the library renders conversations only).

import { existsSync } from "node:fs";
import { join } from "node:path";
import { AutoTokenizer, env } from "@huggingface/transformers";
import { Refusal, SetupError, packageVersion, serve } from "../jsonl.mjs";

const loaded = new Map(); // model id -> the library's tokenizer

async function modelTokenizer(model) {
  const root = process.env.SPECGATE_EXPORT_DIR;
  if (!root) {
    throw new SetupError("SPECGATE_EXPORT_DIR is not set (run `specgate models export ID $SPECGATE_EXPORT_DIR/ID` first)");
  }
  for (const name of ["tokenizer.json", "tokenizer_config.json"]) {
    const path = join(root, model.id, name);
    if (!existsSync(path)) throw new SetupError(`missing ${path} (run \`specgate models export ${model.id} ${join(root, model.id)}\`)`);
  }
  if (!loaded.has(model.id)) {
    env.allowRemoteModels = false;
    env.localModelPath = `${root}/`;
    loaded.set(model.id, await AutoTokenizer.from_pretrained(model.id, { local_files_only: true }));
  }
  return loaded.get(model.id);
}

/** PROTOCOL.md section 5's encodings have no JavaScript counterpart here: refused, never coerced. */
function plain(value) {
  if (Array.isArray(value)) return value.map(plain);
  if (value === null || typeof value !== "object") return value;
  const keys = Object.keys(value);
  if (keys.length === 1 && ["$dict", "$bytes", "$array"].includes(keys[0])) {
    throw new Refusal(`${keys[0]} values cannot be given to transformers.js`);
  }
  return Object.fromEntries(keys.map((k) => [k, plain(value[k])]));
}

async function encode(request) {
  if (request.parse_special === false) {
    throw new Refusal("transformers.js has no switch to leave special tokens as text (parse_special=false)");
  }
  return (await modelTokenizer(request.model)).encode(request.text, { add_special_tokens: false });
}

async function decode(request) {
  const tokenizer = await modelTokenizer(request.model);
  const text = tokenizer.decode(request.ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  return { $bytes: Buffer.from(text, "utf8").toString("base64") };
}

async function render(request) {
  const tokenizer = await modelTokenizer(request.model);
  const messages = plain(request.messages);
  if (!Array.isArray(messages) || messages.length === 0) throw new Refusal("an empty conversation cannot be rendered");
  const { tools = null, documents = null, ...kwargs } = plain(request.kwargs ?? {});
  try {
    return tokenizer.apply_chat_template(messages, {
      ...kwargs,
      tools,
      documents,
      tokenize: false,
      add_generation_prompt: request.add_generation_prompt ?? true,
    });
  } catch (error) {
    throw new Refusal(`apply_chat_template cannot render it: ${error.message}`);
  }
}

await serve(
  {
    engine: "transformers.js",
    version: packageVersion(import.meta.resolve("@huggingface/transformers")),
    capabilities: ["encode", "decode", "render"],
    ops: ["encode", "decode", "render"],
  },
  { encode, decode, render },
);
