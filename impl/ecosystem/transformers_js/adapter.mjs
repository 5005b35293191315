// transformers.js 3 (npm `@huggingface/transformers`, exactly 3.8.1) as a specgate `cmd:` engine
// speaking PROTOCOL.md (`specgate-jsonl/1`): stages encode, decode and render, through the
// library's AutoTokenizer loaded from the files `specgate models export ID $SPECGATE_EXPORT_DIR/ID`
// writes (tokenizer.json, tokenizer_config.json; local files only, never the Hub). transformers.js 3
// carries its own tokenizer implementation (src/tokenizers.js; version 4 moved to
// @huggingface/tokenizers, gated in its own row) and renders chat templates with @huggingface/jinja.
// Standalone: node builtins, @huggingface/transformers and the shared ../jsonl.mjs and
// ../tokenizer_ops.mjs only.
//
//     SPECGATE_EXPORT_DIR=DIR node impl/ecosystem/transformers_js/adapter.mjs
//
// - encode, decode, render: the library's own API, as ../tokenizer_ops.mjs describes; render with
//   the chat template of tokenizer_config.json, as an app calls it. `render_template` is not
//   offered (the library renders conversations only).

import { dirname } from "node:path";
import { AutoTokenizer, env } from "@huggingface/transformers";
import { packageVersion } from "../jsonl.mjs";
import { exportedDir, serveTokenizer } from "../tokenizer_ops.mjs";

function load(model) {
  env.allowRemoteModels = false;
  env.localModelPath = `${dirname(exportedDir(model.id))}/`;
  return AutoTokenizer.from_pretrained(model.id, { local_files_only: true });
}

await serveTokenizer("transformers.js", packageVersion(import.meta.resolve("@huggingface/transformers")), load);
