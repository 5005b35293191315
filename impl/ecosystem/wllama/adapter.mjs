// wllama (npm `@wllama/wllama`, exactly 2.3.4: llama.cpp compiled to WebAssembly) as a specgate
// `cmd:` engine speaking PROTOCOL.md (`specgate-jsonl/1`), gated where it runs: in headless
// Chromium, on a page this adapter serves on loopback (./browser.mjs). Stages encode and decode on
// models with weights (wllama loads a full model: vocab-only GGUFs cannot be loaded).
// Standalone: node builtins, @wllama/wllama (in the page) and the shared loop ../jsonl.mjs only.
//
//     node impl/ecosystem/wllama/adapter.mjs
//
// - the model: `new Wllama(paths).loadModel([blob of the GGUF], {n_ctx: 512, n_threads: 1})`, one
//   model at a time (another model: `exit()`, then a new instance).
// - encode: `wllama.tokenize(text, parse_special)` (llama_tokenize, no BOS added).
// - decode: `wllama.detokenize(ids)`: the bytes (a Uint8Array), answered as they are.
// Version 3 of wllama dropped tokenize/detokenize from its API (OpenAI-style completions only); 2.3.4
// is the last release with them and what apps written against them pin.

import { packageVersion, serve } from "../jsonl.mjs";
import { open } from "./browser.mjs";

const N_CTX = 512;
const files = {}; // model id -> GGUF path, served to the page
let browser = null;

async function page(model) {
  files[model.id] = model.gguf;
  browser ??= await open(files);
  return browser;
}

async function encode(request) {
  const { run } = await page(request.model);
  return run({ op: "tokenize", model: request.model.id, n_ctx: N_CTX, text: request.text, special: request.parse_special !== false });
}

async function decode(request) {
  const { run } = await page(request.model);
  const bytes = await run({ op: "detokenize", model: request.model.id, n_ctx: N_CTX, ids: request.ids });
  return { $bytes: Buffer.from(bytes).toString("base64") };
}

process.on("exit", () => browser?.close());
await serve(
  {
    engine: "wllama",
    // The package has no Node entry point (it is for browsers): its version from its own files.
    version: packageVersion(new URL("./node_modules/@wllama/wllama/esm/index.js", import.meta.url).href),
    capabilities: ["encode", "decode"],
  },
  { encode, decode },
);
