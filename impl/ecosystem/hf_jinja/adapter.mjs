// @huggingface/jinja (the Jinja of transformers.js) as a specgate `cmd:` engine speaking
// PROTOCOL.md (`specgate-jsonl/1`): stages `render` (the GGUF's own chat template) and
// `render_template`. Standalone: node builtins, @huggingface/jinja and the shared loop ../jsonl.mjs only.
//
//     node impl/ecosystem/hf_jinja/adapter.mjs

import { closeSync, fstatSync, openSync, readFileSync, readSync } from "node:fs";
import { Template } from "@huggingface/jinja";
import { Refusal, packageVersion, serve } from "../jsonl.mjs";

// ---- GGUF key-value section -------------------------------------------------------------
// Read through a file descriptor in growing chunks, so a weights file of gigabytes costs
// only the bytes of its metadata; tensor infos and data are never read.

const CHUNK = 1 << 20;
const SCALARS = {
  0: ["getUint8", 1],
  1: ["getInt8", 1],
  2: ["getUint16", 2],
  3: ["getInt16", 2],
  4: ["getUint32", 4],
  5: ["getInt32", 4],
  6: ["getFloat32", 4],
  10: ["getBigUint64", 8],
  11: ["getBigInt64", 8],
  12: ["getFloat64", 8],
};
const BOOL = 7;
const STRING = 8;
const ARRAY = 9;

/** Reads little-endian values from a file, fetching more bytes when a read runs past. */
class FileCursor {
  constructor(path) {
    this.fd = openSync(path, "r");
    this.size = fstatSync(this.fd).size;
    this.buffer = Buffer.alloc(0);
    this.base = 0; // file offset of buffer[0]
    this.pos = 0; // file offset of the next read
  }

  need(n) {
    const end = this.pos + n;
    if (end > this.size) throw new Error(`truncated GGUF: ${n} bytes wanted at offset ${this.pos}`);
    if (end <= this.base + this.buffer.length) return;
    const length = Math.max(n, CHUNK);
    const fresh = Buffer.alloc(Math.min(length, this.size - this.pos));
    readSync(this.fd, fresh, 0, fresh.length, this.pos);
    this.buffer = fresh;
    this.base = this.pos;
  }

  view(n) {
    this.need(n);
    const start = this.pos - this.base;
    this.pos += n;
    return new DataView(this.buffer.buffer, this.buffer.byteOffset + start, n);
  }

  scalar(type) {
    const [getter, size] = SCALARS[type];
    const value = this.view(size)[getter](0, true);
    return typeof value === "bigint" ? Number(value) : value;
  }

  string() {
    const length = this.scalar(10);
    this.need(length);
    const start = this.pos - this.base;
    this.pos += length;
    return this.buffer.toString("utf8", start, start + length);
  }

  value(type) {
    if (type in SCALARS) return this.scalar(type);
    if (type === BOOL) return this.scalar(0) !== 0;
    if (type === STRING) return this.string();
    if (type === ARRAY) {
      const itemType = this.scalar(4);
      const count = this.scalar(10);
      const items = new Array(count);
      for (let i = 0; i < count; i++) items[i] = this.value(itemType);
      return items;
    }
    throw new Error(`unknown GGUF value type ${type} at offset ${this.pos}`);
  }

  close() {
    closeSync(this.fd);
  }
}

/** The key-value section of the GGUF at `path`, as a Map from key to value. */
function readGgufMetadata(path) {
  const cursor = new FileCursor(path);
  try {
    cursor.need(4);
    if (cursor.buffer.toString("latin1", 0, 4) !== "GGUF") throw new Error(`${path} is not a GGUF file`);
    cursor.pos = 4;
    const version = cursor.scalar(4);
    if (version < 2) throw new Error(`GGUF version ${version} is not supported (2 or 3 expected)`);
    cursor.scalar(10); // tensor count
    const kvCount = cursor.scalar(10);
    const metadata = new Map();
    for (let i = 0; i < kvCount; i++) {
      const key = cursor.string();
      metadata.set(key, cursor.value(cursor.scalar(4)));
    }
    return metadata;
  } finally {
    cursor.close();
  }
}

// ---- the protocol's values --------------------------------------------------------------

/** Undo PROTOCOL.md section 5's encodings in a request. JavaScript objects have only string
 * keys and the library has no bytes type, so `$dict` and `$bytes` are refused, never coerced. */
function decoded(value) {
  if (Array.isArray(value)) return value.map(decoded);
  if (value === null || typeof value !== "object") return value;
  const keys = Object.keys(value);
  if (keys.length === 1 && keys[0] === "$dict") {
    throw new Refusal("objects with non-string keys ($dict) cannot be given to @huggingface/jinja");
  }
  if (keys.length === 1 && (keys[0] === "$bytes" || keys[0] === "$array")) {
    throw new Refusal(`${keys[0]} values cannot be given to @huggingface/jinja`);
  }
  return Object.fromEntries(keys.map((k) => [k, decoded(value[k])]));
}

// ---- rendering ----------------------------------------------------------------------------

const REASONING_KEYS = ["reasoning_content", "thinking", "reasoning"];
const SPECIAL_TOKEN_IDS = {
  bos_token: "tokenizer.ggml.bos_token_id",
  eos_token: "tokenizer.ggml.eos_token_id",
  unk_token: "tokenizer.ggml.unknown_token_id",
  pad_token: "tokenizer.ggml.padding_token_id",
};

/** The library's Template renders with its own globals (raise_exception, strftime_now, range)
 * and lexer options (trim_blocks, lstrip_blocks, the generation tag); a failure to compile or
 * render, raise_exception included, is the template refusing the input (PROTOCOL.md 4.1). */
function renderSource(source, context) {
  let template;
  try {
    template = new Template(source);
  } catch (error) {
    throw new Refusal(`the template cannot compile: ${error.message}`);
  }
  try {
    return template.render(context);
  } catch (error) {
    throw new Refusal(`the template cannot render: ${error.message}`);
  }
}

const templates = new Map(); // gguf sha256 (or path) -> {source, specials}

/** The model's chat template and special-token strings, read from its GGUF once. */
function modelTemplate(model) {
  const key = model.sha256 || model.gguf;
  if (!templates.has(key)) {
    const metadata = readGgufMetadata(model.gguf);
    const tokens = metadata.get("tokenizer.ggml.tokens") || [];
    const specials = {};
    for (const [name, idKey] of Object.entries(SPECIAL_TOKEN_IDS)) {
      const id = metadata.get(idKey);
      if (Number.isInteger(id) && id >= 0 && id < tokens.length) specials[name] = tokens[id];
    }
    templates.set(key, { source: metadata.get("tokenizer.chat_template") ?? configTemplate(model), specials });
  }
  const entry = templates.get(key);
  if (entry.source == null) {
    throw new Refusal("the model has no chat template (the ChatML fallback is not implemented here)");
  }
  return entry;
}

function configTemplate(model) {
  if (!model.tokenizer_config) return null;
  const source = JSON.parse(readFileSync(model.tokenizer_config, "utf8")).chat_template;
  if (Array.isArray(source)) return source.find((t) => t.name === "default")?.template ?? null;
  return source ?? null;
}

/** transformers' message normalization (PROTOCOL.md 4.1 rule 1): null values dropped, the
 * reasoning under `thinking` first and `reasoning_content` last. */
function normalized(message) {
  const kept = Object.fromEntries(Object.entries(message).filter(([, v]) => v !== null));
  const key = REASONING_KEYS.find((k) => kept[k] != null);
  if (key === undefined) return kept;
  const reasoning = kept[key];
  const { thinking: _t, reasoning_content: _r, ...rest } = kept;
  return { thinking: reasoning, ...rest, reasoning_content: reasoning };
}

function render(request) {
  const { source, specials } = modelTemplate(request.model);
  const messages = decoded(request.messages);
  if (!Array.isArray(messages) || messages.length === 0) {
    throw new Refusal("an empty conversation cannot be rendered");
  }
  const { tools = null, documents = null, ...kwargs } = decoded(request.kwargs ?? {});
  const context = {
    messages: messages.map(normalized),
    tools,
    documents,
    add_generation_prompt: request.add_generation_prompt ?? true,
    ...specials,
    ...kwargs,
  };
  return renderSource(source, context);
}

function renderTemplate(request) {
  return renderSource(request.template, decoded(request.context ?? {}));
}

// ---- the protocol loop (../jsonl.mjs) ------------------------------------------------------

await serve(
  {
    engine: "@huggingface/jinja",
    version: packageVersion(import.meta.resolve("@huggingface/jinja")),
    capabilities: ["render"],
  },
  { render, render_template: renderTemplate },
);
