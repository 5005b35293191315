// What the JavaScript confirm.mjs scripts under impl/ecosystem/ share: where the specgate model
// cache is, and the report of each hand reproduction against its reference literal. Node
// builtins only (a confirm script uses its engine's public API and nothing of specgate); a
// script imports it as `../divergences.mjs`.

import { homedir } from "node:os";
import { join } from "node:path";

/** The specgate cache folder of `modelId` (SPECGATE_CACHE, else $XDG_CACHE_HOME or ~/.cache, + specgate). */
export function modelDir(modelId) {
  const cache = process.env.SPECGATE_CACHE ?? join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "specgate");
  return join(cache, "models", modelId);
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
