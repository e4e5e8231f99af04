// The official openai npm package (v6) against meshserve's OpenAI-compatible
// routes served by openai_fake_server (server/coordinator/http/testing/).
// The fake model's tokens are recomputed here from its definition
// (NextToken/Reference in server/coordinator/generate/testing/fake_steps.h),
// so the check is independent of the server's code.
//
//   node openai_client_check.cjs PORT OPENAI_PACKAGE_DIR
// Prints one line per check; exits 1 on the first failure.
'use strict';
const assert = require('assert');

const [port, packageDir] = process.argv.slice(2);
const OpenAI = require(packageDir);

const MASK = (1n << 64n) - 1n;
// The token the fake model samples after `tokens` (FNV-1a over id + 1).
function nextToken(tokens) {
  let h = 1469598103934665603n;
  for (const t of tokens) h = ((h ^ BigInt(t + 1)) * 1099511628211n) & MASK;
  return Number((h >> 17n) % 50n);
}
function reference(prompt, maxTokens) {
  const all = [...prompt];
  const out = [];
  while (out.length < maxTokens) {
    const t = nextToken(all);
    out.push(t);
    all.push(t);
  }
  return out;
}

async function expectError(promise, cls, status, param) {
  try {
    await promise;
  } catch (e) {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${e && e.constructor.name}: ${e}`);
    assert.strictEqual(e.status, status);
    assert.strictEqual(e.param, param);
    return e;
  }
  assert.fail(`expected ${cls.name}, the call succeeded`);
}

async function main() {
  const client = new OpenAI({
    apiKey: 'unused', baseURL: `http://127.0.0.1:${port}/v1`, maxRetries: 0, timeout: 60000,
  });

  // A whole completion.
  const whole = await client.completions.create({
    model: 'lm', prompt: [1, 2, 3], max_tokens: 8, stream: false, return_token_ids: true,
  });
  assert.strictEqual(whole.object, 'text_completion');
  assert.strictEqual(whole.model, 'lm');
  assert.strictEqual(whole.system_fingerprint, 'v7');
  assert.match(whole.id, /^cmpl-[0-9a-f]{16}$/);
  assert.strictEqual(whole.choices.length, 1);
  assert.deepStrictEqual(whole.choices[0].token_ids, reference([1, 2, 3], 8));
  assert.deepStrictEqual(whole.choices[0].prompt_token_ids, [1, 2, 3]);
  assert.strictEqual(whole.choices[0].finish_reason, 'length');
  assert.strictEqual(whole.choices[0].text, '');
  assert.deepStrictEqual(whole.usage,
                         {prompt_tokens: 3, completion_tokens: 8, total_tokens: 11});
  console.log('ok whole completion:', JSON.stringify(whole.choices[0].token_ids));

  // A stream, with usage.
  const stream = await client.completions.create({
    model: 'lm', prompt: [9, 8], max_tokens: 12, stream: true, return_token_ids: true,
    stream_options: {include_usage: true},
  });
  const ids = [];
  const reasons = [];
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    ++chunks;
    assert.strictEqual(chunk.object, 'text_completion');
    assert.strictEqual(chunk.system_fingerprint, 'v7');
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      ids.push(...c.token_ids);
      if (c.finish_reason !== null) reasons.push(c.finish_reason);
    }
  }
  assert.deepStrictEqual(ids, reference([9, 8], 12));
  assert.deepStrictEqual(reasons, ['length']);
  assert.deepStrictEqual(usage, {prompt_tokens: 2, completion_tokens: 12, total_tokens: 14});
  console.log(`ok stream: ${chunks} chunks:`, JSON.stringify(ids));

  // n = 2 and logprobs.
  const two = await client.completions.create({
    model: 'lm', prompt: [4], max_tokens: 3, n: 2, seed: 5, logprobs: 1, return_token_ids: true,
  });
  assert.strictEqual(two.choices.length, 2);
  for (const c of two.choices) {
    assert.deepStrictEqual(c.token_ids, reference([4], 3));
    assert.deepStrictEqual(c.logprobs.tokens, reference([4], 3).map(String));
    assert.deepStrictEqual(c.logprobs.token_logprobs, [-1.5, -1.5, -1.5]);
    assert.deepStrictEqual(c.logprobs.top_logprobs, reference([4], 3).map((t) => ({[String(t)]: -1.5})));
  }
  console.log('ok n=2 with logprobs');

  // Refusals reach the SDK as its typed errors.
  await expectError(client.completions.create({model: 'lm', prompt: [1], max_tokens: 0}),
                    OpenAI.BadRequestError, 400, 'max_tokens');
  await expectError(client.completions.create({model: 'lm', prompt: 'Hello', max_tokens: 2}),
                    OpenAI.BadRequestError, 400, 'model');
  await expectError(client.completions.create({model: 'nope', prompt: [1], max_tokens: 2}),
                    OpenAI.NotFoundError, 404, 'model');
  console.log('ok errors: BadRequestError, NotFoundError');

  // The model list.
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  assert.deepStrictEqual(models, ['lm']);
  console.log('ok models:', JSON.stringify(models));
}

main().then(() => console.log('PASS'), (e) => {
  console.error('FAIL:', e && e.stack ? e.stack : e);
  process.exit(1);
});
