// Headless Chromium running a page served on loopback: what wllama (llama.cpp compiled to
// WebAssembly) needs to run where its users run it, in a browser. Node builtins only; shared by
// adapter.mjs and confirm.mjs of this folder.
//
// The page imports @wllama/wllama from this folder's node_modules (served under /wllama/) and
// asks the server for work: GET /next answers the next job (long poll), POST /answer takes its
// result. `open(files)` starts the server and the browser and returns `run(job)`, a promise of the
// page's answer, and `close()`. Chromium: $SPECGATE_CHROMIUM, else `chromium` on PATH.

import { spawn } from "node:child_process";
import { createReadStream, existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { delimiter, dirname, extname, join } from "node:path";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const WLLAMA = join(HERE, "node_modules", "@wllama", "wllama");
const TYPES = { ".js": "text/javascript", ".mjs": "text/javascript", ".wasm": "application/wasm", ".html": "text/html" };

const PAGE = `<!DOCTYPE html><meta charset="utf-8"><title>specgate wllama</title>
<script type="module">
import { Wllama } from "/wllama/esm/index.js";
const paths = { "single-thread/wllama.wasm": "/wllama/esm/single-thread/wllama.wasm" };
let engine = null, loaded = null;
async function load(model, nCtx) {
  if (loaded === model) return engine;
  if (engine) await engine.exit();
  engine = new Wllama(paths, { logger: { debug() {}, log() {}, warn() {}, error: console.error } });
  const blob = await (await fetch("/model/" + encodeURIComponent(model))).blob();
  await engine.loadModel([blob], { n_ctx: nCtx, n_threads: 1 });
  loaded = model;
  return engine;
}
const ops = {
  async tokenize(job) { return (await load(job.model, job.n_ctx)).tokenize(job.text, job.special); },
  async detokenize(job) { return Array.from(await (await load(job.model, job.n_ctx)).detokenize(job.ids)); },
  async version() { return "ready"; },
};
for (;;) {
  const job = await (await fetch("/next")).json();
  let answer;
  try { answer = { id: job.id, result: await ops[job.op](job) }; }
  catch (error) { answer = { id: job.id, error: String(error && error.message || error) }; }
  await fetch("/answer", { method: "POST", body: JSON.stringify(answer) });
}
</script>`;

function chromium() {
  if (process.env.SPECGATE_CHROMIUM) return process.env.SPECGATE_CHROMIUM;
  for (const dir of (process.env.PATH || "").split(delimiter)) {
    for (const name of ["chromium", "chromium-browser", "google-chrome"]) {
      if (dir && existsSync(join(dir, name))) return join(dir, name);
    }
  }
  return null;
}

/** Start the loopback server and headless Chromium; `files` maps a model id to its GGUF path. */
export async function open(files) {
  const browser = chromium();
  if (browser === null) throw new Error("no Chromium found (apt-get install chromium, or set SPECGATE_CHROMIUM)");
  const waiting = []; // jobs the page has not taken
  const pollers = []; // page requests waiting for a job
  const pending = new Map(); // job id -> {resolve, reject}
  let next = 0;
  const server = createServer((req, res) => {
    const url = new URL(req.url, "http://127.0.0.1");
    if (url.pathname === "/") return res.writeHead(200, { "content-type": "text/html" }).end(PAGE);
    if (url.pathname === "/next") {
      if (waiting.length > 0) return res.writeHead(200).end(JSON.stringify(waiting.shift()));
      return pollers.push(res);
    }
    if (url.pathname === "/answer") {
      let body = "";
      req.on("data", (chunk) => (body += chunk));
      req.on("end", () => {
        const answer = JSON.parse(body);
        const waiter = pending.get(answer.id);
        pending.delete(answer.id);
        if (waiter) ("error" in answer ? waiter.reject(new Error(answer.error)) : waiter.resolve(answer.result));
        res.writeHead(204).end();
      });
      return undefined;
    }
    const path = url.pathname.startsWith("/model/")
      ? files[decodeURIComponent(url.pathname.slice(7))]
      : url.pathname.startsWith("/wllama/") ? join(WLLAMA, url.pathname.slice(8)) : null;
    if (!path || !path.startsWith(WLLAMA) && !Object.values(files).includes(path) || !existsSync(path)) {
      return res.writeHead(404).end();
    }
    res.writeHead(200, { "content-type": TYPES[extname(path)] ?? "application/octet-stream", "content-length": statSync(path).size });
    return createReadStream(path).pipe(res);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const profile = mkdtempSync(join(tmpdir(), "specgate-wllama-"));
  const child = spawn(
    browser,
    ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
      `--user-data-dir=${profile}`, `http://127.0.0.1:${server.address().port}/`],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let stderr = "";
  child.stderr.on("data", (chunk) => (stderr = (stderr + chunk).slice(-2000)));
  const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
  exited.then((code) => {
    for (const { reject } of pending.values()) reject(new Error(`Chromium exited (${code}): ${stderr.trim().split("\n").pop()}`));
    pending.clear();
  });
  function run(job) {
    const id = next++;
    return new Promise((resolve, reject) => {
      pending.set(id, { resolve, reject });
      const message = { ...job, id };
      if (pollers.length > 0) pollers.shift().writeHead(200).end(JSON.stringify(message));
      else waiting.push(message);
    });
  }
  function close() {
    child.kill("SIGKILL");
    server.close();
    for (const res of pollers) res.destroy();
    try {
      rmSync(profile, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
    } catch {
      // Chromium may still be writing its profile as it dies: a leftover temp folder, not an error.
    }
  }
  await run({ op: "version" }); // the page is up and wllama imported
  return { run, close };
}
