// What the JavaScript confirm.mjs scripts under impl/ecosystem/ share: where the specgate model
// cache is, and the report of each hand reproduction against its reference literal. Node
// builtins only (a confirm script uses its engine's public API and nothing of specgate); a
// script imports it as `../divergences.mjs`.

import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

/** The specgate cache folder of `modelId` (SPECGATE_CACHE, else $XDG_CACHE_HOME or ~/.cache, + specgate). */
export function modelDir(modelId) {
  const cache = process.env.SPECGATE_CACHE ?? join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "specgate");
  return join(cache, "models", modelId);
}

/** The paths of `names` in the cached model `modelId`'s folder; when one is missing, one line naming
 * the missing files and the command that fetches them, then exit 2 (a model that is not cached). */
export function cachedFiles(modelId, names) {
  const files = names.map((name) => join(modelDir(modelId), name));
  const missing = files.filter((path) => !existsSync(path));
  if (missing.length > 0) {
    console.log(`missing ${missing.join(", ")} (fetch the model with \`specgate models fetch ${modelId}\`)`);
    process.exit(2);
  }
  return files;
}

/** The two decode divergences on qwen3-vocab of a tokenizer whose decode answers a JavaScript string,
 * never bytes: a token that is a lone UTF-8 byte and a piece ending inside a UTF-8 character come
 * back as U+FFFD where llama.cpp answers the bytes. `decoded(ids)` is the engine's string for `ids`. */
export function stringDecodeDivergences(decoded) {
  const hex = (ids) => Buffer.from(decoded(ids), "utf8").toString("hex");
  return [
    {
      name: "decode answers U+FFFD for a token that is a lone UTF-8 byte (decode group, token-121)",
      got: () => hex([121]),
      reference: "bd", // llama.cpp via llama-cpp-python 0.3.36: detokenize([121]) == b"\xbd"
    },
    {
      name: "decode answers U+FFFD for a piece ending inside a UTF-8 character (decode group, token-1683)",
      got: () => hex([1683]),
      reference: "20c3", // llama.cpp via llama-cpp-python 0.3.36: detokenize([1683]) == b" \xc3"
    },
  ];
}

/** What `fn()` answers, or its error's first line as `<error: …>` (an engine that throws). */
export function answerOrError(fn) {
  try {
    return fn();
  } catch (error) {
    return `<error: ${error.message.split("\n")[0]}>`;
  }
}

/** Decode of no ids answers the empty string in llama.cpp; `decoded(ids)` is the engine's string. */
export function emptyDecodeDivergence(decoded) {
  return {
    name: "decode of no ids throws instead of answering the empty string (decode error group, ws-empty)",
    got: () => answerOrError(() => decoded([])),
    reference: "", // snapshots/<model>/decode.json, case ws-empty: ids [], hex "" (llama.cpp via llama-cpp-python 0.3.36: b"")
  };
}

/** One line per divergence ({ name, got: () => engine value, reference }), then exit 0 when
 * every one still reproduces (the engine's value differs from the reference), 1 otherwise. */
export function reportDivergences(divergences) {
  let allReproduce = true;
  for (const { name, got, reference } of divergences) {
    const engine = got();
    const reproduces = engine !== reference;
    allReproduce &&= reproduces;
    console.log(`${reproduces ? "REPRODUCES" : "GONE"}: ${name}: engine ${JSON.stringify(engine)}, reference ${JSON.stringify(reference)}`);
  }
  process.exit(allReproduce ? 0 : 1);
}
