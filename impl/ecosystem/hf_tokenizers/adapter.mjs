// @huggingface/tokenizers (tokenizers.js, pure JavaScript) as a specgate `cmd:` engine speaking
// PROTOCOL.md (`specgate-jsonl/1`): stages split, encode and decode on the tokenizer files
// `specgate models export` writes to $SPECGATE_EXPORT_DIR/<model id>/. Standalone: node builtins,
// @huggingface/tokenizers and the shared loop ../jsonl.mjs only.
//
//     SPECGATE_EXPORT_DIR=DIR node impl/ecosystem/hf_tokenizers/adapter.mjs
//
// - encode: Tokenizer.encode(text, {add_special_tokens: false}).ids (no BOS, PROTOCOL.md 4.2).
//   parse_special=false is refused: the library has no switch that leaves control tokens as text.
// - split: the library's own SplitPreTokenizer built from tokenizer.json's Split step (the
//   byte-level step after it only re-spells the pieces), pre_tokenize_text(text).
// - decode: Tokenizer.decode(ids) returns a JavaScript string, never bytes; the answer is that
//   string encoded as UTF-8 — the library's honest answer, so a piece ending inside a UTF-8
//   character comes back as U+FFFD (a divergence the gate reports, not hidden).

import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { SplitPreTokenizer, Tokenizer } from "@huggingface/tokenizers";
import { Refusal, SetupError, packageVersion, serve } from "../jsonl.mjs";

// ---- loading a model's exported tokenizer files -----------------------------------------

const loaded = new Map(); // model id -> {tokenizer, splitter}

function exportedFile(modelId, name) {
  const root = process.env.SPECGATE_EXPORT_DIR;
  if (!root) {
    throw new SetupError(
      "SPECGATE_EXPORT_DIR is not set (run `specgate models export ID $SPECGATE_EXPORT_DIR/ID` first)",
    );
  }
  const path = join(root, modelId, name);
  if (!existsSync(path)) throw new SetupError(`missing ${path} (run \`specgate models export ${modelId} ${join(root, modelId)}\`)`);
  return JSON.parse(readFileSync(path, "utf8"));
}

/** The regex Split step of tokenizer.json's pre-tokenizer, as the library's own pre-tokenizer. */
function splitterOf(config) {
  const pre = config.pre_tokenizer;
  const steps = pre?.type === "Sequence" ? pre.pretokenizers : [pre];
  const split = steps.find((step) => step?.type === "Split" && step.pattern?.Regex !== undefined);
  return split === undefined ? null : new SplitPreTokenizer(split);
}

function modelTokenizer(model) {
  if (!loaded.has(model.id)) {
    const config = exportedFile(model.id, "tokenizer.json");
    const tokenizerConfig = exportedFile(model.id, "tokenizer_config.json");
    loaded.set(model.id, { tokenizer: new Tokenizer(config, tokenizerConfig), splitter: splitterOf(config) });
  }
  return loaded.get(model.id);
}

// ---- the stages ----------------------------------------------------------------------------

function encode(request) {
  if (request.parse_special === false) {
    throw new Refusal("@huggingface/tokenizers has no switch to leave special tokens as text (parse_special=false)");
  }
  return modelTokenizer(request.model).tokenizer.encode(request.text, { add_special_tokens: false }).ids;
}

function split(request) {
  const { splitter } = modelTokenizer(request.model);
  if (splitter === null) throw new Refusal("tokenizer.json has no regex Split pre-tokenizer");
  return splitter.pre_tokenize_text(request.text);
}

function decode(request) {
  const { tokenizer } = modelTokenizer(request.model);
  let text;
  try {
    text = tokenizer.decode(request.ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  } catch (error) {
    // The library validates its input and rejects some (an empty id list): its stated limit.
    if (/token_ids must be/.test(error.message)) throw new Refusal(`Tokenizer.decode rejects this input: ${error.message}`);
    throw error;
  }
  return { $bytes: Buffer.from(text, "utf8").toString("base64") };
}

// ---- the protocol loop (../jsonl.mjs) ------------------------------------------------------

await serve(
  {
    engine: "@huggingface/tokenizers",
    version: packageVersion(import.meta.resolve("@huggingface/tokenizers")),
    capabilities: ["split", "encode", "decode"],
  },
  { split, encode, decode },
);
