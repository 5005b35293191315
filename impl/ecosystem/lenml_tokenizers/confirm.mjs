// Hand reproductions of the divergences the gates found in @lenml/tokenizers 3.7.2, with the
// library's public API alone (no specgate): TokenizerLoader.fromPreTrained on Qwen3's own tokenizer
// files from the specgate model cache (qwen3-vocab: tokenizer.json + tokenizer_config.json). Each
// expected value is a literal from the named reference on the same model. Exit 0 when every
// divergence still reproduces, 1 otherwise, 2 when the model files are missing.
//
//     node impl/ecosystem/lenml_tokenizers/confirm.mjs

import { readFileSync } from "node:fs";
import { TokenizerLoader } from "@lenml/tokenizers";
import { answerOrError, cachedFiles, emptyDecodeDivergence, reportDivergences, stringDecodeDivergences } from "../divergences.mjs";

const files = cachedFiles("qwen3-vocab", ["tokenizer.json", "tokenizer_config.json"]);
const [tokenizerJSON, tokenizerConfig] = files.map((p) => JSON.parse(readFileSync(p, "utf8")));
const tokenizer = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
const decoded = (ids) => tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });

const rendered = (messages) =>
  answerOrError(() => tokenizer.apply_chat_template(messages, { tokenize: false, add_generation_prompt: true }));

reportDivergences([
  ...stringDecodeDivergences(decoded),
  emptyDecodeDivergence(decoded),
  {
    name: "the bundled Jinja cannot parse Qwen3's own chat template (render refusals, 01_single_user)",
    got: () => rendered([{ role: "user", content: "What is the capital of France?" }]),
    // transformers 5.24.0 apply_chat_template(tokenize=False, add_generation_prompt=True)
    // (snapshots/qwen3-vocab/render.json, case 01_single_user/gen)
    reference: "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
  },
]);
