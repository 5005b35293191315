// @lenml/tokenizers (npm, exactly 3.7.2: "a lightweight no-dependency fork of transformers.js, only
// tokenizers", with its own bundled Jinja) as a specgate `cmd:` engine speaking PROTOCOL.md
// (`specgate-jsonl/1`): stages encode, decode and render on the files `specgate models export ID
// $SPECGATE_EXPORT_DIR/ID` writes (tokenizer.json, tokenizer_config.json; a missing file is a protocol
// error naming it). Standalone: node builtins, @lenml/tokenizers and the shared ../jsonl.mjs and
// ../tokenizer_ops.mjs only.
//
//     SPECGATE_EXPORT_DIR=DIR node impl/ecosystem/lenml_tokenizers/adapter.mjs
//
// - loading: TokenizerLoader.fromPreTrained({tokenizerJSON, tokenizerConfig}), the library's entry.
// - encode, decode, render: the transformers.js API, as ../tokenizer_ops.mjs describes (render uses
//   the bundled Jinja; a template that throws is refused with the library's message).

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { TokenizerLoader } from "@lenml/tokenizers";
import { packageVersion } from "../jsonl.mjs";
import { exportedDir, serveTokenizer } from "../tokenizer_ops.mjs";

function load(model) {
  const dir = exportedDir(model.id);
  const [tokenizerJSON, tokenizerConfig] = ["tokenizer.json", "tokenizer_config.json"].map((name) =>
    JSON.parse(readFileSync(join(dir, name), "utf8")),
  );
  return TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
}

await serveTokenizer("@lenml/tokenizers", packageVersion(import.meta.resolve("@lenml/tokenizers")), load);
