// @lenml/tokenizers (npm, exactly 3.7.2: "a lightweight no-dependency fork of transformers.js, only
// tokenizers", with its own bundled Jinja) as a specgate `cmd:` engine speaking PROTOCOL.md
// (`specgate-jsonl/1`): stages encode, decode and render on the files `specgate models export ID
// $SPECGATE_EXPORT_DIR/ID` writes (tokenizer.json, tokenizer_config.json; a missing file is a protocol
// error naming it). Standalone: node builtins, @lenml/tokenizers and the shared loop ../jsonl.mjs only.
//
//     SPECGATE_EXPORT_DIR=DIR node impl/ecosystem/lenml_tokenizers/adapter.mjs
//
// - loading: TokenizerLoader.fromPreTrained({tokenizerJSON, tokenizerConfig}), the library's entry.
// - encode: tokenizer.encode(text, {add_special_tokens: false}) (no BOS, PROTOCOL.md 4.2);
//   parse_special=false is refused: the library has no switch that leaves control tokens as text.
// - decode: tokenizer.decode(ids, {skip_special_tokens: false, clean_up_tokenization_spaces: false})
//   returns a JavaScript string, never bytes; the answer is that string as UTF-8 (a piece ending
//   inside a UTF-8 character comes back as U+FFFD: the library's honest answer, reported).
// - render: tokenizer.apply_chat_template(messages, {tokenize: false, add_generation_prompt, tools,
//   documents, ...kwargs}); a template that throws is refused with the library's message.
//   `render_template` is not offered (the library renders conversations only).

import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { TokenizerLoader } from "@lenml/tokenizers";
import { Refusal, SetupError, packageVersion, serve } from "../jsonl.mjs";

const loaded = new Map(); // model id -> the library's tokenizer

function exportedFile(modelId, name) {
  const root = process.env.SPECGATE_EXPORT_DIR;
  if (!root) {
    throw new SetupError("SPECGATE_EXPORT_DIR is not set (run `specgate models export ID $SPECGATE_EXPORT_DIR/ID` first)");
  }
  const path = join(root, modelId, name);
  if (!existsSync(path)) throw new SetupError(`missing ${path} (run \`specgate models export ${modelId} ${join(root, modelId)}\`)`);
  return JSON.parse(readFileSync(path, "utf8"));
}

function modelTokenizer(model) {
  if (!loaded.has(model.id)) {
    const tokenizerJSON = exportedFile(model.id, "tokenizer.json");
    const tokenizerConfig = exportedFile(model.id, "tokenizer_config.json");
    loaded.set(model.id, TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig }));
  }
  return loaded.get(model.id);
}

/** PROTOCOL.md section 5's encodings have no JavaScript counterpart here: refused, never coerced. */
function plain(value) {
  if (Array.isArray(value)) return value.map(plain);
  if (value === null || typeof value !== "object") return value;
  const keys = Object.keys(value);
  if (keys.length === 1 && ["$dict", "$bytes", "$array"].includes(keys[0])) {
    throw new Refusal(`${keys[0]} values cannot be given to @lenml/tokenizers`);
  }
  return Object.fromEntries(keys.map((k) => [k, plain(value[k])]));
}

function encode(request) {
  if (request.parse_special === false) {
    throw new Refusal("@lenml/tokenizers has no switch to leave special tokens as text (parse_special=false)");
  }
  return modelTokenizer(request.model).encode(request.text, { add_special_tokens: false });
}

function decode(request) {
  const text = modelTokenizer(request.model).decode(request.ids, {
    skip_special_tokens: false,
    clean_up_tokenization_spaces: false,
  });
  return { $bytes: Buffer.from(text, "utf8").toString("base64") };
}

function render(request) {
  const tokenizer = modelTokenizer(request.model);
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
    engine: "@lenml/tokenizers",
    version: packageVersion(import.meta.resolve("@lenml/tokenizers")),
    capabilities: ["encode", "decode", "render"],
    ops: ["encode", "decode", "render"],
  },
  { encode, decode, render },
);
