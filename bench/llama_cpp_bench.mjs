// llama.cpp's baseline for bench/run_generation.py: node-llama-cpp (its
// prebuilt CPU binaries) runs a GGUF with 2 threads, greedy, one sequence.
//
// Measures, for token-id prompts given on the command line (the GGUF has no
// tokenizer: ids in, ids out):
//   ttft_ms:  time from evaluate() of the long prompt to its first token
//             (the prompt's prefill plus one sampled token), per repetition;
//   decode:   one stream from the short prompt, max_tokens tokens; time per
//             token after the first (the decode steps alone).
// The sequence's history is cleared between repetitions. Prints one JSON line.
//
// Usage: node llama_cpp_bench.mjs NODE_MODULES_DIR MODEL.gguf THREADS REPS
//        MAX_TOKENS LONG_PROMPT_IDS(comma) SHORT_PROMPT_IDS(comma)
// Thread-safety: a single-threaded script (llama.cpp's threads are its own).
import path from "node:path";
import {pathToFileURL} from "node:url";

const [modDir, modelPath, threadsArg, repsArg, maxTokArg, longArg, shortArg] =
    process.argv.slice(2);
const threads = Number(threadsArg), reps = Number(repsArg), maxTokens = Number(maxTokArg);
const longIds = longArg.split(",").map(Number), shortIds = shortArg.split(",").map(Number);

const nlc = await import(pathToFileURL(path.join(modDir, "node-llama-cpp", "dist", "index.js")));
const llama = await nlc.getLlama({gpu: false, build: "never", maxThreads: threads,
                                  logLevel: "warn"});
// Read into memory (no mmap): the weights resident as meshserve's are.
const model = await llama.loadModel({modelPath, gpuLayers: 0, useMmap: false});
const context = await model.createContext({contextSize: 512, batchSize: 512, threads});
const seq = context.getSequence();

async function run(ids, n) {
  const times = [];
  const tokens = [];
  const t0 = performance.now();
  for await (const tok of seq.evaluate(ids, {temperature: 0})) {
    times.push(performance.now() - t0);
    tokens.push(tok);
    if (tokens.length >= n) break;
  }
  await seq.clearHistory();
  return {times, tokens};
}

await run(longIds, 1);  // warm up
await run(shortIds, 16);
const ttft = [];
const perToken = [];
let tokens = null;
for (let r = 0; r < reps; r++) {
  ttft.push((await run(longIds, 1)).times[0]);
  const d = await run(shortIds, maxTokens);
  perToken.push((d.times[d.times.length - 1] - d.times[0]) / (d.times.length - 1));
  tokens = d.tokens;
}
console.log(JSON.stringify({ttft_ms: ttft, decode_ms_per_token: perToken, tokens,
                            threads: context.currentThreads ?? threads,
                            build: llama.buildType, cpu: llama.cpuMathCores ?? null}));
await context.dispose();
await model.dispose();
await llama.dispose();
