// Hand reproductions of the divergences the gates found in transformers.js 3 (npm
// @huggingface/transformers 3.8.1), with the library's public API alone (no specgate): AutoTokenizer
// on Qwen3's own tokenizer files from the specgate model cache (qwen3-vocab: tokenizer.json +
// tokenizer_config.json, local files only). Each expected value is a literal from the named reference
// on the same model. Exit 0 when every divergence still reproduces, 1 otherwise, 2 when the model
// files are missing.
//
//     node impl/ecosystem/transformers_js/confirm.mjs

import { dirname } from "node:path";
import { AutoTokenizer, env } from "@huggingface/transformers";
import { cachedFiles, emptyDecodeDivergence, reportDivergences, stringDecodeDivergences } from "../divergences.mjs";

const [tokenizerJSON] = cachedFiles("qwen3-vocab", ["tokenizer.json", "tokenizer_config.json"]);
env.allowRemoteModels = false;
env.localModelPath = `${dirname(dirname(tokenizerJSON))}/`;
const tokenizer = await AutoTokenizer.from_pretrained("qwen3-vocab", { local_files_only: true });
const decoded = (ids) => tokenizer.decode(ids, { skip_special_tokens: false, clean_up_tokenization_spaces: false });

reportDivergences([
  ...stringDecodeDivergences(decoded),
  emptyDecodeDivergence(decoded),
  {
    name: "reasoning_content keeps none of its whitespace: the template's strip('\\n') strips all whitespace (render group, 32_reasoning_content_whitespace_final)",
    got: () =>
      tokenizer.apply_chat_template(
        [
          { role: "user", content: "Name a prime." },
          { role: "assistant", content: "  7  ", reasoning_content: "\n\n  Small primes: 2, 3, 5, 7.  \n\t\n" },
        ],
        { tokenize: false, add_generation_prompt: false },
      ),
    // transformers 5.24.0 apply_chat_template(tokenize=False) (snapshots/qwen3-vocab/render.json, 32_reasoning_content_whitespace_final/no-gen)
    reference:
      "<|im_start|>user\nName a prime.<|im_end|>\n<|im_start|>assistant\n<think>\n  Small primes: 2, 3, 5, 7.  \n\t\n</think>\n\n  7  <|im_end|>\n",
  },
  {
    name: "thinking alias: the assistant's `thinking` is not given to the template as reasoning_content (render group, 14_thinking_alias)",
    got: () =>
      tokenizer.apply_chat_template(
        [
          { role: "user", content: "Pick a colour." },
          { role: "assistant", content: "Blue.", thinking: "Any colour will do." },
        ],
        { tokenize: false, add_generation_prompt: false },
      ),
    // transformers 5.24.0 apply_chat_template(tokenize=False) (snapshots/qwen3-vocab/render.json, 14_thinking_alias/no-gen)
    reference:
      "<|im_start|>user\nPick a colour.<|im_end|>\n<|im_start|>assistant\n<think>\nAny colour will do.\n</think>\n\nBlue.<|im_end|>\n",
  },
]);
