// The encode, decode and render ops of an engine whose tokenizer has transformers.js's API —
// `encode(text, {add_special_tokens})`, `decode(ids, {...})` returning a string,
// `apply_chat_template(messages, {...})` — loaded from the files `specgate models export ID
// $SPECGATE_EXPORT_DIR/ID` writes: transformers.js 3 and its fork @lenml/tokenizers. Node
// builtins and the shared loop ./jsonl.mjs only; an adapter imports it as `../tokenizer_ops.mjs`.
//
// - encode: no BOS (PROTOCOL.md 4.2); parse_special=false is refused: the library has no switch
//   that leaves control tokens as text.
// - decode: the library answers a JavaScript string, never bytes; the answer is that string as
//   UTF-8 (a piece ending inside a UTF-8 character comes back as U+FFFD: the library's honest answer).
// - render: apply_chat_template(messages, {tokenize: false, add_generation_prompt, tools, documents,
//   ...kwargs}); a template that throws is refused with the library's message. PROTOCOL.md section
//   5's encodings ($dict, $bytes, $array) have no JavaScript counterpart here: refused, never coerced.

import { existsSync } from "node:fs";
import { join } from "node:path";
import { Refusal, SetupError, serve } from "./jsonl.mjs";

/** The folder `specgate models export` wrote for `modelId` under $SPECGATE_EXPORT_DIR, once each of
 * `names` is there (else a SetupError naming the command that writes it). */
export function exportedDir(modelId, names = ["tokenizer.json", "tokenizer_config.json"]) {
  const root = process.env.SPECGATE_EXPORT_DIR;
  if (!root) {
    throw new SetupError("SPECGATE_EXPORT_DIR is not set (run `specgate models export ID $SPECGATE_EXPORT_DIR/ID` first)");
  }
  const dir = join(root, modelId);
  for (const name of names) {
    const path = join(dir, name);
    if (!existsSync(path)) throw new SetupError(`missing ${path} (run \`specgate models export ${modelId} ${dir}\`)`);
  }
  return dir;
}

/** The handlers `{encode, decode, render}` for `serve`: `load(model)` gives the library's tokenizer
 * (or a promise of it), once per model id; `label` names the library in refusals. */
export function tokenizerOps(label, load) {
  const loaded = new Map(); // model id -> the library's tokenizer
  async function tokenizer(model) {
    if (!loaded.has(model.id)) loaded.set(model.id, await load(model));
    return loaded.get(model.id);
  }

  function plain(value) {
    if (Array.isArray(value)) return value.map(plain);
    if (value === null || typeof value !== "object") return value;
    const keys = Object.keys(value);
    if (keys.length === 1 && ["$dict", "$bytes", "$array"].includes(keys[0])) {
      throw new Refusal(`${keys[0]} values cannot be given to ${label}`);
    }
    return Object.fromEntries(keys.map((k) => [k, plain(value[k])]));
  }

  async function encode(request) {
    if (request.parse_special === false) {
      throw new Refusal(`${label} has no switch to leave special tokens as text (parse_special=false)`);
    }
    return (await tokenizer(request.model)).encode(request.text, { add_special_tokens: false });
  }

  async function decode(request) {
    const text = (await tokenizer(request.model)).decode(request.ids, {
      skip_special_tokens: false,
      clean_up_tokenization_spaces: false,
    });
    return { $bytes: Buffer.from(text, "utf8").toString("base64") };
  }

  async function render(request) {
    const library = await tokenizer(request.model);
    const messages = plain(request.messages);
    if (!Array.isArray(messages) || messages.length === 0) throw new Refusal("an empty conversation cannot be rendered");
    const { tools = null, documents = null, ...kwargs } = plain(request.kwargs ?? {});
    try {
      return library.apply_chat_template(messages, {
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

  return { encode, decode, render };
}

/** Serve `engine` (its `version`, read by the adapter from its own node_modules) with the three
 * ops above until shutdown. */
export async function serveTokenizer(engine, version, load) {
  const ops = ["encode", "decode", "render"];
  await serve({ engine, version, capabilities: ops, ops }, tokenizerOps(engine, load));
}
